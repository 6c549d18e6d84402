"""CPU tests of the grid_sample family through the rudnn package: grid_sample in 2-D and 3-D
(bilinear, nearest, bicubic; zeros, border, reflection; align_corners) and affine_grid
against NumPy float64 references written here (torch's definitions); the gradients of both
(input and grid; theta) against finite differences of the forward in float64; out= (both
gradients, either skipped with None); errors reaching Python as the rudnn.Error subclass that
names the op and the argument. Inputs are random with a fresh seed per run (printed in every
failure message); RUDNN_TEST_SEED=<int> replays one.
"""

import itertools

import numpy as np
import pytest
from support import F16, F32, Ctx, assert_unchanged, check, f64, randn, snapshot

import rudnn

F64 = np.float64
DTYPES = [F32, F16, F64]
MODES = ["bilinear", "nearest", "bicubic"]
PADDINGS = ["zeros", "border", "reflection"]


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


# ---- NumPy float64 references (torch's GridSampler definitions) -----------------------------------


def unnormalize(c, size, align):
    return (c + 1) / 2 * (size - 1) if align else ((c + 1) * size - 1) / 2


def reflect(c, twice_low, twice_high):
    if twice_low == twice_high:
        return np.zeros_like(c)
    lo, span = twice_low / 2, (twice_high - twice_low) / 2
    c = np.abs(c - lo)
    extra = np.fmod(c, span)
    flips = np.floor(c / span)
    return np.where(flips % 2 == 0, extra + lo, span - extra + lo)


def pad_coordinate(c, size, padding, align):
    if padding == "border":
        return np.clip(c, 0, size - 1)
    if padding == "reflection":
        c = reflect(c, 0, 2 * (size - 1)) if align else reflect(c, -1, 2 * size - 1)
        return np.clip(c, 0, size - 1)
    return c


def gather(xn, idx, sizes):
    """xn [C, *S] at integer positions idx (one array per axis): [C, *O], zero outside."""
    valid = np.ones(idx[0].shape, bool)
    for i, s in zip(idx, sizes):
        valid &= (i >= 0) & (i < s)
    clipped = tuple(np.clip(i, 0, s - 1).astype(np.int64) for i, s in zip(idx, sizes))
    return np.where(valid, xn[(slice(None),) + clipped], 0.0)


def cubic_weights(t, A=-0.75):
    def near(u):
        return ((A + 2) * u - (A + 3)) * u * u + 1

    def far(u):
        return ((A * u - 5 * A) * u + 8 * A) * u - 4 * A

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def ref_grid_sample(x, grid, mode, padding, align):
    x, g = f64(x), f64(grid)
    N, C, S = x.shape[0], x.shape[1], x.shape[2:]
    r = len(S)
    out = np.zeros((N, C) + g.shape[1:-1])
    for n in range(N):
        raw = [unnormalize(g[n, ..., r - 1 - i], S[i], align) for i in range(r)]  # per spatial axis
        if mode == "bicubic":
            base = [np.floor(c) for c in raw]
            w = [cubic_weights(c - b) for c, b in zip(raw, base)]
            for taps in itertools.product(range(4), repeat=r):
                pos = [pad_coordinate(base[i] - 1 + taps[i], S[i], padding, align) for i in range(r)]
                weight = np.prod([w[i][taps[i]] for i in range(r)], axis=0)
                out[n] += weight * gather(x[n], pos, S)
            continue
        coords = [pad_coordinate(c, S[i], padding, align) for i, c in enumerate(raw)]
        if mode == "nearest":
            out[n] = gather(x[n], [np.rint(c) for c in coords], S)
            continue
        base = [np.floor(c) for c in coords]
        frac = [c - b for c, b in zip(coords, base)]
        for corner in itertools.product((0, 1), repeat=r):
            weight = np.prod([frac[i] if corner[i] else 1 - frac[i] for i in range(r)], axis=0)
            out[n] += weight * gather(x[n], [base[i] + corner[i] for i in range(r)], S)
    return out


def base_coords(n, align):
    if n == 1:
        return np.zeros(1)
    return np.linspace(-1.0, 1.0, n) if align else (np.arange(n) * 2 + 1) / n - 1


def ref_affine_grid(theta, size, align):
    theta = f64(theta)
    spatial = size[2:]
    axes = [base_coords(s, align) for s in spatial]  # D, H, W order
    mesh = np.meshgrid(*axes, indexing="ij")
    homog = np.stack([m for m in reversed(mesh)] + [np.ones(mesh[0].shape)], -1)  # x, y, (z), 1
    return np.einsum("n...k,nik->n...i", np.broadcast_to(homog, (size[0],) + homog.shape), theta)


def directional_check(ctx, what, f, args, grads, dy, h=1e-6, rtol=1e-5):
    """<dy, f(args + h u) - f(args - h u)> / 2h equals sum <grad_i, u_i> (args: float64 arrays)."""
    gen = np.random.default_rng(ctx.seed)
    us = [gen.standard_normal(a.shape) for a in args]
    plus = f64(f(*[a + h * u for a, u in zip(args, us)]))
    minus = f64(f(*[a - h * u for a, u in zip(args, us)]))
    numeric = float(np.sum(dy * (plus - minus)) / (2 * h))
    analytic = float(sum(np.sum(f64(g) * u) for g, u in zip(grads, us)))
    assert abs(numeric - analytic) <= rtol * max(1.0, abs(analytic)) + 1e-5, ctx.msg(
        f"{what}: directional derivative {analytic!r}, finite differences {numeric!r}"
    )


def random_grid(rng, shape, dtype, spread=1.2):
    return rng.uniform(-spread, spread, size=shape).astype(dtype)


# ---- grid_sample -----------------------------------------------------------------------------------

SHAPES = [
    ((2, 3, 5, 7), (2, 4, 6, 2)),
    ((1, 2, 1, 1), (1, 3, 2, 2)),
    ((1, 1, 4, 3, 5), (1, 2, 3, 4, 3)),
    ((0, 2, 4, 4), (0, 3, 3, 2)),
    ((2, 0, 4, 4), (2, 3, 3, 2)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_against_numpy(rng, dtype, shapes, mode, padding, align):
    xs, gs = shapes
    if mode == "bicubic" and len(xs) == 5:
        pytest.skip("bicubic is 2-D only (its refusal is tested below)")
    ctx = Ctx(rng, dtype=dname(dtype), shapes=shapes, mode=mode, padding=padding, align=align)
    x = randn(rng, xs, dtype)
    grid = random_grid(rng, gs, dtype)
    before = snapshot(x, grid)
    y = rudnn.grid_sample(x, grid, mode, padding, align)
    assert isinstance(y, np.ndarray)
    verify(ctx, "grid_sample", y, ref_grid_sample(x, grid, mode, padding, align), dtype)
    assert_unchanged(ctx, before, [x, grid])


@pytest.mark.parametrize("shapes", SHAPES[:3], ids=str)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_backward_matches_finite_differences(rng, shapes, mode, padding, align):
    xs, gs = shapes
    if mode == "bicubic" and len(xs) == 5:
        pytest.skip("bicubic is 2-D only")
    ctx = Ctx(rng, shapes=shapes, mode=mode, padding=padding, align=align)
    x = randn(rng, xs, F64)
    grid = random_grid(rng, gs, F64)
    dy = randn(rng, xs[:2] + gs[1:-1], F64)
    dx, dgrid = rudnn.grid_sample_backward(dy, x, grid, mode, padding, align)
    assert dx.shape == x.shape and dgrid.shape == grid.shape
    if mode == "nearest":
        assert not np.any(dgrid), ctx.msg("nearest: the grid gradient must be zero")
        directional_check(ctx, "dinput", lambda a: rudnn.grid_sample(a, grid, mode, padding, align), [x], [dx], dy)
    else:
        directional_check(ctx, "dinput, dgrid", lambda a, b: rudnn.grid_sample(a, b, mode, padding, align),
                          [x, grid], [dx, dgrid], dy)


@pytest.mark.parametrize("dtype", [F32, F16], ids=dname)
def test_grid_sample_backward_low_precision_against_float64(rng, dtype):
    ctx = Ctx(rng, dtype=dname(dtype))
    x = randn(rng, (2, 3, 6, 5), dtype)
    grid = random_grid(rng, (2, 4, 4, 2), dtype)
    dy = randn(rng, (2, 3, 4, 4), dtype)
    ref = rudnn.grid_sample_backward(f64(dy), f64(x), f64(grid), "bilinear", "border", True)
    got = rudnn.grid_sample_backward(dy, x, grid, "bilinear", "border", True)
    verify(ctx, "dinput", got[0], f64(ref[0]), dtype)
    verify(ctx, "dgrid", got[1], f64(ref[1]), dtype)


def test_grid_sample_out_and_skipped_gradients(rng):
    x = randn(rng, (1, 2, 5, 5), F32)
    grid = random_grid(rng, (1, 3, 4, 2), F32)
    o = np.full((1, 2, 3, 4), np.nan, F32)
    assert rudnn.grid_sample(x, grid, out=o) is o
    np.testing.assert_array_equal(o, rudnn.grid_sample(x, grid))
    dy = randn(rng, o.shape, F32)
    dx_ref, dg_ref = rudnn.grid_sample_backward(dy, x, grid)
    dx, dg = np.full(x.shape, np.nan, F32), np.full(grid.shape, np.nan, F32)
    r = rudnn.grid_sample_backward(dy, x, grid, out=(dx, dg))
    assert r[0] is dx and r[1] is dg
    np.testing.assert_array_equal(dx, dx_ref)
    np.testing.assert_array_equal(dg, dg_ref)
    det = rudnn.grid_sample_backward(dy, x, grid, deterministic=True)  # the same sums on the CPU
    np.testing.assert_array_equal(det[0], dx_ref)
    np.testing.assert_array_equal(det[1], dg_ref)
    dg2 = np.full(grid.shape, np.nan, F32)
    rudnn.grid_sample_backward(dy, x, grid, out=(None, dg2))
    np.testing.assert_array_equal(dg2, dg_ref)
    with pytest.raises(rudnn.ShapeMismatch, match="^grid_sample: "):
        rudnn.grid_sample(x, grid, out=np.zeros((1, 2, 4, 3), F32))


def test_non_finite_coordinates_sample_as_zero_with_zeros_padding(rng):
    x = randn(rng, (1, 1, 3, 3), F32) + 5
    grid = np.array([[[[np.nan, 0.0], [np.inf, 0.0], [0.0, -np.inf]]]], F32)
    for mode in MODES:
        np.testing.assert_array_equal(rudnn.grid_sample(x, grid, mode), np.zeros((1, 1, 1, 3), F32))


# ---- affine_grid -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("size", [(2, 3, 4, 5), (1, 1, 1, 6), (2, 1, 3, 1, 4), (0, 2, 3, 3), (1, 2, 0, 3)], ids=str)
@pytest.mark.parametrize("align", [False, True])
def test_affine_grid_against_numpy_and_finite_differences(rng, dtype, size, align):
    ctx = Ctx(rng, dtype=dname(dtype), size=size, align=align)
    r = len(size) - 2
    theta = randn(rng, (size[0], r, r + 1), dtype)
    grid = rudnn.affine_grid(theta, size, align)
    verify(ctx, "affine_grid", grid, ref_affine_grid(theta, size, align), dtype)
    dgrid = randn(rng, grid.shape, dtype)
    dtheta = rudnn.affine_grid_backward(dgrid, list(size), align)
    assert dtheta.shape == theta.shape and dtheta.dtype == dtype
    if dtype == F64:
        directional_check(ctx, "dtheta", lambda t: rudnn.affine_grid(t, size, align), [theta], [dtheta], dgrid)
    else:
        verify(ctx, "affine_grid_backward", dtheta, f64(rudnn.affine_grid_backward(f64(dgrid), size, align)), dtype)


def test_affine_grid_out(rng):
    theta = randn(rng, (2, 2, 3), F32)
    o = np.full((2, 4, 5, 2), np.nan, F32)
    assert rudnn.affine_grid(theta, (2, 1, 4, 5), out=o) is o
    np.testing.assert_array_equal(o, rudnn.affine_grid(theta, (2, 1, 4, 5)))
    d = np.full(theta.shape, np.nan, F32)
    assert rudnn.affine_grid_backward(o, (2, 1, 4, 5), out=d) is d
    np.testing.assert_array_equal(d, rudnn.affine_grid_backward(o, (2, 1, 4, 5)))


def test_errors_name_the_op_and_argument(rng):
    x = randn(rng, (1, 2, 4, 4), F32)
    grid = random_grid(rng, (1, 3, 3, 2), F32)
    theta = randn(rng, (1, 2, 3), F32)
    cases = [
        (rudnn.InvalidArgument, r"^grid_sample: mode must be one of 'bilinear', 'nearest', 'bicubic', got 'linear'",
         lambda: rudnn.grid_sample(x, grid, "linear")),
        (rudnn.InvalidArgument, r"^grid_sample: padding_mode must be one of",
         lambda: rudnn.grid_sample(x, grid, padding_mode="clamp")),
        (rudnn.InvalidArgument, r"^grid_sample: align_corners must be a bool",
         lambda: rudnn.grid_sample(x, grid, align_corners=None)),
        (rudnn.InvalidArgument, r"^grid_sample_backward: mode must be one of",
         lambda: rudnn.grid_sample_backward(x, x, grid, 3)),
        (rudnn.InvalidArgument, r"^grid_sample: grid is None", lambda: rudnn.grid_sample(x, None)),
        (rudnn.InvalidArgument, r"^grid_sample_backward: deterministic must be a bool",
         lambda: rudnn.grid_sample_backward(x[..., :3, :3], x, grid, deterministic=1)),
        (rudnn.DTypeMismatch, r"^grid_sample: ", lambda: rudnn.grid_sample(x, grid.astype(F16))),
        (rudnn.ShapeMismatch, r"^grid_sample: ", lambda: rudnn.grid_sample(x, grid[..., :1])),
        (rudnn.ShapeMismatch, r"^grid_sample: ", lambda: rudnn.grid_sample(x[0], grid)),
        (rudnn.InvalidArgument, r"^grid_sample: ",
         lambda: rudnn.grid_sample(randn(rng, (1, 1, 2, 3, 3), F32), random_grid(rng, (1, 2, 2, 2, 3), F32),
                                   "bicubic")),
        (rudnn.Error, r"^grid_sample_backward: ", lambda: rudnn.grid_sample_backward(x, x, grid)),
        (rudnn.InvalidArgument, r"^affine_grid: size must be a sequence of ints", lambda: rudnn.affine_grid(theta, 4)),
        (rudnn.InvalidArgument, r"^affine_grid: size element must be an int",
         lambda: rudnn.affine_grid(theta, (1, 1, 2.0, 2))),
        (rudnn.Error, r"^affine_grid: ", lambda: rudnn.affine_grid(theta, (1, 1, 4))),
        (rudnn.Error, r"^affine_grid: ", lambda: rudnn.affine_grid(theta, (2, 1, 4, 4))),
        (rudnn.Error, r"^affine_grid: ", lambda: rudnn.affine_grid(theta, (1, 1, 2, 4, 4))),
        (rudnn.Error, r"^affine_grid_backward: ", lambda: rudnn.affine_grid_backward(grid, (1, 1, 4, 4))),
        (rudnn.InvalidArgument, r"^affine_grid_backward: align_corners must be a bool",
         lambda: rudnn.affine_grid_backward(grid, (1, 1, 3, 3), 1)),
    ]
    for exc, pattern, call in cases:
        with pytest.raises(exc, match=pattern):
            call()
