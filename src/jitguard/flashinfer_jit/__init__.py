"""FlashInfer's JIT, run the way jitguard runs it: its nvcc module builds through the supervised runner
(``flashinfer_build``), the model's GDN instances only (``gdn_variants``) and the router that sends each GDN
call to a module holding its instance (``gdn_router``), its CuTeDSL kernels compiled once per host
(``cutedsl_cache``), and the doctor's compile probe (``probe_module``). Above ``supervise`` (process
supervision), which it uses; below the op and the engine boundary, which call it."""
