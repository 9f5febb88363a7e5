"""The package is the data path (README "Layout"): each stage imports only from the stages before it.

Walks every module's imports with ``ast`` (function-level imports too: a lazy import is still a dependency;
only ``if TYPE_CHECKING:`` blocks are skipped, since annotations create no runtime arrow). A room's modules sit
at its stage; a feature package's modules each at the stage its ``__init__.py``'s ``STAGES`` table names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import jitguard

PACKAGE = Path(jitguard.__file__).parent
# Lowest first. `config`, `errors`, `fileio` (trusted file I/O), `redaction` and `version` are the ground every
# stage stands on; `report` holds pure renderers
# (below the stages with side effects, so the op's explain() and the engines' log lines can use them);
# `boundary` is where jitguard runs inside foreign code (the fail-safe, the one patch mechanism, the process's
# facts): right above `findings` (its fault line is a finding), below every stage that patches;
# `locks` (a lock with visible waits, where locks live) right above them, so every stage with side effects can take one;
# `ledger` (the start ledger: what each JIT layer compiled, jitguard's own phases) right above `boundary`, so every
# stage that compiles, loads or waits (fleet, flashinfer_jit, integrations) can count into it;
# `state` is the record the build stage writes; `status` (the status service: what each GDN backend and engine
# choice can do here) right above it, so the op and the engine guard both ask it and neither asks the other;
# `fleet` shares what a host compiled (store, compiler cache, warm snapshots) and is called by the build stage
# and the engine boundary; the op (`gdn`) uses decision, status and the build stage; the engine integrations sit
# above the op; the CLI sits on top of every stage, and the package root (`__init__.py`: the version and
# `install()`, which reaches the engine boundary) on top of all: no module imports it.
ROOT = "__init__"
STAGES = (
    ("config", "errors", "fileio", "redaction", "version"),
    ("facts",),
    ("findings",),
    ("locks",),
    ("boundary",),
    ("ledger",),
    ("decision",),
    ("report",),
    ("state",),
    ("status",),
    ("fleet",),
    ("supervise",),
    ("flashinfer_jit",),
    ("gdn",),
    ("integrations",),
    ("cli", "__main__"),
    (ROOT,),
)
RANK = {name: rank for rank, names in enumerate(STAGES) for name in names}
# A feature package (a concern that crosses three or more stages: `cutedsl/`, `gdn_variants/`) is a folder whose
# `__init__.py` holds a docstring and `STAGES = {module: stage}`, a literal naming each module's stage, and
# imports nothing. Each module is ranked at its stage: it imports from rooms and feature modules at or before
# that stage, and any stage at or after it may import it, so pure and impure stay apart inside the package.
FEATURE_TABLE = "STAGES"
FEATURE_STAGES = frozenset(RANK) - {ROOT, "__main__"}


def _stage(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "jitguard":
        return None
    return parts[1] if len(parts) > 1 else ROOT


def _module_name(path: Path, package: Path) -> str:
    rel = path.relative_to(package.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _named_from(target: str, name: str, package_dir: Path) -> str:
    """What ``from <target> import <name>`` depends on: the submodule ``name`` where it is one, else ``target``
    (for ``jitguard`` itself: the root, which holds ``__version__`` and ``install()``)."""
    folder = package_dir.joinpath(*target.split(".")[1:])
    is_module = folder.is_dir() and ((folder / name).is_dir() or (folder / f"{name}.py").is_file())
    return f"{target}.{name}" if is_module else target


def _imports(path: Path, package_dir: Path) -> list[tuple[int, str]]:
    module = _module_name(path, package_dir)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []

    def add(line: int, target: str) -> None:
        if (line, target) not in found:
            found.append((line, target))

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for rest in child.orelse:
                    visit(rest)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    add(child.lineno, alias.name)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - child.level + 1]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                if _stage(target) is None:
                    add(child.lineno, target)
                else:  # `from jitguard import facts` names a stage, `from jitguard.cutedsl import x` a module
                    for alias in child.names:
                        add(child.lineno, _named_from(target, alias.name, package_dir))
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def _stage_table(init: Path) -> dict[str, str] | None:
    """The ``STAGES`` literal of a feature package's ``__init__.py``; None where there is none. Raises
    ``ValueError`` for a table that is not a dict literal of module name -> stage name."""
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        if not any(isinstance(t, ast.Name) and t.id == FEATURE_TABLE for t in targets):
            continue
        table = ast.literal_eval(node.value) if node.value is not None else None
        if not isinstance(table, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in table.items()
        ):
            raise ValueError(f"{FEATURE_TABLE} is not a dict literal of module name -> stage")
        return table
    return None


def feature_packages(package_dir: Path = PACKAGE) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Every feature package's table ({package: {module: stage}}), and what is wrong with the tables: a stage
    that is not one, a module of the package left out, a name that is no module of it, an import in the face."""
    features: dict[str, dict[str, str]] = {}
    problems = []
    for init in sorted(package_dir.glob("*/__init__.py")):
        name = init.parent.name
        if name in RANK:
            continue
        try:
            table = _stage_table(init)
        except ValueError as exc:
            problems.append(f"{name}/__init__.py: {exc}")
            continue
        if table is None:
            continue
        features[name] = table
        modules = {
            _module_name(p, package_dir).removeprefix(f"jitguard.{name}.")
            for p in init.parent.rglob("*.py")
            if p != init
        }
        problems += [
            f"{name}/__init__.py: {m!r} is at an unknown stage {s!r}"
            for m, s in table.items()
            if s not in FEATURE_STAGES
        ]
        problems += [
            f"{name}/__init__.py: {m!r} is no module of {name}/" for m in sorted(set(table) - modules)
        ]
        problems += [
            f"{name}/{m.replace('.', '/')}.py: not in {name}/__init__.py's {FEATURE_TABLE}"
            for m in sorted(modules - set(table))
        ]
        problems += [
            f"{name}/__init__.py:{line}: a feature package's face imports nothing ({target})"
            for line, target in _imports(init, package_dir)
            if target != "__future__"
        ]
    return features, problems


def _rank(module: str, features: dict[str, dict[str, str]]) -> int | None:
    """Where ``module`` (``jitguard...``) stands in STAGES; None where it is placed nowhere."""
    parts = module.split(".")
    if len(parts) == 1:
        return RANK[ROOT]
    if parts[1] in features:
        if len(parts) == 2:
            return RANK["config"]  # the face imports nothing: the ground
        stage = features[parts[1]].get(".".join(parts[2:]))
        return RANK[stage] if stage in FEATURE_STAGES else None
    return RANK.get(parts[1])


def _label(module: str, features: dict[str, dict[str, str]]) -> str:
    """How a problem names the importer: its room, or a feature module and its stage."""
    stage = _stage(module)
    assert stage is not None
    if stage in features:
        return f"{module.removeprefix('jitguard.')} ({features[stage].get(module.split('.', 2)[-1], '?')})"
    return stage


def backward_imports(package_dir: Path = PACKAGE) -> list[str]:
    features, problems = feature_packages(package_dir)
    for path in sorted(package_dir.rglob("*.py")):
        module = _module_name(path, package_dir)
        source = _stage(module)
        assert source is not None
        if source in features and module == f"jitguard.{source}":
            continue  # the face: feature_packages() checks it imports nothing
        if source not in RANK and source not in features:
            problems.append(
                f"{path.relative_to(package_dir)}: stage {source!r} is not placed in STAGES, nor a feature package"
            )
            continue
        rank = _rank(module, features)
        if rank is None:
            continue  # a module its package's table leaves out or misplaces: reported above
        for line, target in _imports(path, package_dir):
            if _stage(target) is None:
                continue
            to = _rank(target, features)
            if to is None or to > rank:
                problems.append(
                    f"{path.relative_to(package_dir)}:{line}: {_label(module, features)} imports {target}"
                )
    return problems


def test_every_stage_imports_only_from_the_stages_before_it() -> None:
    assert backward_imports() == []


def test_the_walker_sees_an_import_of_the_package_root(tmp_path: Path) -> None:
    """The root reaches the engine boundary (``install()``), so a stage that imports it climbs back up."""
    fake = tmp_path / "jitguard" / "state"
    fake.mkdir(parents=True)
    (fake / "record.py").write_text("from jitguard import __version__\n\ndef f():\n    import jitguard\n")
    (tmp_path / "jitguard" / "__init__.py").write_text("")
    assert backward_imports(tmp_path / "jitguard") == [
        "state/record.py:1: state imports jitguard",
        "state/record.py:4: state imports jitguard",
    ]


def test_the_walker_sees_a_backward_import(tmp_path: Path) -> None:
    """The check itself can fail: a lazy import of a later stage inside a function is reported."""
    fake = tmp_path / "jitguard" / "facts"
    fake.mkdir(parents=True)
    (fake / "probe.py").write_text("def f():\n    from jitguard.cli import main\n    return main\n")
    (tmp_path / "jitguard" / "__init__.py").write_text("")
    assert backward_imports(tmp_path / "jitguard") == ["facts/probe.py:2: facts imports jitguard.cli"]


def test_the_feature_packages_name_each_of_their_modules_at_a_stage() -> None:
    features, problems = feature_packages()
    assert problems == []
    assert {"cutedsl", "gdn_variants"} <= set(features)


def _feature(tmp_path: Path, table: str, modules: dict[str, str]) -> Path:
    """A package with a feature ``feat/`` (``table``: its ``__init__.py``) and the rooms' files in ``modules``."""
    package = tmp_path / "jitguard"
    (package / "feat").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "feat" / "__init__.py").write_text(f'"""A feature."""\n\n{table}\n')
    for name, source in modules.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(source)
    return package


def test_a_feature_module_imports_only_at_or_before_its_own_stage(tmp_path: Path) -> None:
    """Ranked at its declared stage: a backward import out of the package, inside it and into it is reported;
    the same imports downhill are not."""
    package = _feature(
        tmp_path,
        'STAGES = {"probe": "facts", "route": "flashinfer_jit"}',
        {
            "feat/probe.py": "from jitguard.feat import route\nfrom jitguard.state import record\n",
            "feat/route.py": "from jitguard.feat import probe\nfrom jitguard.supervise import runner\n",
            "facts/disk.py": "from jitguard.feat.probe import x\n\ndef f():\n    from jitguard.feat import route\n",
            "cli/main.py": "from jitguard.feat import probe, route\n",
            "state/record.py": "",
            "supervise/runner.py": "",
        },
    )
    assert backward_imports(package) == [
        "facts/disk.py:4: facts imports jitguard.feat.route",
        "feat/probe.py:1: feat.probe (facts) imports jitguard.feat.route",
        "feat/probe.py:2: feat.probe (facts) imports jitguard.state.record",
    ]


def test_a_feature_module_left_out_of_its_table_is_reported(tmp_path: Path) -> None:
    package = _feature(tmp_path, 'STAGES = {"probe": "facts"}', {"feat/probe.py": "", "feat/extra.py": ""})
    assert backward_imports(package) == ["feat/extra.py: not in feat/__init__.py's STAGES"]


def test_a_table_naming_an_unknown_stage_or_module_is_reported(tmp_path: Path) -> None:
    package = _feature(
        tmp_path,
        'STAGES = {"probe": "facts", "route": "build", "gone": "state"}',
        {"feat/probe.py": "", "feat/route.py": ""},
    )
    assert backward_imports(package) == [
        "feat/__init__.py: 'route' is at an unknown stage 'build'",
        "feat/__init__.py: 'gone' is no module of feat/",
    ]


def test_a_feature_package_face_imports_nothing(tmp_path: Path) -> None:
    package = _feature(
        tmp_path,
        'from __future__ import annotations\nfrom jitguard.feat import probe\nSTAGES = {"probe": "facts"}',
        {"feat/probe.py": ""},
    )
    assert backward_imports(package) == [
        "feat/__init__.py:4: a feature package's face imports nothing (jitguard.feat.probe)"
    ]


def test_a_folder_that_is_neither_a_room_nor_a_feature_is_reported(tmp_path: Path) -> None:
    package = _feature(tmp_path, "TABLE = {}", {"feat/probe.py": ""})
    assert backward_imports(package) == [
        "feat/__init__.py: stage 'feat' is not placed in STAGES, nor a feature package",
        "feat/probe.py: stage 'feat' is not placed in STAGES, nor a feature package",
    ]


def test_type_checking_imports_are_not_arrows(tmp_path: Path) -> None:
    fake = tmp_path / "jitguard" / "facts"
    fake.mkdir(parents=True)
    (fake / "probe.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jitguard.cli import main\n"
    )
    assert backward_imports(tmp_path / "jitguard") == []


# The file checks that decide trust, written once (docs/design.md "Rooms": fileio.py): a module that opens
# without following a link, compares an owner or looks at a link itself does it through fileio.
TRUST_CHECKS = frozenset({"O_NOFOLLOW", "st_uid", "lstat"})


def trust_checks_outside_fileio(package_dir: Path = PACKAGE) -> list[str]:
    problems = []
    for path in sorted(package_dir.rglob("*.py")):
        if path.relative_to(package_dir) == Path("fileio.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = (
                node.attr
                if isinstance(node, ast.Attribute)
                else node.id
                if isinstance(node, ast.Name)
                else None
            )
            if name in TRUST_CHECKS:
                problems.append(
                    f"{path.relative_to(package_dir)}:{node.lineno}: {name} (use jitguard.fileio)"
                )
    return problems


def test_every_trust_check_goes_through_fileio() -> None:
    assert trust_checks_outside_fileio() == []


def test_the_trust_walker_sees_a_check_of_its_own(tmp_path: Path) -> None:
    fake = tmp_path / "jitguard" / "fleet"
    fake.mkdir(parents=True)
    (fake / "x.py").write_text("import os\n\ndef f(p):\n    return os.lstat(p).st_uid\n")
    assert trust_checks_outside_fileio(tmp_path / "jitguard") == [
        "fleet/x.py:4: st_uid (use jitguard.fileio)",
        "fleet/x.py:4: lstat (use jitguard.fileio)",
    ]


# jitguard's own modules are imported at the top (docs/design.md "Rules a change must keep"). These stay lazy,
# each for its reason (the same one-line comment sits at the import); a new one fails below until it is put here
# with its reason, and one that moved to the top must leave the list.
LAZY_IMPORTS: dict[tuple[str, str], str] = {
    # The root and package faces run first on every import beneath them: they stay light.
    ("__init__.py", "jitguard"): "the root stays at the version: `jitguard.JitguardError` loads errors",
    (
        "__init__.py",
        "jitguard.integrations.flashinfer_hook",
    ): "the root stays at the version: `install()` loads the hook",
    (
        "facts/__init__.py",
        "jitguard.facts",
    ): "every probe's import runs facts/__init__; only collect() needs them all",
    (
        "facts/__init__.py",
        "jitguard.cutedsl",
    ): "every probe's import runs facts/__init__; only collect() needs the DSL's probes",
    ("gdn/backends/__init__.py", "jitguard.gdn.backends"): "each backend's import runs it; not all three",
    (
        "errors.py",
        "jitguard.fileio",
    ): "errors loads first everywhere; fileio only when a state dir is refused",
    # What reports a broken jitguard must import without it.
    (
        "boundary/failsafe.py",
        "jitguard.findings.checks_jitguard",
    ): "the fault shield, where the installation is broken",
    ("cli/__init__.py", "jitguard.facts.installation"): "`jitguard` reports a broken installation",
    ("cli/__init__.py", "jitguard.findings.checks_jitguard"): "`jitguard` reports a broken installation",
    ("cli/__init__.py", "jitguard.cli.envelope"): "only an error under --json needs it",
    # Cycles inside the vLLM plugin (the package face imports its parts; the warmup and the GDN site use each other).
    (
        "integrations/vllm/coverage.py",
        "jitguard.integrations.vllm",
    ): "a cycle: SITES is defined in the package face",
    (
        "integrations/vllm/warmup.py",
        "jitguard.integrations.vllm.gdn_prefill",
    ): "a cycle: vllm.gdn_prefill imports the warmup",
    # The engine plugins' import stays light and their shields hold: a stage loads where it is used, under the
    # shield that runs it (FlashInfer builds, a store restores, the op is asked, a CuTeDSL-era module appears),
    # not with the hook or the plugin.
    (
        "integrations/flashinfer_hook.py",
        "jitguard.flashinfer_jit.flashinfer_build",
    ): "the build stage, when FlashInfer builds",
    (
        "integrations/flashinfer_hook.py",
        "jitguard.gdn_variants.module_router",
    ): "with FlashInfer's GDN prefill module",
    (
        "integrations/flashinfer_hook.py",
        "jitguard.cutedsl",
    ): "the kernel cache, with FlashInfer's CuTeDSL module",
    (
        "gdn_variants/partial_module.py",
        "jitguard.flashinfer_jit.flashinfer_build",
    ): "the build stage, on a build",
    (
        "gdn/backends/flashinfer.py",
        "jitguard.cutedsl",
    ): "the kernel cache, where FlashInfer uses CuTeDSL",
    (
        "integrations/choices.py",
        "jitguard.integrations.triton_blocked",
    ): "under the guard's shield, where it runs",
    (
        "integrations/flashinfer_hook.py",
        "jitguard.gdn_variants.variant_plan",
    ): "the variant plan, with a model config",
    (
        "integrations/vllm/gdn_prefill.py",
        "jitguard.integrations.flashinfer_hook",
    ): "under the shield that plans the variants",
    (
        "integrations/vllm/__init__.py",
        "jitguard.integrations.flashinfer_hook",
    ): "the hook, inside register()'s shield",
    (
        "integrations/sglang.py",
        "jitguard.integrations.flashinfer_hook",
    ): "the hook, inside register()'s shield",
    ("integrations/vllm/warm_hooks.py", "jitguard.fleet"): "the fleet, when a restore or a save runs",
    ("integrations/sglang.py", "jitguard.fleet"): "the fleet, when a restore runs",
}
# `jitguard --help` imports every command module (cli/__init__.py, and cli/build.py its targets' modules): a
# command's own stages load where it runs, so `--help` stays light and `jitguard doctor` can name a missing
# dependency (tests/real/failsafe/test_broken_jitguard.py).
COMMAND_STAGES: dict[str, frozenset[str]] = {
    "cli/starts.py": frozenset(
        {"jitguard.cli.envelope", "jitguard.config", "jitguard.ledger", "jitguard.ledger.record"}
    ),
    "cli/build.py": frozenset(
        {
            "jitguard.cli.envelope",
            "jitguard.cli.report",
            "jitguard.facts",
            "jitguard.facts.build_identity",
            "jitguard.fleet.module_share",
            "jitguard.supervise.build_options",
            "jitguard.supervise.runner",
        }
    ),
    "cli/build_flashinfer.py": frozenset(
        {
            "jitguard.cli.build_flashinfer_plan",
            "jitguard.cli.envelope",
            "jitguard.cli.report",
            "jitguard.facts.flashinfer",
            "jitguard.findings.catalog",
            "jitguard.flashinfer_jit.flashinfer_build",
            "jitguard.gdn_variants.partial_module",
            "jitguard.state.failure_cache",
            "jitguard.supervise.build_options",
        }
    ),
    "cli/build_flashinfer_plan.py": frozenset(
        {"jitguard.cli.envelope", "jitguard.facts.flashinfer", "jitguard.gdn_variants.variant_plan"}
    ),
    "cli/cache.py": frozenset(
        {
            "jitguard.cli.envelope",
            "jitguard.cli.report",
            "jitguard.cutedsl.kernel_cache",
            "jitguard.facts",
            "jitguard.facts.disk",
            "jitguard.findings.checks_disk",
            "jitguard.state.failure_cache",
            "jitguard.state.job_memory",
            "jitguard.state.module_names",
        }
    ),
    "cli/doctor.py": frozenset(
        {
            "jitguard.cli.engine",
            "jitguard.cli.envelope",
            "jitguard.cli.report",
            "jitguard.facts",
            "jitguard.facts.installation",
            "jitguard.facts.jit_caches",
            "jitguard.facts.serialize",
            "jitguard.findings",
            "jitguard.findings.checks",
            "jitguard.findings.checks_jitguard",
            "jitguard.findings.checks_store",
            "jitguard.findings.model",
            "jitguard.flashinfer_jit.probe_module",
            "jitguard.fleet.signing",
            "jitguard.fleet.store_transport",
            "jitguard.gdn.dispatch",
            "jitguard.integrations.vllm.preview",
            "jitguard.supervise.build_options",
        }
    ),
    "cli/gdn.py": frozenset(
        {
            "jitguard.cli.envelope",
            "jitguard.gdn.backends.torch",
            "jitguard.gdn.dispatch",
            "jitguard.gdn.reference",
            "jitguard.gdn.shapes",
            "jitguard.report.text",
        }
    ),
    "cli/warm.py": frozenset(
        {
            "jitguard.cli.envelope",
            "jitguard.facts.disk",
            "jitguard.facts.jit_caches",
            "jitguard.findings.checks_disk",
            "jitguard.fleet",
            "jitguard.fleet.artifact_store",
            "jitguard.fleet.signing",
            "jitguard.fleet.snapshot",
            "jitguard.fleet.store_transport",
            "jitguard.fleet.warm_transfer",
        }
    ),
}


def function_level_imports(package_dir: Path = PACKAGE) -> set[tuple[str, str]]:
    """(file, module) for each import of jitguard's own modules inside a function (``TYPE_CHECKING`` aside)."""
    found = set()
    for path in sorted(package_dir.rglob("*.py")):
        module = _module_name(path, package_dir)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]

        def visit(node: ast.AST, in_function: bool, path: Path = path, package: str = package) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and _is_type_checking(child):
                    continue
                if in_function and isinstance(child, ast.Import):
                    found.update(
                        (path.relative_to(package_dir).as_posix(), alias.name)
                        for alias in child.names
                        if _stage(alias.name) is not None
                    )
                elif in_function and isinstance(child, ast.ImportFrom):
                    base = (
                        package.split(".")[: len(package.split(".")) - child.level + 1] if child.level else []
                    )
                    target = ".".join(base + ([child.module] if child.module else []))
                    if _stage(target) is not None:
                        found.add((path.relative_to(package_dir).as_posix(), target))
                visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

        visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return found


def test_jitguards_own_modules_are_imported_at_the_top_but_for_the_listed_lazy_ones() -> None:
    allowed = set(LAZY_IMPORTS) | {
        (path, module) for path, modules in COMMAND_STAGES.items() for module in modules
    }
    found = function_level_imports()
    assert sorted(found - allowed) == [], "import these at the module top, or list them with the reason"
    assert sorted(allowed - found) == [], "these are imported at the top now: take them off the list"


def test_the_import_walker_sees_a_function_level_import(tmp_path: Path) -> None:
    fake = tmp_path / "jitguard" / "state"
    fake.mkdir(parents=True)
    (fake / "record.py").write_text(
        "import os\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jitguard.facts import Facts\n"
        "def f():\n    import torch\n    from jitguard.findings import model\n    from . import other\n"
    )
    assert function_level_imports(tmp_path / "jitguard") == {
        ("state/record.py", "jitguard.findings"),
        ("state/record.py", "jitguard.state"),
    }


def test_the_design_states_the_stage_list_as_it_is() -> None:
    """docs/design.md's downhill chain is this file's STAGES, in order: a new or moved room is said there."""
    design = (PACKAGE.parents[1] / "docs" / "design.md").read_text()
    found = re.search(r"\*\*Imports run downhill\.\*\* `([^`]+)`", design)
    assert found is not None, "docs/design.md lost its downhill chain"
    chain = [step.strip() for step in " ".join(found.group(1).split()).split("->")]
    expected = ["/".join(names) for names in STAGES if ROOT not in names and names != ("cli", "__main__")]
    assert chain == [*expected, "cli", "the package root"]
