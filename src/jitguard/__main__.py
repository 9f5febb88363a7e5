from jitguard.cli import main

raise SystemExit(main())
