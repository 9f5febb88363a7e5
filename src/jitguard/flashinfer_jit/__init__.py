"""FlashInfer's JIT, run the way jitguard runs it: its nvcc module builds through the supervised runner
(``flashinfer_build``) and the doctor's compile probe (``probe_module``). Above ``supervise`` (process
supervision), which it uses; below the op and the engine boundary, which call it. The model's GDN instances
(``gdn_variants``) and the CuTeDSL kernels (``cutedsl``) are feature packages with modules at this stage."""
