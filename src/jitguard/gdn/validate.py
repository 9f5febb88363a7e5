"""Input validation for the GDN prefill op: every bad input gets an error that says what was wrong and what to
do.

The checks run on every call, so they only read shapes, dtypes and devices (a few attribute reads). Values
of ``cu_seqlens`` are checked when they can be read without a device synchronisation: when ``cu_seqlens``
lives on the CPU. A device-resident ``cu_seqlens`` is checked for dtype and shape only (reading it would
stall the stream on every call); call ``check_cu_seqlens_values`` yourself while debugging.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from jitguard.decision.gdn_resolution import head_layout
from jitguard.errors import UsageError

if TYPE_CHECKING:
    import torch

BACKEND_CHOICES = ("auto", "flashinfer", "triton", "torch")


class GdnInputError(UsageError, ValueError):
    """Bad input to ``jitguard.gdn.chunk_gated_delta_rule``.

    A ``UsageError`` (the CLI exits with 2) and a ``ValueError`` (what PyTorch code expects for bad
    arguments).
    """


def _fail(message: str) -> GdnInputError:
    return GdnInputError(message)


# torch types, bound on first use so that importing this module does not import torch.
_Tensor: Any = None
_FLOATS: tuple[Any, ...] = ()
_INTS: tuple[Any, ...] = ()
_F32: Any = None


def _bind_torch() -> None:
    global _Tensor, _FLOATS, _INTS, _F32
    import torch

    _Tensor, _F32 = torch.Tensor, torch.float32
    _FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
    _INTS = (torch.int32, torch.int64)


def _shape(name: str, t: Any, ndim: int, hint: str) -> tuple[int, ...]:
    if not isinstance(t, _Tensor):
        raise _fail(f"{name} must be a torch.Tensor {hint}, got {type(t).__name__}.")
    shape = tuple(t.shape)
    if len(shape) != ndim:
        raise _fail(f"{name} must be {ndim}-D {hint}, got shape {list(shape)}.")
    return shape


def check_call(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    cu_seqlens: torch.Tensor,
    scale: float | None,
    initial_state: torch.Tensor | None,
) -> tuple[str, torch.dtype, int, int, int, int]:
    """Validate one call. Returns its dispatch key ``(device type, dtype, D, Hq, Hk, Hv)``; raises
    ``GdnInputError``."""
    if _Tensor is None:
        _bind_torch()
    try:
        key = _fast_check(q, k, v, g, beta, cu_seqlens, scale, initial_state)
    except GdnInputError:
        raise  # cu_seqlens values: already the full message
    except (AttributeError, TypeError, ValueError, OverflowError):
        key = None
    if key is not None:
        return key
    _, hq, hk, hv, d, _ = _explain_call(q, k, v, g, beta, cu_seqlens, scale, initial_state)
    return _device_type(q.device), q.dtype, d, hq, hk, hv


# torch.device.type builds a new str on every read (~0.2 us); devices are few, so remember each one's type.
_DEVICE_TYPES: dict[Any, str] = {}


def _device_type(device: Any) -> str:
    kind = _DEVICE_TYPES.get(device)
    if kind is None:
        kind = _DEVICE_TYPES[device] = device.type
    return kind


def _fast_check(
    q: Any, k: Any, v: Any, g: Any, beta: Any, cu: Any, scale: Any, state: Any
) -> tuple[str, Any, int, int, int, int] | None:
    """The per-call path: the same rules as ``_explain_call`` with the fewest attribute reads. Returns the
    dispatch key, or None when anything is off (``_explain_call`` then finds it and says what); raises
    GdnInputError only for the values of a CPU ``cu_seqlens``."""
    T = _Tensor
    if not (isinstance(q, T) and isinstance(k, T) and isinstance(v, T) and isinstance(g, T)):
        return None
    if not (isinstance(beta, T) and isinstance(cu, T)):
        return None
    t, hq, d = q.shape
    tk, hk, dk = k.shape
    tv, hv, dv = v.shape
    if t != tk or t != tv or d != dk or d != dv:
        return None
    if hq == hk:
        if hv % hq:
            return None
    elif hk != hv or hq % hk:
        return None
    h = hq if hq > hv else hv
    dtype = q.dtype
    if dtype not in _FLOATS or k.dtype != dtype or v.dtype != dtype:
        return None
    th = (t, h)
    if g.shape != th or beta.shape != th or g.dtype not in _FLOATS or beta.dtype not in _FLOATS:
        return None
    device = q.device
    if k.device != device or v.device != device or g.device != device or beta.device != device:
        return None
    (n1,) = cu.shape
    if n1 < 2 or cu.dtype not in _INTS:
        return None
    if cu.is_cpu:
        check_cu_seqlens_values(cu, t)  # raises GdnInputError itself: the message needs the values
    elif cu.device != device:
        return None
    if state is not None and (
        not isinstance(state, T)
        or state.shape != (n1 - 1, h, d, d)
        or state.dtype != _F32
        or state.device != device
    ):
        return None
    if scale is not None and (type(scale) not in (float, int) or not math.isfinite(scale) or scale == 0):
        return None
    return _device_type(device), dtype, d, hq, hk, hv


def _explain_call(
    q: Any, k: Any, v: Any, g: Any, beta: Any, cu_seqlens: Any, scale: Any, initial_state: Any
) -> tuple[int, int, int, int, int, int]:
    """The thorough path: finds what is wrong and raises a GdnInputError that says so."""
    T, Hq, D = _shape("q", q, 3, "[T, Hq, D] (packed varlen; flatten a [B, T, H, D] batch to [B*T, H, D])")
    Tk, Hk, Dk = _shape("k", k, 3, "[T, Hk, D]")
    Tv, Hv, Dv = _shape("v", v, 3, "[T, Hv, D]")
    if not T == Tk == Tv:
        raise _fail(f"q, k and v must have the same number of tokens T, got {T}, {Tk} and {Tv}.")
    if not D == Dk == Dv:
        raise _fail(f"q, k and v must have the same head size D, got {D}, {Dk} and {Dv}.")
    if not (Hq == Hk == Hv) and head_layout(Hq, Hk, Hv) is None:
        raise _fail(
            f"head counts q/k/v = {Hq}/{Hk}/{Hv} are not supported: use Hq == Hk with Hv a multiple of Hq "
            f"(GVA, e.g. Qwen3.5's 16/16/32), or Hk == Hv with Hq a multiple of Hk (GQA)."
        )
    H = Hq if Hq > Hv else Hv
    dtype = q.dtype
    if dtype not in _FLOATS:
        raise _fail(f"q must be float16, bfloat16, float32 or float64, got {dtype}.")
    if k.dtype != dtype or v.dtype != dtype:
        raise _fail(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}.")
    device = q.device
    if k.device != device or v.device != device:
        raise _fail(f"q, k and v must be on one device, got {q.device}, {k.device} and {v.device}.")
    for name, t in (("g", g), ("beta", beta)):
        if not isinstance(t, _Tensor) or tuple(t.shape) != (T, H):
            shape = _shape(name, t, 2, f"[T, max(Hq, Hv)] = [{T}, {H}]")
            raise _fail(f"{name} must have shape [T, max(Hq, Hv)] = [{T}, {H}], got {list(shape)}.")
        if t.dtype not in _FLOATS:
            raise _fail(f"{name} must be a floating-point tensor (float32 recommended), got {t.dtype}.")
        if t.device != device:
            raise _fail(f"{name} must be on the device of q ({device}), got {t.device}.")
    N = _check_cu_seqlens(cu_seqlens, T, device)
    if initial_state is not None:
        shape = _shape("initial_state", initial_state, 4, f"[N, H, V, K] = [{N}, {H}, {D}, {D}]")
        if shape != (N, H, D, D):
            raise _fail(
                f"initial_state must have shape [N, max(Hq, Hv), V, K] = [{N}, {H}, {D}, {D}], "
                f"got {list(shape)}. The state is value-major ([V, K], FlashInfer/vLLM layout); "
                f"transpose an FLA [K, V] state with .transpose(-1, -2)."
            )
        if initial_state.dtype != _F32:
            raise _fail(
                f"initial_state must be float32, got {initial_state.dtype}: use initial_state.float()."
            )
        if initial_state.device != device:
            raise _fail(f"initial_state must be on the device of q ({device}), got {initial_state.device}.")
    if scale is not None and (
        isinstance(scale, bool) or not isinstance(scale, (int, float)) or not _finite_nonzero(scale)
    ):
        raise _fail(f"scale must be a finite non-zero number or None (= D ** -0.5), got {scale!r}.")
    return T, Hq, Hk, Hv, D, N


def _finite_nonzero(x: float) -> bool:
    try:
        return math.isfinite(x) and x != 0
    except OverflowError:  # an int too large for a float
        return False


def _check_cu_seqlens(cu_seqlens: Any, T: int, device: Any) -> int:
    hint = "[N + 1] with the sequence boundaries, e.g. torch.tensor([0, 5, 12]) for lengths 5 and 7"
    (n1,) = _shape("cu_seqlens", cu_seqlens, 1, hint)
    if cu_seqlens.dtype not in _INTS:
        raise _fail(f"cu_seqlens must be int32 or int64, got {cu_seqlens.dtype}.")
    if n1 < 2:
        raise _fail(f"cu_seqlens must hold at least 2 entries (one sequence), got {n1}.")
    where = cu_seqlens.device
    if where.type == "cpu":
        check_cu_seqlens_values(cu_seqlens, T)
    elif where != device:
        raise _fail(f"cu_seqlens must be on the CPU or on the device of q ({device}), got {where}.")
    return n1 - 1


def check_cu_seqlens_values(cu_seqlens: torch.Tensor, total_tokens: int) -> None:
    """Check that ``cu_seqlens`` starts at 0, never decreases and ends at ``total_tokens`` (reads values)."""
    values = [int(x) for x in cu_seqlens.tolist()]
    if values[0] != 0:
        raise _fail(f"cu_seqlens must start at 0, got {values[0]} (cu_seqlens={_short(values)}).")
    for i in range(1, len(values)):
        if values[i] < values[i - 1]:
            raise _fail(
                f"cu_seqlens must be non-decreasing, but entry {i} ({values[i]}) < "
                f"entry {i - 1} ({values[i - 1]})."
            )
    if values[-1] != total_tokens:
        raise _fail(
            f"cu_seqlens must end at T = {total_tokens} (the number of packed tokens), got {values[-1]} "
            f"(cu_seqlens={_short(values)})."
        )


def _short(values: list[int]) -> str:
    return (
        str(values)
        if len(values) <= 8
        else f"[{values[0]}, {values[1]}, ..., {values[-1]}] ({len(values)} entries)"
    )


def check_backend_name(backend: Any) -> str:
    if not isinstance(backend, str) or backend.lower() not in BACKEND_CHOICES:
        raise _fail(f"backend must be one of {', '.join(BACKEND_CHOICES)}, got {backend!r}.")
    return backend.lower()
