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
