"""The artifact store on S3: real s3fs over real HTTP against moto's S3-compatible server on 127.0.0.1."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import services
from jitguard.fleet.artifact_store import ArtifactKey, ArtifactStore
from jitguard.fleet.store_transport import ArtifactRejected, StoreUnavailable

pytest.importorskip("s3fs", reason="the s3:// store needs s3fs (pip install 'jitguard[s3]')")

KEY = ArtifactKey("probe_module", "0123456789abcdef", "feedface" * 4)


@pytest.fixture
def s3_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")


@pytest.fixture
def endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, s3_env: None) -> Iterator[str]:
    with services.s3_server(tmp_path / "moto") as url:
        monkeypatch.setenv("AWS_ENDPOINT_URL", url)  # botocore's own variable: s3fs needs nothing else
        import s3fs

        s3fs.S3FileSystem.clear_instance_cache()
        s3fs.S3FileSystem(anon=False).mkdir("fleet-bucket")
        yield url
        s3fs.S3FileSystem.clear_instance_cache()


def _library(tmp_path: Path) -> Path:
    path = tmp_path / "host-a" / "probe_module.so"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x7fELF" + bytes(range(256)) * 64)
    return path


def test_a_module_published_to_s3_is_fetched_verified_on_another_host(tmp_path: Path, endpoint: str) -> None:
    library = _library(tmp_path)
    ArtifactStore("s3://fleet-bucket/jitguard", timeout=60).publish(KEY, {"probe_module.so": library})

    fetched = ArtifactStore("s3://fleet-bucket/jitguard", timeout=60).fetch(KEY, tmp_path / "host-b")

    assert fetched is not None
    assert (tmp_path / "host-b" / "probe_module.so").read_bytes() == library.read_bytes()
    assert (
        ArtifactStore("s3://fleet-bucket/jitguard").fetch(
            ArtifactKey(KEY.module, KEY.build_fingerprint, "0" * 32), tmp_path / "host-c"
        )
        is None
    )


def test_a_blob_overwritten_in_s3_is_refused(tmp_path: Path, endpoint: str) -> None:
    import s3fs

    manifest = ArtifactStore("s3://fleet-bucket/jitguard").publish(
        KEY, {"probe_module.so": _library(tmp_path)}
    )
    blob = f"fleet-bucket/jitguard/v1/blobs/{manifest.files[0].sha256}"
    s3fs.S3FileSystem().pipe_file(blob, b"\x7fELF" + b"\0" * (manifest.files[0].size - 4))
    with pytest.raises(ArtifactRejected, match="does not match its manifest"):
        ArtifactStore("s3://fleet-bucket/jitguard").fetch(KEY, tmp_path / "host-b")
    assert not (tmp_path / "host-b" / "probe_module.so").exists()


def test_a_bucket_that_does_not_exist_is_unavailable(tmp_path: Path, endpoint: str) -> None:
    with pytest.raises(StoreUnavailable):
        ArtifactStore("s3://no-such-bucket/jitguard", timeout=30).fetch(KEY, tmp_path / "host-b")


def test_an_endpoint_that_never_answers_is_given_up_on_in_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, s3_env: None
) -> None:
    import s3fs

    with services.silent_server() as port:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
        s3fs.S3FileSystem.clear_instance_cache()
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            ArtifactStore("s3://fleet-bucket/jitguard", timeout=3).fetch(KEY, tmp_path / "host-b")
        assert time.monotonic() - started < 10
    s3fs.S3FileSystem.clear_instance_cache()


def test_ten_restorers_on_a_hung_store_all_give_up_by_the_one_deadline(tmp_path: Path, s3_env: None) -> None:
    """One deadline (JITGUARD_SHARE_TIMEOUT) bounds a whole restore on a host, lock wait included: the nine that
    wait for the first restorer's lock do not wait longer than the first one's store."""
    import subprocess
    import sys

    with services.silent_server() as port:
        env = _hung_store_env(tmp_path, port, JITGUARD_SHARE_TIMEOUT="6")
        args = [sys.executable, "-m", "jitguard", "warm", "restore", "--arch", "9.0", "--layers", "vllm"]
        started = time.monotonic()
        procs = [
            subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(10)
        ]
        outputs = [p.communicate(timeout=180) for p in procs]
        slowest = time.monotonic() - started
    assert [p.returncode for p in procs] == [1] * 10
    for out, err in outputs:
        assert "Traceback" not in err, err
        assert "did not answer within" in out or "waited" in out or "lock" in out, out + err
    # Ten restorers one after another would take 10 x 6 s; under one deadline each gives up by its own 6 s
    # (plus process start and import on a busy machine).
    assert slowest < 6 * 4, slowest


def test_the_plugins_save_never_delays_the_engines_exit(tmp_path: Path, s3_env: None) -> None:
    """A save to a store that never answers runs in a daemon thread: the process exits when its work is done."""
    import subprocess
    import sys

    cache = tmp_path / "vllm" / "torch_compile_cache"
    cache.mkdir(parents=True)
    (cache / "a.py").write_text("x = 1\n")
    code = (
        "from jitguard.config import Settings; from jitguard.fleet.warm_start import save_when_ready; "
        "thread = save_when_ready(Settings.from_env()); assert thread is not None and thread.daemon; "
        "print('engine done', flush=True)"
    )
    with services.silent_server() as port:
        env = _hung_store_env(
            tmp_path, port, JITGUARD_SHARE_PUBLISH="1", JITGUARD_SHARE_TIMEOUT="600", JITGUARD_WARM_ARCH="9.0"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
        )
    assert done.returncode == 0, done.stderr
    assert "engine done" in done.stdout


def _hung_store_env(tmp_path: Path, port: int, **extra: str) -> dict[str, str]:
    """A host whose store is an S3 endpoint that accepts connections and never answers."""
    import os

    return {
        **os.environ,
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "JITGUARD_CACHE_DIR": str(tmp_path / "jitguard"),
        "JITGUARD_SHARE": "s3://fleet-bucket/jitguard",
        "VLLM_CACHE_ROOT": str(tmp_path / "vllm"),
        **extra,
    }
