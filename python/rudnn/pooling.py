"""The pooling family (C++: ``rudnn/pooling.h``): max, average, adaptive max / average and LP
pooling over 1-D, 2-D and 3-D inputs (``[N, C, L]``, ``[N, C, H, W]``, ``[N, C, D, H, W]``;
the rank picks the form) with their backward passes, as ``torch.nn.functional``'s
``max_pool{1,2,3}d``, ``avg_pool{1,2,3}d``, ``adaptive_{max,avg}_pool{1,2,3}d`` and
``lp_pool{1,2,3}d``. Global pooling is adaptive pooling to ``output_size=1``.

Layouts: a contiguous input runs in NCHW order; a channels-last dense input (torch's
``channels_last`` / ``channels_last_3d``) runs channels-last kernels in place and gives
channels-last results, as torch; other strides are read through one dense copy.

Options take torch's spelling: ``kernel_size``, ``stride``, ``padding`` and ``dilation`` are
an int (the same for every spatial axis) or one int per spatial axis; ``stride=None`` means
the kernel size. ``ceil_mode`` rounds the output size up as torch does (the last window must
start inside the input or the left padding).

Under ``torch.compile`` the forward functions called without ``out=``/``stream=`` call their
custom op (``torch.ops.rudnn.max_pool`` / ``avg_pool``), which the compiler traces
(differentiable there).

Every function follows the package's common contract (see ``help(rudnn)``): results of the
first argument's array type, ``out=`` written in place, ``stream=``, and errors that are
:class:`rudnn.Error` subclasses naming the op and the argument. Dtypes: float32, float16,
bfloat16 on every device, float64 too on the CPU (the reference, computed in float64); GPU
sums are float32, each result rounded once. Inputs of any strides are taken (see Layouts).

Divergences from torch: the batch axis is required (add a batch of 1 to an unbatched
``[C, ...]`` input); the max backward needs the indices of a max_pool with the same options;
lp_pool's norm_type must be finite and > 0.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

from . import _interop as io
from . import _rudnn
from ._interop import Array, StreamLike

__all__ = [
    "max_pool",
    "max_pool_backward",
    "avg_pool",
    "avg_pool_backward",
    "adaptive_max_pool",
    "adaptive_max_pool_backward",
    "adaptive_avg_pool",
    "adaptive_avg_pool_backward",
    "lp_pool",
    "lp_pool_backward",
]

IntOrInts = Union[int, Sequence[int]]


def spatial(x, value, fill: int = 0):
    """An option as the custom ops' int[] schema takes it: one int per spatial axis of x
    (None: ``[]``, the op's default). Bools and non-ints are left for the op to refuse."""
    if value is None:
        return []
    if isinstance(value, int) and not isinstance(value, bool):
        return [value] * max(len(x.shape) - 2, 0)
    return list(value)


_ARGS = """
    Args:
        {x}: ``[N, C, L]``, ``[N, C, H, W]`` or ``[N, C, D, H, W]``; float32 / float16 /
            bfloat16 (float64 on the CPU). N may be 0; every other axis >= 1.
        kernel_size: the window, an int or one int > 0 per spatial axis.
        stride: an int or one int > 0 per spatial axis; ``None`` (default): ``kernel_size``.
        padding: implicit padding on both sides, an int or ints in ``[0, kernel / 2]``.{extra}
        ceil_mode: round output sizes up (torch's rule) instead of down.
        out: optional preallocated result{out_note}, contiguous, written in place.
        stream: CUDA stream (see ``help(rudnn)``); ignored on the CPU.

    Results: contiguous, or channels-last for a channels-last input (``out`` then in that
    layout). Output size per spatial axis: ``floor_or_ceil((in + 2 pad - dilation (kernel - 1) - 1) /
    stride) + 1``, which must be >= 1.
"""

_RAISES = """
    Raises:
        InvalidArgument (ValueError): option lists of the wrong length, kernel / stride /
            dilation <= 0, padding < 0 or > kernel / 2, an output size <= 0, an empty axis
            other than the batch, a bool or non-int option; an ``out`` that overlaps an input,
            is not contiguous or cannot be written.
        ShapeMismatch (ValueError): an input that is not 3-, 4- or 5-d; operands or ``out``
            of the wrong shape.
        DTypeMismatch (TypeError): a dtype the op does not take (float64 on a GPU), operands
            of different dtypes{dtype_extra}.
        DeviceMismatch (ValueError): operands on different devices.
"""


def max_pool(
    input: Array,
    kernel_size: IntOrInts,
    stride: Optional[IntOrInts] = None,
    padding: IntOrInts = 0,
    dilation: IntOrInts = 1,
    ceil_mode: bool = False,
    *,
    out: Optional[Tuple[Array, Array]] = None,
    stream: StreamLike = None,
) -> Tuple[Array, Array]:
    if out is None and stream is None and io.compiling():
        return io.torch_ops().max_pool(
            input, spatial(input, kernel_size), spatial(input, stride), spatial(input, padding),
            spatial(input, dilation), ceil_mode,
        )
    kind, stream = io.context(input, stream)
    r = _rudnn.max_pool(
        io.as_input(input), kernel_size, stride, padding, dilation, ceil_mode, stream=stream, out=io.as_output(out)
    )
    return out if out is not None else io.results(kind, r)


max_pool.__doc__ = (
    """Max pooling: ``out[n, c, o] = max`` over the window at ``o`` (padding never wins; a NaN
    wins over every number; ties keep the first), with torch's ``return_indices``.
"""
    + _ARGS.format(
        x="input",
        extra="\n        dilation: spacing of the window's taps, an int or ints > 0.",
        out_note=": ``(out, indices)``",
    )
    + """
    Returns:
        ``(out, indices)``: ``[N, C, out...]`` in the input's dtype, and int64 of the same shape
        holding the flat index of each maximum within its ``(n, c)`` plane, as torch.
"""
    + _RAISES.format(dtype_extra="; an ``indices`` output that is not int64")
)


def max_pool_backward(
    dout: Array,
    indices: Array,
    input: Array,
    kernel_size: IntOrInts,
    stride: Optional[IntOrInts] = None,
    padding: IntOrInts = 0,
    dilation: IntOrInts = 1,
    ceil_mode: bool = False,
    *,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    """Gradient of :func:`max_pool` with respect to its input: each input element gathers the
    ``dout`` entries whose index points at it (deterministic, no atomics).

    Args:
        dout: ``[N, C, out...]``, the input's dtype.
        indices: int64 ``[N, C, out...]`` from :func:`max_pool` with the same options (an
            index outside its window is ignored, where torch would scatter to it).
        input: the forward's input; read for its shape, dtype and device only.
        kernel_size, stride, padding, dilation, ceil_mode: as for :func:`max_pool`.
        out: optional array of the input's shape and dtype, contiguous, written in place.
        stream: CUDA stream; ignored on the CPU.

    Returns:
        ``dinput``: the input's shape and dtype (float32 sums, rounded once).

    Raises:
        as for :func:`max_pool`; ShapeMismatch / DTypeMismatch for ``dout`` or ``indices`` not of
        the forward output's shape, or of the wrong dtype (indices: int64).
    """
    kind, stream = io.context(dout, stream)
    r = _rudnn.max_pool_backward(
        io.as_input(dout), io.as_input(indices), io.as_input(input), kernel_size, stride, padding, dilation,
        ceil_mode, stream=stream, out=io.as_output(out),
    )
    return out if out is not None else io.result(kind, r)


def avg_pool(
    input: Array,
    kernel_size: IntOrInts,
    stride: Optional[IntOrInts] = None,
    padding: IntOrInts = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: Optional[int] = None,
    *,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    if out is None and stream is None and io.compiling():
        return io.torch_ops().avg_pool(
            input, spatial(input, kernel_size), spatial(input, stride), spatial(input, padding), ceil_mode,
            count_include_pad, divisor_override,
        )
    kind, stream = io.context(input, stream)
    r = _rudnn.avg_pool(
        io.as_input(input), kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
        stream=stream, out=io.as_output(out),
    )
    return out if out is not None else io.result(kind, r)


avg_pool.__doc__ = (
    """Average pooling: the sum of the in-bounds window elements over the divisor:
    ``divisor_override`` when given, else the window clipped to the padded input
    (``count_include_pad=True``, torch's default) or to the input itself.
"""
    + _ARGS.format(
        x="input",
        extra="\n        count_include_pad: padded positions count in the divisor (a bool)."
        "\n        divisor_override: ``None`` or an int > 0 dividing every window.",
        out_note=" of the output's shape and the input's dtype",
    )
    + """
    Returns:
        ``[N, C, out...]`` in the input's dtype (float32 sums, rounded once).
"""
    + _RAISES.format(dtype_extra="")
    + """        divisor_override 0 or negative is InvalidArgument, as in torch.
"""
)


def avg_pool_backward(
    dout: Array,
    input: Array,
    kernel_size: IntOrInts,
    stride: Optional[IntOrInts] = None,
    padding: IntOrInts = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: Optional[int] = None,
    *,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    """Gradient of :func:`avg_pool` with respect to its input: a gather over the windows that
    cover each input element (deterministic, no atomics).

    Args:
        dout: ``[N, C, out...]`` in the input's dtype.
        input: the forward's input; read for its shape, dtype and device only.
        kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override: as for
            :func:`avg_pool`.
        out: optional array of the input's shape and dtype, contiguous, written in place.
        stream: CUDA stream; ignored on the CPU.

    Returns:
        ``dinput``: the input's shape and dtype.

    Raises:
        as for :func:`avg_pool`; ShapeMismatch / DTypeMismatch for a ``dout`` that is not the
        forward output's shape and dtype.
    """
    kind, stream = io.context(dout, stream)
    r = _rudnn.avg_pool_backward(
        io.as_input(dout), io.as_input(input), kernel_size, stride, padding, ceil_mode, count_include_pad,
        divisor_override, stream=stream, out=io.as_output(out),
    )
    return out if out is not None else io.result(kind, r)


# ---- Adaptive and LP pooling ---------------------------------------------------------------------


def adaptive_max_pool(
    input: Array, output_size: IntOrInts, *, out: Optional[Tuple[Array, Array]] = None, stream: StreamLike = None
) -> Tuple[Array, Array]:
    """Adaptive max pooling to ``output_size`` (torch's ``adaptive_max_pool{1,2,3}d`` with
    ``return_indices``): output o of an axis of size ``in`` pools
    ``[floor(o in / out), ceil((o + 1) in / out))``; NaN, ties and indices as :func:`max_pool`.
    Global max pooling is ``output_size=1``.

    Args:
        input: ``[N, C, *spatial]`` (1-, 2- or 3-D), dtypes as :func:`max_pool`.
        output_size: an int (every spatial axis) or one int >= 1 per spatial axis (no None
            entries).
        out: optional ``(out, indices)``, contiguous, written in place.
        stream: CUDA stream; ignored on the CPU.

    Returns:
        ``(out, indices)``: ``[N, C, *output_size]`` in the input's dtype, and int64 indices.

    Raises: as :func:`max_pool`; InvalidArgument for an output_size of the wrong length or
    with an entry < 1.
    """
    if out is None and stream is None and io.compiling():
        return io.torch_ops().adaptive_max_pool(input, spatial(input, output_size))
    kind, stream = io.context(input, stream)
    r = _rudnn.adaptive_max_pool(io.as_input(input), output_size, stream=stream, out=io.as_output(out))
    return out if out is not None else io.results(kind, r)


def adaptive_max_pool_backward(
    dout: Array,
    indices: Array,
    input: Array,
    output_size: IntOrInts,
    *,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    """Gradient of :func:`adaptive_max_pool` (a gather from its indices, deterministic); args
    as :func:`max_pool_backward` with ``output_size`` for the pooling options."""
    kind, stream = io.context(dout, stream)
    r = _rudnn.adaptive_max_pool_backward(
        io.as_input(dout), io.as_input(indices), io.as_input(input), output_size, stream=stream,
        out=io.as_output(out),
    )
    return out if out is not None else io.result(kind, r)


def adaptive_avg_pool(
    input: Array, output_size: IntOrInts, *, out: Optional[Array] = None, stream: StreamLike = None
) -> Array:
    """Adaptive average pooling (torch's ``adaptive_avg_pool{1,2,3}d``): the mean over
    :func:`adaptive_max_pool`'s windows. Global average pooling is ``output_size=1``.

    Args: as :func:`adaptive_max_pool` (``out``: one array). Returns ``[N, C, *output_size]`` in
    the input's dtype (float32 sums on a GPU, rounded once). Raises: as
    :func:`adaptive_max_pool`.
    """
    if out is None and stream is None and io.compiling():
        return io.torch_ops().adaptive_avg_pool(input, spatial(input, output_size))
    kind, stream = io.context(input, stream)
    r = _rudnn.adaptive_avg_pool(io.as_input(input), output_size, stream=stream, out=io.as_output(out))
    return out if out is not None else io.result(kind, r)


def adaptive_avg_pool_backward(
    dout: Array, input: Array, output_size: IntOrInts, *, out: Optional[Array] = None, stream: StreamLike = None
) -> Array:
    """Gradient of :func:`adaptive_avg_pool` (a gather, deterministic); ``input`` is read for
    its shape, dtype and device only."""
    kind, stream = io.context(dout, stream)
    r = _rudnn.adaptive_avg_pool_backward(
        io.as_input(dout), io.as_input(input), output_size, stream=stream, out=io.as_output(out)
    )
    return out if out is not None else io.result(kind, r)


def lp_pool(
    input: Array,
    norm_type: float,
    kernel_size: IntOrInts,
    stride: Optional[IntOrInts] = None,
    ceil_mode: bool = False,
    *,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    """Power-average (LP) pooling, as torch's ``lp_pool{1,2,3}d``:
    ``(sum over the window of x^p)^(1/p)`` with ``p = norm_type``; a window clipped by
    ``ceil_mode`` is scaled by ``K / (its in-bounds count)`` as in torch. Signs as torch:
    ``x^p`` of a negative x with a non-integer p is NaN.

    Args:
        input: ``[N, C, *spatial]``, dtypes as :func:`avg_pool`.
        norm_type: p, a number, finite and > 0 (torch also takes 0, negatives and inf).
        kernel_size, stride, ceil_mode: as for :func:`avg_pool` (no padding).
        out, stream: as for :func:`avg_pool`.

    Returns: ``[N, C, out...]`` in the input's dtype.

    Raises: as :func:`avg_pool`; InvalidArgument for norm_type not finite and > 0.
    """
    if out is None and stream is None and io.compiling():
        return io.torch_ops().lp_pool(
            input, float(norm_type), spatial(input, kernel_size), spatial(input, stride), ceil_mode
        )
    kind, stream = io.context(input, stream)
    r = _rudnn.lp_pool(io.as_input(input), norm_type, kernel_size, stride, ceil_mode, stream=stream,
                       out=io.as_output(out))
    return out if out is not None else io.result(kind, r)


def lp_pool_backward(
    dout: Array,
    input: Array,
    forward_out: Array,
    norm_type: float,
    kernel_size: IntOrInts,
    stride: Optional[IntOrInts] = None,
    ceil_mode: bool = False,
    *,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    """Gradient of :func:`lp_pool` from the forward's input and result ``forward_out``:
    ``dx = x^(p-1) * sum over the windows covering x of dout * out^(1-p) * K / count``; a window
    whose result is 0 passes no gradient (as torch). A gather, deterministic."""
    kind, stream = io.context(dout, stream)
    r = _rudnn.lp_pool_backward(
        io.as_input(dout), io.as_input(input), io.as_input(forward_out), norm_type, kernel_size, stride, ceil_mode,
        stream=stream, out=io.as_output(out),
    )
    return out if out is not None else io.result(kind, r)
