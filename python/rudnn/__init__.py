"""ruDNN: neural-network operators for CUDA GPUs, with a CPU reference for every op.

The functions here are the normalization family of the C++ library (``rudnn/normalization.h``):
LayerNorm, RMSNorm, residual-add + RMSNorm, softmax, log-sum-exp and cross entropy over the
last axis, with their backward passes.

Inputs and outputs
    Inputs are any DLPack-capable arrays: torch tensors, numpy arrays, cupy/jax arrays,
    rudnn Tensors (host buffers such as read-only numpy arrays are taken through the buffer
    protocol). Nothing is copied on the way in or out: ruDNN reads the caller's memory in
    place and returns new arrays that wrap ruDNN's own memory.

    The type of the first array argument decides the result type:

    - torch tensor -> torch tensors on the same device (``torch.from_dlpack``). A CUDA op
      runs on ``torch.cuda.current_stream(device)``, so it is ordered with the caller's
      torch work, as a torch op would be.
    - numpy array -> numpy arrays (writable; they share ruDNN's memory).
    - anything else -> :class:`rudnn.Tensor`, itself DLPack-capable.

    torch is imported only when the caller uses it; numpy is never imported by ruDNN itself.

Common contract (every op)
    - Rows: ``x`` has shape ``[..., H]``; the op runs on each of the ``numel / H`` rows of
      length ``H`` (the last axis). ``H >= 1``; zero rows is valid. Results are new,
      contiguous arrays.
    - Dtypes: row inputs are float32, float16 or bfloat16 (numpy has no bfloat16). ``gamma``
      and ``beta`` are ``[H]`` vectors in float32 or in ``x``'s dtype; either way the result
      has ``x``'s dtype. ``None`` means no parameter (gamma = 1, beta = 0).
    - Precision: statistics, sums and the affine arithmetic run in float32 on every device;
      each result is rounded once to its dtype. Backward ops accumulate in float32.
    - Layout: any non-negative strides (transposes, slices) are taken; layouts that are not
      row-dense are copied once on the device inside the op. numpy views with negative
      strides are copied to a contiguous array first (DLPack import refuses them).
    - Devices: all arrays of one call on the same device (CPU or one CUDA GPU).
    - Inputs are never modified. ``out=`` (optional) names caller-allocated outputs of the
      result's shape and dtype, contiguous rows, not overlapping any input; the function then
      writes them and returns them.
    - ``stream=`` (optional): a cudaStream_t address as an int, or an object with a
      ``cuda_stream`` attribute (``torch.cuda.Stream``); default: torch's current stream for
      torch CUDA tensors, else ruDNN's current (the legacy default) stream. Ignored on the CPU.

Errors
    Every error is a :class:`rudnn.Error` carrying the C++ message (which names the op, the
    argument and the rule). Its subclasses also derive from the matching builtin:
    :class:`InvalidArgument`, :class:`ShapeMismatch`, :class:`DeviceMismatch` are
    ``ValueError``; :class:`DTypeMismatch` is ``TypeError``; :class:`Unsupported` is
    ``NotImplementedError``; :class:`OutOfMemory` is ``MemoryError``; :class:`CudaError` is
    ``RuntimeError``. Arguments that are not arrays at all raise ``TypeError``.

Memory and streams
    ruDNN's CUDA results come from ruDNN's own stream-ordered pool (not torch's caching
    allocator), allocated on the stream the op ran on, and are returned to the pool on that
    stream when the last reference goes. A result used on another stream needs the same care
    as with any stream-ordered allocator (an event, or keep the result alive until that
    work is done). A borrowed stream must outlive the results allocated on it (torch's
    streams live as long as the process).
"""

import numbers as _numbers
import sys as _sys

from . import _rudnn
from ._rudnn import (
    CudaError,
    DeviceMismatch,
    DTypeMismatch,
    Error,
    InvalidArgument,
    OutOfMemory,
    ShapeMismatch,
    Tensor,
    Unsupported,
    built_with_cuda,
    cuda_device_count,
)

__version__ = _rudnn.version()

__all__ = [
    "Tensor",
    "Error",
    "InvalidArgument",
    "ShapeMismatch",
    "DTypeMismatch",
    "DeviceMismatch",
    "Unsupported",
    "OutOfMemory",
    "CudaError",
    "version",
    "cuda_device_count",
    "built_with_cuda",
    "from_dlpack",
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


def version():
    """The ruDNN library version, ``'major.minor.patch'``."""
    return _rudnn.version()


# ---- Input / output conversion ------------------------------------------------------------

_RUDNN, _NUMPY, _TORCH = 0, 1, 2


def _torch():
    return _sys.modules.get("torch")


def _numpy():
    return _sys.modules.get("numpy")


def _context(primary, stream):
    """(result kind, stream) for a call whose first array argument is ``primary``."""
    torch = _torch()
    if torch is not None and isinstance(primary, torch.Tensor):
        if stream is None and primary.device.type == "cuda":
            stream = torch.cuda.current_stream(primary.device).cuda_stream
        return _TORCH, stream
    np = _numpy()
    if np is not None and isinstance(primary, np.ndarray):
        return _NUMPY, stream
    return _RUDNN, stream


def _input(a):
    """An argument as the native module takes it (still zero-copy where possible)."""
    if a is None or isinstance(a, Tensor):
        return a
    torch = _torch()
    if torch is not None and isinstance(a, torch.Tensor):
        # torch refuses to export tensors that require grad; ruDNN only reads them.
        return a.detach() if a.requires_grad else a
    np = _numpy()
    if np is not None and isinstance(a, np.ndarray) and any(s < 0 for s in a.strides):
        return np.ascontiguousarray(a)  # DLPack import takes no negative strides
    return a


def _output(kind, t):
    """A native result as the caller's kind of array (zero-copy)."""
    if t is None or kind == _RUDNN:
        return t
    if kind == _TORCH:
        return _torch().from_dlpack(t)
    np = _numpy()
    try:
        # The buffer protocol gives a writable array (numpy marks arrays imported through
        # unversioned DLPack read-only); both share the Tensor's memory.
        return np.asarray(t)
    except (BufferError, TypeError, ValueError):
        return np.from_dlpack(t)


def _outputs(kind, ts):
    return tuple(_output(kind, t) for t in ts)


def _out_arg(out):
    if out is None:
        return None
    if isinstance(out, (tuple, list)):
        return tuple(o if o is None else _input(o) for o in out)
    return _input(out)


def from_dlpack(obj, *, stream=None):
    """Zero-copy import of a DLPack-capable array (or a host buffer) as a :class:`rudnn.Tensor`.

    The Tensor shares ``obj``'s memory and keeps it alive. For a CUDA producer, ``stream``
    (int address or object with ``cuda_stream``) is the stream the data will be used on;
    default: the legacy default stream. Negative strides raise :class:`Unsupported`, dtypes
    other than float16/32/64, bfloat16, int32/64, uint8/32 and bool raise :class:`Unsupported`.
    """
    return _rudnn.from_dlpack(obj, stream=stream)


# ---- Forward ops ---------------------------------------------------------------------------


def layer_norm(x, gamma=None, beta=None, eps=1e-5, *, out=None, stream=None):
    """LayerNorm over the last axis: ``(x - mean) / sqrt(var + eps) * gamma + beta``.

    Args:
        x: ``[..., H]`` array, float32 / float16 / bfloat16.
        gamma, beta: ``[H]`` arrays in float32 or ``x``'s dtype, or ``None`` (1 and 0).
        eps: finite and > 0.
        out: optional ``[..., H]`` array of ``x``'s dtype to write.

    Returns:
        ``y`` with ``x``'s shape and dtype. Mean and (biased) variance are computed in float32
        with a two-pass scheme (large means do not cancel); ``y`` is rounded once.

    Raises:
        InvalidArgument (ValueError): eps not finite or <= 0, empty last axis.
        ShapeMismatch (ValueError): gamma/beta not ``[H]``, 0-d ``x``.
        DTypeMismatch (TypeError): unsupported dtypes (e.g. float64).
        DeviceMismatch (ValueError): operands on different devices.
    """
    kind, stream = _context(x, stream)
    r = _rudnn.layer_norm(_input(x), _input(gamma), _input(beta), eps, stream=stream, out=_out_arg(out))
    return out if out is not None else _output(kind, r)


def rms_norm(x, gamma=None, eps=1e-6, *, out=None, stream=None):
    """RMSNorm over the last axis: ``x / sqrt(mean(x**2) + eps) * gamma``.

    Args:
        x: ``[..., H]`` array, float32 / float16 / bfloat16.
        gamma: ``[H]`` array in float32 or ``x``'s dtype, or ``None`` (1).
        eps: finite and > 0.
        out: optional ``[..., H]`` array of ``x``'s dtype to write.

    Returns:
        ``y`` with ``x``'s shape and dtype (statistics in float32, rounded once).

    Raises:
        InvalidArgument, ShapeMismatch, DeviceMismatch (ValueError); DTypeMismatch (TypeError),
        as for :func:`layer_norm`.
    """
    kind, stream = _context(x, stream)
    r = _rudnn.rms_norm(_input(x), _input(gamma), eps, stream=stream, out=_out_arg(out))
    return out if out is not None else _output(kind, r)


def add_rms_norm(x, residual, gamma=None, eps=1e-6, *, out=None, stream=None):
    """Residual add then RMSNorm in one pass.

    ``sum = x + residual`` (computed in float32, rounded to ``x``'s dtype) and
    ``normed = rms_norm(sum, gamma, eps)``, whose statistics read the rounded ``sum``, so both
    equal the two ops composed.

    Args:
        x, residual: ``[..., H]`` arrays of the same shape and dtype (float32 / float16 / bfloat16).
        gamma: ``[H]`` array in float32 or ``x``'s dtype, or ``None``.
        eps: finite and > 0.
        out: optional ``(sum_out, normed_out)``.

    Returns:
        ``(sum, normed)``, both with ``x``'s shape and dtype.

    Raises:
        ShapeMismatch (ValueError) / DTypeMismatch (TypeError) when ``residual`` differs from
        ``x``; otherwise as for :func:`rms_norm`.
    """
    kind, stream = _context(x, stream)
    r = _rudnn.add_rms_norm(_input(x), _input(residual), _input(gamma), eps, stream=stream, out=_out_arg(out))
    return out if out is not None else _outputs(kind, r)


def softmax(x, *, out=None, stream=None):
    """Softmax over the last axis: ``exp(x - max) / sum(exp(x - max))``.

    Args:
        x: ``[..., H]`` array, float32 / float16 / bfloat16.
        out: optional array of ``x``'s shape and dtype.

    Returns:
        ``y`` with ``x``'s shape and dtype (float32 arithmetic, rounded once). A row whose
        maximum is not finite (all -inf, any +inf, any NaN) gives a row of NaN, as in PyTorch.

    Raises:
        DTypeMismatch (TypeError), ShapeMismatch / InvalidArgument (ValueError).
    """
    kind, stream = _context(x, stream)
    r = _rudnn.softmax_last_axis(_input(x), stream=stream, out=_out_arg(out))
    return out if out is not None else _output(kind, r)


softmax_last_axis = softmax


def logsumexp(x, *, out=None, stream=None):
    """``log(sum(exp(x)))`` over the last axis.

    Args:
        x: ``[..., H]`` array, float32 / float16 / bfloat16.
        out: optional array of shape ``x.shape[:-1]`` and ``x``'s dtype.

    Returns:
        Shape ``x.shape[:-1]`` (0-d for 1-d ``x``), ``x``'s dtype, computed in float32. All
        -inf gives -inf, any +inf gives +inf, any NaN gives NaN.

    Raises:
        DTypeMismatch (TypeError), ShapeMismatch / InvalidArgument (ValueError).
    """
    kind, stream = _context(x, stream)
    r = _rudnn.logsumexp(_input(x), stream=stream, out=_out_arg(out))
    return out if out is not None else _output(kind, r)


def cross_entropy(logits, targets, ignore_index=None, *, out=None, stream=None):
    """Per-row cross entropy (no reduction) of ``logits`` against integer class targets.

    ``loss = logsumexp(logits_row) - logits_row[target]``, in float32. The class axis is the
    last one (unlike ``torch.nn.functional.cross_entropy`` for >2-d inputs).

    Args:
        logits: ``[..., C]`` array, float32 / float16 / bfloat16.
        targets: integer array (int32, int64, uint32, uint8) of shape ``logits.shape[:-1]``. A
            negative target ``t`` means class ``t + C``. A target still outside ``[0, C)``
            gives a NaN loss (it is never used as an index).
        ignore_index: rows whose target equals it (compared before the negative wrap) get loss
            0. ``None``: no row is ignored.
        out: optional float32 array of ``targets``' shape.

    Returns:
        float32 loss of shape ``targets.shape`` (reduce it yourself, e.g. ``loss.mean()``).

    Raises:
        ShapeMismatch (ValueError): targets' shape is not ``logits.shape[:-1]``.
        DTypeMismatch (TypeError): non-integer targets, unsupported logits dtype.
    """
    kind, stream = _context(logits, stream)
    r = _rudnn.cross_entropy(_input(logits), _input(targets), ignore_index, stream=stream, out=_out_arg(out))
    return out if out is not None else _output(kind, r)


# ---- Backward ops --------------------------------------------------------------------------


def layer_norm_backward(dy, x, gamma=None, beta=None, eps=1e-5, *, out=None, stream=None):
    """Gradients of :func:`layer_norm` (recomputes the statistics from ``x``).

    Args:
        dy: upstream gradient, same shape and dtype as ``x``.
        x, gamma, beta, eps: as in the forward call (only ``beta``'s presence, shape and
            dtype matter).
        out: optional ``(dx_out, dgamma_out, dbeta_out)``; ``dgamma_out`` / ``dbeta_out``
            must be given exactly when ``gamma`` / ``beta`` are (else ``None``).

    Returns:
        ``(dx, dgamma, dbeta)``: ``dx`` in ``x``'s dtype; ``dgamma`` / ``dbeta`` in the
        dtypes of ``gamma`` / ``beta``, ``None`` when that parameter is ``None``. Accumulated
        in float32; the parameter gradients are reduced in a fixed order (deterministic).

    Raises:
        as for :func:`layer_norm`; ShapeMismatch / DTypeMismatch when ``dy`` differs from ``x``.
    """
    kind, stream = _context(dy, stream)
    r = _rudnn.layer_norm_backward(
        _input(dy), _input(x), _input(gamma), _input(beta), eps, stream=stream, out=_out_arg(out)
    )
    return out if out is not None else _outputs(kind, r)


def rms_norm_backward(dy, x, gamma=None, eps=1e-6, *, out=None, stream=None):
    """Gradients of :func:`rms_norm` (recomputes the statistics from ``x``).

    Args:
        dy: upstream gradient, same shape and dtype as ``x``.
        x, gamma, eps: as in the forward call.
        out: optional ``(dx_out, dgamma_out)`` (``dgamma_out`` ``None`` when ``gamma`` is).

    Returns:
        ``(dx, dgamma)``: ``dx`` in ``x``'s dtype, ``dgamma`` in ``gamma``'s dtype (``None``
        without ``gamma``), accumulated in float32.

    Raises:
        as for :func:`rms_norm`; ShapeMismatch / DTypeMismatch when ``dy`` differs from ``x``.
    """
    kind, stream = _context(dy, stream)
    r = _rudnn.rms_norm_backward(_input(dy), _input(x), _input(gamma), eps, stream=stream, out=_out_arg(out))
    return out if out is not None else _outputs(kind, r)


def softmax_backward(dy, y, *, out=None, stream=None):
    """Gradient of :func:`softmax` from its output ``y``: ``dx = y * (dy - sum(dy * y))``.

    Args:
        dy, y: same shape and dtype (float32 / float16 / bfloat16).
        out: optional array of ``y``'s shape and dtype.

    Returns:
        ``dx`` with ``y``'s shape and dtype (float32 arithmetic).
    """
    kind, stream = _context(dy, stream)
    r = _rudnn.softmax_backward(_input(dy), _input(y), stream=stream, out=_out_arg(out))
    return out if out is not None else _output(kind, r)


def cross_entropy_backward(logits, targets, dloss, ignore_index=None, *, out=None, stream=None):
    """Gradient of :func:`cross_entropy`: ``dlogits = dloss[row] * (softmax(row) - onehot(target))``.

    Args:
        logits, targets, ignore_index: as in the forward call.
        dloss: float32 upstream gradient of ``targets``' shape (any strides, e.g. a broadcast
            scalar for a mean/sum reduction).
        out: optional array of ``logits``' shape and dtype.

    Returns:
        ``dlogits`` in ``logits``' shape and dtype. Ignored rows get 0, out-of-range targets a
        NaN row.

    Raises:
        DTypeMismatch (TypeError): ``dloss`` not float32; otherwise as for :func:`cross_entropy`.
    """
    kind, stream = _context(logits, stream)
    r = _rudnn.cross_entropy_backward(
        _input(logits), _input(targets), _input(dloss), ignore_index, stream=stream, out=_out_arg(out)
    )
    return out if out is not None else _output(kind, r)


def cross_entropy_with_grad(logits, targets, grad_scale=1.0, ignore_index=None, *, out=None, stream=None):
    """Cross entropy and its gradient in one pass over the logits.

    ``loss`` as :func:`cross_entropy`, ``dlogits`` as :func:`cross_entropy_backward` with
    ``dloss = grad_scale`` on every row (e.g. ``grad_scale = 1 / rows`` for a mean loss).

    Args:
        logits, targets, ignore_index: as for :func:`cross_entropy`.
        grad_scale: a finite float, or a float32 array of ``targets``' shape on the logits'
            device (one upstream gradient per row, as ``dloss`` of
            :func:`cross_entropy_backward`; e.g. ``1 / count`` of the non-ignored targets,
            computed on the device).
        out: optional ``(loss_out, dlogits_out)``.

    Returns:
        ``(loss, dlogits)``: float32 loss of ``targets``' shape, ``dlogits`` of ``logits``'
        shape and dtype.

    Raises:
        InvalidArgument (ValueError): grad_scale not finite; otherwise as for :func:`cross_entropy`
        and, for an array, as ``dloss`` of :func:`cross_entropy_backward`.
    """
    kind, stream = _context(logits, stream)
    if isinstance(grad_scale, _numbers.Real):
        grad_scale = float(grad_scale)
    else:
        grad_scale = _input(grad_scale)
    r = _rudnn.cross_entropy_with_grad(
        _input(logits), _input(targets), grad_scale, ignore_index, stream=stream, out=_out_arg(out)
    )
    return out if out is not None else _outputs(kind, r)


def scale_unless_one(x, scale, *, stream=None):
    """``x *= scale`` in place, skipped on the device when ``scale`` is exactly 1.

    For a gradient computed ahead under an assumed upstream gradient of 1 (as
    :func:`cross_entropy_with_grad` inside an autograd forward), once the true upstream
    gradient is known on the device: when it is 1, ``x`` is untouched at the cost of one
    launch, and the host never waits for the value.

    Args:
        x: float32/float16/bfloat16 array with a dense last axis and one row stride.
        scale: a float32 array of one element on ``x``'s device.

    Returns:
        ``x``.

    Raises:
        InvalidArgument (ValueError): scale not one float32 element, or x's layout.
    """
    _, stream = _context(x, stream)
    torch = _torch()
    target = x.detach() if torch is not None and isinstance(x, torch.Tensor) else x  # the same memory
    _rudnn.scale_unless_one(target, _input(scale), stream=stream)
    return x


def __getattr__(name):
    # rudnn.torch_autograd is imported on first use only (it imports torch).
    if name == "torch_autograd":
        import importlib

        return importlib.import_module(".torch_autograd", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
