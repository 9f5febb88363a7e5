"""`jitguard build flashinfer-gdn --share URL` with the REAL flashinfer 0.6.6 on this host, which cannot build
the module (no libcuda to link): the module another host published is fetched, verified and installed into
FlashInfer's workspace, and nothing compiles. (The published library is a small real ELF built with gcc: the
real GDN build takes an hour here.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from envelope_schemas import assert_valid
from flashinfer_066 import NEEDS_FLASHINFER_066
from services import NEEDS_FSSPEC

pytestmark = [
    *NEEDS_FLASHINFER_066,
    NEEDS_FSSPEC,
]

# Run in the environment of the "host" that builds: publish a library under the key this host computes.
PUBLISH = r"""
import sys
from pathlib import Path
from flashinfer.jit import gdn
from jitguard.facts.build_identity import of_facts
from jitguard.fleet.artifact_store import ArtifactKey, ArtifactStore
from jitguard.flashinfer_jit.flashinfer_build import facts_for
from jitguard.fleet.module_share import spec_variant
import os
spec = gdn.gen_gdn_prefill_sm90_module()
key = ArtifactKey(spec.name, of_facts(facts_for(dict(os.environ))), spec_variant(spec))
ArtifactStore(sys.argv[1]).publish(key, {spec.name + ".so": Path(sys.argv[2])})
print(spec.name)
"""


def _env(root: Path, name: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JITGUARD_", "FLASHINFER_", "SCCACHE_"))}
    env.update(
        {
            "FLASHINFER_CUDA_ARCH_LIST": "9.0a",
            "FLASHINFER_WORKSPACE_BASE": str(root / name / "workspace"),
            "JITGUARD_CACHE_DIR": str(root / name / "cache"),
            "NO_COLOR": "1",
        }
    )
    return env


def test_a_host_that_cannot_build_fetches_the_published_module(tmp_path: Path) -> None:
    library = tmp_path / "published.so"
    (tmp_path / "lib.c").write_text("int jitguard_published(void) { return 42; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", str(tmp_path / "lib.c"), "-o", str(library)], check=True)
    store = f"file://{tmp_path / 'store'}"
    (tmp_path / "store").mkdir()
    publisher = subprocess.run(
        [sys.executable, "-c", PUBLISH, store, str(library)],
        env=_env(tmp_path, "builder"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert publisher.returncode == 0, publisher.stderr

    proc = subprocess.run(
        [sys.executable, "-m", "jitguard", "build", "flashinfer-gdn", "--share", store, "--json"],
        env=_env(tmp_path, "server"),
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert proc.returncode == 0, proc.stdout + proc.stderr
    payload = json.loads(proc.stdout)
    assert_valid(payload)
    assert payload["status"] == "fetched" and payload["build"] is None
    assert payload["shared"][0]["action"] == "fetched"
    installed = Path(payload["so_path"])
    assert installed.read_bytes() == library.read_bytes()
    assert installed.is_relative_to(tmp_path / "server" / "workspace")
    assert not list(installed.parent.glob("*.o"))  # nothing compiled
