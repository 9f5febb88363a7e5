"""Signed warm snapshots through the real CLI, each command a fresh process: keys made by `jitguard warm
keygen`, a publisher saving to a real ``file://`` store with JITGUARD_SIGNING_KEY, readers restoring with
JITGUARD_TRUSTED_KEYS; every document a reader must not trust refused with one warning and nothing landed."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from envelope_schemas import assert_valid
from fault_makers import FOREIGN_UID, assert_no_traceback, base_env, chown_foreign, host_env, jitguard

pytest.importorskip(
    "fsspec", reason="the artifact store needs fsspec (pip install fsspec: the 'share' extra)"
)

ARCH = ("--arch", "9.0")
FILES = ("vllm/torch_compile_cache/h/rank_0_0/a.py", "triton/K/k.cubin", "inductor/fxgraph/x/entry")


class Fleet:
    """A store, key files, and hosts (each its own cache roots and jitguard cache) under one directory."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.store = base / "store"
        self.store.mkdir()

    def env(self, host: str, **extra: str) -> dict[str, str]:
        return host_env(self.base / host, self.store, **extra)

    def keygen(self, name: str) -> str:
        proc = jitguard(
            ["warm", "keygen", "--out", str(self.base / "keys" / name)], base_env(self.base / "jg")
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    def key(self, name: str) -> str:
        return str(self.base / "keys" / name)

    def fill(self, host: str, tag: str = "") -> None:
        for relative in FILES:
            path = self.base / host / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes((relative + tag).encode() * 50)

    def run(self, action: str, host: str, *args: str, **extra: str) -> tuple[Any, dict[str, Any]]:
        proc = jitguard(["warm", action, *ARCH, "--json", *args], self.env(host, **extra))
        assert_no_traceback(proc)
        envelope = json.loads(proc.stdout) if proc.stdout.strip() else {}
        if envelope:
            assert_valid(envelope)
        return proc, envelope

    def save(self, host: str, key: str | None, *args: str) -> dict[str, Any]:
        self.fill(host)
        extra = {"JITGUARD_SIGNING_KEY": self.key(key)} if key else {}
        proc, envelope = self.run("save", host, *args, **extra)
        assert proc.returncode == 0, proc.stderr
        return envelope

    def manifest(self) -> Path:
        (found,) = self.store.rglob("default.json")
        return found

    def landed(self, host: str) -> list[str]:
        return [r for r in FILES if (self.base / host / r).exists()]


@pytest.fixture
def fleet(tmp_path: Path) -> Fleet:
    return Fleet(tmp_path)


def assert_refused(fleet: Fleet, proc: Any, envelope: dict[str, Any], status: str, host: str = "b") -> None:
    assert proc.returncode == 1, proc.stderr
    assert envelope["outcome"] == "refused" and envelope["signature"]["status"] == status
    assert not envelope["signature"]["accepted"]
    warnings = [line for line in proc.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 1 and "compiles as without jitguard" in warnings[0], proc.stderr
    assert fleet.landed(host) == []


def test_a_snapshot_signed_by_a_trusted_key_restores(fleet: Fleet) -> None:
    public = fleet.keygen("a")
    assert fleet.save("a", "a")["detail"].endswith(f"signed by key {public.split(':')[1]}")
    proc, envelope = fleet.run("restore", "b", JITGUARD_TRUSTED_KEYS=public)
    assert proc.returncode == 0, proc.stderr
    assert envelope["outcome"] == "restored" and envelope["restored"]["landed"] == 3
    assert envelope["signature"] == {"status": "trusted", "signer": public.split(":")[1], "accepted": True}
    assert fleet.landed("b") == list(FILES)


def test_an_unsigned_snapshot_is_refused_under_trusted_keys(fleet: Fleet) -> None:
    public = fleet.keygen("a")
    fleet.save("a", None)
    proc, envelope = fleet.run("restore", "b", JITGUARD_TRUSTED_KEYS=public)
    assert_refused(fleet, proc, envelope, "unsigned")
    proc, envelope = fleet.run("restore", "c")  # without trusted keys: today's behaviour
    assert proc.returncode == 0 and envelope["signature"]["status"] == "unsigned"


def test_a_snapshot_signed_by_another_key_is_refused(fleet: Fleet) -> None:
    trusted, _other = fleet.keygen("a"), fleet.keygen("other")
    fleet.save("a", "other")
    proc, envelope = fleet.run("restore", "b", JITGUARD_TRUSTED_KEYS=trusted)
    assert_refused(fleet, proc, envelope, "untrusted")
    assert envelope["signature"]["signer"] == _other.split(":")[1]


@pytest.mark.parametrize("part", ["body", "signature"])
def test_a_flipped_byte_in_the_body_or_the_signature_is_refused(fleet: Fleet, part: str) -> None:
    public = fleet.keygen("a")
    fleet.save("a", "a")
    envelope = json.loads(fleet.manifest().read_bytes())
    if part == "body":  # one size in the manifest changed: a blob of that size would then be accepted
        envelope["body"] = envelope["body"].replace('"size":', '"size":1', 1)
    else:
        raw = bytearray(base64.b64decode(envelope["signature"]))
        raw[0] ^= 0x80
        envelope["signature"] = base64.b64encode(bytes(raw)).decode()
    fleet.manifest().write_text(json.dumps(envelope))
    proc, result = fleet.run("restore", "b", JITGUARD_TRUSTED_KEYS=public)
    assert_refused(fleet, proc, result, "bad-signature")


def test_a_signed_manifest_copied_under_another_name_is_refused(fleet: Fleet) -> None:
    public = fleet.keygen("a")
    fleet.save("a", "a")
    shutil.copy(fleet.manifest(), fleet.manifest().with_name("canary.json"))
    proc, envelope = fleet.run("restore", "b", "--name", "canary", JITGUARD_TRUSTED_KEYS=public)
    assert_refused(fleet, proc, envelope, "bad-signature")


def test_rotation_readers_trusting_two_keys_restore_what_either_signed(fleet: Fleet) -> None:
    old, new = fleet.keygen("old"), fleet.keygen("new")
    listed = fleet.base / "trusted-keys"
    listed.write_text(
        f"# rotation: {new.split(':')[1]} replaces {old.split(':')[1]}\n{old} retiring\n{new}\n"
    )
    fleet.save("a", "old")
    proc, envelope = fleet.run("restore", "b", JITGUARD_TRUSTED_KEYS=f"{old},{new}")
    assert proc.returncode == 0 and envelope["signature"]["signer"] == old.split(":")[1]
    fleet.save("a", "new")  # the publisher moves to the new key; the store's manifest is replaced
    proc, envelope = fleet.run("restore", "c", JITGUARD_TRUSTED_KEYS=str(listed))
    assert proc.returncode == 0 and envelope["signature"]["signer"] == new.split(":")[1]
    proc, envelope = fleet.run("restore", "d", JITGUARD_TRUSTED_KEYS=old)  # a reader not yet told
    assert_refused(fleet, proc, envelope, "untrusted", host="d")


def test_a_private_key_others_can_read_stops_the_save_with_the_fix(fleet: Fleet) -> None:
    fleet.keygen("a")
    Path(fleet.key("a")).chmod(0o644)
    fleet.fill("a")
    proc = jitguard(["warm", "save", *ARCH], fleet.env("a", JITGUARD_SIGNING_KEY=fleet.key("a")))
    assert_no_traceback(proc)
    assert proc.returncode == 2 and f"chmod 600 {fleet.key('a')}" in proc.stderr
    assert not any(fleet.store.rglob("*")), "a save with an unusable key uploaded something"


def test_a_private_key_of_another_user_stops_the_save(fleet: Fleet) -> None:
    fleet.keygen("a")
    chown_foreign(Path(fleet.key("a")))  # skips unless root: a second real user owns it
    fleet.fill("a")
    proc = jitguard(["warm", "save", *ARCH], fleet.env("a", JITGUARD_SIGNING_KEY=fleet.key("a")))
    assert_no_traceback(proc)
    assert proc.returncode == 2 and f"uid {FOREIGN_UID}" in proc.stderr and "keygen" in proc.stderr
    assert not any(fleet.store.rglob("*"))


def test_keygen_never_overwrites_and_prints_only_the_public_line(fleet: Fleet) -> None:
    public = fleet.keygen("a")
    assert public.startswith("jitguard-ed25519:") and len(public.splitlines()) == 1
    before = Path(fleet.key("a")).read_bytes()
    assert Path(fleet.key("a")).stat().st_mode & 0o777 == 0o600
    again = jitguard(["warm", "keygen", "--out", fleet.key("a")], base_env(fleet.base / "jg"))
    assert_no_traceback(again)
    assert again.returncode == 2 and "never overwritten" in again.stderr and again.stdout == ""
    assert Path(fleet.key("a")).read_bytes() == before


def test_show_says_who_signed_and_whom_this_host_trusts(fleet: Fleet) -> None:
    public = fleet.keygen("a")
    fleet.save("a", "a")
    key_id = public.split(":")[1]
    proc, envelope = fleet.run("show", "b", JITGUARD_TRUSTED_KEYS=public)
    assert proc.returncode == 0
    assert envelope["signature"]["status"] == "trusted" and envelope["signing"]["trusted_signers"] == [key_id]
    text = jitguard(["warm", "show", *ARCH], fleet.env("b"))
    assert f"signature: signed by key {key_id} (not checked" in text.stdout
    assert "accepts any snapshot, signed or not" in text.stdout
    proc, envelope = fleet.run("show", "a", JITGUARD_SIGNING_KEY=fleet.key("a"))
    assert envelope["signing"]["signs_as"] == public


def test_trusted_keys_that_cannot_be_read_are_a_usage_error(fleet: Fleet) -> None:
    fleet.save("a", None)
    proc = jitguard(["warm", "restore", *ARCH], fleet.env("b", JITGUARD_TRUSTED_KEYS="ssh-ed25519 AAAAC3"))
    assert_no_traceback(proc)
    assert proc.returncode == 2 and "not a jitguard public key" in proc.stderr
    assert fleet.landed("b") == []


def test_doctor_says_the_store_is_unsigned_and_names_the_fix(fleet: Fleet) -> None:
    proc = jitguard(["doctor", "--backend", "torch", "--json"], fleet.env("b"))
    payload = json.loads(proc.stdout)
    assert_valid(payload)
    (finding,) = payload["store"]["findings"]
    assert finding["code"] == "store-unsigned" and finding["severity"] == "warning"
    assert any("keygen" in (fix["command"] or "") for fix in finding["fixes"])
    public = fleet.keygen("a")
    proc = jitguard(["doctor", "--backend", "torch", "--json"], fleet.env("b", JITGUARD_TRUSTED_KEYS=public))
    store = json.loads(proc.stdout)["store"]
    assert store["findings"] == [] and store["trusted_signers"] == [public.split(":")[1]]


def test_the_engines_save_replaces_a_manifest_this_host_did_not_sign(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin's save (only when the store lacks something) still re-signs a snapshot that holds every
    file but was saved unsigned or by another key: a fleet that turns signing on is not stuck unsigned."""
    from jitguard.config import Settings
    from jitguard.fleet import warm_start

    public = fleet.keygen("a")
    for name, value in fleet.env("a").items():
        monkeypatch.setenv(name, value)
    fleet.fill("a")
    assert warm_start.save_now(Settings.from_env(), arch="sm_90", only_if_new=True).action == "saved"
    unchanged = warm_start.save_now(Settings.from_env(), arch="sm_90", only_if_new=True)
    assert unchanged.action == "unchanged"
    monkeypatch.setenv("JITGUARD_SIGNING_KEY", fleet.key("a"))
    assert warm_start.save_now(Settings.from_env(), arch="sm_90", only_if_new=True).action == "saved"
    assert json.loads(fleet.manifest().read_bytes())["key"] == public.split(":")[1]
    assert warm_start.save_now(Settings.from_env(), arch="sm_90", only_if_new=True).action == "unchanged"


def test_an_engine_start_refuses_an_untrusted_snapshot_with_one_warning_and_goes_on(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The plugins' restore (``restore_once``): never an error that stops the engine, one warning, nothing
    landed, and not asked again in the same process."""
    import logging

    from jitguard.config import Settings
    from jitguard.fleet import warm_start

    trusted, _other = fleet.keygen("a"), fleet.keygen("other")
    fleet.save("a", "other")
    for name, value in fleet.env("b", JITGUARD_TRUSTED_KEYS=trusted).items():
        monkeypatch.setenv(name, value)
    with caplog.at_level(logging.INFO, logger="jitguard"):
        first = warm_start.restore_once(Settings.from_env(), arch="sm_90")
        again = warm_start.restore_once(Settings.from_env(), arch="sm_90")
    assert first.action == "refused" and first.signature is not None and first.signature.status == "untrusted"
    assert again.action == "refused" and "tried earlier in this process" in again.detail
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "not in JITGUARD_TRUSTED_KEYS" in warnings[0].getMessage()
    assert fleet.landed("b") == []


def test_doctor_text_shows_the_store_section(fleet: Fleet) -> None:
    public = fleet.keygen("a")
    proc = jitguard(
        ["doctor", "--backend", "torch"],
        fleet.env("b", JITGUARD_SIGNING_KEY=fleet.key("a"), JITGUARD_TRUSTED_KEYS=public),
    )
    assert_no_traceback(proc)
    key_id = public.split(":")[1]
    assert f"signs what it saves as: {key_id}" in proc.stdout and f"accepts: only {key_id}" in proc.stdout
    assert "store-unsigned" not in proc.stdout
    Path(fleet.key("a")).chmod(0o644)
    proc = jitguard(["doctor", "--backend", "torch"], fleet.env("b", JITGUARD_SIGNING_KEY=fleet.key("a")))
    assert "store-unsigned" in proc.stdout and "jitguard warm keygen --out" in proc.stdout
    assert "signing-key-unusable" in proc.stdout and f"chmod 600 {fleet.key('a')}" in proc.stdout


def test_a_module_from_an_untrusted_publisher_is_refused_and_built_here(fleet: Fleet) -> None:
    """`jitguard build ninja --publish/--share`: the module store is signed and checked like snapshots."""
    from fault_makers import tiny_project

    trusted, _other = fleet.keygen("a"), fleet.keygen("other")
    store = f"file://{fleet.store}"

    def build(host: str, *args: str, **extra: str) -> dict[str, Any]:
        project = fleet.base / host / "project"
        if not project.exists():
            tiny_project(project)
        proc = jitguard(
            ["build", "ninja", str(project), "--progress", "none", "--json", *args],
            base_env(fleet.base / host / "jg", **extra),
        )
        assert_no_traceback(proc)
        payload = json.loads(proc.stdout)
        assert_valid(payload)
        return payload

    published = build("a", "--publish", store, JITGUARD_SIGNING_KEY=fleet.key("other"))
    assert [o["action"] for o in published["shared"]] == ["published"]
    refused = build("b", "--share", store, JITGUARD_TRUSTED_KEYS=trusted)
    assert refused["status"] == "built" and refused["shared"][0]["action"] == "refused"
    assert "not in JITGUARD_TRUSTED_KEYS" in refused["shared"][0]["detail"]
    fetched = build("c", "--share", store, JITGUARD_TRUSTED_KEYS=f"{trusted},{_other}")
    assert fetched["status"] == "fetched" and "(trusted)" in fetched["shared"][0]["detail"]
