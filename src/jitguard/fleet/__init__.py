"""The fleet: what one host compiled, made available to every other (the artifact store, the compiler cache,
fetch-before-build and publish, warm snapshots of an engine start's JIT caches). Below the build stage and the
engine boundary, which call it; above ``state``, whose trust rules it keeps."""
