"""Where vLLM chooses a FlashInfer JIT path, by name: one ``Site`` per function or method jitguard wraps.

A site says which choice it is (``jitguard.decision.engine_verdicts``), the module and function found by name in
vLLM's code, the releases that have it, how a user names FlashInfer there, and vLLM's own answer without it.
``apply`` patches the module once it is imported (idempotent, through ``boundary.patches``), ``undo``
restores it. Each site module (``gdn``, ``sampler``, ``attention``, ``predicates``) lists its own;
``jitguard.integrations.vllm`` joins them. Every site asks the one ``ChoiceGuard`` of the process.

A site's ``releases`` is open ('0.23+') while the newest release jitguard knows (``coverage.KNOWN``) still has
it, so a new release is checked for every such site without touching them; it is closed ('0.17-0.33') once
vLLM dropped the name and the site's job passed to the others of its choice: a later release is not expected
to have it, and its absence there is no moved layout.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from jitguard.boundary import patches
from jitguard.boundary.failsafe import shielded
from jitguard.decision.engine_verdicts import Choice

if TYPE_CHECKING:
    from jitguard.integrations.choices import ChoiceGuard

log = logging.getLogger("jitguard.vllm")
PACKAGE = "vllm"


@dataclass(frozen=True)
class Site:
    choice: Choice
    module: str
    target: str  # the function or method jitguard wraps, e.g. "TopKTopPSampler.__init__"
    releases: str  # '0.23+': still there in the newest release jitguard knows; '0.17-0.33': dropped after
    named: str  # how a user names FlashInfer here, in vLLM's terms
    answer: str  # vLLM's own path when jitguard says FlashInfer cannot work
    apply: Callable[[ModuleType, ChoiceGuard], bool] = field(compare=False, repr=False)
    undo: Callable[[ModuleType], None] = field(compare=False, repr=False)
    layout: bool = False  # one of its choice's alternative layouts (found when any of them is)

    def to_json(self) -> dict[str, Any]:
        return {
            "choice": self.choice.key,
            "module": self.module,
            "target": self.target,
            "releases": self.releases,
            "named": self.named,
            "answer": self.answer,
        }


Wrap = Callable[[ModuleType, Callable[..., Any], "ChoiceGuard"], Any]


def function_patch(
    names: tuple[str, ...], choice: Choice, wrap: Wrap, *, optional: bool = False
) -> tuple[Callable[[ModuleType, ChoiceGuard], bool], Callable[[ModuleType], None]]:
    """Patch and undo for the module functions ``names``: ``wrap(module, original, guard)`` takes each one's
    place in the module and in every loaded vLLM module that imported it. ``optional``: releases without
    them are no moved layout (the patch just does not apply); otherwise a missing one is said once and
    nothing is patched."""

    def patch(module: ModuleType, guard: ChoiceGuard) -> bool:
        missing = [n for n in names if not callable(module.__dict__.get(n))]
        if missing:
            if not optional:
                layout_moved(module.__name__, ", ".join(missing), choice.title)
            return False
        for name in names:
            patches.wrap(module, name, lambda original: wrap(module, original, guard), rebind_under=PACKAGE)
        return True

    def unpatch(module: ModuleType) -> None:
        for name in names:
            patches.undo(module, name, rebind_under=PACKAGE)

    return patch, unpatch


def method_patch(
    cls_name: str,
    method: str,
    choice: Choice,
    wrap: Callable[[Any, ChoiceGuard], Any],
    *,
    needs: tuple[str, ...] = (),
    optional: bool = False,
) -> tuple[Callable[[ModuleType, ChoiceGuard], bool], Callable[[ModuleType], None]]:
    """Patch and undo for ``cls_name.method`` in a module: ``wrap(original, guard)`` takes its place.
    ``needs``: the class's other attributes the wrapper uses (a class without them is a moved layout).
    ``optional``: a module without the class is no moved layout (a release that dropped it); a class that
    lost the method is one still."""

    def patch(module: ModuleType, guard: ChoiceGuard) -> bool:
        cls = module.__dict__.get(cls_name)
        if cls is None and optional:
            return False
        if cls is None or not callable(getattr(cls, method, None)) or not all(hasattr(cls, n) for n in needs):
            shape = f" with {'/'.join(needs)}" if needs else ""
            layout_moved(module.__name__, f"{cls_name}.{method}{shape}", choice.title)
            return False
        return patches.wrap(cls, method, lambda original: wrap(original, guard))

    def unpatch(module: ModuleType) -> None:
        cls = module.__dict__.get(cls_name)
        if cls is not None:
            patches.undo(cls, method)

    return patch, unpatch


def layout_moved(module: str, target: str, what: str) -> None:
    """vLLM's code moved under jitguard: say so once; vLLM then runs exactly as without jitguard."""
    log.warning(
        "jitguard: [jitguard-fault] %s has no %s as jitguard knows it (this vLLM moved it); the %s choice is "
        "vLLM's own, unguarded. Fix: upgrade jitguard (`pip install -U .` from a newer checkout).",
        module,
        target,
        what,
    )


_deciding: ContextVar[Choice | None] = ContextVar("jitguard_vllm_deciding", default=None)


@contextlib.contextmanager
def deciding(choice: Choice) -> Iterator[None]:
    """vLLM is deciding ``choice`` inside this block (its own predicate runs): a gate of another choice it asks
    on the way is this choice's business, judged by its site when vLLM's answer comes back."""
    token = _deciding.set(choice)
    try:
        yield
    finally:
        _deciding.reset(token)


def decided_by_another(choice: Choice) -> bool:
    """Whether ``choice``'s gate is being asked inside vLLM's decision of another guarded choice: vLLM 0.34's
    ``flashinfer_sampler_supported`` asks ``has_flashinfer()`` first, and the umbrella's verdict (any other
    FlashInfer kernel failing here) must not turn the sampler off, nor make vLLM raise its own error where
    the user named it; the sampler's site judges the sampler's modules."""
    outer = _deciding.get()
    return outer is not None and outer.key != choice.key


def may_keep(guard: ChoiceGuard, choice: Choice, *, named: str | None, instead: str, asked: str = "") -> bool:
    """Whether vLLM may keep FlashInfer for ``choice``; raises ``ChoiceUnavailable`` when the user named it
    (``named``: how) and it cannot work. A fault of jitguard's own keeps vLLM's choice (said once)."""
    route_logs()  # vLLM may have configured its logging only after register() ran
    return shielded(
        f"vLLM's choice of {choice.title}",
        "vLLM's choice stands",
        lambda: guard.allows(choice, named=named, instead=instead, asked=asked),
        lambda: True,
    )


# ---- how a user names FlashInfer, read the way vLLM reads it ---------------------------------------------
def env_flag(name: str) -> bool | None:
    """vLLM's boolean variables: ``bool(int(value))`` when set; None when unset or not a number."""
    raw = os.environ.get(name)
    if raw is None:
        return None
    try:
        return bool(int(raw.strip()))
    except ValueError:
        return None


def current_config() -> Any:
    """vLLM's current config, or None outside ``set_current_vllm_config`` (no warning, no exception)."""
    try:
        from vllm import config
    except Exception:
        return None
    getter = getattr(config, "get_current_vllm_config_or_none", None)
    try:
        if callable(getter):
            return getter()
        return config.get_current_vllm_config()
    except Exception:
        return None


def config_value(*path: str) -> Any:
    """``get_current_vllm_config().<path>``, or None when any part is missing."""
    value = current_config()
    for name in path:
        value = getattr(value, name, None)
        if value is None:
            return None
    return value


def enum_name(value: Any) -> str:
    """An enum member's name ("FLASHINFER"), or the text of anything else, upper-cased."""
    return str(getattr(value, "name", value) or "").strip().upper()


def route_logs() -> None:
    """Show jitguard's log lines in vLLM's log, in vLLM's format: vLLM configures only its own 'vllm' logger,
    so without this jitguard's INFO lines (build progress, waits on another rank) would be lost. Does nothing
    when the application configured logging itself, or vLLM has not (yet)."""
    ours = logging.getLogger("jitguard")
    theirs = logging.getLogger("vllm")
    if ours.handlers or logging.getLogger().handlers or not theirs.handlers:
        return
    for handler in theirs.handlers:
        ours.addHandler(handler)
    ours.setLevel(theirs.level or logging.INFO)
    ours.propagate = False
