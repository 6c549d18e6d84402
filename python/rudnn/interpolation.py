"""The interpolation family (C++: ``rudnn/interpolation.h``): :func:`interpolate` (resizing
``[N, C, L]``, ``[N, C, H, W]`` or ``[N, C, D, H, W]`` inputs) and its backward pass, as
``torch.nn.functional.interpolate`` option for option.

Modes and the ranks they take: ``"nearest"`` and ``"nearest-exact"`` (also spelled
``"nearest_exact"``) 3-, 4- or 5-d; ``"linear"`` 3-d; ``"bilinear"`` 4-d; ``"trilinear"``
5-d; ``"bicubic"`` 4-d (A = -0.75, taps clamped to the edge, so values may overshoot the
input's range); ``"area"`` 3-, 4- or 5-d (adaptive average pooling to the output size).
Source positions follow torch exactly: ``align_corners`` for the linear modes and bicubic;
with ``scale_factor`` the kernel samples with ``1 / scale_factor`` unless
``recompute_scale_factor`` (then ``in / out``), the output size being ``floor(in * scale)``
either way. The nearest modes pick their pixel in float32 on every device, bit for bit as
torch's CUDA kernels.

``antialias=True`` (``"bilinear"`` and ``"bicubic"`` only, as torch): each output averages a
window of the input under the mode's filter stretched by the scale when downsampling (the
triangle, or Keys' cubic with A = -0.5), the window's weights normalised to sum 1 (torch's
``_upsample_*_aa``); upsampling bilinear with it equals plain bilinear.

Under ``torch.compile`` :func:`interpolate` called without ``out=``/``stream=`` calls its custom
op (``torch.ops.rudnn.interpolate``), which the compiler traces (differentiable there).

Every function follows the package's common contract (see ``help(rudnn)``). Dtypes: float32,
float16, bfloat16 (float64 too on the CPU, where the float64 reference runs); GPU arithmetic
is float32, each output rounded once. Inputs of any strides are taken; outputs are contiguous.

Divergences from torch: the batch axis is required; with antialias, a scale factor that
leaves one axis's size unchanged (1.05 on 10 pixels) samples that axis with ``1 / scale`` (as
torch's CUDA forward; its CPU kernels copy the axis).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

from . import _interop as io
from . import _rudnn
from ._interop import Array, StreamLike

__all__ = ["interpolate", "interpolate_backward", "interpolate_output_shape"]

IntOrInts = Union[int, Sequence[int]]
FloatOrFloats = Union[float, Sequence[float]]


def sizes(x_dims: int, size) -> List[int]:
    """``size`` as the custom op's int[] schema takes it (None: ``[]``); bools and other types
    are left for the op to refuse."""
    if size is None:
        return []
    if isinstance(size, int) and not isinstance(size, bool):
        return [size] * max(x_dims - 2, 0)
    return list(size)


def scales(x_dims: int, scale_factor) -> List[float]:
    """``scale_factor`` as the custom op's float[] schema takes it (None: ``[]``)."""
    if scale_factor is None:
        return []
    if isinstance(scale_factor, (int, float)) and not isinstance(scale_factor, bool):
        return [float(scale_factor)] * max(x_dims - 2, 0)
    return [float(s) for s in scale_factor]


def antialias_flag(antialias) -> bool:
    """``antialias`` checked to be a bool (as the op's bool schema needs)."""
    if antialias is True or antialias is False:
        return antialias
    raise _rudnn.InvalidArgument(f"interpolate: antialias must be a bool, got {type(antialias).__name__}")


_OPTIONS = """
        size: the output's spatial size, an int (every axis) or one int >= 1 per spatial axis;
            exactly one of ``size`` and ``scale_factor``.
        scale_factor: a number (every axis) or one per spatial axis, finite and > 0; the output
            size is ``floor(in * scale_factor)``, which must be >= 1.
        mode: ``"nearest"`` (default), ``"nearest-exact"``, ``"linear"``, ``"bilinear"``,
            ``"trilinear"``, ``"bicubic"`` or ``"area"`` (ranks: see the module's help).
        align_corners: None (default: False for the modes that take it) or a bool, for the
            linear modes and bicubic only (a bool, even False, with another mode is refused,
            as torch).
        recompute_scale_factor: None / False (sample with ``1 / scale_factor``) or True (with
            ``in / out``); True only with ``scale_factor``.
        antialias: False (default) or True (``"bilinear"`` and ``"bicubic"`` only; see the
            module's help).
"""

_RAISES = """
    Raises:
        InvalidArgument (ValueError): an unknown mode or one that does not take the input's
            rank; neither or both of size and scale_factor; a list whose length is neither 1
            nor the spatial rank; a size or output size <= 0 or >= 2^31; a scale factor <= 0,
            NaN or infinite; recompute_scale_factor with size; align_corners with a nearest
            mode or area; antialias with a mode other than bilinear and bicubic, or not a bool;
            a bool where a number belongs; an empty axis other than the batch;
            an ``out`` that overlaps an input, is not contiguous or cannot be written.
        ShapeMismatch (ValueError): an input that is not 3-, 4- or 5-d; ``out`` (or ``dout``)
            of the wrong shape.
        DTypeMismatch (TypeError): a dtype the op does not take (float64 on a GPU), operands
            of different dtypes.
        DeviceMismatch (ValueError): operands on different devices.
"""


def interpolate(
    input: Array,
    size: Optional[IntOrInts] = None,
    scale_factor: Optional[FloatOrFloats] = None,
    mode: str = "nearest",
    align_corners: Optional[bool] = None,
    recompute_scale_factor: Optional[bool] = None,
    antialias: bool = False,
    *,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    antialias = antialias_flag(antialias)
    if out is None and stream is None and io.compiling():
        dims = len(input.shape)
        return io.torch_ops().interpolate(
            input, sizes(dims, size), scales(dims, scale_factor), mode, align_corners,
            bool(recompute_scale_factor), antialias,
        )
    kind, stream = io.context(input, stream)
    r = _rudnn.interpolate(
        io.as_input(input), size, scale_factor, mode, align_corners, recompute_scale_factor, antialias,
        stream=stream, out=io.as_output(out),
    )
    return out if out is not None else io.result(kind, r)


interpolate.__doc__ = (
    """Resizes ``input`` to ``size`` (or by ``scale_factor``):
    ``out[n, c, o...]`` = the weighted sum of the input taps of ``o`` in ``mode``.

    Args:
        input: ``[N, C, L]``, ``[N, C, H, W]`` or ``[N, C, D, H, W]``; N may be 0, every other
            axis >= 1 (and < 2^31).
"""
    + _OPTIONS
    + """        out: optional array of the result's shape and dtype, contiguous, written in place.
        stream: CUDA stream (see ``help(rudnn)``); ignored on the CPU.

    Returns:
        ``[N, C, out...]`` in the input's dtype, contiguous.
"""
    + _RAISES
)


def interpolate_backward(
    dout: Array,
    input_size: Sequence[int],
    size: Optional[IntOrInts] = None,
    scale_factor: Optional[FloatOrFloats] = None,
    mode: str = "nearest",
    align_corners: Optional[bool] = None,
    recompute_scale_factor: Optional[bool] = None,
    antialias: bool = False,
    *,
    deterministic: bool = True,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    antialias = antialias_flag(antialias)
    kind, stream = io.context(dout, stream)
    r = _rudnn.interpolate_backward(
        io.as_input(dout), input_size, size, scale_factor, mode, align_corners, recompute_scale_factor,
        antialias, deterministic=deterministic, stream=stream, out=io.as_output(out),
    )
    return out if out is not None else io.result(kind, r)


interpolate_backward.__doc__ = (
    """Gradient of :func:`interpolate` with respect to its input (the adjoint:
    ``dinput[i] = sum over outputs o of weight(o, i) * dout[o]``, the forward's weights).

    By default each input-gradient element gathers its outputs in a fixed order (identical
    bits run to run, no atomics). ``deterministic=False`` lets float32 on a GPU in the nearest,
    linear and cubic modes scatter with float32 atomic adds (faster for large upsampling
    factors; the last bits may vary run to run, as torch's CUDA kernels). float16 / bfloat16,
    area, antialias and the CPU always gather.

    Args:
        dout: ``[N, C, out...]``, the forward output's shape; its dtype is the result's.
        input_size: the forward input's shape ``(N, C, *in)`` (a tuple, list or ``torch.Size``).
        size, scale_factor, mode, align_corners, recompute_scale_factor, antialias: as in the
            forward call (see :func:`interpolate`).
        deterministic: a bool (default True; see above).
        out: optional array of ``input_size`` in dout's dtype, contiguous, written in place.
        stream: CUDA stream; ignored on the CPU.

    Returns:
        ``dinput`` of ``input_size`` in dout's dtype.
"""
    + _RAISES.replace("``out`` (or ``dout``)", "``dout`` (not the output shape of ``input_size``) or ``out``")
)


def interpolate_output_shape(
    input_size: Sequence[int],
    size: Optional[IntOrInts] = None,
    scale_factor: Optional[FloatOrFloats] = None,
    mode: str = "nearest",
    align_corners: Optional[bool] = None,
    recompute_scale_factor: Optional[bool] = None,
    antialias: bool = False,
) -> Tuple[int, ...]:
    """The shape ``(N, C, *out)`` that :func:`interpolate` gives for an input of shape
    ``input_size`` with these options (no array needed).

    Raises:
        the shape and option errors of :func:`interpolate` (its op name, ``"interpolate"``).
    """
    return _rudnn.interpolate_output_shape(
        input_size, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias_flag(antialias)
    )
