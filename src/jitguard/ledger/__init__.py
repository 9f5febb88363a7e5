"""The start ledger: what every JIT layer compiled, loaded from its cache or got from the store during one
engine start, the seconds each took, and jitguard's own seconds by phase.

``record`` is the pure part (layers, phases, one process's record, how a start's processes join, the ready line,
must-hit); ``tally`` fills this process's record; ``tools`` reads each tool's own hooks and counters; ``start``
is the lifecycle the engine integrations call; ``history`` keeps one file per process and start (docs/starts.md).
"""
