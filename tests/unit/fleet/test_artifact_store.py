"""The artifact store on a real local filesystem through fsspec: publish, fetch, verify, refuse, give up."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jitguard import fileio
from jitguard.fleet.artifact_store import (
    ArtifactKey,
    ArtifactRejected,
    ArtifactStore,
    StoreUnavailable,
)

pytest.importorskip(
    "fsspec", reason="the artifact store needs fsspec (pip install fsspec: the 'share' extra)"
)

KEY = ArtifactKey("probe_module", "0123456789abcdef", "feedface" * 4)


def _library(tmp_path: Path, text: bytes = b"\x7fELF a built library") -> Path:
    path = tmp_path / "built" / "probe_module.so"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text)
    return path


def _store(tmp_path: Path, **kwargs: float) -> ArtifactStore:
    (tmp_path / "store").mkdir(exist_ok=True)
    return ArtifactStore(f"file://{tmp_path / 'store'}", **kwargs)


def test_a_published_module_is_fetched_verified_into_another_directory(tmp_path: Path) -> None:
    library = _library(tmp_path)
    store = _store(tmp_path)
    manifest = store.publish(KEY, {"probe_module.so": library}, {"note": "test"})

    fetched = store.fetch(KEY, tmp_path / "host-b")

    assert fetched is not None
    assert fetched.paths == (tmp_path / "host-b" / "probe_module.so",)
    assert fetched.paths[0].read_bytes() == library.read_bytes()
    assert manifest.files[0].sha256 == fileio.sha256_regular(library)
    assert fetched.manifest.extra == {"note": "test"}
    assert not [p for p in (tmp_path / "host-b").iterdir() if p.name.startswith(".")]  # no temp file left


def test_a_key_not_in_the_store_is_a_miss(tmp_path: Path) -> None:
    assert _store(tmp_path).fetch(KEY, tmp_path / "host-b") is None


def test_another_variant_of_the_same_module_is_a_miss(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.publish(KEY, {"probe_module.so": _library(tmp_path)})
    other = ArtifactKey(KEY.module, KEY.build_fingerprint, "0" * 32)
    assert store.fetch(other, tmp_path / "host-b") is None


def test_a_store_that_is_not_there_is_unavailable(tmp_path: Path) -> None:
    store = ArtifactStore(f"file://{tmp_path / 'not-mounted'}")
    with pytest.raises(StoreUnavailable, match="no store"):
        store.fetch(KEY, tmp_path / "host-b")


def test_a_tampered_blob_is_refused_and_nothing_is_installed(tmp_path: Path) -> None:
    store = _store(tmp_path)
    manifest = store.publish(KEY, {"probe_module.so": _library(tmp_path)})
    blob = tmp_path / "store" / "v1" / "blobs" / manifest.files[0].sha256
    blob.write_bytes(b"\x7fELF a swapped libXX")  # same size, other bytes

    with pytest.raises(ArtifactRejected, match="does not match its manifest"):
        store.fetch(KEY, tmp_path / "host-b")
    assert list((tmp_path / "host-b").iterdir()) == []


def test_a_truncated_blob_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path)
    manifest = store.publish(KEY, {"probe_module.so": _library(tmp_path)})
    blob = tmp_path / "store" / "v1" / "blobs" / manifest.files[0].sha256
    blob.write_bytes(blob.read_bytes()[:5])
    with pytest.raises(ArtifactRejected):
        store.fetch(KEY, tmp_path / "host-b")


def _manifest_path(tmp_path: Path) -> Path:
    return tmp_path / "store" / "v1" / "modules" / KEY.manifest_name


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"module": "another_module"}, "another module"),
        ({"files": [{"name": "../../evil.so", "size": 1, "sha256": "0" * 64}]}, "not a plain file name"),
        ({"files": []}, "no files"),
        ({"schema": "something/9"}, "not a jitguard artifact manifest"),
    ],
)
def test_a_manifest_that_does_not_check_out_is_refused(tmp_path: Path, change: dict, message: str) -> None:
    store = _store(tmp_path)
    store.publish(KEY, {"probe_module.so": _library(tmp_path)})
    path = _manifest_path(tmp_path)
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(ArtifactRejected, match=message):
        store.fetch(KEY, tmp_path / "host-b")
    assert not (tmp_path / "evil.so").exists()


def test_publishing_the_same_bytes_twice_keeps_one_blob(tmp_path: Path) -> None:
    store = _store(tmp_path)
    library = _library(tmp_path)
    store.publish(KEY, {"probe_module.so": library})
    store.publish(ArtifactKey(KEY.module, KEY.build_fingerprint, "1" * 32), {"probe_module.so": library})
    assert len(list((tmp_path / "store" / "v1" / "blobs").iterdir())) == 1
    assert len(list((tmp_path / "store" / "v1" / "modules" / KEY.module).iterdir())) == 2


def test_a_pipe_in_a_file_store_is_refused_at_once_never_waited_on(tmp_path: Path) -> None:
    # A named pipe with no writer where the manifest belongs: opening it for reading would block forever.
    # (A store that hangs for real, an endpoint that never answers: tests/real/fleet/test_artifact_store_s3.py.)
    store = _store(tmp_path, timeout=600.0)
    store.publish(KEY, {"probe_module.so": _library(tmp_path)})
    document = tmp_path / "store" / "v1" / "modules" / KEY.manifest_name
    document.unlink()
    os.mkfifo(document)
    assert store.fetch(KEY, tmp_path / "host-b") is None  # not a document: a miss, at once
    assert not (tmp_path / "host-b" / "probe_module.so").exists()


def test_a_bad_key_is_refused_before_anything_is_written() -> None:
    with pytest.raises(ValueError):
        ArtifactKey("m", "../../etc", "x" * 32)
    with pytest.raises(ValueError):
        ArtifactKey("a/b", "0" * 16, "x" * 32)


def test_a_blob_that_is_a_pipe_or_a_link_in_the_store_is_missing_not_read(tmp_path: Path) -> None:
    store = _store(tmp_path, timeout=30.0)
    manifest = store.publish(KEY, {"probe_module.so": _library(tmp_path)})
    blob = tmp_path / "store" / "v1" / "blobs" / manifest.files[0].sha256
    private = tmp_path / "private.key"
    private.write_bytes(
        blob.read_bytes()
    )  # the same bytes: a link would pass every check but where it points
    private.chmod(0o600)
    for plant in (lambda: os.mkfifo(blob), lambda: blob.symlink_to(private)):
        blob.unlink()
        plant()
        with pytest.raises(ArtifactRejected, match="its blob is not in the store"):
            store.fetch(KEY, tmp_path / "host-b")
        assert not (tmp_path / "host-b" / "probe_module.so").exists()


def test_a_fetch_never_replaces_a_file_already_here(tmp_path: Path) -> None:
    store = _store(tmp_path, timeout=30.0)
    store.publish(KEY, {"probe_module.so": _library(tmp_path)})
    here = tmp_path / "host-b"
    here.mkdir()
    (here / "probe_module.so").write_bytes(b"built here meanwhile")
    fetched = store.fetch(KEY, here)
    assert fetched is not None
    assert (here / "probe_module.so").read_bytes() == b"built here meanwhile"
    assert [p.name for p in here.iterdir()] == ["probe_module.so"]  # no temporary left behind
