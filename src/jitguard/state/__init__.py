"""The record: what a build leaves for the next process (outcomes by environment fingerprint, learned memory per
compile job, the passes of engine proofs), in jitguard's trusted cache dir (``jitguard.fileio``). The kept
CuTeDSL kernels are recorded at this stage too, by ``cutedsl.kernel_cache``."""
