"""`jitguard doctor`: the verdict per backend, before any compile, with the evidence and what to type."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from jitguard.config import Settings, problems
from jitguard.errors import EXIT_FAILURE, EXIT_OK, SettingsInvalid, UsageError

if TYPE_CHECKING:
    from jitguard.facts import Facts
    from jitguard.findings.model import Finding
    from jitguard.flashinfer_jit.probe_module import ProbeResult

# The command's stages are imported where it runs them: `jitguard --help` imports every command module.

BACKEND_CHOICES = ("all", "flashinfer", "triton", "torch")
ENGINE_CHOICES = ("vllm", "sglang")


def configure(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="diagnose whether FlashInfer / Triton / PyTorch kernels can build and load here",
        description=(
            "Probe this machine (GPU, CUDA toolchain, linker, libstdc++, memory, disk, packages) and report, per "
            "backend, every finding with its evidence and fix, ending with the verdict. Compiles nothing unless "
            "--compile is given."
        ),
        epilog="Exit codes: 0 every requested backend is usable, 1 a blocking finding, 2 usage error.",
    )
    parser.add_argument(
        "--backend",
        default="all",
        type=str.lower,
        choices=BACKEND_CHOICES,
        help="backend to check (default: all)",
    )
    parser.add_argument(
        "--json", action="store_true", help="emit the versioned JSON envelope instead of the report"
    )
    parser.add_argument(
        "--deep",
        action="store_true",
        help=(
            "also import the backend packages in a subprocess to catch broken installs (seconds); a 'deep "
            "checks' block says what was imported and how it went"
        ),
    )
    parser.add_argument(
        "--engine",
        type=str.lower,
        choices=ENGINE_CHOICES,
        help="also list every FlashInfer choice this engine would make here, with jitguard's verdict",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help=(
            "also run a real supervised build of a small CUDA probe module with FlashInfer's flags (seconds) "
            "and report what it compiled, linked and loaded"
        ),
    )
    parser.set_defaults(execute=execute)


def execute(args: argparse.Namespace) -> int:
    from jitguard.facts import collect
    from jitguard.findings import checks_config
    from jitguard.findings.checks import preflight

    if args.compile and args.backend not in ("all", "flashinfer"):
        # Silently skipping it would read as "the build works"; the probe only exists for FlashInfer's JIT.
        raise UsageError(
            f"--compile builds a FlashInfer probe module; it says nothing about --backend {args.backend}. "
            f"Run `jitguard doctor --backend flashinfer --compile`, or drop --compile."
        )
    bad, unknown = checks_config.settings()
    if bad:  # every malformed JITGUARD_* at once, each a finding with its fix: exit 2
        raise SettingsInvalid(problems()[0], bad)
    settings = Settings.from_env()
    own = _installation() + unknown  # jitguard's own install first: a broken one explains whatever follows
    facts = collect(cache_dir=settings.cache_dir)
    backends = ("flashinfer", "triton", "torch") if args.backend == "all" else (args.backend,)
    results = {name: preflight(facts, name) for name in backends}
    deep = _deep(facts, backends) if args.deep else None
    for name, checked in (deep or {}).items():
        results[name] = results[name] + checked.pop("found")
    probe = _compile_probe(facts, settings) if args.compile and "flashinfer" in results else None
    if probe is not None:
        results["flashinfer"] = _with_probe(results["flashinfer"], list(probe.findings))
    decision = _gdn_decision(facts)
    engine = _engine_choices(args.engine, facts, settings) if args.engine else None
    store = _store_trust(settings)
    blocked = any(f.blocking for fs in (own, *results.values()) for f in fs)
    code = EXIT_FAILURE if blocked else EXIT_OK

    if args.json:
        from jitguard.cli.envelope import dumps

        payload = _payload(facts, own, results, decision, code)
        payload["store"] = {**store, "findings": [f.to_json() for f in store["findings"]]}
        if engine is not None:
            payload["engine"] = engine
        if deep is not None:
            payload["deep"] = deep
        if probe is not None:
            payload["compile_probe"] = probe.to_json()
        sys.stdout.write(dumps("doctor", payload) + "\n")
    else:
        from jitguard.cli.report import render_doctor

        render_doctor(
            facts,
            results,
            decision,
            own=own,
            engine=engine,
            probe=probe.to_json() if probe else None,
            store=store,
            deep=deep,
        )
    return code


def _installation() -> list[Finding]:
    from jitguard.facts.installation import probe
    from jitguard.findings.checks_jitguard import installation

    return installation(probe())


def _store_trust(settings: Settings) -> dict[str, Any]:
    """The store, how this host signs what it saves and which signers it accepts, and the findings about it
    (docs/fleet.md "Signed snapshots")."""
    import os

    from jitguard.facts.jit_caches import layers, untrusted
    from jitguard.findings.checks_store import store_trust, warm_caches
    from jitguard.fleet.signing import SigningError, load_signer, parse_trusted_keys
    from jitguard.fleet.store_transport import describe_url

    store = describe_url(settings.share_url) if settings.share_url else None
    trusted: tuple[str, ...] = ()
    trust_problem = signs_as = signing_problem = None
    if settings.trusted_keys is not None:
        try:
            trusted = tuple(k.key_id for k in parse_trusted_keys(settings.trusted_keys))
        except SigningError as exc:
            trust_problem = str(exc)
    if settings.signing_key is not None:
        try:
            signs_as = load_signer(settings.signing_key).public.key_id
        except SigningError as exc:
            signing_problem = str(exc)
    findings = store_trust(store, trusted, trust_problem, signs_as, signing_problem)
    if store:  # what a save would leave out matters only where there is a store to save to
        caches = layers(os.environ, settings.cache_dir)
        findings += warm_caches(caches, untrusted(caches))
    return {"url": store, "signs_as": signs_as, "trusted_signers": list(trusted), "findings": findings}


def _deep(facts: Facts, backends: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """``--deep``: per backend, what was imported in a subprocess (the package's GDN module, and in
    FlashInfer's CuTeDSL era each GPU arch's kernel module), the outcome, the seconds and the findings (under
    ``found``, which the caller moves into the backend's findings). The backends run at the same time."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from jitguard.findings.checks import DEEP_IMPORTS, _gdn_kernels, deep_checks

    def one(name: str) -> dict[str, Any]:
        module = DEEP_IMPORTS.get(name)
        if module is None:
            return {
                "imports": [],
                "outcome": "none",
                "detail": "no import to try (the op imports torch itself)",
            }
        package = "flashinfer-python" if name == "flashinfer" else "fla-core"
        kernels = [k.module for k in _gdn_kernels(facts)] if name == "flashinfer" else []
        if package in facts.packages.missing:
            return {"imports": [], "outcome": "skipped", "detail": f"{package} is not installed"}
        started = time.monotonic()
        found = deep_checks(facts, name)
        seconds = round(time.monotonic() - started, 1)
        codes = [f.code for f in found]
        detail = "imported in a subprocess" if not found else "failed: " + ", ".join(codes)
        return {
            "imports": [module, *kernels],
            "outcome": "failed" if found else "ok",
            "detail": detail,
            "seconds": seconds,
            "found": found,
        }

    with ThreadPoolExecutor(max_workers=len(backends)) as pool:
        done = dict(zip(backends, pool.map(one, backends), strict=True))
    for checked in done.values():
        checked.setdefault("found", [])
        checked.setdefault("seconds", 0.0)
    return done


def _compile_probe(facts: Facts, settings: Settings) -> ProbeResult:
    from jitguard.flashinfer_jit.probe_module import run_probe
    from jitguard.supervise.build_options import BuildOptions

    options = BuildOptions.from_settings(settings, backend="flashinfer", progress="none", timeout=600.0)
    return run_probe(facts, options)


def _with_probe(preflight: list[Finding], probe: list[Finding]) -> list[Finding]:
    """Pre-flight findings plus what the real build found that pre-flight did not already say."""
    from jitguard.findings.model import sort_findings

    known = {f.code for f in preflight}
    return sort_findings(preflight + [f for f in probe if f.code not in known])


def _gdn_decision(facts: Facts) -> dict[str, Any] | None:
    """What `backend='auto'` GDN prefill would pick here, and why the others were skipped."""
    from jitguard.gdn.dispatch import describe_auto

    return describe_auto(facts=facts)


def _engine_choices(engine: str, facts: Facts, settings: Settings) -> dict[str, Any]:
    """Every FlashInfer choice the engine would make here and what jitguard says to each (docs/vllm.md,
    docs/sglang.md)."""
    if engine == "sglang":
        from jitguard.cli.engine import describe

        rows = describe("sglang", settings.cache_dir, facts=facts)
        return {"name": "sglang", "version": rows[0]["sglang"] if rows else None, "choices": rows}
    from jitguard.integrations.vllm.preview import preview

    return preview(facts, settings.cache_dir).to_json()


def _payload(
    facts: Facts,
    own: list[Finding],
    results: dict[str, list[Finding]],
    decision: dict[str, Any] | None,
    code: int,
) -> dict[str, Any]:
    from jitguard.facts.serialize import facts_to_json

    return {
        "fingerprint": facts.fingerprint,
        "exit_code": code,
        "installation": {"ok": not own, "findings": [f.to_json() for f in own]},
        "unavailable_facts": dict(facts.unavailable),
        "backends": {
            name: {
                "usable": not any(f.blocking for f in findings),
                "findings": [f.to_json() for f in findings],
            }
            for name, findings in results.items()
        },
        "gdn_prefill": decision,
        "facts": facts_to_json(facts),
    }
