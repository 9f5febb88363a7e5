"""ELF readers for the symbol versions that decide whether a shared object loads: the versions a library
DEFINES
(``.gnu.version_d``, e.g. every ``GLIBCXX_3.4.x`` of a libstdc++) and the versions an object NEEDS from each
library (``.gnu.version_r``). The dynamic loader refuses an object whose needed version its library lacks
(``version `GLIBCXX_3.4.32' not found``); comparing these two sets predicts that refusal before any load.

Readers raise ``ElfReadError`` for a missing or non-ELF file; the probes that call them turn it into a fact.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# VER_FLG_BASE marks the version definition that names the file itself (its soname), not a version node.
_VER_FLG_BASE = 0x1
_VERSION_NAME = re.compile(r"^(?P<prefix>[A-Za-z_]+?)_?(?P<number>\d+(?:\.\d+)*)$")


class ElfReadError(Exception):
    """The file is missing, unreadable or not an ELF shared object with the section asked for."""


@dataclass(frozen=True)
class DynamicInfo:
    """The parts of the dynamic section the loader uses to find libraries."""

    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]


def defined_versions(path: str | os.PathLike[str]) -> tuple[str, ...]:
    """Version nodes ``path`` defines (``GLIBCXX_3.4``, ..., ``CXXABI_1.3.13``), sorted; the soname entry
    excluded.

    An unversioned library defines none and gives ``()``.
    """
    from elftools.elf.gnuversions import GNUVerDefSection

    names: set[str] = set()
    with _open_elf(path) as elf:
        for section in elf.iter_sections():
            if not isinstance(section, GNUVerDefSection):
                continue
            for verdef, auxiliaries in section.iter_versions():
                if verdef["vd_flags"] & _VER_FLG_BASE:
                    continue
                # The first auxiliary entry is the node's own name; later ones name the nodes it inherits
                # from.
                first = next(iter(auxiliaries), None)
                if first is not None:
                    names.add(first.name)
    return tuple(sorted(names, key=version_key))


def needed_versions(path: str | os.PathLike[str]) -> dict[str, tuple[str, ...]]:
    """Versions ``path`` needs, per library file name: ``{"libstdc++.so.6": ("GLIBCXX_3.4", ...), ...}``."""
    from elftools.elf.gnuversions import GNUVerNeedSection

    needed: dict[str, set[str]] = {}
    with _open_elf(path) as elf:
        for section in elf.iter_sections():
            if not isinstance(section, GNUVerNeedSection):
                continue
            for verneed, auxiliaries in section.iter_versions():
                if verneed.name:
                    needed.setdefault(verneed.name, set()).update(aux.name for aux in auxiliaries)
    return {lib: tuple(sorted(names, key=version_key)) for lib, names in sorted(needed.items())}


def dynamic_info(path: str | os.PathLike[str]) -> DynamicInfo:
    """Soname, DT_NEEDED and the RPATH/RUNPATH entries (``$ORIGIN`` expanded to the file's directory)."""
    from elftools.elf.dynamic import DynamicSection

    soname: str | None = None
    needed: list[str] = []
    rpath: list[str] = []
    runpath: list[str] = []
    origin = str(Path(os.path.realpath(path)).parent)
    with _open_elf(path) as elf:
        for section in elf.iter_sections():
            if not isinstance(section, DynamicSection):
                continue
            for tag in section.iter_tags():
                # pyelftools sets the string of a string-valued tag as an attribute named after it.
                kind = tag.entry.d_tag
                if kind == "DT_SONAME":
                    soname = str(getattr(tag, "soname", ""))
                elif kind == "DT_NEEDED":
                    needed.append(str(getattr(tag, "needed", "")))
                elif kind == "DT_RPATH":
                    rpath += _expand_origin(str(getattr(tag, "rpath", "")), origin)
                elif kind == "DT_RUNPATH":
                    runpath += _expand_origin(str(getattr(tag, "runpath", "")), origin)
    return DynamicInfo(soname, tuple(needed), tuple(rpath), tuple(runpath))


def symbols(path: str | os.PathLike[str], *, containing: str = "") -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(defined, undefined) names in the dynamic symbol table (``.dynsym``: what the loader binds) that
    contain ``containing``, each sorted. An undefined function is bound lazily, at its first call: a library
    that needs a symbol nothing provides loads, then kills the process ("symbol lookup error") when called."""
    from elftools.elf.sections import SymbolTableSection

    defined: set[str] = set()
    undefined: set[str] = set()
    with _open_elf(path) as elf:
        table = elf.get_section_by_name(".dynsym")
        if not isinstance(table, SymbolTableSection):
            raise ElfReadError(f"{path} has no dynamic symbol table")
        for symbol in table.iter_symbols():
            if not symbol.name or containing not in symbol.name:
                continue
            (undefined if symbol["st_shndx"] == "SHN_UNDEF" else defined).add(symbol.name)
    return tuple(sorted(defined)), tuple(sorted(undefined))


def version_key(name: str) -> tuple[str, tuple[int, ...]]:
    """Sort key: by prefix, then numerically (``GLIBCXX_3.4.9`` < ``GLIBCXX_3.4.10``)."""
    m = _VERSION_NAME.match(name)
    if not m:
        return (name, ())
    return (m.group("prefix"), tuple(int(p) for p in m.group("number").split(".")))


def versions_with_prefix(names: Iterable[str], prefix: str) -> tuple[str, ...]:
    """The plain numbered versions of one family, sorted: ``prefix="GLIBCXX"`` keeps ``GLIBCXX_3.4.30`` but
    not
    ``GLIBCXX_LDBL_3.4`` or ``CXXABI_TM_1``."""
    pattern = re.compile(rf"^{re.escape(prefix)}_\d+(?:\.\d+)*$")
    return tuple(sorted({n for n in names if pattern.match(n)}, key=version_key))


def max_version(names: Iterable[str], prefix: str) -> str | None:
    """The newest numbered version of the family ``prefix`` in ``names``, or None."""
    family = versions_with_prefix(names, prefix)
    return family[-1] if family else None


def version_tuple(name: str) -> tuple[int, ...]:
    """``GLIBCXX_3.4.30`` -> ``(3, 4, 30)``; a name without a number gives ``()``."""
    return version_key(name)[1]


def _expand_origin(value: str, origin: str) -> list[str]:
    return [p.replace("${ORIGIN}", origin).replace("$ORIGIN", origin) for p in value.split(":") if p]


@contextmanager
def _open_elf(path: str | os.PathLike[str]) -> Iterator[Any]:
    """The parsed ELF file; any failure to read or parse it (also mid-iteration) becomes ``ElfReadError``."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as handle:
            yield ELFFile(handle)
    except OSError as exc:
        raise ElfReadError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except (ELFError, ValueError, KeyError, IndexError, AssertionError) as exc:
        raise ElfReadError(f"{path} is not a readable ELF file: {exc}") from exc
    except ElfReadError:
        raise
    except Exception as exc:  # a damaged file can trip any corner of the parser; it is still just unreadable
        raise ElfReadError(f"{path} is not a readable ELF file: {type(exc).__name__}: {exc}") from exc
