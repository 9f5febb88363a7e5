"""The one calling convention of jitguard's GDN prefill op, and the head mapping every backend follows.

Heads (see docs/gdn.md): q has ``Hq`` heads, k ``Hk``, v ``Hv``; the op computes ``H = max(Hq, Hv)``
independent recurrences ("state heads", FlashInfer's ``num_sab_heads``). State head ``h`` reads q head
``h // (H // Hq)``, k head ``h // (H // Hk)`` and v head ``h // (H // Hv)``. Allowed layouts:

- ``mha``: Hq == Hk == Hv;
- ``gva``: Hq == Hk, Hv = r * Hq (Qwen3.5 / Qwen3-Next: 16 q/k heads, 32 v heads);
- ``gqa``: Hk == Hv, Hq = r * Hk.

This module is pure Python (no torch). ``CallSpec`` and ``head_layout``, which decisions need, live in
``jitguard.decision.gdn_resolution``.
"""

from __future__ import annotations

DEFAULT_CHUNK = 64
# FLA's l2norm epsilon (fla.modules.l2norm); jitguard normalises with the same formula for every backend.
L2NORM_EPS = 1e-6
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
