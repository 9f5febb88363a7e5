"""FlashInfer's CuTeDSL era (>= 0.6.14): the CUTLASS DSL installed here and as the engine imports it, its
verdicts, and each kernel compiled once per host, kept and carried to other hosts (docs/cutedsl.md).

A feature package: each module sits at the stage ``STAGES`` names and imports only from that stage and the
ones before it (docs/design.md "Feature packages"). This file imports nothing."""

STAGES = {
    "dsl_stack": "facts",  # the DSL's wheels and CUTE_DSL_* variables a compiled kernel depends on
    "dsl_path": "facts",  # where the engine's `import cutlass` finds the DSL, each arch's kernel module
    "dsl_install": "facts",  # the DSL wheels' files against their RECORD
    "compile_routes": "facts",  # where each FlashInfer module keeps the kernels it compiles
    "dsl_checks": "findings",  # pre-flight: damaged, off the path, shadowed, a kernel module missing
    "kernel_cache": "state",  # compiled kernels on disk, verified on every load
    "kernel_key": "state",  # what makes one compiled kernel what it is, without a path
    "kernel_objects": "fleet",  # a kernel as bytes: exported, loaded, fetched from and published to the store
    "persisting_compile": "flashinfer_jit",  # FlashInfer's compile cache, made to persist across processes
}
