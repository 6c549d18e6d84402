"""The convolution family (C++: ``rudnn/conv.h``): 1-D, 2-D and 3-D cross-correlation
(``torch.nn.functional.conv{1,2,3}d``) forward with bias and a fused epilogue, its data and
weight gradients, grouped and depthwise convolution, :func:`plan_conv`, and the causal
depthwise conv1d of Mamba and linear-attention layers (:func:`causal_conv1d`, with a carried
state and a packed varlen form) with its backward pass.

Layouts: with ``layout="nchw"`` (default) input is ``[N, C, *in]``, weight
``[K, C/groups, *kernel]`` and the result ``[N, K, *out]``; any strides are read in place, so a
channels-last torch tensor (``torch.channels_last``) runs channels-last and gives a
channels-last result, as torch. With ``layout="nhwc"`` the shapes are channels-last
themselves: input ``[N, *in, C]``, weight ``[K, *kernel, C/groups]``, result ``[N, *out, K]``.
The rank of the input (3, 4, 5) picks 1-D, 2-D or 3-D.

Options take torch's spelling: ``stride``, ``padding`` and ``dilation`` are an int (every
spatial axis) or one int per spatial axis; ``padding`` may also be ``"valid"`` (none) or
``"same"`` (stride 1; ``dilation * (kernel - 1)`` zeros in all, the odd one after the end, as
torch). ``padding_end`` (keyword) sets the zeros after each axis separately (asymmetric
padding; None: as ``padding``). Output size per axis:
``(in + pad + pad_end - dilation * (kernel - 1) - 1) // stride + 1``, which must be >= 1.

Strategies (``strategy=``): ``"auto"`` (default: the forward runs ImplicitGemm where it
applies, else the memory-bound depthwise kernel where groups == C, else Direct; the gradients
run Direct), ``"direct"``, ``"implicit_gemm"`` (tensor cores, float16 / bfloat16: the forward
for channels-last operands with C % 8 == 0, the data gradient for channels-last dout with
K % 8 == 0 (any stride, padding, dilation); anything else it cannot take, the weight gradient
included, is :class:`rudnn.Unsupported`), ``"autotune"`` (the faster of
implicit_gemm and direct for the forward and the data gradient, measured on the first call of
its shape class and recorded, see :func:`rudnn.autotune_entries`; the weight gradient runs
Direct). :func:`plan_conv` says which kernel a call runs.

Under ``torch.compile`` :func:`conv_forward` and :func:`causal_conv1d` called without
``out=``/``stream=`` (and, for causal_conv1d, without ``conv_state``) call their custom ops
(``torch.ops.rudnn.conv`` / ``causal_conv1d``), which the compiler traces (differentiable there).

Every function follows the package's common contract (see ``help(rudnn)``). Dtypes: float32,
float16, bfloat16 on the GPU with float32 accumulation and one rounding per output (float64
too on the CPU, where the float64 reference runs); weight, bias and residual share the
input's dtype. Every gradient is deterministic (no atomics).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

from . import _interop as io
from . import _rudnn
from ._interop import Array, StreamLike

__all__ = [
    "conv_forward",
    "conv_data_backward",
    "conv_weight_backward",
    "plan_conv",
    "causal_conv1d",
    "causal_conv1d_backward",
]

IntOrInts = Union[int, Sequence[int]]
Padding = Union[int, Sequence[int], str]


def spatial(rank: int, value) -> List[int]:
    """An option as the custom ops' int[] schema takes it: one int per spatial axis (None:
    ``[]``). Strings, bools and non-ints are left for the op to refuse."""
    if value is None:
        return []
    if isinstance(value, int) and not isinstance(value, bool):
        return [value] * rank
    return list(value)


_OPTIONS = """
        stride: an int or one int >= 1 per spatial axis (default 1).
        padding: zeros before (and, without ``padding_end``, after) each spatial axis: an int
            or ints >= 0 (default 0), ``"valid"`` (0) or ``"same"`` (stride 1 only; the output
            has the input's size).
        dilation: spacing of the kernel taps, an int or ints >= 1 (default 1).
        groups: an int >= 1 dividing C and K (C: depthwise).
        padding_end: None (as ``padding``) or zeros after each axis, an int or ints >= 0;
            None with ``"same"`` / ``"valid"``.
        layout: ``"nchw"`` (default; any strides) or ``"nhwc"`` (channels-last shapes).
        strategy: ``"auto"`` (default), ``"direct"``, ``"implicit_gemm"`` or ``"autotune"``.
"""

_RAISES = """
    Raises:
        InvalidArgument (ValueError): stride or dilation < 1, padding < 0, groups < 1 or not
            dividing C and K, an output size < 1, a non-batch axis of size 0, an option list
            of the wrong length, a bool or non-int option, an unknown name (padding, layout,
            strategy, activation), ``"same"`` with a stride; an ``out`` that overlaps an
            input, is of the wrong layout or cannot be written.
        ShapeMismatch (ValueError): an input that is not 3-, 4- or 5-d; a weight not
            ``[K, C/groups, *kernel]`` (``[K, *kernel, C/groups]``); bias not ``[K]``;
            residual or ``out`` not the output's shape.
        DTypeMismatch (TypeError): operands of different dtypes, a non-float dtype, float64
            on a GPU.
        DeviceMismatch (ValueError): operands on different devices.
        Unsupported (NotImplementedError): ``strategy="implicit_gemm"`` for a case it cannot
            take (the message names what is missing).
"""


def conv_forward(
    input: Array,
    weight: Array,
    bias: Optional[Array] = None,
    stride: IntOrInts = 1,
    padding: Padding = 0,
    dilation: IntOrInts = 1,
    groups: int = 1,
    *,
    padding_end: Optional[IntOrInts] = None,
    activation: str = "none",
    residual: Optional[Array] = None,
    layout: str = "nchw",
    strategy: str = "auto",
    allow_tf32: bool = False,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    if out is None and stream is None and io.compiling():
        rank = len(input.shape) - 2
        return io.torch_ops().conv(
            input, weight, bias, residual, spatial(rank, stride), padding if isinstance(padding, str) else "",
            [] if isinstance(padding, str) else spatial(rank, padding), spatial(rank, padding_end),
            spatial(rank, dilation), groups, activation, layout, strategy,
        )
    kind, stream = io.context(input, stream)
    r = _rudnn.conv_forward(
        io.as_input(input), io.as_input(weight), io.as_input(bias), stride, padding, dilation, groups,
        padding_end=padding_end, activation=activation, residual=io.as_input(residual), layout=layout,
        strategy=strategy, allow_tf32=allow_tf32, stream=stream, out=io.as_output(out),
    )
    return out if out is not None else io.result(kind, r)


conv_forward.__doc__ = (
    """Convolution (cross-correlation) with an optional fused epilogue:
    ``out = activation(conv(input, weight) + bias + residual)``, evaluated in float32 before the
    one rounding, where ``conv(...)[n, k, o] = sum over c in k's group and taps t of
    input[n, c, o * stride - pad + t * dilation] * weight[k, c', t]`` (padding reads 0).

    Args:
        input: ``[N, C, *in]`` (``[N, *in, C]`` with ``layout="nhwc"``), 1 to 3 spatial axes;
            N may be 0.
        weight: ``[K, C/groups, *kernel]`` (``[K, *kernel, C/groups]``), input's dtype.
        bias: None or ``[K]``, input's dtype.
"""
    + _OPTIONS
    + """        activation: the epilogue's ``"none"`` (default), ``"relu"``, ``"silu"`` or ``"gelu"``
            (the erf form, torch's default).
        residual: None or an array of the output's shape and dtype (any strides), added
            before the activation; not ``out`` itself.
        allow_tf32: a bool; concerns a future float32 ImplicitGemm only (Direct computes in
            float32).
        out: optional array of the output's shape and dtype, dense in the logical or (for
            ``"nchw"``) the channels-last order.
        stream: CUDA stream (see ``help(rudnn)``); ignored on the CPU.

    Returns:
        ``[N, K, *out]`` (``[N, *out, K]``) in the input's dtype; channels-last in memory for a
        channels-last ``"nchw"`` input, as torch.
"""
    + _RAISES
)


def conv_data_backward(
    dout: Array,
    weight: Array,
    input_size: Sequence[int],
    stride: IntOrInts = 1,
    padding: Padding = 0,
    dilation: IntOrInts = 1,
    groups: int = 1,
    *,
    padding_end: Optional[IntOrInts] = None,
    layout: str = "nchw",
    strategy: str = "auto",
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    kind, stream = io.context(dout, stream)
    r = _rudnn.conv_data_backward(
        io.as_input(dout), io.as_input(weight), input_size, stride, padding, dilation, groups,
        padding_end=padding_end, layout=layout, strategy=strategy, stream=stream, out=io.as_output(out),
    )
    return out if out is not None else io.result(kind, r)


conv_data_backward.__doc__ = (
    """The gradient of ``conv(input, weight)`` with respect to the input (the epilogue's
    gradient is the caller's: ``dout`` is taken after it). Each element gathers its covering
    outputs in a fixed order (deterministic).

    Args:
        dout: ``[N, K, *out]`` (``[N, *out, K]``), weight's dtype.
        weight: as in the forward call.
        input_size: the forward input's shape (a tuple, list or ``torch.Size``).
"""
    + _OPTIONS
    + """        out: optional array of ``input_size`` in dout's dtype.
        stream: CUDA stream; ignored on the CPU.

    Returns:
        ``dinput`` of ``input_size`` in dout's dtype (channels-last for a channels-last dout).
"""
    + _RAISES.replace("residual or ``out``", "dout or ``out``")
)


def conv_weight_backward(
    dout: Array,
    input: Array,
    weight_size: Sequence[int],
    stride: IntOrInts = 1,
    padding: Padding = 0,
    dilation: IntOrInts = 1,
    groups: int = 1,
    *,
    padding_end: Optional[IntOrInts] = None,
    with_bias: bool = True,
    layout: str = "nchw",
    strategy: str = "auto",
    out: Optional[Tuple[Array, Optional[Array]]] = None,
    stream: StreamLike = None,
) -> Tuple[Array, Optional[Array]]:
    kind, stream = io.context(dout, stream)
    r = _rudnn.conv_weight_backward(
        io.as_input(dout), io.as_input(input), weight_size, stride, padding, dilation, groups,
        padding_end=padding_end, with_bias=with_bias, layout=layout, strategy=strategy, stream=stream,
        out=io.as_output(out),
    )
    return out if out is not None else io.results(kind, r)


conv_weight_backward.__doc__ = (
    """The weight (and bias) gradient of ``conv(input, weight) + bias``: ``dweight`` of
    ``weight_size`` and ``dbias = dout`` summed over batch and space, accumulated in float32
    (float64 on the CPU) in a fixed order and rounded once; zeros for N = 0.

    Args:
        dout: ``[N, K, *out]`` (``[N, *out, K]``), input's dtype.
        input: the forward input.
        weight_size: the weight's shape (a tuple, list or ``torch.Size``).
"""
    + _OPTIONS
    + """        with_bias: a bool (default True): also compute ``dbias`` (ignored with ``out``, whose
            second element decides).
        out: optional ``(dweight_out, dbias_out)``; ``dbias_out`` None: no bias gradient.
        stream: CUDA stream; ignored on the CPU.

    Returns:
        ``(dweight, dbias)``: weight_size and ``[K]`` in dout's dtype; dbias None without
        ``with_bias`` (``out`` itself when given).
"""
    + _RAISES.replace("residual or ``out``", "dout or ``out``")
)


def plan_conv(
    direction: str,
    input_size: Sequence[int],
    weight_size: Sequence[int],
    dtype,
    *,
    stride: IntOrInts = 1,
    padding: Padding = 0,
    dilation: IntOrInts = 1,
    groups: int = 1,
    padding_end: Optional[IntOrInts] = None,
    layout: str = "nchw",
    strategy: str = "auto",
    allow_tf32: bool = False,
    device=None,
) -> dict:
    """What a convolution with these shapes, dtype, device and options runs, for operands
    contiguous in ``layout``: ``{"kernel": "Reference" | "Direct" | "Depthwise" |
    "ImplicitGemm", "workspace_bytes": int, "why": str}`` (a one-line reason). Nothing runs
    and nothing is allocated.

    Args:
        direction: ``"forward"``, ``"data_backward"`` or ``"weight_backward"``.
        input_size, weight_size: shapes in ``layout``'s order.
        dtype: ``"float32"``, ``"float16"``, ``"bfloat16"``, ``"float64"`` or a torch / numpy
            dtype.
        device: None (CUDA device 0), ``"cpu"``, ``"cuda"``, ``"cuda:<i>"`` or an int.
        the options: as for :func:`conv_forward`.

    Raises:
        the validation errors of :func:`conv_forward` (op name ``plan_conv``); Unsupported for
        an ``"implicit_gemm"`` request it cannot take.
    """
    return _rudnn.plan_conv(
        direction, input_size, weight_size, dtype, stride=stride, padding=padding, dilation=dilation, groups=groups,
        padding_end=padding_end, layout=layout, strategy=strategy, allow_tf32=allow_tf32, device=device,
    )


def causal_conv1d(
    x: Array,
    weight: Array,
    bias: Optional[Array] = None,
    conv_state: Optional[Array] = None,
    cu_seqlens: Optional[Array] = None,
    silu: bool = False,
    *,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    """Causal depthwise conv1d over channels-last ``x [B, L, C]`` with a kernel of W taps:
    ``pre[b, t, c] = bias[c] + sum_{w < W} weight[c, w] * xs[b, t - (W - 1) + w, c]`` and
    ``out = silu(pre)`` when ``silu`` else ``pre`` (float32, one rounding), where ``xs`` is x
    extended to the left by the carried state (``conv_state[b, c, j]`` at position
    ``-(W - 1) + j``) or by zeros.

    Decoding: pass ``conv_state`` and L = 1 step by step; the state is updated **in place** to
    the last W - 1 positions of ``xs`` (so it must be writable; it is never copied).
    Varlen: ``cu_seqlens`` (int32 ``[S + 1]``, non-decreasing from 0 to L, on x's device, not
    read by the host) splits ``x [1, L, C]`` into S sequences that never see each other;
    ``conv_state`` is then ``[S, C, W - 1]``.

    Args:
        x: ``[B, L, C]`` (any strides).
        weight: ``[C, W]``, W >= 1, x's dtype.
        bias: None or ``[C]``, x's dtype.
        conv_state: None or ``[B, C, W - 1]`` (``[S, C, W - 1]`` varlen), x's dtype, written.
        cu_seqlens: None or int32 ``[S + 1]``, S >= 1, with B == 1 (its contents are the
            caller's promise; only the CPU reference checks them).
        silu: a bool: apply SiLU.
        out: optional array of x's shape and dtype, contiguous.
        stream: CUDA stream; ignored on the CPU.

    Returns:
        ``[B, L, C]`` in x's dtype.

    Raises:
        ShapeMismatch / DTypeMismatch / DeviceMismatch (op ``causal_conv1d``): operands not of
        the shapes, dtype or device above; InvalidArgument: W < 1, cu_seqlens with B != 1,
        silu not a bool, a ``conv_state`` or ``out`` that cannot be written in place or
        overlaps an input.
    """
    if out is None and stream is None and conv_state is None and io.compiling():
        return io.torch_ops().causal_conv1d(x, weight, bias, None, cu_seqlens, silu)
    kind, stream = io.context(x, stream)
    r = _rudnn.causal_conv1d(
        io.as_input(x), io.as_input(weight), io.as_input(bias), io.as_output(conv_state), io.as_input(cu_seqlens),
        silu, stream=stream, out=io.as_output(out),
    )
    return out if out is not None else io.result(kind, r)


def causal_conv1d_backward(
    dout: Array,
    x: Array,
    weight: Array,
    bias: Optional[Array] = None,
    initial_state: Optional[Array] = None,
    cu_seqlens: Optional[Array] = None,
    silu: bool = False,
    *,
    out: Optional[Tuple[Array, Array, Optional[Array], Optional[Array]]] = None,
    stream: StreamLike = None,
) -> Tuple[Array, Array, Optional[Array], Optional[Array]]:
    """Gradients of :func:`causal_conv1d` for the same arguments, ``initial_state`` being the
    state the forward read (a copy taken before its in-place update) or None. ``dweight`` and
    ``dbias`` are accumulated in float32 in a fixed order (deterministic) and rounded once.
    Nothing is written to ``initial_state``.

    Args:
        dout: x's shape and dtype.
        x, weight, bias, cu_seqlens, silu: as in the forward call.
        initial_state: None or the forward's state before its update.
        out: optional ``(dx, dweight, dbias, dinitial_state)``; dbias / dinitial_state None
            exactly when bias / initial_state are.
        stream: CUDA stream; ignored on the CPU.

    Returns:
        ``(dx, dweight, dbias, dinitial_state)`` in x's dtype, None for an absent bias /
        initial_state (``out`` itself when given).

    Raises:
        as :func:`causal_conv1d` (op ``causal_conv1d_backward``), and dout not x's shape.
    """
    kind, stream = io.context(dout, stream)
    r = _rudnn.causal_conv1d_backward(
        io.as_input(dout), io.as_input(x), io.as_input(weight), io.as_input(bias), io.as_input(initial_state),
        io.as_input(cu_seqlens), silu, stream=stream, out=io.as_output(out),
    )
    return out if out is not None else io.results(kind, r)
