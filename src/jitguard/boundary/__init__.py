"""Where jitguard runs inside foreign code (an engine, FlashInfer): the fail-safe boundary (``failsafe``), the
one way jitguard wraps a foreign function (``patches``) and this process's facts, collected once within the
pre-flight deadline (``process_facts``).

A stage of its own, right above ``findings`` (its fault line is a finding): the build stage's patchers
(FlashInfer's GDN router, the CuTeDSL compile route, the build hook's facts) and the engine plugins stand on
it alike, so none of them writes its own marker, rebinding or fault handling. It sits below everything that
patches, not at the ground beside config/errors/fileio, because a fault is reported as a ``jitguard-fault``
finding from the catalog and the facts it hands out are the facts stage's.
"""
