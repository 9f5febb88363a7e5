"""The decision stage: pure functions from findings (and what happened so far) to a choice and its trace.
No I/O, no imports of torch or any backend library; the callers (the op's dispatcher, the engine
integrations, the CLI) gather the findings and act on the decision."""
