"""The grid_sample family (C++: ``rudnn/grid_sample.h``): :func:`grid_sample` (2-D and 3-D;
bilinear, nearest, bicubic; zeros, border and reflection padding; ``align_corners``) with its
backward pass for the input and the grid, and :func:`affine_grid` with its backward pass, as
``torch.nn.functional.grid_sample`` / ``affine_grid`` option for option.

Coordinates: ``grid[..., 0]`` is x (the W axis), ``grid[..., 1]`` is y (H), ``grid[..., 2]`` z
(D), normalised to ``[-1, 1]``; with ``align_corners`` -1 and 1 are the centres of the corner
pixels, without it their outer edges. Nearest rounds half to even; bicubic uses A = -0.75 and
pads each of its 16 taps separately, as torch. A NaN or infinite coordinate samples as if at
pixel -100 (zero with zeros padding), as torch; bicubic takes the same rule (torch's bicubic
does not guard it).

Under ``torch.compile`` the forward functions called without ``out=``/``stream=`` call their
custom op (``torch.ops.rudnn.grid_sample`` / ``affine_grid``), which the compiler traces
(differentiable there).

Every function follows the package's common contract (see ``help(rudnn)``). Dtypes: float32,
float16, bfloat16 (float64 too on the CPU, where the float64 reference runs); every operand
of one call has the same dtype; GPU arithmetic is float32, each result rounded once.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

from . import _interop as io
from . import _rudnn
from ._interop import Array, StreamLike

__all__ = ["grid_sample", "grid_sample_backward", "affine_grid", "affine_grid_backward"]

_OPTIONS = """
        mode: ``"bilinear"`` (default; trilinear for 3-D), ``"nearest"`` or ``"bicubic"``
            (2-D only).
        padding_mode: ``"zeros"`` (default), ``"border"`` or ``"reflection"``.
        align_corners: a bool (default False; torch warns about its default, ruDNN does not).
"""

_RAISES = """
    Raises:
        InvalidArgument (ValueError): an unknown mode or padding_mode, bicubic with 3-D input,
            align_corners not a bool, an input with an empty spatial axis; an ``out`` that
            overlaps an input, is not contiguous or cannot be written.
        ShapeMismatch (ValueError): input not 4-d / 5-d, grid not ``[N, ..., 2]`` /
            ``[N, ..., 3]`` with input's batch, operands or ``out`` of the wrong shape.
        DTypeMismatch (TypeError): operands of different dtypes, a dtype the op does not take
            (float64 on a GPU).
        DeviceMismatch (ValueError): operands on different devices.
"""


def grid_sample(
    input: Array,
    grid: Array,
    mode: str = "bilinear",
    padding_mode: str = "zeros",
    align_corners: bool = False,
    *,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    if out is None and stream is None and io.compiling():
        return io.torch_ops().grid_sample(input, grid, mode, padding_mode, align_corners)
    kind, stream = io.context(input, stream)
    r = _rudnn.grid_sample(
        io.as_input(input), io.as_input(grid), mode, padding_mode, align_corners, stream=stream,
        out=io.as_output(out),
    )
    return out if out is not None else io.result(kind, r)


grid_sample.__doc__ = (
    """Samples ``input`` at the locations of ``grid``:
    ``out[n, c, (do,) ho, wo] = input[n, c]`` interpolated at ``grid[n, (do,) ho, wo]``.

    Args:
        input: 2-D ``[N, C, H, W]`` or 3-D ``[N, C, D, H, W]``; H, W (D) >= 1, N and C may be 0.
        grid: ``[N, Ho, Wo, 2]`` (2-D) or ``[N, Do, Ho, Wo, 3]`` (3-D), input's dtype.
"""
    + _OPTIONS
    + """        out: optional array of the result's shape and dtype, contiguous, written in place.
        stream: CUDA stream (see ``help(rudnn)``); ignored on the CPU.

    Returns:
        ``[N, C, Ho, Wo]`` (``[N, C, Do, Ho, Wo]``) in the input's dtype.
"""
    + _RAISES
)


def grid_sample_backward(
    dout: Array,
    input: Array,
    grid: Array,
    mode: str = "bilinear",
    padding_mode: str = "zeros",
    align_corners: bool = False,
    *,
    deterministic: bool = False,
    out: Optional[Tuple[Optional[Array], Optional[Array]]] = None,
    stream: StreamLike = None,
) -> Tuple[Optional[Array], Optional[Array]]:
    """Gradients of :func:`grid_sample` given ``dout`` (the output's shape and dtype).

    The grid gradient is computed per output location without atomics (deterministic); it
    is zero for nearest and follows torch's conventions at clamped and reflected borders. On
    a GPU the input gradient is scattered with float32 atomic adds by default (float16 /
    bfloat16 through a float32 accumulator of the input's size, rounded once), so its last bits
    can vary from run to run, as with torch's CUDA kernel; ``deterministic=True`` gathers
    instead (a device radix sort of the (location, tap) entries by input cell: identical bits
    run to run, at the cost of the sort and about 36 bytes of scratch per entry, see
    ``rudnn/grid_sample.h``). On the CPU both are the same deterministic float64 sums.

    Args:
        dout: the upstream gradient, the forward output's shape and dtype.
        input, grid, mode, padding_mode, align_corners: as in the forward call.
        deterministic: a bool (GPU input gradient without atomics; see above).
        out: optional ``(dinput_out, dgrid_out)``; a ``None`` element skips that gradient.
        stream: CUDA stream; ignored on the CPU.

    Returns:
        ``(dinput, dgrid)`` of input's and grid's shapes and dtype (``out`` itself when given).
"""
    kind, stream = io.context(dout, stream)
    r = _rudnn.grid_sample_backward(
        io.as_input(dout), io.as_input(input), io.as_input(grid), mode, padding_mode, align_corners,
        deterministic=deterministic, stream=stream, out=io.as_output(out),
    )
    return out if out is not None else io.results(kind, r)


grid_sample_backward.__doc__ += _RAISES


def affine_grid(
    theta: Array,
    size: Sequence[int],
    align_corners: bool = False,
    *,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    """The sampling grid of the affine maps ``theta``:
    ``grid[n, (d,) h, w] = theta[n] @ [x_w, y_h, (z_d,) 1]`` with the base coordinates spaced
    evenly over ``[-1, 1]`` (pixel centres without ``align_corners``; a single pixel sits at 0).

    Args:
        theta: ``[N, 2, 3]`` (2-D) or ``[N, 3, 4]`` (3-D).
        size: the output size ``(N, C, H, W)`` or ``(N, C, D, H, W)``, ints >= 0, ``size[0] = N``
            (a tuple, list or ``torch.Size``).
        align_corners: a bool (default False, without torch's warning).
        out: optional array of the grid's shape and theta's dtype, contiguous.
        stream: CUDA stream; ignored on the CPU.

    Returns:
        ``[N, H, W, 2]`` or ``[N, D, H, W, 3]`` in theta's dtype.

    Raises:
        InvalidArgument (ValueError): size not of 4 or 5 ints, a negative size, align_corners
            not a bool; an ``out`` that cannot be written in place.
        ShapeMismatch (ValueError): theta not ``[N, 2, 3]`` / ``[N, 3, 4]`` for the size, or
            ``size[0] != N``; ``out`` of the wrong shape.
        DTypeMismatch (TypeError): a dtype the op does not take.
    """
    if out is None and stream is None and io.compiling():
        return io.torch_ops().affine_grid(theta, list(size), align_corners)
    kind, stream = io.context(theta, stream)
    r = _rudnn.affine_grid(io.as_input(theta), size, align_corners, stream=stream, out=io.as_output(out))
    return out if out is not None else io.result(kind, r)


def affine_grid_backward(
    dgrid: Array,
    size: Sequence[int],
    align_corners: bool = False,
    *,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    """``dtheta`` (``[N, 2, 3]`` or ``[N, 3, 4]``) of :func:`affine_grid` given ``dgrid`` (the
    grid's shape): a sum over the grid's locations in float32 (float64 on the CPU), in a
    fixed order (deterministic).

    Args:
        dgrid: the grid's shape, float dtype.
        size, align_corners: as in the forward call.
        out: optional array of theta's shape and dgrid's dtype, contiguous.
        stream: CUDA stream; ignored on the CPU.

    Raises:
        as for :func:`affine_grid`, with ``dgrid`` checked against ``size``.
    """
    kind, stream = io.context(dgrid, stream)
    r = _rudnn.affine_grid_backward(io.as_input(dgrid), size, align_corners, stream=stream, out=io.as_output(out))
    return out if out is not None else io.result(kind, r)
