"""The normalization family (C++: ``rudnn/normalization.h``): LayerNorm, RMSNorm, residual-add +
RMSNorm, softmax, log-sum-exp and cross entropy over the last axis, with their backward passes.

Under ``torch.compile`` the forward functions called without ``out=``/``stream=`` call their
custom op (``torch.ops.rudnn.*``), which the compiler traces (differentiable there).

Every function follows the package's common contract (see ``help(rudnn)``): ``[..., H]``
inputs, float32 arithmetic, results of the first argument's array type, ``out=`` written in
place, ``stream=``, and errors that are :class:`rudnn.Error` subclasses naming the op and the
argument. Dtypes: float32, float16, bfloat16 on every device; float64 too on the CPU (the
reference, for ``torch.autograd.gradcheck``-style checks).
"""

from __future__ import annotations

import numbers
from typing import Optional, Tuple

from . import _interop as io
from . import _rudnn
from ._interop import Array, StreamLike

__all__ = [
    "layer_norm",
    "rms_norm",
    "add_rms_norm",
    "softmax",
    "softmax_last_axis",
    "logsumexp",
    "cross_entropy",
    "layer_norm_backward",
    "rms_norm_backward",
    "softmax_backward",
    "cross_entropy_backward",
    "cross_entropy_with_grad",
    "scale_unless_one",
]

# ---- Forward ops ---------------------------------------------------------------------------


def layer_norm(
    x: Array,
    gamma: Optional[Array] = None,
    beta: Optional[Array] = None,
    eps: float = 1e-5,
    *,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    """LayerNorm over the last axis: ``(x - mean) / sqrt(var + eps) * gamma + beta``.

    Args:
        x: ``[..., H]``, float32 / float16 / bfloat16 (float64 on the CPU).
        gamma, beta: ``[H]`` in float32 or ``x``'s dtype, or ``None`` (1 and 0).
        eps: a number (not bool), finite and > 0 in float32.
        out: optional ``[..., H]`` array of ``x``'s dtype, written in place.
        stream: CUDA stream (see ``help(rudnn)``); ignored on the CPU.

    Returns:
        ``y``: ``x``'s shape and dtype. Mean and (biased) variance in float32, two-pass (large
        means do not cancel); ``y`` rounded once. ``out`` itself when given.

    Raises:
        InvalidArgument (ValueError): eps not finite, <= 0 or outside float32's range; an empty
            last axis; ``x`` None; a read-only or negative-stride ``out``.
        ShapeMismatch (ValueError): gamma/beta not ``[H]``; 0-d ``x``; ``out`` of another shape.
        DTypeMismatch (TypeError): a dtype the op does not take (e.g. int16, float64 on a GPU).
        DeviceMismatch (ValueError): operands on different devices.
    """
    if out is None and stream is None and io.compiling():
        return io.torch_ops().layer_norm(x, gamma, beta, eps)
    kind, stream = io.context(x, stream)
    r = _rudnn.layer_norm(
        io.as_input(x), io.as_input(gamma), io.as_input(beta), eps, stream=stream, out=io.as_output(out)
    )
    return out if out is not None else io.result(kind, r)


def rms_norm(
    x: Array, gamma: Optional[Array] = None, eps: float = 1e-6, *, out: Optional[Array] = None, stream: StreamLike = None
) -> Array:
    """RMSNorm over the last axis: ``x / sqrt(mean(x**2) + eps) * gamma``.

    Args:
        x: ``[..., H]``, float32 / float16 / bfloat16 (float64 on the CPU).
        gamma: ``[H]`` in float32 or ``x``'s dtype, or ``None`` (1).
        eps: a number (not bool), finite and > 0 in float32.
        out: optional ``[..., H]`` array of ``x``'s dtype, written in place.
        stream: CUDA stream (see ``help(rudnn)``); ignored on the CPU.

    Returns:
        ``y``: ``x``'s shape and dtype (statistics in float32, rounded once).

    Raises:
        InvalidArgument (ValueError): eps not finite, <= 0 or outside float32's range; an empty
            last axis; ``x`` None; a read-only or negative-stride ``out``.
        ShapeMismatch (ValueError): gamma not ``[H]``; 0-d ``x``; ``out`` of another shape.
        DTypeMismatch (TypeError): a dtype the op does not take (e.g. int16, float64 on a GPU).
        DeviceMismatch (ValueError): operands on different devices.
    """
    if out is None and stream is None and io.compiling():
        return io.torch_ops().rms_norm(x, gamma, eps)
    kind, stream = io.context(x, stream)
    r = _rudnn.rms_norm(io.as_input(x), io.as_input(gamma), eps, stream=stream, out=io.as_output(out))
    return out if out is not None else io.result(kind, r)


def add_rms_norm(
    x: Array,
    residual: Array,
    gamma: Optional[Array] = None,
    eps: float = 1e-6,
    *,
    out: Optional[Tuple[Array, Array]] = None,
    stream: StreamLike = None,
) -> Tuple[Array, Array]:
    """Residual add then RMSNorm in one pass.

    ``sum = x + residual`` (float32, rounded to ``x``'s dtype) and
    ``normed = rms_norm(sum, gamma, eps)``, whose statistics read the rounded ``sum``, so both
    equal the two ops composed.

    Args:
        x, residual: ``[..., H]``, the same shape and dtype (float32 / float16 / bfloat16;
            float64 on the CPU).
        gamma: ``[H]`` in float32 or ``x``'s dtype, or ``None``.
        eps: a number (not bool), finite and > 0 in float32.
        out: optional ``(sum_out, normed_out)``, written in place.

    Returns:
        ``(sum, normed)``, both with ``x``'s shape and dtype.

    Raises:
        ShapeMismatch (ValueError) / DTypeMismatch (TypeError) when ``residual`` differs from
        ``x``; otherwise as for :func:`rms_norm`.
    """
    if out is None and stream is None and io.compiling():
        return io.torch_ops().add_rms_norm(x, residual, gamma, eps)
    kind, stream = io.context(x, stream)
    r = _rudnn.add_rms_norm(
        io.as_input(x), io.as_input(residual), io.as_input(gamma), eps, stream=stream, out=io.as_output(out)
    )
    return out if out is not None else io.results(kind, r)


def softmax(x: Array, *, out: Optional[Array] = None, stream: StreamLike = None) -> Array:
    """Softmax over the last axis: ``exp(x - max) / sum(exp(x - max))``.

    Args:
        x: ``[..., H]``, float32 / float16 / bfloat16 (float64 on the CPU).
        out: optional array of ``x``'s shape and dtype, written in place.

    Returns:
        ``y``: ``x``'s shape and dtype (float32 arithmetic, rounded once). A row whose maximum
        is not finite (all -inf, any +inf, any NaN) gives a row of NaN, as in PyTorch.

    Raises:
        DTypeMismatch (TypeError); ShapeMismatch / InvalidArgument (ValueError): 0-d ``x``, an
        empty last axis, ``out`` overlapping ``x``.
    """
    if out is None and stream is None and io.compiling():
        return io.torch_ops().softmax(x)
    kind, stream = io.context(x, stream)
    r = _rudnn.softmax_last_axis(io.as_input(x), stream=stream, out=io.as_output(out))
    return out if out is not None else io.result(kind, r)


softmax_last_axis = softmax


def logsumexp(x: Array, *, out: Optional[Array] = None, stream: StreamLike = None) -> Array:
    """``log(sum(exp(x)))`` over the last axis.

    Args:
        x: ``[..., H]``, float32 / float16 / bfloat16 (float64 on the CPU).
        out: optional array of shape ``x.shape[:-1]`` and ``x``'s dtype.

    Returns:
        Shape ``x.shape[:-1]`` (0-d for 1-d ``x``), ``x``'s dtype, computed in float32. All
        -inf gives -inf, any +inf gives +inf, any NaN gives NaN.

    Raises:
        DTypeMismatch (TypeError); ShapeMismatch / InvalidArgument (ValueError).
    """
    if out is None and stream is None and io.compiling():
        return io.torch_ops().logsumexp(x)
    kind, stream = io.context(x, stream)
    r = _rudnn.logsumexp(io.as_input(x), stream=stream, out=io.as_output(out))
    return out if out is not None else io.result(kind, r)


def cross_entropy(
    logits: Array,
    targets: Array,
    ignore_index: Optional[int] = None,
    *,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    """Per-row cross entropy (no reduction) of ``logits`` against integer class targets.

    ``loss = logsumexp(logits_row) - logits_row[target]``, in float32. The class axis is the
    last one (unlike ``torch.nn.functional.cross_entropy`` for >2-d inputs; for torch's
    defaults and reductions use :func:`rudnn.torch_autograd.cross_entropy`).

    Args:
        logits: ``[..., C]``, float32 / float16 / bfloat16 (float64 on the CPU).
        targets: int32 / int64 / uint32 / uint8 of shape ``logits.shape[:-1]``. A negative
            target ``t`` means class ``t + C``; one still outside ``[0, C)`` gives a NaN loss
            (it is never used as an index).
        ignore_index: an int (not bool): rows whose target equals it (compared before the
            negative wrap) get loss 0. ``None``: no row is ignored.
        out: optional float32 array of ``targets``' shape.

    Returns:
        Loss of shape ``targets.shape``: float32 (float64 for float64 logits).

    Raises:
        ShapeMismatch (ValueError): targets' shape is not ``logits.shape[:-1]``.
        DTypeMismatch (TypeError): non-integer targets, an unsupported logits dtype.
        InvalidArgument (ValueError): ignore_index not an int or None.
    """
    if out is None and stream is None and io.compiling():
        return io.torch_ops().cross_entropy(logits, targets, ignore_index, "none", False)[0]
    kind, stream = io.context(logits, stream)
    r = _rudnn.cross_entropy(
        io.as_input(logits), io.as_input(targets), ignore_index, stream=stream, out=io.as_output(out)
    )
    return out if out is not None else io.result(kind, r)


# ---- Backward ops --------------------------------------------------------------------------


def layer_norm_backward(
    dy: Array,
    x: Array,
    gamma: Optional[Array] = None,
    beta: Optional[Array] = None,
    eps: float = 1e-5,
    *,
    out: Optional[Tuple[Array, Optional[Array], Optional[Array]]] = None,
    stream: StreamLike = None,
) -> Tuple[Array, Optional[Array], Optional[Array]]:
    """Gradients of :func:`layer_norm` (recomputes the statistics from ``x``).

    Args:
        dy: upstream gradient, ``x``'s shape and dtype.
        x, gamma, beta, eps: as in the forward call (only ``beta``'s presence, shape and dtype
            matter).
        out: optional ``(dx_out, dgamma_out, dbeta_out)``; ``dgamma_out`` / ``dbeta_out`` given
            exactly when ``gamma`` / ``beta`` are (else ``None``).

    Returns:
        ``(dx, dgamma, dbeta)``: ``dx`` in ``x``'s dtype; ``dgamma`` / ``dbeta`` in the dtypes of
        ``gamma`` / ``beta``, ``None`` without that parameter. Accumulated in float32; the
        parameter gradients are reduced in a fixed order (deterministic).

    Raises:
        as for :func:`layer_norm`; ShapeMismatch / DTypeMismatch when ``dy`` differs from ``x``.
    """
    kind, stream = io.context(dy, stream)
    r = _rudnn.layer_norm_backward(
        io.as_input(dy),
        io.as_input(x),
        io.as_input(gamma),
        io.as_input(beta),
        eps,
        stream=stream,
        out=io.as_output(out),
    )
    return out if out is not None else io.results(kind, r)


def rms_norm_backward(
    dy: Array,
    x: Array,
    gamma: Optional[Array] = None,
    eps: float = 1e-6,
    *,
    out: Optional[Tuple[Array, Optional[Array]]] = None,
    stream: StreamLike = None,
) -> Tuple[Array, Optional[Array]]:
    """Gradients of :func:`rms_norm` (recomputes the statistics from ``x``).

    Args:
        dy: upstream gradient, ``x``'s shape and dtype.
        x, gamma, eps: as in the forward call.
        out: optional ``(dx_out, dgamma_out)`` (``dgamma_out`` ``None`` when ``gamma`` is).

    Returns:
        ``(dx, dgamma)``: ``dx`` in ``x``'s dtype, ``dgamma`` in ``gamma``'s dtype (``None``
        without ``gamma``), accumulated in float32.

    Raises:
        as for :func:`rms_norm`; ShapeMismatch / DTypeMismatch when ``dy`` differs from ``x``.
    """
    kind, stream = io.context(dy, stream)
    r = _rudnn.rms_norm_backward(
        io.as_input(dy), io.as_input(x), io.as_input(gamma), eps, stream=stream, out=io.as_output(out)
    )
    return out if out is not None else io.results(kind, r)


def softmax_backward(dy: Array, y: Array, *, out: Optional[Array] = None, stream: StreamLike = None) -> Array:
    """Gradient of :func:`softmax` from its output ``y``: ``dx = y * (dy - sum(dy * y))``.

    Args:
        dy, y: the same shape and dtype (float32 / float16 / bfloat16; float64 on the CPU).
        out: optional array of ``y``'s shape and dtype.

    Returns:
        ``dx``: ``y``'s shape and dtype (float32 arithmetic).

    Raises:
        ShapeMismatch (ValueError) / DTypeMismatch (TypeError) when ``dy`` and ``y`` differ.
    """
    kind, stream = io.context(dy, stream)
    r = _rudnn.softmax_backward(io.as_input(dy), io.as_input(y), stream=stream, out=io.as_output(out))
    return out if out is not None else io.result(kind, r)


def cross_entropy_backward(
    logits: Array,
    targets: Array,
    dloss: Array,
    ignore_index: Optional[int] = None,
    *,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    """Gradient of :func:`cross_entropy`: ``dlogits = dloss[row] * (softmax(row) - onehot(target))``.

    Args:
        logits, targets, ignore_index: as in the forward call.
        dloss: float32 upstream gradient of ``targets``' shape (any strides, e.g. a broadcast
            scalar for a mean/sum reduction); float64 for float64 logits.
        out: optional array of ``logits``' shape and dtype.

    Returns:
        ``dlogits``: ``logits``' shape and dtype. Ignored rows get 0, out-of-range targets a
        NaN row.

    Raises:
        DTypeMismatch (TypeError): ``dloss`` of another dtype; otherwise as for
        :func:`cross_entropy`.
    """
    kind, stream = io.context(logits, stream)
    r = _rudnn.cross_entropy_backward(
        io.as_input(logits),
        io.as_input(targets),
        io.as_input(dloss),
        ignore_index,
        stream=stream,
        out=io.as_output(out),
    )
    return out if out is not None else io.result(kind, r)


def cross_entropy_with_grad(
    logits: Array,
    targets: Array,
    grad_scale: "float | Array" = 1.0,
    ignore_index: Optional[int] = None,
    *,
    out: Optional[Tuple[Array, Array]] = None,
    stream: StreamLike = None,
) -> Tuple[Array, Array]:
    """Cross entropy and its gradient in one pass over the logits.

    ``loss`` as :func:`cross_entropy`, ``dlogits`` as :func:`cross_entropy_backward` with
    ``dloss = grad_scale`` on every row (e.g. ``grad_scale = 1 / rows`` for a mean loss).

    Args:
        logits, targets, ignore_index: as for :func:`cross_entropy`.
        grad_scale: a finite number (not bool), or a float32 array of ``targets``' shape on the
            logits' device (one upstream gradient per row, as ``dloss`` of
            :func:`cross_entropy_backward`; e.g. ``1 / count`` of the non-ignored targets,
            computed on the device).
        out: optional ``(loss_out, dlogits_out)``.

    Returns:
        ``(loss, dlogits)``: float32 loss of ``targets``' shape, ``dlogits`` of ``logits``'
        shape and dtype.

    Raises:
        InvalidArgument (ValueError): grad_scale not finite in float32; otherwise as for
        :func:`cross_entropy` and, for an array, as ``dloss`` of :func:`cross_entropy_backward`.
    """
    kind, stream = io.context(logits, stream)
    if isinstance(grad_scale, numbers.Real) and not isinstance(grad_scale, bool):
        grad_scale = float(grad_scale)  # numpy / torch scalars as Python floats; bool is refused
    else:
        grad_scale = io.as_input(grad_scale)
    r = _rudnn.cross_entropy_with_grad(
        io.as_input(logits), io.as_input(targets), grad_scale, ignore_index, stream=stream, out=io.as_output(out)
    )
    return out if out is not None else io.results(kind, r)


def scale_unless_one(x: Array, scale: Array, *, stream: StreamLike = None) -> Array:
    """``x *= scale`` in place, skipped on the device when ``scale`` is exactly 1.

    For a gradient computed ahead under an assumed upstream gradient of 1 (as
    :func:`cross_entropy_with_grad` inside an autograd forward), once the true upstream
    gradient is known on the device: when it is 1, ``x`` is untouched at the cost of one
    launch, and the host never waits for the value.

    Args:
        x: float32 / float16 / bfloat16 (float64 on the CPU), a dense last axis and one row
            stride; written in place (read-only or negative-stride arrays are refused).
        scale: one float32 element on ``x``'s device.

    Returns:
        ``x``.

    Raises:
        InvalidArgument (ValueError): scale not one float32 element, x's layout.
    """
    _, stream = io.context(x, stream)
    _rudnn.scale_unless_one(io.as_output(x), io.as_input(scale), stream=stream)
    return x
