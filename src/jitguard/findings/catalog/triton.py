"""Finding codes of the 'triton' area: what Triton's JIT needs on the host to build its launcher (a C compiler,
Python.h, libcuda), the fallback FlashInfer's failures land on. See docs/findings.md (generated)."""

from __future__ import annotations

from jitguard.findings.model import CatalogEntry, FixTemplate

_AREA = "triton"

ENTRIES: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        code="triton-cc-missing",
        severity="error",
        title="Triton finds no C compiler to build its launcher",
        cause=(
            "Triton compiles a small C launcher at its first kernel launch, with $CC (taken as one program) "
            "or else gcc or clang on PATH (never `cc`). {detail}The first Triton kernel (FLA's GDN prefill, "
            "Inductor's kernels) then fails with 'Failed to find C compiler. Please specify via CC "
            "environment variable.'"
        ),
        fixes=(
            FixTemplate("Point Triton at the compiler this machine has:", "export CC={compiler}"),
            FixTemplate(
                "Or install one (Debian/Ubuntu; `dnf install -y gcc` on Red Hat):",
                "apt-get install -y gcc",
            ),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="triton-python-headers-missing",
        severity="error",
        title="Python.h is missing: Triton cannot build its launcher",
        cause=(
            "Triton's launcher includes Python.h from sysconfig's include directory ({include}); this Python "
            "{python_version} has no headers there. Distribution Pythons ship them in a separate -dev package."
        ),
        fixes=(
            FixTemplate(
                "Install the headers (Debian/Ubuntu; python3-dev for the distribution's default Python):",
                "apt-get install -y python{python_version}-dev",
            ),
            FixTemplate("Or on Red Hat / Fedora:", "dnf install -y python{python_version}-devel"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="triton-libcuda-missing",
        severity="error",
        title="Triton cannot find or link libcuda for its launcher",
        cause=(
            "Triton {triton_version} links its launcher with {link_flag} against the libcuda directories it "
            "finds: TRITON_LIBCUDA_PATH, else the libcuda.so.1 entries of `/sbin/ldconfig -p`, else "
            "LD_LIBRARY_PATH. {detail}"
        ),
        fixes=(
            FixTemplate("Tell Triton where the driver's library is:", "export TRITON_LIBCUDA_PATH={fix_dir}"),
            FixTemplate("Or refresh the loader cache (as root), as Triton's message says:", "ldconfig"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="triton-launcher-build-failed",
        severity="error",
        title="{compiler} cannot build a C stub the way Triton builds its launcher",
        cause=(
            "The compiler Triton runs was found and Python.h is there, but building a one-line C module with "
            "Triton's command failed; Triton's first kernel launch will fail the same way. See the evidence."
        ),
        fixes=(
            FixTemplate(
                "Reproduce the build and read the compiler's error:", "jitguard doctor --backend triton"
            ),
            FixTemplate("Or point Triton at another compiler:", "export CC=/usr/bin/gcc"),
        ),
        area=_AREA,
    ),
)
