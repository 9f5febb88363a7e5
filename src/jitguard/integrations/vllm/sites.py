"""Where vLLM chooses a FlashInfer JIT path, by name: one ``Site`` per function or method jitguard wraps.

A site says which choice it is (``jitguard.decision.engine``), the module and function found by name in
vLLM's code, the releases that have it, how a user names FlashInfer there, and vLLM's own answer without it.
``apply`` patches the module once it is imported (idempotent), ``undo`` restores it. Each site module
(``gdn``, ``sampler``, ``attention``, ``gates``) lists its own; ``jitguard.integrations.vllm`` joins them.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from jitguard.decision.engine import Choice
from jitguard.integrations.boundary import shielded

if TYPE_CHECKING:
    from jitguard.integrations.choices import ChoiceGuard
    from jitguard.integrations.vllm.gdn import GdnGuard

log = logging.getLogger("jitguard.vllm")
MARK = "__jitguard_original__"


@dataclass
class Guards:
    """This process's guards: GDN prefill's (its own messages, vLLM's option) and every other choice's."""

    gdn: GdnGuard
    choices: ChoiceGuard


@dataclass(frozen=True)
class Site:
    choice: Choice
    module: str
    target: str  # the function or method jitguard wraps, e.g. "TopKTopPSampler.__init__"
    releases: str
    named: str  # how a user names FlashInfer here, in vLLM's terms
    answer: str  # vLLM's own path when jitguard says FlashInfer cannot work
    apply: Callable[[ModuleType, Guards], bool] = field(compare=False, repr=False)
    undo: Callable[[ModuleType], None] = field(compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "choice": self.choice.key,
            "module": self.module,
            "target": self.target,
            "releases": self.releases,
            "named": self.named,
            "answer": self.answer,
        }


def original_of(obj: Any) -> Any:
    """What jitguard wrapped, or None when ``obj`` is not one of its wrappers."""
    return getattr(obj, MARK, None)


def mark(wrapper: Any, original: Any) -> Any:
    setattr(wrapper, MARK, original)
    return wrapper


def rebind(name: str, old: Any, new: Any) -> None:
    """Replace ``old`` by ``new`` wherever a loaded vLLM module imported it under ``name`` (``from vllm.x
    import name`` copies the binding; a module imported later gets the patched one from the import hook)."""
    for module_name, module in list(sys.modules.items()):
        if module is None or not module_name.startswith("vllm"):
            continue
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict) and namespace.get(name) is old:
            namespace[name] = new


Wrap = Callable[[ModuleType, Callable[..., Any], "Guards"], Any]


def function_patch(
    names: tuple[str, ...], choice: Choice, wrap: Wrap, *, optional: bool = False
) -> tuple[Callable[[ModuleType, Guards], bool], Callable[[ModuleType], None]]:
    """Patch and undo for the module functions ``names``: ``wrap(module, original, guards)`` takes each one's
    place in the module and in every loaded vLLM module that imported it (``rebind``). ``optional``: releases
    without them are no moved layout (the patch just does not apply); otherwise a missing one is said once
    and nothing is patched."""

    def patch(module: ModuleType, guards: Guards) -> bool:
        missing = [n for n in names if not callable(module.__dict__.get(n))]
        if missing:
            if not optional:
                layout_moved(module.__name__, ", ".join(missing), choice.title)
            return False
        for name in names:
            original = module.__dict__[name]
            if original_of(original) is None:
                wrapper = mark(wrap(module, original, guards), original)
                setattr(module, name, wrapper)
                rebind(name, original, wrapper)
        return True

    def unpatch(module: ModuleType) -> None:
        for name in names:
            wrapper = module.__dict__.get(name)
            original = original_of(wrapper)
            if original is not None:
                setattr(module, name, original)
                rebind(name, wrapper, original)

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


def keeps(guards: Guards, choice: Choice, *, named: str | None, instead: str) -> bool:
    """Whether vLLM may keep FlashInfer for ``choice``; raises ``ChoiceUnavailable`` when the user named it
    (``named``: how) and it cannot work. A fault of jitguard's own keeps vLLM's choice (said once)."""
    route_logs()  # vLLM may have configured its logging only after register() ran
    return shielded(
        f"vLLM's choice of {choice.title}",
        "vLLM's choice stands",
        lambda: guards.choices.allows(choice, named=named, instead=instead),
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
