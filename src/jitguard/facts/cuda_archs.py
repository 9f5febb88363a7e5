"""GPU code targets (``compute_120f``, ``sm_90a``, ``7.5``) and which CUDA releases' nvcc can produce them.

nvcc itself is the authority: ``nvcc --help`` lists every value its ``--gpu-architecture`` accepts, ``a`` and
``f`` variants included (``--list-gpu-arch`` lists only the plain ones). The table here is the fallback when
that list cannot be read, and the source of "which toolkit can": the first and last release per target,
checked against the lists of real nvcc 11.8 and 13.0 by the tests. Pure: no process is started here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

Release = tuple[int, int]

_SPELLING = re.compile(r"^(?P<major>\d+)\.(?P<minor>\d)(?P<suffix>[af]?)$")
_CODE = re.compile(r"^(?:compute_|sm_|lto_|sm)?(?P<number>\d{2,3})(?P<suffix>[af]?)$")
_ALLOWED = re.compile(r"Allowed values for this option:\s*(?P<values>.*?)\.\s*(?:\n\s*\n|\n--|\Z)", re.S)


@dataclass(frozen=True, order=True)
class Target:
    """One code target: compute capability ``major.minor`` and FlashInfer's/nvcc's suffix ("" , "a" or "f")."""

    major: int
    minor: int
    suffix: str = ""

    @property
    def number(self) -> int:
        return self.major * 10 + self.minor

    @property
    def spelling(self) -> str:
        """FlashInfer's spelling, as FLASHINFER_CUDA_ARCH_LIST takes it: ``12.0f``."""
        return f"{self.major}.{self.minor}{self.suffix}"

    @property
    def compute(self) -> str:
        return f"compute_{self.number}{self.suffix}"

    @property
    def sm(self) -> str:
        return f"sm_{self.number}{self.suffix}"

    @property
    def gencode(self) -> str:
        return f"-gencode=arch={self.compute},code={self.sm}"

    def runs_on(self, major: int, minor: int) -> bool:
        """Whether this target's code runs on a GPU of capability major.minor: an ``a`` target on exactly
        that capability, a plain or ``f`` one on its major from its minor up (FlashInfer's jit-cache rule)."""
        if self.suffix == "a":
            return (self.major, self.minor) == (major, minor)
        return self.major == major and self.minor <= minor


def parse(text: str) -> Target | None:
    """``12.0f``, ``compute_120f``, ``sm_90a``, ``sm120f`` or ``75`` -> Target; None for anything else."""
    text = text.strip().lower()
    m = _SPELLING.match(text)
    if m:
        return Target(int(m.group("major")), int(m.group("minor")), m.group("suffix"))
    m = _CODE.match(text)
    if m:
        number = int(m.group("number"))
        return Target(number // 10, number % 10, m.group("suffix"))
    return None


# Plain targets: (first CUDA release whose nvcc targets it, last release or None). Read from NVIDIA's release
# notes; 11.8's and 13.0's rows are checked against those nvcc's own lists by tests/real/test_arch_verdicts.py.
_PLAIN: dict[int, tuple[Release, Release | None]] = {
    35: ((5, 0), (11, 8)),
    37: ((6, 5), (11, 8)),
    50: ((6, 0), (12, 9)),
    52: ((6, 5), (12, 9)),
    53: ((6, 5), (12, 9)),
    60: ((8, 0), (12, 9)),
    61: ((8, 0), (12, 9)),
    62: ((8, 0), (12, 9)),
    70: ((9, 0), (12, 9)),  # CUDA 13.0 dropped Volta (V100) and Xavier (7.2)
    72: ((10, 0), (12, 9)),
    75: ((10, 0), None),
    80: ((11, 0), None),
    86: ((11, 1), None),
    87: ((11, 4), None),
    88: ((13, 0), None),
    89: ((11, 8), None),
    90: ((11, 8), None),
    100: ((12, 8), None),
    101: ((12, 8), (12, 9)),  # renamed 110 in CUDA 13.0
    103: ((12, 9), None),
    110: ((13, 0), None),
    120: ((12, 8), None),
    121: ((12, 9), None),
}
# Arch-specific ('a') and family ('f') variants: their first release (they end with their plain target).
_SUFFIXED: dict[tuple[int, str], Release] = {
    (90, "a"): (12, 0),
    (100, "a"): (12, 8),
    (101, "a"): (12, 8),
    (120, "a"): (12, 8),
    (103, "a"): (12, 9),
    (121, "a"): (12, 9),
    (110, "a"): (13, 0),
    (100, "f"): (12, 9),
    (101, "f"): (12, 9),
    (103, "f"): (12, 9),
    (120, "f"): (12, 9),
    (121, "f"): (12, 9),
    (110, "f"): (13, 0),
}


@dataclass(frozen=True)
class ReleaseRange:
    """The CUDA releases whose nvcc can target one target: ``first`` up to ``last`` (None: still current)."""

    first: Release
    last: Release | None

    def contains(self, release: Release) -> bool:
        return release >= self.first and (self.last is None or release <= self.last)

    @property
    def text(self) -> str:
        first = f"{self.first[0]}.{self.first[1]}"
        if self.last is None:
            return f"CUDA {first} or newer"
        return f"CUDA {first} to {self.last[0]}.{self.last[1]}"


def releases_for(target: Target) -> ReleaseRange | None:
    """The CUDA releases that can target ``target``, from the table; None when the table does not know it."""
    plain = _PLAIN.get(target.number)
    if plain is None:
        return None
    if not target.suffix:
        return ReleaseRange(*plain)
    first = _SUFFIXED.get((target.number, target.suffix))
    if first is None:
        return None
    return ReleaseRange(max(first, plain[0]), plain[1])


def table_targets(release: Release) -> tuple[str, ...]:
    """Every ``compute_*`` value the table says nvcc of ``release`` accepts (the fallback list)."""
    found = [
        f"compute_{n}" for n, (first, last) in _PLAIN.items() if ReleaseRange(first, last).contains(release)
    ]
    for (number, suffix), _ in _SUFFIXED.items():
        rng = releases_for(Target(number // 10, number % 10, suffix))
        if rng is not None and rng.contains(release):
            found.append(f"compute_{number}{suffix}")
    return tuple(sorted(found, key=_code_key))


def parse_nvcc_help(text: str) -> tuple[str, ...]:
    """The values ``--gpu-architecture`` accepts, from ``nvcc --help`` (``compute_*``, ``sm_*``, ``lto_*``,
    ``all``, ...); ``()`` when the help has no such list."""
    start = text.find("--gpu-architecture")
    if start < 0:
        return ()
    m = _ALLOWED.search(text, start)
    if m is None:
        return ()
    return tuple(re.findall(r"'([^']+)'", m.group("values")))


def targets_of(values: Iterable[str]) -> tuple[Target, ...]:
    """The virtual targets (``compute_*``) among nvcc's allowed values, sorted."""
    found = {t for v in values if v.startswith("compute_") and (t := parse(v)) is not None}
    return tuple(sorted(found))


def can_target(target: Target, listed: Iterable[str], release: Release | None) -> bool | None:
    """Whether nvcc can produce ``target``: from its own list when there is one, else from the table for its
    release; None when neither tells."""
    values = tuple(listed)
    if values:
        return target.compute in values
    if release is None:
        return None
    rng = releases_for(target)
    return None if rng is None else rng.contains(release)


def _code_key(code: str) -> tuple[int, str]:
    t = parse(code)
    return (t.number, t.suffix) if t else (0, code)
