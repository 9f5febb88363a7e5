"""The start ledger: what every JIT layer compiled, loaded from its cache or got from the store during one
engine start, the seconds each took, and jitguard's own seconds by phase.

- ``record``: the pure part: the layers and phases, one process's record, how the records of one start's
  processes join (``merge``), the one line logged at ready, and which compiles a restored snapshot should
  have spared (must-hit).
- ``tally``: this process's record as it fills (thread-safe), the start id every process of an engine shares
  (``JITGUARD_START_ID``, set by the first process and inherited by the ones it starts), and the must-hit
  errors of ``JITGUARD_WARM=require``.
- ``tools``: what is read from each tool's own hooks and counters (Triton's compilation listener, Inductor's
  cache counters, vLLM's compilation counter and compile time).
- ``start``: the lifecycle the engine integrations call: ``begin`` at plugin registration, ``covered_by``
  after the warm restore, ``ready`` where the engine is ready (the line in the log, the file written).
- ``history``: one JSON file per process and start under ``<cache dir>/starts/``, the last starts kept.
"""
