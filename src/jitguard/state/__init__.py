"""The record: what a build leaves for the next process (outcomes by environment fingerprint, learned memory per
compile job, kept CuTeDSL kernels), in jitguard's trusted cache dir (``jitguard.fileio``)."""
