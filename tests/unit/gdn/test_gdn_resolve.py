"""Backend resolution on this machine's real facts (no GPU, no libcuda; torch the CPU build, or the CUDA build
with triton, whichever pip chose) and the first-use failure path with a real failure (a real link against a libcuda that does not exist here)."""

from __future__ import annotations

import importlib.metadata
import logging
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from jitguard.decision.gdn_resolution import CallSpec
from jitguard.errors import BackendUnavailable, ConfigError
from jitguard.findings.model import Finding
from jitguard.gdn import chunk_gated_delta_rule, explain
from jitguard.gdn.backends import torch as torch_backend
from jitguard.gdn.call import GdnCall
from jitguard.gdn.dispatch import Dispatcher, backend_status, outlook, reset, resolve
from jitguard.gdn.shapes import make_inputs
from jitguard.report.text import render_decision
from jitguard.status.gdn_backends import BackendStatuses

pytest.importorskip("jitguard.findings.checks")  # the lead's pre-flight checks
pytest.importorskip("jitguard.state.failure_cache")

CUDA_QWEN = CallSpec("cuda", "bfloat16", 128, 16, 16, 32)


def _installed(name: str) -> bool:
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


# What blocks Triton here: no GPU always; no triton too, unless pip chose torch's CUDA build (it brings triton).
TRITON_BLOCKERS = {"gpu-none"} | (set() if _installed("triton") else {"triton-missing"})


@pytest.fixture(autouse=True)
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("JITGUARD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("JITGUARD_GDN_BACKEND", raising=False)
    reset()
    yield
    reset()


def codes(findings: Any) -> set[str]:
    return {f.code for f in findings}


def small() -> Any:
    return make_inputs((20, 1), 2, 2, 4, 128, dtype=torch.bfloat16)


def test_auto_on_cpu_tensors_runs_torch_and_explains_why() -> None:
    x = small()
    o, _ = chunk_gated_delta_rule(x.q, x.k, x.v, x.g, x.beta, cu_seqlens=x.cu_seqlens)
    assert o.shape == (21, 4, 128)
    text = explain()
    assert "cpu bfloat16, D=128" in text and "chosen:    torch" in text
    assert "gdn-input-unsupported" in text and "CUDA tensors only" in text


def test_auto_for_a_cuda_call_here_picks_torch_because_gpu_backends_are_blocked() -> None:
    decision = resolve("auto", CUDA_QWEN)
    assert decision.backend == "torch"
    by_name = {e.backend: e for e in decision.trace}
    assert by_name["flashinfer"].outcome == "skipped"
    assert {"gpu-none", "link-missing-libcuda"} <= codes(by_name["flashinfer"].findings)
    assert by_name["triton"].outcome == "skipped"
    assert codes(by_name["triton"].findings) & {"gpu-none", "triton-missing"} == TRITON_BLOCKERS
    assert by_name["torch"].outcome == "chosen"


def test_strict_flashinfer_raises_with_the_gpu_and_libcuda_findings() -> None:
    x = small()
    with pytest.raises(BackendUnavailable) as caught:
        chunk_gated_delta_rule(x.q, x.k, x.v, x.g, x.beta, cu_seqlens=x.cu_seqlens, backend="flashinfer")
    err = caught.value
    assert err.backend == "flashinfer"
    assert {"gpu-none", "link-missing-libcuda", "gdn-input-unsupported"} <= codes(err.findings)
    assert err.alternative == "torch"
    message = str(err)
    assert "[link-missing-libcuda]" in message and "Fix:" in message and "Or use backend='torch'" in message


def test_strict_triton_raises_with_its_findings() -> None:
    with pytest.raises(BackendUnavailable) as caught:
        resolve("triton", CUDA_QWEN)
    assert codes(caught.value.findings) & {"gpu-none", "triton-missing"} == TRITON_BLOCKERS


def test_strict_torch_is_always_available() -> None:
    assert resolve("torch", CUDA_QWEN).backend == "torch"


def test_env_var_names_a_backend_strictly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JITGUARD_GDN_BACKEND", "flashinfer")
    reset()
    x = small()
    with pytest.raises(BackendUnavailable):
        chunk_gated_delta_rule(x.q, x.k, x.v, x.g, x.beta, cu_seqlens=x.cu_seqlens)
    # an explicit argument wins over the variable
    o, _ = chunk_gated_delta_rule(x.q, x.k, x.v, x.g, x.beta, cu_seqlens=x.cu_seqlens, backend="torch")
    assert o.shape[0] == 21


def test_outlook_shows_a_blocked_named_backend_as_no_backend_instead_of_raising(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JITGUARD_GDN_BACKEND", "flashinfer")
    reset()
    made = outlook(CUDA_QWEN)
    assert (made.backend, made.requested, made.source) == ("none", "flashinfer", "JITGUARD_GDN_BACKEND")
    skipped = made.trace[0]
    assert skipped.outcome == "skipped" and "gpu-none" in {f.code for f in skipped.findings}
    assert "chosen:    none" in explain()
    with pytest.raises(BackendUnavailable):
        resolve("auto", CUDA_QWEN)  # the op's path stays strict


def test_a_malformed_env_var_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JITGUARD_GDN_BACKEND", "cudnn")
    reset()
    x = small()
    with pytest.raises(ConfigError, match="JITGUARD_GDN_BACKEND"):
        chunk_gated_delta_rule(x.q, x.k, x.v, x.g, x.beta, cu_seqlens=x.cu_seqlens)


def test_backend_status_reports_real_findings() -> None:
    status = backend_status("flashinfer")
    assert not status.usable and "gpu-none" in codes(status.findings)
    assert backend_status("torch").usable


def test_a_cached_failure_blocks_the_backend(tmp_path: Path) -> None:
    from jitguard.findings.catalog import make
    from jitguard.state.failure_cache import FailureCache

    env = BackendStatuses(cache_dir=tmp_path / "cache")
    FailureCache(tmp_path / "cache").record_failure(
        "gdn-prefill/flashinfer",
        env.facts().fingerprint,
        [make("link-missing-libcuda", backend="flashinfer")],
    )
    reset()
    status = backend_status("flashinfer")
    cached = [f for f in status.findings if f.code == "gdn-cached-failure"]
    assert cached and "link-missing-libcuda" in cached[0].cause
    assert any(
        fix.command == "jitguard cache clear --module gdn-prefill/flashinfer --yes" for fix in cached[0].fixes
    )


# ---- first use: a backend that passes pre-flight but fails for real when it loads ----------------------
class LinksAgainstLibcuda:
    """Stands in for FlashInfer's JIT on a GPU host whose pre-flight passed: ``load`` runs the same kind of
    link (c++ -shared ... -lcuda), which really fails here because this machine has no libcuda.so."""

    NAME = "fakejit"
    TITLE = "Test JIT backend"
    MODULE: str | None = "gdn-prefill/fakejit"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.loads = 0

    def input_findings(self, spec: CallSpec) -> list[Finding]:
        return []

    def load(self) -> None:
        self.loads += 1
        src = self.workdir / "k.cc"
        src.write_text("int k() { return 1; }\n")
        done = subprocess.run(
            ["c++", "-shared", "-fPIC", str(src), "-o", str(self.workdir / "k.so"), "-lcuda"],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"Ninja build failed:\n{done.stderr}")

    def run(self, call: GdnCall) -> Any:
        raise AssertionError("never reached: load fails")


class LaunchFails(LinksAgainstLibcuda):
    NAME = "fakelaunch"
    MODULE = "gdn-prefill/fakelaunch"

    def load(self) -> None:
        self.loads += 1

    def run(self, call: GdnCall) -> Any:
        return torch.mm(call.q, call.q)  # a 3-D tensor: a real RuntimeError from the "kernel"


class PreflightPasses(BackendStatuses):
    """Pre-flight says yes, as it does on a healthy GPU host; facts, fingerprint and the cache are real."""

    def preflight(self, backend: Any) -> list[Finding]:
        return []


def run_small(d: Dispatcher, x: Any, backend: str = "auto") -> Any:
    key = ("cpu", x.q.dtype, 128, 2, 2, 4)
    return d.call(backend, key, GdnCall(x.q, x.k, x.v, x.g, x.beta, x.cu_seqlens, 128**-0.5))


def test_first_use_failure_is_classified_cached_logged_once_and_falls_through(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from jitguard.state.failure_cache import FailureCache

    fake = LinksAgainstLibcuda(tmp_path)
    env = PreflightPasses(cache_dir=tmp_path / "cache")
    d = Dispatcher([fake, torch_backend], env)  # type: ignore[list-item]
    x = small()
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        o, _ = run_small(d, x)
        o2, _ = run_small(d, x)
    expected, _ = torch_backend.chunk_gated_delta_rule(
        x.q, x.k, x.v, x.g, x.beta, cu_seqlens=x.cu_seqlens, scale=128**-0.5
    )
    torch.testing.assert_close(o, expected)
    torch.testing.assert_close(o2, expected)
    assert fake.loads == 1
    warnings = [r.getMessage() for r in caplog.records if "failed on first use" in r.getMessage()]
    assert len(warnings) == 1
    assert (
        "[link-missing-libcuda]" in warnings[0]
        and "Fix:" in warnings[0]
        and "Falling back to torch" in warnings[0]
    )
    record = FailureCache(tmp_path / "cache").get("gdn-prefill/fakejit", env.facts().fingerprint)
    assert record is not None and {"gdn-first-use-failed", "link-missing-libcuda"} <= set(record.codes)
    trace = {e.backend: e for e in d.decisions()[0].trace}
    assert trace["fakejit"].outcome == "failed" and trace["torch"].outcome == "chosen"

    # A new process (dispatcher) skips it from the cache without trying again.
    again = LinksAgainstLibcuda(tmp_path)
    d2 = Dispatcher([again, torch_backend], PreflightPasses(cache_dir=tmp_path / "cache"))  # type: ignore[list-item]
    run_small(d2, x)
    assert again.loads == 0
    skipped = {e.backend: e for e in d2.decisions()[0].trace}["fakejit"]
    assert skipped.outcome == "skipped" and "gdn-cached-failure" in codes(skipped.findings)


def test_strict_first_use_failure_raises_with_the_classified_cause(tmp_path: Path) -> None:
    fake = LinksAgainstLibcuda(tmp_path)
    d = Dispatcher([fake, torch_backend], PreflightPasses(cache_dir=tmp_path / "cache"))  # type: ignore[list-item]
    with pytest.raises(BackendUnavailable) as caught:
        run_small(d, small(), backend="fakejit")
    assert "link-missing-libcuda" in codes(caught.value.findings)
    assert caught.value.alternative == "torch"
    # The next call fails the same way, naming the same backend, without trying to load it again.
    with pytest.raises(BackendUnavailable) as again:
        run_small(d, small(), backend="fakejit")
    assert again.value.backend == "fakejit" and again.value.alternative == "torch"
    assert "link-missing-libcuda" in codes(again.value.findings) and fake.loads == 1


def test_a_launch_failure_falls_through_too(tmp_path: Path) -> None:
    fake = LaunchFails(tmp_path)
    d = Dispatcher([fake, torch_backend], PreflightPasses(cache_dir=tmp_path / "cache"))  # type: ignore[list-item]
    o, _ = run_small(d, small())
    assert o.shape == (21, 4, 128)
    failed = {e.backend: e for e in d.decisions()[0].trace}["fakelaunch"]
    assert failed.outcome == "failed" and "gdn-launch-failed" in codes(failed.findings)


class NeverTakesInputs(LinksAgainstLibcuda):
    NAME = "fastfirst"
    MODULE = "gdn-prefill/fastfirst"

    def input_findings(self, spec: CallSpec) -> list[Finding]:
        from jitguard.findings.catalog import make

        return [make("gdn-input-unsupported", backend=self.NAME, title=self.TITLE, reason="D must be 128")]


def test_an_accelerator_call_on_a_fallback_warns_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = Dispatcher([NeverTakesInputs(tmp_path), torch_backend], PreflightPasses(cache_dir=tmp_path / "c"))  # type: ignore[list-item]
    made = d.decide("auto", CallSpec("cuda", "bfloat16", 64, 2, 2, 4))
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        d._announce(made)
        d._announce(made)
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "[gdn-fallback-in-use]" in warning and "fastfirst [gdn-input-unsupported]" in warning
    assert "gdn-fallback-in-use" not in render_decision(
        made
    )  # a decision is a value: the note goes to the plan


class NoCompilerForTriton(LinksAgainstLibcuda):
    NAME = "fastsecond"
    MODULE = "gdn-prefill/fastsecond"

    def input_findings(self, spec: CallSpec) -> list[Finding]:
        from jitguard.findings.catalog import make

        return [make("triton-cc-missing", backend=self.NAME, detail="", compiler="/usr/bin/gcc-12")]


def test_a_fallback_past_two_blocked_backends_names_both_with_their_fixes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backends = [NeverTakesInputs(tmp_path), NoCompilerForTriton(tmp_path), torch_backend]
    d = Dispatcher(backends, PreflightPasses(cache_dir=tmp_path / "c"))  # type: ignore[arg-type]
    made = d.decide("auto", CallSpec("cuda", "bfloat16", 64, 2, 2, 4))
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        d._announce(made)
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "fastfirst [gdn-input-unsupported]" in warning and "fastsecond [triton-cc-missing]" in warning
    assert "Fix fastsecond: " in warning and "export CC=/usr/bin/gcc-12" in warning


def test_without_torch_no_backend_is_shown_as_chosen(tmp_path: Path) -> None:
    """This machine's real facts with torch's distribution taken out: resolve() (doctor, explain) must not
    name torch as chosen; no call's tensors prove it is installed."""
    import dataclasses

    from jitguard.facts import collect
    from jitguard.facts.packages import PackageFacts

    facts = collect(cache_dir=tmp_path / "cache")
    pkgs = facts.packages
    without = PackageFacts(
        installed=tuple(p for p in pkgs.installed if p.name != "torch"), missing=(*pkgs.missing, "torch")
    )
    decision = resolve(
        "auto",
        CallSpec("cpu", "bfloat16", 128, 16, 16, 32),
        facts=dataclasses.replace(facts, packages=without),
    )
    assert decision.backend == "none"
    torch_entry = next(e for e in decision.trace if e.backend == "torch")
    assert torch_entry.outcome == "skipped" and "torch-missing" in {f.code for f in torch_entry.findings}
