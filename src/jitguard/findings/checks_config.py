"""Pre-flight checks of jitguard's own settings: every malformed JITGUARD_* variable (``config-invalid``, with
what it accepts) and every JITGUARD_* name jitguard does not read (``config-unknown``: a typo reads as unset),
for `jitguard doctor`; the table they come from is ``jitguard.config.VARIABLES``."""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping

from jitguard.config import VARIABLES, Variable, problems
from jitguard.errors import ConfigError
from jitguard.findings.catalog import make
from jitguard.findings.model import Finding

_EXAMPLES = {
    "flag": "1",
    "duration": "10m",
    "memory": "75%",
    "size": "6G",
    "count": "4",
    "name": "default",
    "arch": "9.0",
    "url": "file:///shared/jitguard",
    "path": "/path/of/your/own",
}


def _example(variable: Variable) -> str:
    if variable.choices:
        return variable.choices[0]
    return _EXAMPLES.get(variable.kind, "...")


def invalid(errors: list[ConfigError]) -> list[Finding]:
    """One ``config-invalid`` finding per malformed variable."""
    found = []
    for error in errors:
        variable = VARIABLES[error.name]
        found.append(
            make(
                "config-invalid",
                evidence=[f"{error.name}={error.value!r}"],
                name=error.name,
                value=repr(error.value) if len(error.value) <= 60 else repr(error.value[:40]) + "...",
                meaning=variable.meaning.split(";")[0].replace("`", ""),
                accepted=error.expected,
                default=variable.default.replace("`", "") or "unset",
                example=_example(variable),
            )
        )
    return found


def unknown(names: list[str], env: Mapping[str, str]) -> list[Finding]:
    """One ``config-unknown`` warning per JITGUARD_* name jitguard does not read, with the nearest real one."""
    known = [name for name, v in VARIABLES.items() if v.scope == "setting"]
    found = []
    for name in names:
        near = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
        if near:
            found.append(make("config-unknown", evidence=[f"{name} is set"], name=name, suggestion=near[0]))
        else:
            found.append(make("config-unknown", evidence=[f"{name} is set"], name=name))
    return found


def settings(env: Mapping[str, str] | None = None) -> tuple[list[Finding], list[Finding]]:
    """(config-invalid findings, config-unknown findings) for ``env`` (default os.environ)."""
    env = os.environ if env is None else env
    errors, names = problems(env)
    return invalid(errors), unknown(names, env)
