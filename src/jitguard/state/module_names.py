"""Which failure-cache records one module name stands for (``jitguard cache list|clear --module NAME``).

A record is named after what failed, by whoever saw it fail:

- the GDN op's backend, on its first use (``gdn-prefill/flashinfer``, ``gdn-prefill/triton``; both FlashInfer
  eras: a build, a load or a first launch), written by ``jitguard.gdn``;
- FlashInfer's JIT module, by FlashInfer's own name (``gdn_prefill_sm90``, a partial module
  ``gdn_prefill_sm90_only_<instances>``, ``sampling``, ...), written by the build hook (in the op or an engine)
  and by ``jitguard build flashinfer-gdn``.

FlashInfer GDN prefill is one thing to a user, and it leaves records under both kinds of name: the op's, and
one per GDN module it built. Any one of them left behind keeps FlashInfer GDN prefill from being tried again
(the op skips a backend with a recorded failure; the build hook answers a recorded module failure at once), so
a name of that group stands for the whole group. Any other name stands for itself alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from jitguard.decision.engine_verdicts import GDN_PREFILL


@dataclass(frozen=True)
class Selection:
    """The records one ``--module NAME`` stands for: exact ``names`` and every name starting with one of
    ``prefixes``. ``group`` says what they are together (None: ``NAME`` alone)."""

    name: str
    names: tuple[str, ...]
    prefixes: tuple[str, ...] = ()
    group: str | None = None

    def holds(self, module: str) -> bool:
        return module in self.names or module.startswith(self.prefixes)

    def note(self) -> str | None:
        """One line for people on why more than ``name`` matched; None when only ``name`` can."""
        if self.group is None:
            return None
        spelled = ", ".join([*self.names, *(f"{p}*" for p in self.prefixes)])
        return (
            f"{self.name} names {self.group}, whose records ({spelled}) go together: any one left behind "
            "keeps it from being tried again"
        )


# The op's record of its FlashInfer backend, spelled once: the status service's ``FLASHINFER_GDN`` and through
# it ``jitguard.gdn.backends.flashinfer.MODULE`` take it from here.
GDN_OP_FLASHINFER = "gdn-prefill/flashinfer"


def _gdn_flashinfer() -> Selection:
    return Selection(
        GDN_OP_FLASHINFER, (GDN_OP_FLASHINFER,), GDN_PREFILL.modules, group="FlashInfer GDN prefill"
    )


def select(name: str) -> Selection:
    """The records ``name`` stands for (see the module docstring)."""
    group = _gdn_flashinfer()
    if group.holds(name):
        return Selection(name, group.names, group.prefixes, group.group)
    return Selection(name, (name,))
