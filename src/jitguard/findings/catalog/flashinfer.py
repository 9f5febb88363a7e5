"""Finding codes of the 'flashinfer' area: the Python packages each backend needs (torch, flashinfer and its
companions, fla-core, triton) and the state of FlashInfer's JIT. See docs/findings.md (generated)."""

from __future__ import annotations

from jitguard.findings.model import CatalogEntry, FixTemplate

_AREA = "flashinfer"

ENTRIES: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        code="torch-missing",
        severity="error",
        title="PyTorch is not installed",
        cause=(
            "Every GDN backend (FlashInfer, FLA/Triton and the PyTorch reference) takes and returns torch "
            "tensors."
        ),
        fixes=(
            FixTemplate("Install PyTorch (pick the CUDA build matching your driver):", "pip install torch"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="torch-no-cuda",
        severity="error",
        title="PyTorch {torch_version} is a {flavour} build",
        cause=(
            "The {backend_label} needs a CUDA build of PyTorch to run kernels on the GPU; {torch_version} "
            "has no CUDA."
        ),
        fixes=(
            FixTemplate(
                "Install a CUDA build of PyTorch (cu128, cu129 or cu130; match your driver):",
                "pip install torch --index-url https://download.pytorch.org/whl/cu130",
            ),
            FixTemplate(
                "Or use the PyTorch backend, which runs on CPU:", "export JITGUARD_GDN_BACKEND=torch"
            ),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="flashinfer-missing",
        severity="error",
        title="FlashInfer (flashinfer-python) is not installed",
        cause="The flashinfer backend needs the flashinfer-python package (GDN prefill since 0.6.2).",
        fixes=(
            FixTemplate("Install it:", "pip install flashinfer-python"),
            FixTemplate("Or use the Triton (FLA) backend:", "export JITGUARD_GDN_BACKEND=triton"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="flashinfer-too-old",
        severity="error",
        title="flashinfer-python {version} has no GDN prefill kernel",
        cause=(
            "GDN prefill (chunk_gated_delta_rule) first shipped in flashinfer-python 0.6.2; {version} is "
            "older."
        ),
        fixes=(
            FixTemplate("Upgrade it:", "pip install -U 'flashinfer-python>=0.6.3'"),
            FixTemplate("Or use the Triton (FLA) backend:", "export JITGUARD_GDN_BACKEND=triton"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="flashinfer-import-broken",
        severity="error",
        title="Importing {module} fails: {error_type}",
        cause=("`import {module}` raised {error_type}: {error_message}. {context}"),
        fixes=(
            FixTemplate("{repair}", "{repair_command}"),  # when the cause is known (e.g. the DSL's)
            FixTemplate("Reproduce it and read the full traceback:", "python -c 'import {module}'"),
            FixTemplate(
                "Reinstall FlashInfer and its companions at matching versions:",
                "pip install --force-reinstall flashinfer-python=={version}",
            ),
            FixTemplate("Meanwhile use the Triton (FLA) backend:", "export JITGUARD_GDN_BACKEND=triton"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="cutlass-dsl-missing",
        severity="error",
        title="nvidia-cutlass-dsl is not installed (flashinfer-python {version} needs it for GDN prefill)",
        cause=(
            "From 0.6.14 FlashInfer's GDN prefill is a CuTeDSL kernel. Without nvidia-cutlass-dsl, "
            "flashinfer.gdn_prefill fails to import, and from 0.6.15 flashinfer.chunk_gated_delta_rule "
            "silently disappears (its import sits in a suppress(ImportError) block)."
        ),
        fixes=(
            FixTemplate(
                "Install the version FlashInfer asks for:", "pip install 'nvidia-cutlass-dsl{requirement}'"
            ),
            FixTemplate(
                "If you installed with `pip install --target`, the DSL's .pth file was skipped; add its "
                "packages:",
                "export PYTHONPATH=<target>/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH",
            ),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="cutlass-dsl-too-old",
        severity="error",
        title=(
            "nvidia-cutlass-dsl {dsl_version} is older than flashinfer-python {version} requires "
            "({requirement})"
        ),
        cause=(
            "flashinfer-python {version} declares nvidia-cutlass-dsl{requirement}. With an older DSL the GDN "
            "kernel module fails to import; FlashInfer swallows that ImportError and later raises "
            "NotImplementedError('... GDN prefill DSL kernel is unavailable'), without the cause."
        ),
        fixes=(FixTemplate("Upgrade it:", "pip install -U 'nvidia-cutlass-dsl{requirement}'"),),
        area=_AREA,
    ),
    CatalogEntry(
        code="cutlass-dsl-install-damaged",
        severity="error",
        title="The nvidia-cutlass-dsl install is damaged: files missing or not their wheel's copy ({summary})",
        cause=(
            "Installed files of {dists} are not the ones their wheels' RECORD lists (sha256 and size); "
            "{how}. The DSL ships as sibling wheels (nvidia-cutlass-dsl, -libs-base, -libs-core, -libs-cu12, "
            "-libs-cu13); in some versions two of them write the same paths with different contents, and a "
            "parallel installer (uv) or an overlapping or interrupted install can leave one wheel's files "
            "overwritten by another's (NVIDIA/cutlass #3170, #3259). A mixed DSL imports, then fails when a "
            "kernel compiles (MLIR errors such as a GPUModuleOp TypeError or \"'llvm.mlir.global_dtors' op "
            "requires attribute 'data'\"), or FlashInfer swallows its import error and later reports only "
            "'... DSL kernel is unavailable'."
        ),
        fixes=(
            FixTemplate(
                "Reinstall the damaged wheels (with the siblings that share their paths) at their installed "
                "versions, one at a time with pip, not with a parallel installer; the CUDA-specific wheel goes "
                "last, so its copy of a shared file wins:",
                "{reinstall_command}",
            ),
            FixTemplate(
                "Then check again (jitguard re-hashes the DSL's files):",
                "jitguard doctor --backend flashinfer",
            ),
            FixTemplate("Meanwhile use the Triton (FLA) backend:", "export JITGUARD_GDN_BACKEND=triton"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="cutlass-dsl-off-path",
        severity="error",
        title=(
            "nvidia-cutlass-dsl {dsl_version} is installed but `import cutlass` cannot find it: {packages_dir} "
            "is not on sys.path"
        ),
        cause=(
            "The DSL keeps its Python packages one level down, in {packages_dir}, and a .pth file puts that "
            "directory on sys.path when the interpreter starts; {why}. Python reads .pth files only in site "
            "directories, so an install with `pip install --target` put on PYTHONPATH (rules_python and PEX do "
            "the same) or `python -S` leaves the DSL's metadata visible (pip and FlashInfer's version checks "
            "pass) and `import cutlass` failing. flashinfer-python {version} swallows that ImportError while "
            "importing and raises NotImplementedError('{unavailable}') at the first GDN prefill request, after "
            "the engine reported ready."
        ),
        fixes=(
            FixTemplate(
                "Put the DSL's packages on the path of every process of the engine:", "{path_command}"
            ),
            FixTemplate(
                "Or install the DSL into a site directory (a venv, pip without --target), where its .pth file "
                "is read:",
                "{install_command}",
            ),
            FixTemplate("Meanwhile use the Triton (FLA) backend:", "export JITGUARD_GDN_BACKEND=triton"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="cutlass-dsl-shadowed",
        severity="error",
        title="`import cutlass` finds {found} at {packages_dir}, not the nvidia-cutlass-dsl {dsl_version} pip reports",
        cause=(
            "{detail} Python imports the first `cutlass` on sys.path, and FlashInfer's GDN prefill kernel "
            "imports it from there: flashinfer-python {version} declares nvidia-cutlass-dsl{requirement}. A "
            "copy that is not the installed DSL's fails to import or to compile the kernel; FlashInfer swallows "
            "the import error and raises NotImplementedError('{unavailable}') at the first GDN prefill request."
        ),
        fixes=(
            FixTemplate(
                "Take {packages_dir} off the path (PYTHONPATH, or the .pth file or package that puts it "
                "there), then check which `cutlass` Python imports:",
                "python -c 'import cutlass; print(cutlass.__file__)'",
            ),
            FixTemplate("Install the DSL FlashInfer accepts, with pip:", "{install_command}"),
            FixTemplate("Meanwhile use the Triton (FLA) backend:", "export JITGUARD_GDN_BACKEND=triton"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="cutlass-dsl-lacks-kernel-imports",
        severity="error",
        title=(
            "nvidia-cutlass-dsl {dsl_version} lacks modules FlashInfer's {arch} GDN prefill kernel imports "
            "({missing})"
        ),
        cause=(
            "{module} imports {missing}, which the DSL at {packages_dir} does not have: a DSL of another version "
            "than flashinfer-python {version} was written for (it declares nvidia-cutlass-dsl{requirement}). "
            "The import fails, FlashInfer swallows it and raises NotImplementedError('{unavailable}') at the "
            "first GDN prefill request."
        ),
        fixes=(
            FixTemplate("Install the DSL FlashInfer accepts, with pip:", "{install_command}"),
            FixTemplate("Meanwhile use the Triton (FLA) backend:", "export JITGUARD_GDN_BACKEND=triton"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="flashinfer-gdn-kernel-missing",
        severity="error",
        title="flashinfer-python {version} has no {arch} GDN prefill kernel module ({module})",
        cause=(
            "FlashInfer's GDN prefill on this GPU ({arch}) imports {module}, which is not in {package_dir} (a "
            "partial or pruned install, or a FlashInfer built without it): its first GDN prefill call raises "
            "NotImplementedError('{unavailable}')."
        ),
        fixes=(
            FixTemplate(
                "Reinstall FlashInfer at its version:",
                "pip install --force-reinstall --no-deps flashinfer-python=={version}",
            ),
            FixTemplate("Meanwhile use the Triton (FLA) backend:", "export JITGUARD_GDN_BACKEND=triton"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="cutlass-dsl-compile-broken",
        severity="error",
        title="The CuTeDSL failed inside its own libraries while compiling a kernel: {symptom}",
        cause=(
            "The error comes from nvidia-cutlass-dsl's native libraries, not from the kernel: every known case "
            "is an install fault. The DSL ships as sibling wheels whose -libs-base and -libs-cu13 write the "
            "same paths with different contents; whichever was installed last wins, file by file "
            "(NVIDIA/cutlass #3170, #3259): a mix raises a GPUModuleOp TypeError or \"'llvm.mlir.global_dtors' "
            "op requires attribute 'data'\" (also a defect of the 4.5.x -libs-cu13, fixed in 4.6), -libs-base "
            "on SM120 emits a malformed `_mma` instruction that ptxas rejects, and runtime libraries the DSL "
            'cannot find show as "JIT session error: Symbols not found: [ cuda_dialect_...".'
        ),
        fixes=(
            FixTemplate(
                "Check the DSL's files against their wheels (jitguard re-hashes them; a damaged install is "
                "reported as cutlass-dsl-install-damaged with the exact reinstall):",
                "jitguard doctor --backend flashinfer",
            ),
            FixTemplate(
                "Reinstall the DSL's wheels one at a time, the CUDA-specific one last (or upgrade to 4.6+, "
                "which fixed the 4.5.x MLIR defect):",
                "pip install --force-reinstall --no-deps nvidia-cutlass-dsl-libs-base nvidia-cutlass-dsl && "
                "pip install --force-reinstall --no-deps nvidia-cutlass-dsl-libs-cu13",
            ),
            FixTemplate("Meanwhile use the Triton (FLA) backend:", "export JITGUARD_GDN_BACKEND=triton"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="flashinfer-dsl-kernel-import-broken",
        severity="error",
        title="FlashInfer's {arch} GDN prefill kernel fails to import: {error_type}",
        cause=(
            "`import {module}` raised {error_type}: {error_message}. flashinfer-python {version} catches "
            "that error while importing and leaves the kernel unset, so its first GDN prefill call raises "
            "NotImplementedError('{unavailable}') without the cause. {context}"
        ),
        fixes=(
            FixTemplate("{repair}", "{repair_command}"),
            FixTemplate("Reproduce it and read the full traceback:", "python -c 'import {module}'"),
            FixTemplate("Meanwhile use the Triton (FLA) backend:", "export JITGUARD_GDN_BACKEND=triton"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="jit-cache-mismatch",
        severity="error",
        title="{package} {package_version} does not match flashinfer-python {version}",
        cause=("FlashInfer checks at import that {package} has its own version{how}; {consequence}"),
        fixes=(
            FixTemplate("Install the matching version:", "{install_command}"),
            FixTemplate(
                "Or remove it (FlashInfer then compiles on first use):", "pip uninstall -y {package}"
            ),
            FixTemplate(
                "Or skip the check, if you know the modules are compatible (prebuilt modules of another "
                "version may crash or compute wrong results):",
                "export FLASHINFER_DISABLE_VERSION_CHECK=1",
            ),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="gdn-prebuilt-available",
        severity="info",
        title="A prebuilt {module} module is installed: no compile needed",
        cause="FlashInfer will load {path} ({source}) instead of compiling {tus} translation units.",
        fixes=(),
        area=_AREA,
    ),
    CatalogEntry(
        code="flashinfer-cutedsl-compiles-per-process",
        severity="info",
        title="flashinfer-python {version} compiles GDN prefill in-process: once per host with jitguard",
        cause=(
            "From 0.6.14 GDN prefill is a CuTeDSL kernel compiled in-process, and FlashInfer keeps it in process "
            "memory only: without jitguard each rank pays the compile (measured 24-28 s per process on an H200 "
            "for three shapes) at its first call, again after every restart. jitguard's kernel cache keeps each "
            "compiled kernel: the first process compiles, every later one loads it (0.2 s). No nvcc, no ninja."
        ),
        fixes=(
            FixTemplate(
                "Nothing to do: jitguard.install() (the vLLM plugin, the jitguard.gdn op) routes FlashInfer's "
                "compile through the kernel cache ($JITGUARD_CACHE_DIR/kernels; JITGUARD_CUTEDSL_CACHE=0 turns "
                "it off). To pay even the first compile before serving, run one request per shape at startup.",
                None,
            ),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="fla-missing",
        severity="error",
        title="FLA (fla-core) is not installed",
        cause=(
            "The triton backend runs flash-linear-attention's chunk_gated_delta_rule from the fla-core "
            "package."
        ),
        fixes=(
            FixTemplate("Install it:", "pip install 'fla-core>=0.6.0'"),
            FixTemplate("Or use the PyTorch backend:", "export JITGUARD_GDN_BACKEND=torch"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="fla-too-old",
        severity="error",
        title="fla-core {fla_version} is older than {minimum}",
        cause="jitguard's triton backend is written and tested against fla-core {minimum} and newer.",
        fixes=(FixTemplate("Upgrade it:", "pip install -U 'fla-core>={minimum}'"),),
        area=_AREA,
    ),
    CatalogEntry(
        code="triton-missing",
        severity="error",
        title="Triton is not installed",
        cause=(
            "FLA's kernels are Triton kernels; fla-core does not depend on triton by default "
            "(only through its [cuda] extra). A CUDA build of PyTorch normally brings it."
        ),
        fixes=(
            FixTemplate("Install it:", "pip install 'triton>=3.3'"),
            FixTemplate("Or install FLA with its CUDA extra:", "pip install 'fla-core[cuda]'"),
        ),
        area=_AREA,
    ),
)
