"""A stand-in ``vllm`` package written to a temp dir, for the plugin's corner cases that no released vLLM has
(tests/unit/integrations; the real releases are tested in tests/real/vllm). The ``stand_in`` fixture that puts
it on ``sys.path`` and takes it away again is in tests/unit/integrations/conftest.py."""

from __future__ import annotations

import textwrap
from pathlib import Path


def write_vllm(root: Path, files: dict[str, str]) -> None:
    """Write ``vllm/__init__.py`` and ``files`` (relative path -> source) under ``root``, with every package's
    ``__init__.py`` on the way."""
    for relative, source in {"vllm/__init__.py": "", **files}.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(root).parents:
            if str(parent) not in (".", "") and not (root / parent / "__init__.py").exists():
                (root / parent / "__init__.py").write_text("")
        path.write_text(textwrap.dedent(source))
