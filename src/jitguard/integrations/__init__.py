"""The engine boundary: the vLLM and SGLang plugins, FlashInfer's JIT hook, the start ledger's hooks."""

import time

IMPORT_STARTED = time.perf_counter()  # when an engine plugin's import began (the start ledger's ``import``)
