"""Rendering for people: findings, verdicts and the machine summary, with rich (NO_COLOR respected)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any, cast

from rich.console import Console
from rich.markup import escape

from jitguard.cli.engine import render
from jitguard.cli.machine import machine_rows
from jitguard.redaction import RedactingWriter

if TYPE_CHECKING:
    from jitguard.facts import Facts
    from jitguard.findings.model import Finding

_MARK = {"error": ("✗", "bold red"), "warning": ("!", "yellow"), "info": ("i", "cyan")}
_ASCII_MARK = {**_MARK, "error": ("x", "bold red")}


def can_encode(stream: Any, text: str) -> bool:
    """Whether ``stream`` (a text stream) can write ``text``: False on a plain-ASCII or Latin-1 terminal
    (``PYTHONIOENCODING=ascii``), where jitguard writes plain ASCII instead."""
    try:
        text.encode(getattr(stream, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def console(stream: Any = None) -> Console:
    """A console that honours NO_COLOR and only uses colour on a terminal."""
    stream = stream or sys.stdout
    no_color = bool(os.environ.get("NO_COLOR"))
    # Off a terminal (logs, CI) rich would wrap at 80 columns; long paths and commands read better unwrapped.
    width = None if stream.isatty() else 160
    # NO_COLOR: no escape sequences at all (rich's own no_color still emits bold), so logs stay plain text.
    # Through a redacting writer: secrets go by value too (jitguard.redaction), whatever a finding quotes.
    return Console(
        file=cast(IO[str], RedactingWriter(stream)),
        no_color=no_color,
        color_system=None if no_color else "auto",
        highlight=False,
        soft_wrap=True,
        width=width,
    )


def render_findings(out: Console, findings: Iterable[Finding], *, indent: str = "  ") -> None:
    marks = _MARK if can_encode(out.file, _MARK["error"][0]) else _ASCII_MARK
    for f in findings:
        mark, style = marks[f.severity]
        out.print(f"{indent}[{style}]{mark} {f.severity:<7}[/] [bold]{escape(f.code)}[/]  {escape(f.title)}")
        out.print(f"{indent}    {escape(f.cause)}")
        for line in f.evidence:
            out.print(f"{indent}    [dim]evidence:[/] {escape(line)}")
        for i, fix in enumerate(f.fixes, 1):
            text = escape(fix.text)
            cmd = f"\n{indent}         [bold green]{escape(fix.command)}[/]" if fix.command else ""
            out.print(f"{indent}    [dim]fix {i}:[/] {text}{cmd}")


def render_store_trust(out: Any, store: Mapping[str, Any]) -> None:
    """doctor's artifact store section: who signs, whom this host trusts, and the findings about it."""
    trusted = store["trusted_signers"]
    out.print(f"[bold]artifact store[/]  {escape(str(store['url'] or 'none configured (JITGUARD_SHARE)'))}")
    out.print(f"  signs what it saves as: {store['signs_as'] or 'nothing (no usable JITGUARD_SIGNING_KEY)'}")
    out.print(f"  accepts: {'only ' + ', '.join(trusted) if trusted else 'anything, signed or not'}")
    if store["findings"]:
        render_findings(out, list(store["findings"]))


def render_doctor(
    facts: Facts,
    results: Mapping[str, list[Finding]],
    decision: Mapping[str, Any] | None,
    stream: Any = None,
    *,
    own: Sequence[Finding] = (),
    engine: Mapping[str, Any] | None = None,
    probe: Mapping[str, Any] | None = None,
    store: Mapping[str, Any] | None = None,
    deep: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    out = console(stream)
    out.print("[bold]jitguard doctor[/]")
    out.print()
    if own:  # jitguard's own installation first: a broken one explains whatever follows
        out.print("[bold]jitguard itself[/]  [bold red]needs repair[/]")
        render_findings(out, list(own))
        out.print()
    rows = machine_rows(facts)
    width = max(len(key) for key, _ in rows)
    for key, value in rows:  # plain lines: a table would pad every line to the console's width when piped
        out.print(f"[bold]{key:<{width}}[/]  {escape(value)}")
    for backend, findings in results.items():
        out.print()
        verdict = "[bold red]blocked[/]" if any(f.blocking for f in findings) else "[bold green]usable[/]"
        out.print(f"[bold]{backend}[/]  {verdict}")
        if findings:
            render_findings(out, findings)
        else:
            out.print("  no findings")
    if deep is not None:
        out.print()
        render_deep(out, deep)
    if probe is not None:
        out.print()
        render_probe(out, probe)
    if store is not None and (store["url"] or store["findings"]):
        out.print()
        render_store_trust(out, store)
    out.print()
    out.print("[bold]Verdict[/]")
    for backend, findings in results.items():
        codes = [f.code for f in findings if f.blocking]
        if codes:
            out.print(f"  {backend:<11}[red]blocked[/] by {', '.join(codes)}")
        else:
            warn = [f.code for f in findings if f.severity == "warning"]
            extra = f" (warnings: {', '.join(warn)})" if warn else ""
            out.print(f"  {backend:<11}[green]usable[/]{extra}")
    strict = decision is not None and decision.get("requested") not in (None, "auto")
    if decision and decision.get("backend") == "none" and strict:
        named = escape(f"{decision.get('source')}={decision.get('requested')}")
        out.print(f"  GDN prefill with {named} (strict): [red]cannot run here[/] (it is blocked, above)")
    elif decision and decision.get("backend") == "none":
        out.print(
            "  GDN prefill with backend='auto': [red]no backend can run here[/] (each one is blocked, above)"
        )
    elif decision:
        chosen = str(decision.get("backend"))
        # The op never probes the torch backend (its inputs are torch tensors), but doctor has: say it plainly.
        blocked = [f.code for f in results.get(chosen, []) if f.blocking]
        if blocked:
            out.print(
                f"  GDN prefill with backend='auto': [red]no backend can run here[/] "
                f"(the last resort, {chosen}, is blocked by {', '.join(blocked)})"
            )
        else:
            out.print(f"  GDN prefill with backend='auto' uses: [bold]{chosen}[/]")
        for entry in decision.get("trace") or ():
            out.print(
                f"    {entry.get('backend')}: {entry.get('outcome')} ({escape(str(entry.get('reason')))})"
            )
    if engine is not None and engine.get("name") == "sglang":
        out.print()
        out.print(escape(render("sglang", engine["choices"])))
    elif engine is not None:
        render_engine(out, engine)
    order = {"jitguard": list(own), **results}
    if decision and decision.get("backend") == "none" and not strict and "torch" in results:
        # Nothing can run: the step that unblocks the last resort (torch runs anywhere) comes first.
        order = {"jitguard": list(own), "torch": results["torch"], **results}
    todo = _next_steps(order)
    if todo:
        out.print()
        out.print("[bold]What to do[/]")
        for i, line in enumerate(todo, 1):
            out.print(f"  {i}. {escape(line)}")


def render_deep(out: Console, deep: Mapping[str, Mapping[str, Any]]) -> None:
    """``doctor --deep``: what each backend's real import in a subprocess tried, and how it went."""
    out.print(
        "[bold]deep checks[/]  (real imports in a subprocess; their findings are in the sections above)"
    )
    for backend, checked in deep.items():
        style = {"ok": "green", "failed": "red"}.get(str(checked["outcome"]), "dim")
        took = f", {checked['seconds']:.1f} s" if checked.get("seconds") else ""
        out.print(f"  {backend:<11}[{style}]{checked['outcome']}[/]  {escape(str(checked['detail']))}{took}")
        for module in checked.get("imports") or ():
            out.print(f"             [dim]import {escape(module)}[/]")


def render_probe(out: Console, probe: Mapping[str, Any]) -> None:
    """``doctor --compile``: what the probe compiled, linked and loaded, step by step (``ProbeResult``)."""
    steps = list(probe.get("steps") or ())
    failed = next((s for s in steps if s["outcome"] == "failed"), None)
    load = next((s for s in steps if s["name"] == "load"), None)
    if failed is not None:
        verdict = f"[bold red]{failed['name']} failed[/]"
    elif load is not None and load["outcome"] == "not-run":
        verdict = f"[bold green]built and linked[/], not loaded: {escape(load['detail'])}"
    else:
        verdict = "[bold green]built, linked and loaded[/]"
    out.print(
        f"[bold]compile probe[/]  {verdict} ({probe['seconds']:.1f} s; a one-kernel module built the way "
        f"FlashInfer's JIT builds, for {escape(probe['arch'])})"
    )
    for step in steps:
        outcome = step["outcome"].replace("-", " ")
        style = {"done": "green", "failed": "red"}.get(step["outcome"], "dim")
        out.print(f"  {step['name']:<8} [{style}]{outcome:<8}[/] {escape(step['detail'])}")
        if step.get("command"):
            out.print(f"           [dim]$ {escape(step['command'])}[/]")
    link = probe.get("link") or {}
    dirs = ", ".join(f"-L{d}" for d in link.get("search_dirs") or ()) or "no -L"
    libraries = " ".join(f"-l{name}" for name in link.get("libraries") or ()) or "no -l"
    out.print(f"  libs     the link line asks for {escape(libraries)}, searching {escape(dirs)}")
    library = probe.get("library")
    if library is None:
        out.print("  library  none built")
    else:
        where = "" if library["kept"] else " (removed with the probe's temporary directory)"
        needs = ", ".join(library.get("needed") or ()) or "nothing"
        out.print(
            f"  library  {escape(library['path'])}, {library['bytes']} bytes, needs {escape(needs)}{where}"
        )
    if probe.get("log_path"):
        out.print(f"  log      {escape(str(probe['log_path']))}")
    if probe.get("flashinfer") is None:
        out.print(
            "  [yellow]FlashInfer is not installed[/]: the probe used the compile and link flags of FlashInfer's "
            "JIT as jitguard knows them; install FlashInfer for its own"
        )


def render_engine(out: Console, engine: Mapping[str, Any]) -> None:
    """``doctor --engine vllm``: each FlashInfer choice the engine would make here and jitguard's answer."""
    version = engine.get("version")
    out.print()
    label = f"vLLM {version}" if version else "vLLM (not installed here; its newest layout)"
    out.print(f"[bold]{escape(label)}: its FlashInfer choices here[/]")
    if engine.get("drift"):
        out.print(f"  [yellow]{escape(engine['drift'])}[/]")
    coverage = engine.get("coverage")
    if coverage:
        unguarded = [c for c in coverage["choices"] if not c["found"]]
        out.print(f"  {escape(coverage['summary'])}" + ("" if unguarded else " (all guarded)"))
        for choice in unguarded:
            where = "; ".join(f"{s['module']}.{s['target']}: {s['state']}" for s in choice["missing"])
            out.print(f"  [yellow]not guarded: {escape(choice['title'])}[/] ({escape(where)})")
    for row in engine.get("choices") or ():
        blocking = [f["code"] for f in row.get("findings", ()) if f.get("severity") == "error"]
        title, default = escape(row["title"]), escape(row["default"])
        if not blocking:
            known = (
                "can work here"
                if row.get("verified", True)
                else "[yellow]not verified[/] (a fact is missing)"
            )
            built = f"; prebuilt: {', '.join(row['prebuilt'][:3])}" if row.get("prebuilt") else ""
            out.print(f"  [bold]{title}[/]: {known}, vLLM's choice stands{escape(built)}")
            out.print(f"    vLLM picks it for: {default}")
        else:
            out.print(f"  [bold]{title}[/]: [bold red]cannot work here[/] ({', '.join(blocking)})")
            out.print(f"    when vLLM picks it ({default}): vLLM uses {escape(row['fallback'])}, one warning")
            if row.get("named_by"):
                named = f"; set here: {row['named_now']}" if row.get("named_now") else ""
                out.print(
                    f"    when you name it ({escape(row['named_by'] + named)}): the engine stops at start-up, "
                    "with the cause and the fix"
                )
        site = row.get("site")
        if site:
            where = f"{site['module']}: {site['target']} (vLLM {site['releases']})"
            out.print(f"    [dim]where: {escape(where)}[/]")
    blocking = _blocking(engine.get("choices") or ())
    if blocking:
        out.print("  why (each code above, once; `jitguard doctor --backend flashinfer` has the evidence):")
    for finding in blocking:
        out.print(f"    {escape('[' + finding['code'] + ']')} {escape(finding['title'])}")
        if finding.get("fixes"):
            fix = finding["fixes"][0]
            command = f" `{escape(fix['command'])}`" if fix.get("command") else ""
            out.print(f"      fix: {escape(fix['text'])}{command}")
    for note in _notes(engine.get("choices") or ()):
        code = escape(f"[{note['code']}]")
        out.print(f"  note: {code} {escape(note['title'])}")
        if note.get("fixes"):
            fix = note["fixes"][0]
            out.print(
                f"    fix: {escape(fix['text'])}"
                + (f" `{escape(fix['command'])}`" if fix.get("command") else "")
            )
    out.print(
        "  [dim]A FlashInfer module that fails to build in the engine anyway is recorded: the next start takes "
        "vLLM's own path at once.[/]"
    )


def _blocking(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The distinct blocking findings behind the rows' "cannot work here (codes)", once each."""
    found: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        for f in row.get("findings", ()):
            if f.get("severity") == "error":
                found.setdefault(f["code"], f)
    return list(found.values())


def _notes(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The distinct explanations (info findings: why flashinfer-cubin does not help, why vLLM itself turns a
    kernel off), once each; the verdict lines alone would not say them."""
    notes: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        for f in row.get("findings", ()):
            if f.get("severity") == "info" and f["code"] != "flashinfer-module-prebuilt":
                notes.setdefault(f["code"], f)
    return list(notes.values())


def _next_steps(results: Mapping[str, list[Finding]]) -> list[str]:
    """The first fix of each distinct blocking finding, in backend preference order."""
    steps: list[str] = []
    seen: set[str] = set()
    for backend, findings in results.items():
        for f in findings:
            if f.blocking and f.code not in seen and f.fixes:
                seen.add(f.code)
                steps.append(f"[{backend}] {f.code}: {f.fixes[0].render()}")
    return steps
