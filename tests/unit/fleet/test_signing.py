"""Signed store documents with real ed25519 keys, real key files and a real ``file://`` store: what a reader
with trusted keys accepts and refuses, key files checked like ssh's, and modules and CuTeDSL kernels sealed the
same way as warm manifests."""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
from pathlib import Path

import pytest

from fault_makers import FOREIGN_UID, chown_foreign
from jitguard.config import Settings
from jitguard.errors import EXIT_USAGE
from jitguard.fleet import module_share
from jitguard.fleet.artifact_store import ArtifactKey, ArtifactStore
from jitguard.fleet.signing import (
    BAD_SIGNATURE,
    TRUSTED,
    UNSIGNED,
    UNTRUSTED,
    UNVERIFIED,
    PublicKey,
    SignatureRefused,
    SigningError,
    Trust,
    generate,
    load_signer,
    parse_trusted_keys,
)

NAME = "warm/0123abcd/sm_90/default.json"
BODY = json.dumps({"schema": "jitguard.warm-snapshot/1", "files": ["a", "b"]}).encode()


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, PublicKey]:
    """Three real key pairs: a, b (the fleet's, for rotation) and other (not trusted)."""
    return {name: generate(tmp_path / "keys" / name) for name in ("a", "b", "other")}


def signer(tmp_path: Path, name: str) -> Trust:
    return Trust(signing_key=tmp_path / "keys" / name)


def reader(*trusted: PublicKey) -> Trust:
    return Trust(trusted=trusted)


def refusal(trust: Trust, name: str, raw: bytes) -> str:
    with pytest.raises(SignatureRefused) as caught:
        trust.open(name, raw)
    return caught.value.seal.status


def test_a_document_signed_by_a_trusted_key_opens_to_its_exact_bytes(tmp_path: Path, keys: dict) -> None:
    document = signer(tmp_path, "a").seal(NAME, BODY)
    body, seal = reader(keys["a"]).open(NAME, document)
    assert body == BODY
    assert (seal.status, seal.signer, seal.accepted) == (TRUSTED, keys["a"].key_id, True)
    envelope = json.loads(document)  # one document: the signature travels with the bytes it signs
    assert envelope["schema"] == "jitguard.signed/1" and envelope["key"] == keys["a"].key_id


def test_without_trusted_keys_unsigned_and_signed_are_both_accepted(tmp_path: Path, keys: dict) -> None:
    assert reader().open(NAME, BODY)[1].status == UNSIGNED
    body, seal = reader().open(NAME, signer(tmp_path, "a").seal(NAME, BODY))
    assert body == BODY and (seal.status, seal.signer) == (UNVERIFIED, keys["a"].key_id)


def test_an_unsigned_document_is_refused_under_trusted_keys(keys: dict) -> None:
    with pytest.raises(SignatureRefused) as caught:
        reader(keys["a"]).open(NAME, BODY)
    assert caught.value.seal.status == UNSIGNED and not caught.value.seal.accepted
    assert keys["a"].key_id in str(caught.value) and "JITGUARD_SIGNING_KEY" in str(caught.value)


def test_a_document_signed_by_another_key_is_refused(tmp_path: Path, keys: dict) -> None:
    document = signer(tmp_path, "other").seal(NAME, BODY)
    assert refusal(reader(keys["a"], keys["b"]), NAME, document) == UNTRUSTED


@pytest.mark.parametrize("field", ["body", "signature"])
def test_a_flipped_byte_in_the_body_or_the_signature_is_refused(
    tmp_path: Path, keys: dict, field: str
) -> None:
    envelope = json.loads(signer(tmp_path, "a").seal(NAME, BODY))
    if field == "body":
        envelope["body"] = envelope["body"].replace('"a"', '"A"')
    else:
        raw = bytearray(base64.b64decode(envelope["signature"]))
        raw[10] ^= 0x01
        envelope["signature"] = base64.b64encode(bytes(raw)).decode()
    assert refusal(reader(keys["a"]), NAME, json.dumps(envelope).encode()) == BAD_SIGNATURE


def test_a_signed_document_copied_under_another_name_is_refused(tmp_path: Path, keys: dict) -> None:
    document = signer(tmp_path, "a").seal(NAME, BODY)
    assert refusal(reader(keys["a"]), "warm/0123abcd/sm_100/default.json", document) == BAD_SIGNATURE
    assert refusal(reader(keys["a"]), "warm/0123abcd/sm_90/other.json", document) == BAD_SIGNATURE


def test_a_damaged_envelope_is_a_refusal_under_trusted_keys(keys: dict) -> None:
    damaged = b'{"schema":"jitguard.signed/1","key":"nothex","body":7}'
    assert refusal(reader(keys["a"]), NAME, damaged) == BAD_SIGNATURE


def test_rotation_two_trusted_keys_accept_either_signer(tmp_path: Path, keys: dict) -> None:
    both = reader(keys["a"], keys["b"])
    for name in ("a", "b"):
        assert both.open(NAME, signer(tmp_path, name).seal(NAME, BODY))[1].signer == keys[name].key_id
    assert refusal(both, NAME, signer(tmp_path, "other").seal(NAME, BODY)) == UNTRUSTED


def test_keygen_never_overwrites_a_file(tmp_path: Path, keys: dict) -> None:
    path = tmp_path / "keys" / "a"
    before = path.read_bytes()
    assert (path.stat().st_mode & 0o777) == 0o600
    with pytest.raises(SigningError, match="never overwritten"):
        generate(path)
    assert path.read_bytes() == before
    target = tmp_path / "elsewhere"
    target.write_text("precious")
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(SigningError, match="never overwritten"):
        generate(tmp_path / "link")
    assert target.read_text() == "precious"


def test_a_private_key_others_can_read_is_refused_with_the_fix(tmp_path: Path, keys: dict) -> None:
    path = tmp_path / "keys" / "a"
    path.chmod(0o644)
    with pytest.raises(SigningError) as caught:
        load_signer(path)
    assert "0644" in str(caught.value) and f"chmod 600 {path}" in str(caught.value)
    assert caught.value.exit_code == EXIT_USAGE
    with pytest.raises(SigningError):  # sealing never falls back to unsigned
        signer(tmp_path, "a").seal(NAME, BODY)


def test_a_private_key_of_another_user_is_refused(tmp_path: Path, keys: dict) -> None:
    path = tmp_path / "keys" / "a"
    chown_foreign(path)  # skips unless root
    with pytest.raises(SigningError) as caught:
        load_signer(path)
    assert f"uid {FOREIGN_UID}" in str(caught.value) and "keygen" in str(caught.value)


def test_a_named_pipe_as_the_key_file_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "key.fifo"
    os.mkfifo(fifo, 0o600)
    outcome: list[BaseException] = []
    worker = threading.Thread(target=lambda: outcome.append(_raises(lambda: load_signer(fifo))), daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "reading a FIFO as a key file hung"
    assert isinstance(outcome[0], SigningError) and "not a regular file" in str(outcome[0])


def _raises(call: object) -> BaseException:
    try:
        call()  # type: ignore[operator]
    except BaseException as exc:
        return exc
    raise AssertionError("no error")


def test_trusted_keys_from_a_list_or_a_file(tmp_path: Path, keys: dict) -> None:
    a, b = keys["a"], keys["b"]
    assert parse_trusted_keys(f"{a.line}, {b.line}") == (a, b)
    assert parse_trusted_keys(f" {a.line}\n{b.line} ") == (a, b)
    listed = tmp_path / "trusted"
    listed.write_text(f"# the fleet's keys\n{a.line} build-host-1\n\n{b.line}\n")
    listed.chmod(0o644)
    assert parse_trusted_keys(str(listed)) == (a, b)
    listed.chmod(0o666)
    with pytest.raises(SigningError, match="another user"):
        parse_trusted_keys(str(listed))


@pytest.mark.parametrize(
    "value",
    [" ", ",", "jitguard-ed25519:0000000000000000:" + "ab" * 32, "ssh-ed25519 AAAA", "relative/file"],
)
def test_trusted_keys_that_cannot_be_used_are_an_error_never_trust_everything(value: str) -> None:
    settings = Settings.from_env({"JITGUARD_TRUSTED_KEYS": value})
    with pytest.raises(SigningError):
        Trust.from_settings(settings)


def test_an_empty_trusted_keys_file_is_an_error(tmp_path: Path) -> None:
    listed = tmp_path / "trusted"
    listed.write_text("# nothing yet\n")
    with pytest.raises(SigningError, match="holds no key"):
        parse_trusted_keys(str(listed))


# -- modules and CuTeDSL kernels: the same seal through the artifact store --------------------------------


def module_store(tmp_path: Path, trust: Trust) -> ArtifactStore:
    (tmp_path / "store").mkdir(exist_ok=True)
    return ArtifactStore(f"file://{tmp_path / 'store'}", timeout=30, trust=trust)


KEY = ArtifactKey("sampling", "fp0123", "var4567")


def publish_library(tmp_path: Path, trust: Trust) -> None:
    library = tmp_path / "sampling.so"
    library.write_bytes(b"\x7fELF library")
    module_store(tmp_path, trust).publish(KEY, {"sampling.so": library})


def test_a_module_signed_on_publish_is_fetched_by_a_reader_that_trusts_it(tmp_path: Path, keys: dict) -> None:
    publish_library(tmp_path, signer(tmp_path, "a"))
    manifests = list((tmp_path / "store").rglob("*.json"))
    assert len(manifests) == 1 and json.loads(manifests[0].read_bytes())["key"] == keys["a"].key_id
    fetched = module_store(tmp_path, reader(keys["a"])).fetch(KEY, tmp_path / "host-b")
    assert fetched is not None and fetched.seal is not None and fetched.seal.status == TRUSTED
    assert (tmp_path / "host-b" / "sampling.so").read_bytes() == b"\x7fELF library"


def test_an_unsigned_module_is_refused_with_one_warning_and_the_store_stays_in_use(
    tmp_path: Path, keys: dict, caplog: pytest.LogCaptureFixture
) -> None:
    publish_library(tmp_path, Trust())
    share = module_share.Share(f"file://{tmp_path / 'store'}", KEY, 30, reader(keys["a"]))
    with caplog.at_level(logging.WARNING, logger="jitguard.share"):
        outcome = share.fetch(tmp_path / "host-b")
    assert outcome.action == "refused" and "unsigned" in outcome.detail
    assert not (tmp_path / "host-b" / "sampling.so").exists()
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    assert share.url not in module_share._down  # a refusal is about the document, not the store


def test_a_bad_signing_key_fails_the_publish_before_anything_is_uploaded(tmp_path: Path, keys: dict) -> None:
    (tmp_path / "keys" / "a").chmod(0o640)
    share = module_share.Share(f"file://{tmp_path / 'store'}", KEY, 30, signer(tmp_path, "a"))
    (tmp_path / "store").mkdir()
    library = tmp_path / "sampling.so"
    library.write_bytes(b"\x7fELF library")
    outcome = share.publish({"sampling.so": library})
    assert outcome.action == "failed" and "chmod 600" in outcome.detail
    assert not any((tmp_path / "store").rglob("*")), "a publish with an unusable key uploaded something"
    assert share.url not in module_share._down


def test_a_cutedsl_kernel_from_an_untrusted_publisher_is_refused(tmp_path: Path, keys: dict) -> None:
    from jitguard.cutedsl import kernel_objects
    from jitguard.cutedsl.kernel_cache import KernelCache, KernelKey

    store = tmp_path / "store"
    store.mkdir()
    key = KernelKey("gdn_prefill_kernel", {"source": "def kernel(): ...", "arch": "sm_90"})
    publisher = Settings(
        share_url=f"file://{store}", share_timeout=30, signing_key=tmp_path / "keys" / "other"
    )
    kernel_objects.publish_shared(publisher, key, b"\x7fELF kernel", "cute-object")
    trusting_a = Settings(share_url=f"file://{store}", share_timeout=30, trusted_keys=keys["a"].line)
    cache = KernelCache(tmp_path / "jitguard")
    assert kernel_objects.fetch_shared(trusting_a, cache, key) is None  # refused: compiled here instead
    assert kernel_objects._share(trusting_a, key).fetch(tmp_path / "k").action == "refused"
    trusting_other = Settings(share_url=f"file://{store}", share_timeout=30, trusted_keys=keys["other"].line)
    fetched = kernel_objects._share(trusting_other, key).fetch(tmp_path / "k2")
    assert fetched.action == "fetched" and f"signed by key {keys['other'].key_id} (trusted)" in fetched.detail
