"""Differentiable ruDNN ops for torch tensors, with torch's defaults (imports torch >= 2.4).

Import explicitly (``import rudnn.torch_autograd``) or use ``rudnn.torch_autograd`` (loaded on
first access). Each function calls a ``torch.library`` custom op (``torch.ops.rudnn.*``, see
:mod:`rudnn.torch_library`) whose backward is ruDNN's backward op, so the functions work in
eager mode, under ``torch.autograd.gradcheck`` (float64 on the CPU) and under
``torch.compile(fullgraph=True)`` without graph breaks. CUDA ops run on
``torch.cuda.current_stream(device)``. The backward ops recompute their statistics from the
saved inputs, so only the inputs (and softmax's output) are saved.

Functional API (over the last axis; shapes and dtypes as the ``rudnn`` functions of the same
names, plus float64 on the CPU):
    rms_norm(x, weight=None, eps=1e-6)                      -> y
    layer_norm(x, weight=None, bias=None, eps=1e-5)         -> y
    add_rms_norm(x, residual, weight=None, eps=1e-6)        -> (x + residual, normed)
    softmax(x)                                              -> y
    logsumexp(x)                                            -> x.shape[:-1]
    cross_entropy(logits, targets, ignore_index=-100, reduction="mean")

Transformer family (shapes and dtypes as the ``rudnn`` functions of the same names):
    rope(x, dims=None, traditional=False, base=None, freqs=None, scale=1.0, offset=0,
         offsets=None, positions=None)                      -> x's shape
    norm_rope(x, weight=None, eps=1e-6, normalize=True, dims=None, ..., offset=0, cache=None)
    swiglu(gate, up=None)                                   -> silu(gate) * up
    geglu(gate, up=None, approximate="none")                -> gelu(gate) * up
  rope's defaults are Hugging Face Llama's: the halves (``rotate_half``) and, when neither
  ``base`` nor ``freqs`` is given, ``base=10000`` (``rope_theta``). The gradient of rope is
  rope_backward (x only: positions and freqs get none); norm_rope's is rope_backward then
  rms_norm_backward (x and weight); with ``cache`` it writes the cache in place and is not
  differentiable (a KV-cache write). ``up=None`` is the one-tensor form: ``gate`` holds
  ``[..., 2I]`` (gate then up along the last axis), as a fused gate/up projection gives.

Modules: :class:`RMSNorm`, :class:`LayerNorm` (normalized over the last axis only).

Differences from torch.nn.functional:
    - cross_entropy's class axis is the last one, its loss is float32 whatever the logits'
      dtype (float64 for float64 logits), a negative target other than ``ignore_index`` means
      class ``t + C``, out-of-range targets give NaN (no device assert); ``ignore_index=None``
      ignores no row. ``'mean'`` divides by the number of rows not ignored (NaN when every row
      is), as torch does. With logits that need a gradient and a reduction, the gradient is
      computed in the forward pass from the same read of the logits and held until backward
      (a logits-sized tensor), which scales it by the upstream gradient in place (no pass when
      that is 1, as for ``loss.backward()``). That backward runs once: a second one
      (``retain_graph=True``) is torch's "modified by an inplace operation" error.
    - Parameter gradients come back in the parameter's dtype (float32 master weights with
      float16/bfloat16 activations are fine).

Errors are :class:`rudnn.Error` subclasses, as for the ``rudnn`` functions.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _rudnn
from . import torch_library as _lib

__all__ = [
    "rms_norm",
    "layer_norm",
    "add_rms_norm",
    "softmax",
    "logsumexp",
    "cross_entropy",
    "rope",
    "norm_rope",
    "swiglu",
    "geglu",
    "RMSNorm",
    "LayerNorm",
    # Earlier names, kept: each .apply is the function of the same op.
    "RMSNormFunction",
    "LayerNormFunction",
    "SoftmaxFunction",
    "CrossEntropyFunction",
]


def _eps(op: str, eps) -> float:
    # The custom op's schema takes a float; refuse what the rudnn functions refuse.
    if isinstance(eps, bool):
        raise _rudnn.InvalidArgument(f"{op}: eps must be a number, got bool")
    return float(eps)


def rms_norm(x: Tensor, weight: Optional[Tensor] = None, eps: float = 1e-6) -> Tensor:
    """Differentiable :func:`rudnn.rms_norm`: ``x / sqrt(mean(x**2) + eps) * weight``."""
    return _lib.rms_norm(x, weight, _eps("rms_norm", eps))


def layer_norm(x: Tensor, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    """Differentiable :func:`rudnn.layer_norm` over the last axis."""
    return _lib.layer_norm(x, weight, bias, _eps("layer_norm", eps))


def add_rms_norm(
    x: Tensor, residual: Tensor, weight: Optional[Tensor] = None, eps: float = 1e-6
) -> Tuple[Tensor, Tensor]:
    """Differentiable :func:`rudnn.add_rms_norm`: ``(x + residual, rms_norm(x + residual))``."""
    return _lib.add_rms_norm(x, residual, weight, _eps("add_rms_norm", eps))


def softmax(x: Tensor) -> Tensor:
    """Differentiable :func:`rudnn.softmax` over the last axis."""
    return _lib.softmax(x)


def logsumexp(x: Tensor) -> Tensor:
    """Differentiable :func:`rudnn.logsumexp` over the last axis."""
    return _lib.logsumexp(x)


def cross_entropy(
    logits: Tensor, targets: Tensor, ignore_index: Optional[int] = -100, reduction: str = "mean"
) -> Tensor:
    """Differentiable cross entropy over the last axis, with torch's defaults.

    Args:
        logits: ``[..., C]``, float32 / float16 / bfloat16 (float64 on the CPU).
        targets: integer class indices of shape ``logits.shape[:-1]``.
        ignore_index: rows whose target equals it contribute 0 (and are not counted by
            ``'mean'``); default -100 as in torch; ``None`` ignores no row.
        reduction: ``'mean'`` (default), ``'sum'`` or ``'none'``.

    Returns:
        float32 loss (float64 for float64 logits): 0-d, or ``targets``' shape for ``'none'``.

    Raises:
        ValueError: an unknown reduction; rudnn.Error subclasses as :func:`rudnn.cross_entropy`.
    """
    if reduction not in _lib.REDUCTIONS:
        raise ValueError(f"cross_entropy: reduction must be one of {_lib.REDUCTIONS}, got {reduction!r}")
    if isinstance(ignore_index, bool):
        raise _rudnn.InvalidArgument("cross_entropy: ignore_index must be an int or None, got bool")
    fused = torch.is_grad_enabled() and logits.requires_grad and reduction != "none"
    loss, _ = _lib.cross_entropy(logits, targets, ignore_index, reduction, fused)
    return loss


# ---- transformer family --------------------------------------------------------------------

#: Hugging Face's default ``rope_theta``: the base when neither base nor freqs is given.
DEFAULT_ROPE_BASE = 10000.0


def _flag(op: str, name: str, value) -> bool:
    if not isinstance(value, bool):
        raise _rudnn.InvalidArgument(f"{op}: {name} must be a bool, got {type(value).__name__}")
    return value


def _number(op: str, name: str, value) -> float:
    if isinstance(value, bool):
        raise _rudnn.InvalidArgument(f"{op}: {name} must be a number, got bool")
    return float(value)


def _index(op: str, name: str, value) -> int:
    if isinstance(value, bool):
        raise _rudnn.InvalidArgument(f"{op}: {name} must be an int, got bool")
    return value if isinstance(value, torch.SymInt) else int(value)


def _rotation(op, x, dims, traditional, base, freqs, scale, offset):
    """rope's schema arguments (dims, traditional, base, freqs, scale, offset)."""
    if base is None and freqs is None:
        base = DEFAULT_ROPE_BASE
    dims = x.shape[-1] if dims is None else _index(op, "dims", dims)
    base = None if base is None else _number(op, "base", base)
    return dims, _flag(op, "traditional", traditional), base, freqs, _number(op, "scale", scale), _index(
        op, "offset", offset
    )


def rope(
    x: Tensor,
    dims: Optional[int] = None,
    *,
    traditional: bool = False,
    base: Optional[float] = None,
    freqs: Optional[Tensor] = None,
    scale: float = 1.0,
    offset: int = 0,
    offsets: Optional[Tensor] = None,
    positions: Optional[Tensor] = None,
) -> Tensor:
    """Differentiable :func:`rudnn.rope` of ``x [B, ..., T, D]`` (gradient for ``x`` only).

    Defaults as Hugging Face Llama: the halves (``traditional=False``, ``rotate_half``), all
    ``D`` features, and ``base=10000`` when neither ``base`` nor ``freqs`` is given. Positions:
    ``offset + t``, ``offsets[b] + t`` (``[B]``) or ``positions`` (``[T]`` / ``[B, T]``, the
    position ids), int32 or int64 on ``x``'s device.
    """
    dims, traditional, base, freqs, scale, offset = _rotation("rope", x, dims, traditional, base, freqs, scale, offset)
    return _lib.rope(x, dims, traditional, base, freqs, scale, offset, offsets, positions)


def norm_rope(
    x: Tensor,
    weight: Optional[Tensor] = None,
    eps: float = 1e-6,
    *,
    normalize: bool = True,
    dims: Optional[int] = None,
    traditional: bool = False,
    base: Optional[float] = None,
    freqs: Optional[Tensor] = None,
    scale: float = 1.0,
    offset: int = 0,
    cache: Optional[Tensor] = None,
) -> Tensor:
    """:func:`rudnn.norm_rope`: rms_norm of each head's features (``normalize``, with an optional
    ``[D]`` weight) then :func:`rope` at positions ``offset .. offset + L``.

    Without ``cache``: a new tensor, differentiable in ``x`` and ``weight``. With ``cache``
    (``[B, H, C, D]``): positions ``offset .. offset + L`` of the cache are written in place and
    the cache is returned (a KV-cache write, not differentiable). rope's defaults as for
    :func:`rope`.
    """
    dims, traditional, base, freqs, scale, offset = _rotation(
        "norm_rope", x, dims, traditional, base, freqs, scale, offset
    )
    eps = _number("norm_rope", "eps", eps)
    normalize = _flag("norm_rope", "normalize", normalize)
    if cache is not None:
        _lib.norm_rope_cache_(x, weight, eps, normalize, dims, traditional, base, freqs, scale, offset, cache)
        return cache
    return _lib.norm_rope(x, weight, eps, normalize, dims, traditional, base, freqs, scale, offset)


def swiglu(gate: Tensor, up: Optional[Tensor] = None) -> Tensor:
    """Differentiable :func:`rudnn.swiglu`: ``F.silu(gate) * up``; ``up=None``: ``gate`` is
    ``[..., 2I]`` holding gate and up as the halves of its last axis."""
    return _lib.swiglu(gate, up)


def geglu(gate: Tensor, up: Optional[Tensor] = None, approximate: str = "none") -> Tensor:
    """Differentiable :func:`rudnn.geglu`: ``F.gelu(gate, approximate=approximate) * up``
    (``"none"``: erf, torch's default; ``"tanh"``); ``up=None`` as for :func:`swiglu`."""
    if approximate not in ("none", "tanh"):
        raise _rudnn.InvalidArgument(f"geglu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _lib.geglu(gate, up, approximate)


class _Apply:
    """An earlier autograd.Function name whose ``apply`` is now the custom-op function."""

    def __init__(self, function):
        self.apply = function


RMSNormFunction = _Apply(rms_norm)
LayerNormFunction = _Apply(layer_norm)
SoftmaxFunction = _Apply(softmax)
CrossEntropyFunction = _Apply(cross_entropy)


class RMSNorm(torch.nn.Module):
    """RMSNorm over the last axis of size ``hidden_size`` with a learnable weight (init 1)."""

    def __init__(self, hidden_size, eps=1e-6, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        self.hidden_size = int(hidden_size)
        self.eps = eps
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.ones(self.hidden_size, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.hidden_size}, eps={self.eps}, elementwise_affine={self.weight is not None}"


class LayerNorm(torch.nn.Module):
    """LayerNorm over the last axis of size ``hidden_size`` with learnable weight / bias."""

    def __init__(self, hidden_size, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None):
        super().__init__()
        self.hidden_size = int(hidden_size)
        self.eps = eps
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.ones(self.hidden_size, device=device, dtype=dtype))
            if bias:
                self.bias = torch.nn.Parameter(torch.zeros(self.hidden_size, device=device, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x):
        return layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.hidden_size}, eps={self.eps}, elementwise_affine={self.weight is not None}"
