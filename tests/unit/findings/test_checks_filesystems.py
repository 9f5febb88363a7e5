"""``cache-on-network-fs``: this machine's real facts, with a mount table (real mountinfo lines) that puts
jitguard's cache dir on NFS, FlashInfer's workspace on Lustre and Triton's cache on local disk; the finding as
doctor's JSON envelope carries it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from envelope_schemas import assert_valid
from jitguard.cli.doctor import _payload
from jitguard.cli.envelope import dumps
from jitguard.facts import Facts, collect, filesystems
from jitguard.findings.checks import preflight


@pytest.fixture(scope="module")
def facts(tmp_path_factory: pytest.TempPathFactory) -> Facts:
    root = tmp_path_factory.mktemp("fs")
    env = {
        "HOME": str(root / "home"),
        "JITGUARD_CACHE_DIR": str(root / "nfs" / "jitguard"),
        "FLASHINFER_WORKSPACE_BASE": str(root / "lustre"),
        "FLASHINFER_CUDA_ARCH_LIST": "9.0a",
        "TRITON_CACHE_DIR": str(root / "ssd" / "triton"),
        "PATH": "/usr/bin:/bin",
    }
    table = "\n".join(
        [
            "1 0 259:2 / / rw,relatime - ext4 /dev/nvme0n1p2 rw",
            f"52 1 0:52 / {root}/nfs rw,relatime shared:1 - nfs4 fs01:/export/cache rw,vers=4.2,hard",
            f"60 1 0:60 / {root}/lustre rw,relatime - lustre 10.2.0.1@o2ib:/scratch rw,noflock",
            f"61 60 259:3 / {root}/ssd rw,relatime - xfs /dev/nvme1n1 rw",
            "",
        ]
    )
    real = collect(env, cache_dir=Path(env["JITGUARD_CACHE_DIR"]))
    assert real.filesystems is not None  # this machine's own table was read
    places = {p.role: p.path for p in real.filesystems.paths}
    return replace(real, filesystems=filesystems.probe(places, table=("test mountinfo", table)))


def _network(found: list) -> dict[str, str]:  # type: ignore[type-arg]
    return {f.title: f.backend for f in found if f.code == "cache-on-network-fs"}


def test_each_backend_hears_about_the_remote_places_it_uses(facts: Facts) -> None:
    assert _network(preflight(facts, "torch")) == {
        "jitguard's cache dir is on a network file system (nfs4)": "any"
    }
    assert _network(preflight(facts, "flashinfer")) == {
        "jitguard's cache dir is on a network file system (nfs4)": "any",
        "FlashInfer's JIT workspace is on a network file system (lustre)": "flashinfer",
    }
    assert len(_network(preflight(facts, "triton"))) == 1  # its own cache is on the xfs mounted inside lustre


def test_the_finding_names_the_mount_and_the_variable_to_set(facts: Facts) -> None:
    finding = next(f for f in preflight(facts, "flashinfer") if "lustre" in f.title)
    assert finding.severity == "warning" and not finding.blocking
    assert "lustre" in finding.evidence[0] and "10.2.0.1@o2ib:/scratch" in finding.evidence[0]
    assert "flashinfer#3777" in finding.cause
    assert finding.fixes[0].command == "export FLASHINFER_WORKSPACE_BASE=/var/tmp/flashinfer-$(id -u)"


def test_doctor_json_carries_the_finding_and_the_file_systems(facts: Facts) -> None:
    results = {name: preflight(facts, name) for name in ("flashinfer", "triton", "torch")}
    payload = json.loads(dumps("doctor", _payload(facts, [], results, None, 1)))
    assert_valid(payload)
    torch = payload["backends"]["torch"]
    remote = next(f for f in torch["findings"] if f["code"] == "cache-on-network-fs")
    assert remote["severity"] == "warning" and torch["usable"] is True
    assert "JITGUARD_CACHE_DIR" in json.dumps(remote["fixes"])
    roles = {p["role"]: p["mount"]["fs_type"] for p in payload["facts"]["filesystems"]["paths"]}
    assert roles == {"cache_dir": "nfs4", "flashinfer_workspace": "lustre", "triton_cache_dir": "xfs"}
