"""The build stage's process supervision (named supervise/: tools read a build/ folder as output): the supervised
ninja runner and its attempts, the keeper and the build cgroup, host-wide compile slots and their launcher, the
module lock and where locks live, OOM detection, progress and learned build times. What FlashInfer's JIT does
with it is ``jitguard.flashinfer_jit``. docs/design.md "Rooms" places both on the data path."""
