"""Finding codes of the 'toolchain' area: what FlashInfer's nvcc-era JIT needs to compile, link and load a
module
(nvcc, ninja, a host C++ compiler, CUDA headers, a linkable libcuda and libcudart, a libstdc++ new enough for
what the compiler produced). See docs/findings.md (generated).

Templates use ``{fields}`` that the toolchain checks fill from the facts (``checks_toolchain``); a fix whose
fields a caller cannot fill (e.g. no directory was found) is dropped by those checks rather than shown
half-empty.
"""

from __future__ import annotations

from jitguard.findings.model import CatalogEntry, FixTemplate

_AREA = "toolchain"
_JIT_CACHE = FixTemplate(
    "Or skip the compile entirely: install the prebuilt FlashInfer JIT cache (replace cu129 with your CUDA "
    "version; its version must equal flashinfer-python's)",
    "pip install flashinfer-jit-cache --index-url https://flashinfer.ai/whl/cu129",
)

ENTRIES: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        code="nvcc-missing",
        severity="error",
        title="nvcc not found: FlashInfer cannot JIT-compile its kernels",
        cause=(
            "FlashInfer compiles with `{nvcc}` (FLASHINFER_NVCC, else $cuda_home/bin/nvcc; cuda_home = "
            "{cuda_home}, "
            "from {cuda_home_source}). {detail}"
        ),
        fixes=(
            FixTemplate(
                "A CUDA toolkit with nvcc exists at {found_home}: point FlashInfer at it",
                "export CUDA_HOME={found_home}",
            ),
            FixTemplate(
                "Install a CUDA toolkit 12.6 or newer (NVIDIA's CUDA apt repository shown; the runfile "
                "works too), "
                "then export CUDA_HOME to it",
                "apt-get install -y cuda-toolkit-12-8 && export CUDA_HOME=/usr/local/cuda-12.8",
            ),
            FixTemplate(
                "Or install nvcc and the CUDA development files into a conda environment",
                "conda install -c conda-forge 'cuda-nvcc>=12.6' cuda-cudart-dev cuda-driver-dev",
            ),
            _JIT_CACHE,
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="nvcc-too-old",
        severity="error",
        title="nvcc {nvcc_version} is too old for FlashInfer's SM90 GDN kernel (needs CUDA 12.6 or newer)",
        cause=(
            "FlashInfer's GDN prefill kernel for Hopper (SM90) uses TMA tensor-map instructions "
            "(`tensormap_replace`) that nvcc before 12.6 does not know; the compile fails after minutes with "
            '`identifier "tensormap_replace..." is undefined`. FlashInfer would use `{nvcc}` ({nvcc_banner}).'
        ),
        fixes=(
            FixTemplate(
                "A newer CUDA toolkit exists at {found_home} (CUDA {found_version}): point FlashInfer at it",
                "export CUDA_HOME={found_home}",
            ),
            FixTemplate(
                "Install a CUDA toolkit 12.6 or newer (NVIDIA's CUDA apt repository shown) and export "
                "CUDA_HOME",
                "apt-get install -y cuda-toolkit-12-8 && export CUDA_HOME=/usr/local/cuda-12.8",
            ),
            FixTemplate(
                "Or install a newer nvcc into a conda environment",
                "conda install -c conda-forge 'cuda-nvcc>=12.6' cuda-cudart-dev cuda-driver-dev",
            ),
            _JIT_CACHE,
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="nvcc-arch-unsupported",
        severity="error",
        title="The CUDA toolkit cannot build FlashInfer's kernels for {arch} ({modules})",
        cause=(
            "FlashInfer {fi_version} asks nvcc for `{gencode}` ({arch_source}) when it JIT-compiles {modules}. "
            "{reason} The build (or FlashInfer before it) fails within seconds, and an engine that picked "
            "FlashInfer there stops at start-up instead of serving (vLLM #50705)."
        ),
        fixes=(
            FixTemplate(
                "FlashInfer's kernels need sm75 or newer, so {dropped} in FLASHINFER_CUDA_ARCH_LIST builds "
                "nothing anyone can use: leave it out",
                "export FLASHINFER_CUDA_ARCH_LIST='{kept_list}'",
            ),
            FixTemplate(
                "This nvcc can build {alt_arch} for the same GPU: name it (FlashInfer takes an entry with a "
                "suffix as written)",
                "export FLASHINFER_CUDA_ARCH_LIST='{alt_list}'",
            ),
            FixTemplate(
                "A CUDA toolkit that targets {arch} exists at {found_home} (CUDA {found_version}): point "
                "FlashInfer at it",
                "export CUDA_HOME={found_home}",
            ),
            FixTemplate(
                "Compile with a CUDA toolkit whose nvcc targets {arch} ({needs}; NVIDIA's CUDA apt "
                "repository shown)",
                "apt-get install -y cuda-toolkit-{toolkit_dash} && export CUDA_HOME=/usr/local/cuda-{toolkit}",
            ),
            FixTemplate(
                "Or compile nothing: flashinfer-jit-cache for FlashInfer {fi_version} and CUDA {wheel_cuda} "
                "ships these modules prebuilt for {wheel_arch}",
                "{wheel_command}",
            ),
            FixTemplate("Or keep the engine off FlashInfer's JIT here: {engine_path}", "{engine_command}"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="ninja-missing",
        severity="error",
        title="ninja not found: FlashInfer cannot run its JIT build",
        cause=(
            "FlashInfer builds every JIT module by running `ninja` from PATH on a generated build.ninja; "
            "no `ninja` executable is on PATH ({path})."
        ),
        fixes=(
            FixTemplate(
                "Install ninja into this Python environment (puts `ninja` on PATH)", "pip install ninja"
            ),
            FixTemplate("Or install the system package", "apt-get install -y ninja-build"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="cxx-missing",
        severity="error",
        title="No usable host C++ compiler (`{cxx}`): FlashInfer cannot compile or link its modules",
        cause=("FlashInfer compiles host code and links every module with $CXX, else `c++`. {detail}"),
        fixes=(
            FixTemplate("A C++ compiler exists at {alt_cxx}: point FlashInfer at it", "export CXX={alt_cxx}"),
            FixTemplate("Install the system C++ compiler (Debian/Ubuntu)", "apt-get install -y g++"),
            FixTemplate("Or on RHEL/Fedora", "dnf install -y gcc-c++"),
            FixTemplate("Or into a conda environment", "conda install -c conda-forge gxx_linux-64"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="cuda-headers-missing",
        severity="error",
        title="CUDA headers not found ({header}): FlashInfer's kernels cannot compile",
        cause=(
            "FlashInfer compiles with -isystem $cuda_home/include, and nvcc adds its own toolkit include "
            "directory; neither holds {header} (cuda_home = {cuda_home}). This happens when CUDA_HOME "
            "points at a "
            "runtime-only install or at a wrapper's prefix, or when only the pip nvcc wheel is installed."
        ),
        fixes=(
            FixTemplate(
                "A full CUDA toolkit with headers exists at {found_home}: point FlashInfer at it",
                "export CUDA_HOME={found_home}",
            ),
            FixTemplate(
                "Install the CUDA development headers for your toolkit (NVIDIA's CUDA apt repository shown)",
                "apt-get install -y cuda-cudart-dev-12-8 cuda-cccl-12-8",
            ),
            FixTemplate(
                "Or in a conda environment", "conda install -c conda-forge cuda-cudart-dev cuda-cccl"
            ),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="link-missing-libcuda",
        severity="error",
        title="The linker cannot find libcuda: FlashInfer's JIT link (`-lcuda`) will fail",
        cause=(
            "FlashInfer links every JIT module with `{link_command}`. A trial of that link on this machine "
            "fails "
            "({detail}): no directory the linker searches (those -L flags, LIBRARY_PATH, its defaults) "
            "holds a "
            "`libcuda.so`. FlashInfer only finds out after every kernel has compiled. {found}"
        ),
        fixes=(
            FixTemplate(
                "Point FlashInfer's link at {fix_dir}, which holds a libcuda.so ({fix_kind}; at run time the "
                "driver's libcuda.so.1 is used)",
                'export FLASHINFER_EXTRA_LDFLAGS="$FLASHINFER_EXTRA_LDFLAGS -L{fix_dir}"',
            ),
            FixTemplate(
                "Only the driver's versioned {so_path} exists: give the linker a `libcuda.so` name for it "
                "in a "
                "directory of your own",
                "mkdir -p {link_dir} && ln -sf {so_path} {link_dir}/libcuda.so && "
                'export FLASHINFER_EXTRA_LDFLAGS="$FLASHINFER_EXTRA_LDFLAGS -L{link_dir}"',
            ),
            FixTemplate(
                "Or put that directory on gcc's library search path instead (append :$LIBRARY_PATH if you "
                "already "
                "set it)",
                "export LIBRARY_PATH={fix_dir}",
            ),
            FixTemplate(
                "Install the CUDA driver link stub (link time only; NVIDIA's CUDA apt repository shown); "
                "FlashInfer finds it in $cuda_home/lib64/stubs once CUDA_HOME names that toolkit",
                "apt-get install -y cuda-driver-dev-{cuda_major}-{cuda_minor} && "
                "export CUDA_HOME=/usr/local/cuda-{cuda_major}.{cuda_minor}",
            ),
            FixTemplate(
                "Or install the stub into a conda environment (it lands in $CONDA_PREFIX/lib/stubs)",
                "conda install -c conda-forge cuda-driver-dev && "
                'export FLASHINFER_EXTRA_LDFLAGS="$FLASHINFER_EXTRA_LDFLAGS -L$CONDA_PREFIX/lib/stubs"',
            ),
            _JIT_CACHE,
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="link-missing-libcudart",
        severity="error",
        title="The linker cannot find libcudart: FlashInfer's JIT link (`-lcudart`) will fail",
        cause=(
            "FlashInfer links every JIT module with `{link_command}`: it looks in $cuda_home/lib64, never "
            "$cuda_home/lib (cuda_home = {cuda_home}, from {cuda_home_source}). A trial of that link on "
            "this machine fails "
            "({detail}). Pip-style and conda CUDA layouts keep libcudart in lib/ or under another prefix "
            "(flashinfer#5064). {found}"
        ),
        fixes=(
            FixTemplate(
                "The CUDA toolkit at {found_home} has lib64/libcudart.so: point FlashInfer at it",
                "export CUDA_HOME={found_home}",
            ),
            FixTemplate(
                "Or point FlashInfer's link at {fix_dir}, which holds libcudart.so",
                'export FLASHINFER_EXTRA_LDFLAGS="$FLASHINFER_EXTRA_LDFLAGS -L{fix_dir}"',
            ),
            FixTemplate(
                "Only the versioned {so_path} exists: give the linker a `libcudart.so` name for it",
                "mkdir -p {link_dir} && ln -sf {so_path} {link_dir}/libcudart.so && "
                'export FLASHINFER_EXTRA_LDFLAGS="$FLASHINFER_EXTRA_LDFLAGS -L{link_dir}"',
            ),
            FixTemplate(
                "Or install the CUDA runtime development files (NVIDIA's CUDA apt repository shown)",
                "apt-get install -y cuda-cudart-dev-{cuda_major}-{cuda_minor}",
            ),
            _JIT_CACHE,
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="libstdcxx-runtime-older",
        severity="warning",
        title="Run-time libstdc++ ({runtime_max}) is older than the compiler's ({compiler_max})",
        cause=(
            "Modules FlashInfer builds here are linked by `{cxx}` against {compiler_lib} and may need its "
            "newest "
            "symbol versions ({missing}). A Python process here loads {runtime_lib} (found via "
            "{runtime_source}), "
            "which lacks them; such a module then fails to load with `version `{first_missing}' not found`. "
            "Whether it does depends on the symbols the module uses: jitguard checks each built module "
            "exactly."
        ),
        fixes=(
            FixTemplate(
                "Load the compiler's newer libstdc++ first in the serving process",
                "export LD_PRELOAD={compiler_lib}",
            ),
            FixTemplate(
                "Or upgrade the environment's libstdc++ (conda) to GCC {gcc_needed} or newer",
                "conda install -c conda-forge 'libstdcxx-ng>={gcc_needed}'",
            ),
            FixTemplate(
                "Or build with a compiler no newer than the runtime's libstdc++ (GCC {runtime_gcc})",
                "export CXX={alt_cxx}",
            ),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="so-glibcxx-missing",
        severity="error",
        title="{so_path} needs {missing}, which the loaded libstdc++ lacks",
        cause=(
            "The module was linked by a newer C++ compiler than the libstdc++ this process loads "
            "({runtime_lib}); "
            "its ELF version requirements name {missing}, so the dynamic loader refuses it "
            "(`version `...' not found`). Typical: a conda environment's libstdc++ with the system g++."
        ),
        fixes=(
            FixTemplate(
                "Load a libstdc++ that has these versions before anything else in the serving process",
                "export LD_PRELOAD={preload_lib}",
            ),
            FixTemplate(
                "Or upgrade the environment's libstdc++ (conda) to GCC {gcc_needed} or newer",
                "conda install -c conda-forge 'libstdcxx-ng>={gcc_needed}'",
            ),
            FixTemplate(
                "Or rebuild the module with a compiler whose libstdc++ is not newer than the runtime's, e.g. "
                "{alt_cxx} (FlashInfer relinks when its build command changes)",
                "export CXX={alt_cxx}",
            ),
        ),
        area=_AREA,
    ),
)
