"""CPU tests of the interpolation family through the rudnn package: interpolate in every mode
(nearest, nearest-exact, linear, bilinear, trilinear, bicubic, area) against a NumPy float64
reference written here (torch's definitions, applied one axis at a time as an [out, in]
matrix), with size or scale_factor, align_corners and recompute_scale_factor; the backward
against the transposed matrices (the adjoint); antialias (bilinear, bicubic) against its own
NumPy rule; out=, strided inputs, zero batches; errors
reaching Python as the rudnn.Error subclass naming the op and the argument. Inputs are random
with a fresh seed per run (printed in every failure message); RUDNN_TEST_SEED=<int> replays one.
"""

import math

import numpy as np
import pytest
from support import F16, F32, Ctx, assert_unchanged, check, f64, randn, snapshot

import rudnn

F64 = np.float64
DTYPES = [F32, F16, F64]
RANK_OF_MODE = {"linear": 1, "bilinear": 2, "trilinear": 3, "bicubic": 2}


def dname(dtype):
    return np.dtype(dtype).name


def verify(ctx, what, got, ref, dtype):
    if dtype != F64:
        check(ctx, what, got, ref, dtype)
        return
    got = np.asarray(got)
    assert got.dtype == F64 and got.shape == ref.shape, ctx.msg(f"{what}: {got.dtype} {got.shape}")
    if ref.size:
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10, err_msg=ctx.msg(what))


# ---- NumPy float64 reference ------------------------------------------------------------------


def cubic_weights(t, A=-0.75):
    def near(u):
        return ((A + 2) * u - (A + 3)) * u * u + 1

    def far(u):
        return ((A * u - 5 * A) * u + 8 * A) * u - 4 * A

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def axis_matrix(n_in, n_out, mode, align, scale):
    """M [n_out, n_in]: out = M @ in along one axis, with torch's source positions. scale: the
    factor passed to the kernel (None: in / out)."""
    M = np.zeros((n_out, n_in))
    dst = np.arange(n_out)
    if mode in ("nearest", "nearest-exact"):
        # torch computes the nearest index in float32 on every device
        r = np.float32(1.0 / scale) if scale is not None else np.float32(n_in) / np.float32(n_out)
        pos = dst.astype(np.float32) + (np.float32(0.5) if mode == "nearest-exact" else np.float32(0))
        src = np.minimum(np.floor(pos * r).astype(np.int64), n_in - 1)
        M[dst, src] = 1.0
        return M
    if mode == "area":
        for o in range(n_out):
            lo, hi = (o * n_in) // n_out, -((-(o + 1) * n_in) // n_out)
            M[o, lo:hi] = 1.0 / (hi - lo)
        return M
    if align:
        r = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        src = dst * r
    else:
        r = 1.0 / scale if scale is not None else n_in / n_out
        src = (dst + 0.5) * r - 0.5
    if mode == "bicubic":
        i0 = np.floor(src)
        w = cubic_weights(src - i0)
        for k in range(4):
            idx = np.clip(i0 - 1 + k, 0, n_in - 1).astype(np.int64)
            np.add.at(M, (dst, idx), w[k])
        return M
    src = np.maximum(src, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    lam = src - i0
    np.add.at(M, (dst, i0), 1 - lam)
    np.add.at(M, (dst, i1), lam)
    return M


def matrices(in_shape, size, scale_factor, mode, align, recompute):
    rank = len(in_shape) - 2
    mats = []
    for i in range(rank):
        n_in = in_shape[2 + i]
        if size is not None:
            n_out = size if isinstance(size, int) else size[i if len(size) > 1 else 0]
            scale = None
        else:
            s = scale_factor if isinstance(scale_factor, (int, float)) else scale_factor[
                i if len(scale_factor) > 1 else 0]
            n_out = int(math.floor(n_in * s))
            scale = None if recompute else s
        mats.append(axis_matrix(n_in, n_out, mode, bool(align), scale))
    return mats


def apply(x, mats, transpose=False):
    y = f64(x)
    for i, M in enumerate(mats):
        y = np.moveaxis(np.tensordot(M.T if transpose else M, np.moveaxis(y, 2 + i, 0), axes=1), 0, 2 + i)
    return y


# ---- forward and backward ---------------------------------------------------------------------

CASES = [
    # (input shape, size, scale_factor, mode, align_corners, recompute)
    ((2, 3, 7), 12, None, "nearest", None, None),
    ((2, 3, 7), None, 1.7, "nearest", None, None),
    ((2, 3, 5, 6), (3, 11), None, "nearest", None, None),
    ((1, 2, 3, 4, 5), None, (2.0, 1.5, 0.6), "nearest", None, None),
    ((2, 3, 9), 4, None, "nearest-exact", None, None),
    ((2, 2, 5, 7), None, 2.3, "nearest_exact", None, None),
    ((2, 3, 7), 15, None, "linear", False, None),
    ((2, 3, 7), 15, None, "linear", True, None),
    ((2, 3, 7), None, 2.3, "linear", None, None),
    ((2, 3, 7), None, 2.3, "linear", None, True),
    ((2, 3, 10, 6), (5, 13), None, "bilinear", False, None),
    ((2, 3, 10, 6), (5, 13), None, "bilinear", True, None),
    ((1, 2, 4, 4), None, 2, "bilinear", None, None),
    ((1, 2, 4, 5), (1, 1), None, "bilinear", True, None),
    ((1, 2, 3, 4, 5), (5, 3, 8), None, "trilinear", False, None),
    ((1, 2, 3, 4, 5), None, 1.5, "trilinear", True, None),
    ((2, 3, 6, 5), (9, 4), None, "bicubic", False, None),
    ((2, 3, 6, 5), (9, 4), None, "bicubic", True, None),
    ((1, 1, 5, 5), None, 3.0, "bicubic", None, None),
    ((2, 3, 11), 4, None, "area", None, None),
    ((2, 3, 7, 9), (3, 5), None, "area", None, None),
    ((1, 2, 5, 6, 7), (2, 4, 3), None, "area", None, None),
    ((0, 3, 4, 4), (8, 8), None, "bilinear", False, None),
]


def case_id(c):
    return f"{c[3]}-{c[0]}-size{c[1]}-scale{c[2]}-align{c[4]}-rec{c[5]}"


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_interpolate_against_numpy(rng, dtype, case):
    shape, size, scale, mode, align, recompute = case
    ctx = Ctx(rng, dtype=dname(dtype), case=case)
    x = randn(rng, shape, dtype)
    before = snapshot(x)
    y = rudnn.interpolate(x, size, scale, mode, align, recompute)
    assert isinstance(y, np.ndarray) and y.flags.c_contiguous
    mats = matrices(shape, size, scale, mode.replace("_", "-"), align, recompute)
    verify(ctx, "interpolate", y, apply(x, mats), dtype)
    assert rudnn.interpolate_output_shape(shape, size, scale, mode, align, recompute) == y.shape
    assert_unchanged(ctx, before, [x])
    dy = randn(rng, y.shape, dtype)
    dx = rudnn.interpolate_backward(dy, shape, size, scale, mode, align, recompute)
    verify(ctx, "interpolate_backward", dx, apply(dy, mats, transpose=True), dtype)
    # deterministic=False is the same gather on the CPU
    np.testing.assert_array_equal(
        rudnn.interpolate_backward(dy, shape, size, scale, mode, align, recompute, deterministic=False), dx)


# ---- antialias (bilinear and bicubic) -----------------------------------------------------------


def aa_filter(x, cubic):
    x = np.abs(x)
    if not cubic:
        return np.maximum(0.0, 1.0 - x)
    a = -0.5
    return np.where(x < 1, ((a + 2) * x - (a + 3)) * x * x + 1,
                    np.where(x < 2, (((x - 5) * x + 8) * x - 4) * a, 0.0))


def aa_axis_matrix(n_in, n_out, cubic, align, scale):
    """torch's antialias rule along one axis: output o averages the inputs j within the support
    of center = r (o + 0.5) under the filter stretched by r >= 1, normalised to sum 1."""
    if align:
        r = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    else:
        r = 1.0 / scale if scale is not None else n_in / n_out
    support = (2.0 if cubic else 1.0) * max(r, 1.0)
    M = np.zeros((n_out, n_in))
    for o in range(n_out):
        center = r * (o + 0.5)
        lo, hi = max(int(center - support + 0.5), 0), min(int(center + support + 0.5), n_in)
        w = aa_filter((np.arange(lo, hi) + 0.5 - center) / max(r, 1.0), cubic)
        M[o, lo:hi] = w / w.sum()
    return M


AA_CASES = [
    # (input shape, size, scale_factor, mode, align_corners, recompute)
    ((2, 3, 16, 18), None, 0.5, "bilinear", None, None),
    ((2, 3, 16, 18), None, 0.5, "bicubic", None, None),
    ((1, 2, 18, 17), None, 1 / 3, "bilinear", True, None),
    ((1, 2, 27, 30), None, 0.37, "bicubic", False, None),
    ((1, 2, 27, 30), None, (0.37, 0.61), "bilinear", None, True),
    ((2, 2, 9, 7), None, (1.7, 2.0), "bicubic", None, None),
    ((1, 3, 13, 11), (5, 23), None, "bilinear", True, None),
    ((1, 1, 1, 9), (3, 4), None, "bicubic", None, None),
    ((1, 1, 40, 6), (3, 1), None, "bicubic", True, None),
    ((0, 2, 8, 8), (4, 4), None, "bilinear", None, None),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("case", AA_CASES, ids=case_id)
def test_antialias_against_numpy(rng, dtype, case):
    shape, size, scale, mode, align, recompute = case
    ctx = Ctx(rng, dtype=dname(dtype), case=case)
    x = randn(rng, shape, dtype)
    before = snapshot(x)
    y = rudnn.interpolate(x, size, scale, mode, align, recompute, antialias=True)
    mats = []
    for i in range(2):
        n_in = shape[2 + i]
        if size is not None:
            n_out, s = size[i], None
        else:
            s = scale if isinstance(scale, float) else scale[i]
            n_out, s = int(math.floor(n_in * s)), (None if recompute else s)
        mats.append(aa_axis_matrix(n_in, n_out, mode == "bicubic", bool(align), s))
    verify(ctx, "interpolate antialias", y, apply(x, mats), dtype)
    assert rudnn.interpolate_output_shape(shape, size, scale, mode, align, recompute, True) == y.shape
    assert_unchanged(ctx, before, [x])
    dy = randn(rng, y.shape, dtype)
    dx = rudnn.interpolate_backward(dy, shape, size, scale, mode, align, recompute, True)
    verify(ctx, "interpolate_backward antialias", dx, apply(dy, mats, transpose=True), dtype)
    o = np.full(y.shape, np.nan, dtype)
    assert rudnn.interpolate(x, size, scale, mode, align, recompute, True, out=o) is o
    np.testing.assert_array_equal(o, y)


def test_antialias_channels_last_view(rng):
    ctx = Ctx(rng)
    x = randn(rng, (2, 11, 13, 3), F32).transpose(0, 3, 1, 2)  # channels-last strides
    mats = [aa_axis_matrix(11, 5, False, False, None), aa_axis_matrix(13, 4, False, False, None)]
    verify(ctx, "channels-last", rudnn.interpolate(x, (5, 4), mode="bilinear", antialias=True),
           apply(x, mats), F32)


def test_strided_input_out_and_torch_size_like_sequences(rng):
    ctx = Ctx(rng)
    base = randn(rng, (2, 3, 8, 10), F32)
    x = base[:, :, ::2, 1:]  # strided view
    ref = apply(x, matrices(x.shape, (7, 5), None, "bilinear", True, None))
    verify(ctx, "strided", rudnn.interpolate(x, (7, 5), mode="bilinear", align_corners=True), ref, F32)
    xt = np.ascontiguousarray(base.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)  # transposed strides
    verify(ctx, "transposed", rudnn.interpolate(xt, [3, 4], mode="bicubic"),
           apply(xt, matrices(xt.shape, [3, 4], None, "bicubic", None, None)), F32)
    o = np.full((2, 3, 7, 5), np.nan, F32)
    assert rudnn.interpolate(x, (7, 5), mode="area", out=o) is o
    np.testing.assert_array_equal(o, rudnn.interpolate(x, (7, 5), mode="area"))
    d = np.full(x.shape, np.nan, F32)
    assert rudnn.interpolate_backward(o, list(x.shape), (7, 5), mode="area", out=d) is d
    np.testing.assert_array_equal(d, rudnn.interpolate_backward(o, x.shape, (7, 5), mode="area"))


def test_large_values_and_bicubic_overshoot(rng):
    ctx = Ctx(rng)
    x = randn(rng, (1, 1, 6, 6), F32, scale=1e30)
    verify(ctx, "large", rudnn.interpolate(x, 13, mode="bilinear"),
           apply(x, matrices(x.shape, 13, None, "bilinear", None, None)), F32)
    step = np.zeros((1, 1, 1, 8), F32)
    step[..., 4:] = 1
    y = rudnn.interpolate(step, (1, 20), mode="bicubic")
    assert y.max() > 1 and y.min() < 0, "bicubic overshoots a step, as torch"


def test_errors_name_the_op_and_argument(rng):
    x = randn(rng, (1, 2, 4, 4), F32)
    x3 = randn(rng, (1, 2, 4), F32)
    cases = [
        (rudnn.InvalidArgument, r"^interpolate: mode must be one of 'nearest', 'nearest-exact'",
         lambda: rudnn.interpolate(x, 8, mode="cubic")),
        (rudnn.InvalidArgument, r"^interpolate: ", lambda: rudnn.interpolate(x3, 8, mode="bilinear")),
        (rudnn.InvalidArgument, r"^interpolate: ", lambda: rudnn.interpolate(x, mode="bilinear")),
        (rudnn.InvalidArgument, r"^interpolate: ", lambda: rudnn.interpolate(x, 8, 2.0)),
        (rudnn.InvalidArgument, r"^interpolate: ", lambda: rudnn.interpolate(x, (8, 8, 8))),
        (rudnn.InvalidArgument, r"^interpolate: ", lambda: rudnn.interpolate(x, 0)),
        (rudnn.InvalidArgument, r"^interpolate: ", lambda: rudnn.interpolate(x, None, -1.0)),
        (rudnn.InvalidArgument, r"^interpolate: ", lambda: rudnn.interpolate(x, None, float("nan"))),
        (rudnn.InvalidArgument, r"^interpolate: ", lambda: rudnn.interpolate(x, None, 0.1)),
        (rudnn.InvalidArgument, r"^interpolate: ", lambda: rudnn.interpolate(x, 8, None, "nearest", False)),
        (rudnn.InvalidArgument, r"^interpolate: ", lambda: rudnn.interpolate(x, 8, None, "area", True)),
        (rudnn.InvalidArgument, r"^interpolate: ",
         lambda: rudnn.interpolate(x, 8, None, "bilinear", None, True)),
        (rudnn.InvalidArgument, r"^interpolate: align_corners must be a bool",
         lambda: rudnn.interpolate(x, 8, None, "bilinear", 1)),
        (rudnn.InvalidArgument, r"^interpolate: recompute_scale_factor must be a bool",
         lambda: rudnn.interpolate(x, None, 2.0, "bilinear", None, "yes")),
        (rudnn.InvalidArgument, r"^interpolate: scale_factor must be a number",
         lambda: rudnn.interpolate(x, None, True)),
        (rudnn.InvalidArgument, r"^interpolate: scale_factor must be a number or a sequence",
         lambda: rudnn.interpolate(x, None, "2")),
        (rudnn.InvalidArgument, r"^interpolate: size element must be an int",
         lambda: rudnn.interpolate(x, (8, 8.0))),
        (rudnn.InvalidArgument, r"^interpolate: input is None", lambda: rudnn.interpolate(None, 8)),
        (rudnn.ShapeMismatch, r"^interpolate: ", lambda: rudnn.interpolate(x[0, 0], 8)),
        (rudnn.InvalidArgument, r"^interpolate: ", lambda: rudnn.interpolate(np.zeros((1, 0, 4, 4), F32), 8)),
        (rudnn.DTypeMismatch, r"^interpolate: ", lambda: rudnn.interpolate(x.astype(np.int32), 8)),
        (rudnn.InvalidArgument, r"^interpolate: options.antialias is set with mode nearest",
         lambda: rudnn.interpolate(x, 8, antialias=True)),
        (rudnn.InvalidArgument, r"^interpolate: options.antialias is set with mode area",
         lambda: rudnn.interpolate(x, 2, mode="area", antialias=True)),
        (rudnn.InvalidArgument, r"^interpolate: options.mode bilinear takes 4-d",
         lambda: rudnn.interpolate(x3, 2, mode="bilinear", antialias=True)),
        (rudnn.InvalidArgument, r"^interpolate: antialias must be a bool",
         lambda: rudnn.interpolate(x, 8, mode="bilinear", antialias=1)),
        (rudnn.InvalidArgument, r"^interpolate_backward: options.antialias is set with mode linear",
         lambda: rudnn.interpolate_backward(x3, (1, 2, 4), 4, mode="linear", antialias=True)),
        (rudnn.ShapeMismatch, r"^interpolate: ", lambda: rudnn.interpolate(x, 8, out=np.zeros((1, 2, 8, 7), F32))),
        (rudnn.DTypeMismatch, r"^interpolate: ", lambda: rudnn.interpolate(x, 8, out=np.zeros((1, 2, 8, 8), F16))),
        (rudnn.InvalidArgument, r"^interpolate: ", lambda: rudnn.interpolate(x, 4, out=x)),
        (rudnn.ShapeMismatch, r"^interpolate_backward: ",
         lambda: rudnn.interpolate_backward(x, (1, 2, 4, 4), 8, mode="bilinear")),
        (rudnn.InvalidArgument, r"^interpolate_backward: input_size must be a sequence of ints",
         lambda: rudnn.interpolate_backward(x, 4, 8)),
        (rudnn.InvalidArgument, r"^interpolate_backward: deterministic must be a bool",
         lambda: rudnn.interpolate_backward(x, (1, 2, 2, 2), 4, deterministic=None)),
    ]
    for exc, pattern, call in cases:
        with pytest.raises(exc, match=pattern):
            call()
