"""CPU tests of the pooling family through the rudnn package: max_pool (values and indices)
and avg_pool (count_include_pad, divisor_override, ceil_mode), adaptive max / average pooling
and LP pooling in 1-D, 2-D and 3-D against NumPy float64 references written here; every
backward pass against finite differences of the
forward in float64; torch's option spelling (an int for every axis, stride None); out= (written
in place, refused when wrong); inputs left unchanged; every error path reaching Python as the
rudnn.Error subclass naming the op and the argument. Inputs are random with a fresh seed per
run (printed in every failure message); RUDNN_TEST_SEED=<int> replays one.
"""

import itertools

import numpy as np
import pytest
from support import F16, F32, Ctx, assert_unchanged, check, f64, randn, snapshot

import rudnn

F64 = np.float64
DTYPES = [F32, F16, F64]


def dname(dtype):
    return np.dtype(dtype).name


def verify(ctx, what, got, ref, dtype):
    if dtype != F64:
        check(ctx, what, got, ref, dtype)
        return
    got = np.asarray(got)
    assert got.dtype == F64 and got.shape == ref.shape, ctx.msg(f"{what}: {got.dtype} {got.shape}")
    if ref.size:
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12, err_msg=ctx.msg(what))


# ---- NumPy float64 reference ---------------------------------------------------------------------


def out_size(n, k, s, p, d, ceil):
    """torch's pooling_output_shape."""
    extent = n + 2 * p - d * (k - 1) - 1
    o = (extent + (s - 1 if ceil else 0)) // s + 1
    if ceil and (o - 1) * s >= n + p:
        o -= 1
    return o


def ref_pool(x, kind, k, s, p, d, ceil, count_include_pad=True, divisor=None):
    """(out, indices) for "max" (indices flat within each (n, c) plane), out for "avg"."""
    x = f64(x)
    N, C, sp = x.shape[0], x.shape[1], x.shape[2:]
    r = len(sp)
    osz = tuple(out_size(sp[i], k[i], s[i], p[i], d[i], ceil) for i in range(r))
    out = np.zeros((N, C) + osz)
    idx = np.zeros((N, C) + osz, np.int64)
    for o in np.ndindex(*osz):
        start = [o[i] * s[i] - p[i] for i in range(r)]
        taps = [[start[i] + j * d[i] for j in range(k[i])] for i in range(r)]
        best = np.full((N, C), -np.inf)
        where = np.full((N, C), -1, np.int64)
        total = np.zeros((N, C))
        valid = 0
        for pos in itertools.product(*taps):
            if not all(0 <= pos[i] < sp[i] for i in range(r)):
                continue
            valid += 1
            v = x[(slice(None), slice(None)) + pos]
            total += v
            take = (v > best) | np.isnan(v)
            best = np.where(take, v, best)
            where = np.where(take, np.ravel_multi_index(pos, sp), where)
        if kind == "max":
            out[(slice(None), slice(None)) + o] = best
            idx[(slice(None), slice(None)) + o] = where
            continue
        if divisor is not None:
            div = divisor
        elif count_include_pad:
            div = np.prod([min(start[i] + k[i], sp[i] + p[i]) - start[i] for i in range(r)])
        else:
            div = valid
        out[(slice(None), slice(None)) + o] = total / div
    return (out, idx) if kind == "max" else out


def expand(v, r, default):
    if v is None:
        return list(default)
    return [v] * r if isinstance(v, int) else list(v)


def directional_check(ctx, what, f, x, grad, dy, h=1e-6, rtol=1e-6):
    """<dy, (f(x + h u) - f(x - h u)) / 2h> equals <grad, u> for a random direction u."""
    u = np.random.default_rng(ctx.seed).standard_normal(x.shape)
    numeric = float(np.sum(dy * (f64(f(x + h * u)) - f64(f(x - h * u))) / (2 * h)))
    analytic = float(np.sum(f64(grad) * u))
    assert abs(numeric - analytic) <= rtol * max(1.0, abs(analytic)) + 1e-6, ctx.msg(
        f"{what}: directional derivative {analytic!r}, finite differences {numeric!r}"
    )


# (input shape, kernel, stride, padding, dilation, ceil_mode)
CASES = [
    ((2, 3, 17), 3, None, 1, 1, False),
    ((1, 2, 16), 4, 3, 2, 2, True),
    ((2, 2, 9, 11), 3, 2, 1, 1, False),
    ((2, 2, 9, 11), (2, 3), (2, 1), (1, 0), (2, 1), True),
    ((1, 3, 7, 8), 2, None, 0, 1, True),
    ((1, 2, 5, 6, 7), 3, 2, 1, 1, False),
    ((1, 1, 6, 5, 4), (2, 3, 2), (1, 2, 2), (1, 1, 0), (1, 1, 2), True),
    ((0, 3, 8, 8), 2, None, 0, 1, False),
]


def case_id(c):
    return f"{c[0]}-k{c[1]}-s{c[2]}-p{c[3]}-d{c[4]}-{'ceil' if c[5] else 'floor'}"


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_max_pool_against_numpy(rng, dtype, case):
    shape, k, s, p, d, ceil = case
    ctx = Ctx(rng, dtype=dname(dtype), case=case_id(case))
    r = len(shape) - 2
    x = randn(rng, shape, dtype)
    before = snapshot(x)
    out, indices = rudnn.max_pool(x, k, s, p, d, ceil)
    ref, ref_idx = ref_pool(x, "max", expand(k, r, ()), expand(s, r, expand(k, r, ())), expand(p, r, ()),
                            expand(d, r, ()), ceil)
    verify(ctx, "max_pool", out, ref, dtype)
    assert indices.dtype == np.int64, ctx.msg(f"indices dtype {indices.dtype}")
    np.testing.assert_array_equal(indices, ref_idx, err_msg=ctx.msg("max_pool indices"))
    assert_unchanged(ctx, before, [x])


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool_against_numpy(rng, dtype, case, count_include_pad):
    shape, k, s, p, _, ceil = case
    ctx = Ctx(rng, dtype=dname(dtype), case=case_id(case), count_include_pad=count_include_pad)
    r = len(shape) - 2
    x = randn(rng, shape, dtype)
    kk = expand(k, r, ())
    args = (kk, expand(s, r, kk), expand(p, r, ()), [1] * r, ceil)
    y = rudnn.avg_pool(x, k, s, p, ceil, count_include_pad)
    verify(ctx, "avg_pool", y, ref_pool(x, "avg", *args, count_include_pad=count_include_pad), dtype)
    divisor = int(rng.integers(1, 10))
    y = rudnn.avg_pool(x, k, s, p, ceil, count_include_pad, divisor)
    verify(ctx, "avg_pool divisor_override", y, ref_pool(x, "avg", *args, divisor=divisor), dtype)


def test_max_pool_nan_wins_and_ties_keep_the_first(rng):
    x = np.array([[[1.0, 3.0, 3.0, np.nan, 2.0, np.nan, 0.0, 0.0]]], F32)
    out, idx = rudnn.max_pool(x, 2)
    assert np.array_equal(out, np.array([[[3.0, np.nan, np.nan, 0.0]]], F32), equal_nan=True)
    np.testing.assert_array_equal(idx, [[[1, 3, 5, 6]]])


@pytest.mark.parametrize("case", CASES[:-1], ids=case_id)
def test_backward_matches_finite_differences(rng, case):
    shape, k, s, p, d, ceil = case
    ctx = Ctx(rng, case=case_id(case))
    x = randn(rng, shape, F64)
    out, idx = rudnn.max_pool(x, k, s, p, d, ceil)
    dy = randn(rng, out.shape, F64)
    dx = rudnn.max_pool_backward(dy, idx, x, k, s, p, d, ceil)
    assert dx.shape == x.shape and dx.dtype == F64
    directional_check(ctx, "max_pool_backward", lambda z: rudnn.max_pool(z, k, s, p, d, ceil)[0], x, dx, dy)
    for cip in (True, False):
        y = rudnn.avg_pool(x, k, s, p, ceil, cip)
        dy = randn(rng, y.shape, F64)
        dx = rudnn.avg_pool_backward(dy, x, k, s, p, ceil, cip)
        directional_check(ctx, f"avg_pool_backward cip={cip}", lambda z: rudnn.avg_pool(z, k, s, p, ceil, cip), x,
                          dx, dy)


@pytest.mark.parametrize("dtype", [F32, F16], ids=dname)
def test_backward_low_precision_against_float64(rng, dtype):
    ctx = Ctx(rng, dtype=dname(dtype))
    x = randn(rng, (2, 3, 10, 9), dtype)
    out, idx = rudnn.max_pool(x, 3, 2, 1)
    dy = randn(rng, out.shape, dtype)
    ref = rudnn.max_pool_backward(f64(dy), idx, f64(x), 3, 2, 1)
    verify(ctx, "max_pool_backward", rudnn.max_pool_backward(dy, idx, x, 3, 2, 1), ref, dtype)
    y = rudnn.avg_pool(x, 3, 2, 1)
    dy = randn(rng, y.shape, dtype)
    ref = rudnn.avg_pool_backward(f64(dy), f64(x), 3, 2, 1)
    verify(ctx, "avg_pool_backward", rudnn.avg_pool_backward(dy, x, 3, 2, 1), ref, dtype)


def test_strided_inputs_and_torch_spelling(rng):
    ctx = Ctx(rng)
    base = randn(rng, (2, 3, 12, 20), F32)
    x = base[:, :, ::2, 1::2]  # odd strides: read through a dense copy
    np.testing.assert_array_equal(rudnn.avg_pool(x, 2), rudnn.avg_pool(np.ascontiguousarray(x), [2, 2], [2, 2], 0))
    a = rudnn.max_pool(x, (3, 2), None, (1, 0))
    b = rudnn.max_pool(np.ascontiguousarray(x), [3, 2], [3, 2], [1, 0], [1, 1])
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v, err_msg=ctx.msg("strided input"))


def test_out_is_written_in_place(rng):
    x = randn(rng, (2, 2, 8, 8), F32)
    o = np.full((2, 2, 4, 4), np.nan, F32)
    i = np.full((2, 2, 4, 4), -7, np.int64)
    ref_o, ref_i = rudnn.max_pool(x, 2)
    r = rudnn.max_pool(x, 2, out=(o, i))
    assert r[0] is o and r[1] is i
    np.testing.assert_array_equal(o, ref_o)
    np.testing.assert_array_equal(i, ref_i)
    a = np.full((2, 2, 4, 4), np.nan, F32)
    assert rudnn.avg_pool(x, 2, out=a) is a
    np.testing.assert_array_equal(a, rudnn.avg_pool(x, 2))
    dx = np.full(x.shape, np.nan, F32)
    assert rudnn.max_pool_backward(ref_o, ref_i, x, 2, out=dx) is dx
    np.testing.assert_array_equal(dx, rudnn.max_pool_backward(ref_o, ref_i, x, 2))
    assert rudnn.avg_pool_backward(ref_o, x, 2, out=dx) is dx
    np.testing.assert_array_equal(dx, rudnn.avg_pool_backward(ref_o, x, 2))
    with pytest.raises(rudnn.ShapeMismatch, match="^avg_pool: "):
        rudnn.avg_pool(x, 2, out=np.zeros((2, 2, 4, 3), F32))
    ro = np.zeros((2, 2, 4, 4), F32)
    ro.flags.writeable = False
    with pytest.raises(rudnn.InvalidArgument, match="avg_pool: out is read-only"):
        rudnn.avg_pool(x, 2, out=ro)
    with pytest.raises(rudnn.InvalidArgument, match="max_pool: out must be a tuple of 2"):
        rudnn.max_pool(x, 2, out=o)
    with pytest.raises(rudnn.Error, match="max_pool"):
        rudnn.max_pool(x, 2, out=(o, np.zeros((2, 2, 4, 4), np.int32)))


# ---- adaptive and LP pooling -----------------------------------------------------------------------


def ref_adaptive(x, kind, osz):
    """torch's adaptive windows [floor(o in / out), ceil((o + 1) in / out)) per axis."""
    x = f64(x)
    sp = x.shape[2:]
    out = np.zeros(x.shape[:2] + tuple(osz))
    idx = np.zeros(out.shape, np.int64)
    for o in np.ndindex(*osz):
        lo = [(o[i] * sp[i]) // osz[i] for i in range(len(sp))]
        hi = [-((-(o[i] + 1) * sp[i]) // osz[i]) for i in range(len(sp))]
        win = x[(slice(None), slice(None)) + tuple(slice(a, b) for a, b in zip(lo, hi))]
        flat = win.reshape(win.shape[:2] + (-1,))
        at = (slice(None), slice(None)) + o
        if kind == "avg":
            out[at] = flat.mean(-1)
            continue
        j = np.argmax(flat, -1)  # the first maximum
        out[at] = np.take_along_axis(flat, j[..., None], -1)[..., 0]
        local = np.unravel_index(j, win.shape[2:])
        idx[at] = np.ravel_multi_index(tuple(lo[i] + local[i] for i in range(len(sp))), sp)
    return out, idx


def ref_lp(x, p, k, s, ceil):
    """(sum over the window of x^p)^(1/p), a window clipped by ceil_mode scaled by K / count."""
    x = f64(x)
    r = len(k)
    total = ref_pool(x**p, "avg", k, s, [0] * r, [1] * r, ceil, count_include_pad=False)
    return (total * np.prod(k)) ** (1.0 / p)


ADAPTIVE = [((2, 3, 17), (5,)), ((2, 2, 9, 11), (4, 3)), ((1, 2, 5, 6, 7), (2, 3, 4)), ((1, 2, 3, 4), (5, 6)),
            ((1, 2, 6, 6), (1, 1))]


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("case", ADAPTIVE, ids=str)
def test_adaptive_pooling_against_numpy_and_finite_differences(rng, dtype, case):
    shape, osz = case
    ctx = Ctx(rng, dtype=dname(dtype), case=case)
    x = randn(rng, shape, dtype)
    out, idx = rudnn.adaptive_max_pool(x, osz)
    ref, ref_idx = ref_adaptive(x, "max", osz)
    verify(ctx, "adaptive_max_pool", out, ref, dtype)
    np.testing.assert_array_equal(idx, ref_idx, err_msg=ctx.msg("adaptive_max_pool indices"))
    verify(ctx, "adaptive_avg_pool", rudnn.adaptive_avg_pool(x, osz), ref_adaptive(x, "avg", osz)[0], dtype)
    if len(set(osz)) == 1:  # an int means every spatial axis
        np.testing.assert_array_equal(rudnn.adaptive_avg_pool(x, osz[0]), rudnn.adaptive_avg_pool(x, osz))
    if dtype == F64:
        dy = randn(rng, out.shape, F64)
        dx = rudnn.adaptive_max_pool_backward(dy, idx, x, osz)
        directional_check(ctx, "adaptive_max_pool_backward", lambda z: rudnn.adaptive_max_pool(z, osz)[0], x, dx, dy)
        dx = rudnn.adaptive_avg_pool_backward(dy, x, osz)
        directional_check(ctx, "adaptive_avg_pool_backward", lambda z: rudnn.adaptive_avg_pool(z, osz), x, dx, dy)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("case", [((2, 3, 17), [3], None, False), ((2, 2, 9, 11), [2, 3], [2, 2], True),
                                  ((1, 2, 5, 6, 7), [2, 2, 3], [1, 2, 2], False)], ids=str)
@pytest.mark.parametrize("p", [1.0, 2.0, 3.5])
def test_lp_pool_against_numpy_and_finite_differences(rng, dtype, case, p):
    shape, k, s, ceil = case
    ctx = Ctx(rng, dtype=dname(dtype), case=case, p=p)
    x = np.abs(randn(rng, shape, dtype)) + dtype(0.1)  # positive: x^p defined for every p
    y = rudnn.lp_pool(x, p, k, s, ceil)
    verify(ctx, "lp_pool", y, ref_lp(x, p, k, k if s is None else s, ceil), dtype)
    if dtype == F64:
        dy = randn(rng, y.shape, F64)
        dx = rudnn.lp_pool_backward(dy, x, y, p, k, s, ceil)
        directional_check(ctx, "lp_pool_backward", lambda z: rudnn.lp_pool(z, p, k, s, ceil), x, dx, dy)


def test_adaptive_and_lp_out_and_errors(rng):
    x = randn(rng, (1, 2, 8, 8), F32)
    o, i = np.full((1, 2, 3, 3), np.nan, F32), np.zeros((1, 2, 3, 3), np.int64)
    r = rudnn.adaptive_max_pool(x, 3, out=(o, i))
    assert r[0] is o and r[1] is i
    np.testing.assert_array_equal(o, rudnn.adaptive_max_pool(x, 3)[0])
    a = np.full((1, 2, 3, 3), np.nan, F32)
    assert rudnn.adaptive_avg_pool(x, (3, 3), out=a) is a
    lp = np.full((1, 2, 4, 4), np.nan, F32)
    assert rudnn.lp_pool(np.abs(x), 2, 2, out=lp) is lp
    cases = [
        (rudnn.InvalidArgument, r"^adaptive_max_pool: output_size is None", lambda: rudnn.adaptive_max_pool(x, None)),
        (rudnn.Error, r"^adaptive_avg_pool: ", lambda: rudnn.adaptive_avg_pool(x, (0, 2))),
        (rudnn.Error, r"^adaptive_avg_pool: ", lambda: rudnn.adaptive_avg_pool(x, (2, 2, 2))),
        (rudnn.InvalidArgument, r"^lp_pool: norm_type must be a number", lambda: rudnn.lp_pool(x, True, 2)),
        (rudnn.InvalidArgument, r"^lp_pool: norm_type must be a number", lambda: rudnn.lp_pool(x, "2", 2)),
        (rudnn.Error, r"^lp_pool: ", lambda: rudnn.lp_pool(x, 0.0, 2)),
        (rudnn.Error, r"^lp_pool: ", lambda: rudnn.lp_pool(x, float("inf"), 2)),
        (rudnn.Error, r"^adaptive_max_pool_backward: ",
         lambda: rudnn.adaptive_max_pool_backward(o, i.astype(np.int32), x, 3)),
        (rudnn.Error, r"^lp_pool_backward: ", lambda: rudnn.lp_pool_backward(lp, x, lp[..., :3], 2, 2)),
    ]
    for exc, pattern, call in cases:
        with pytest.raises(exc, match=pattern):
            call()


def test_errors_name_the_op_and_argument(rng):
    x = randn(rng, (1, 2, 8, 8), F32)
    cases = [
        (rudnn.InvalidArgument, r"^max_pool: kernel_size is None", lambda: rudnn.max_pool(x, None)),
        (rudnn.InvalidArgument, r"^max_pool: ceil_mode must be a bool", lambda: rudnn.max_pool(x, 2, ceil_mode=1)),
        (rudnn.InvalidArgument, r"^max_pool: stride must be an int or a sequence", lambda: rudnn.max_pool(x, 2, "2")),
        (rudnn.InvalidArgument, r"^avg_pool: kernel_size element must be an int", lambda: rudnn.avg_pool(x, [2, 2.5])),
        (rudnn.InvalidArgument, r"^avg_pool: padding must be an int", lambda: rudnn.avg_pool(x, 2, 2, True)),
        (rudnn.InvalidArgument, r"^avg_pool: divisor_override is 0", lambda: rudnn.avg_pool(x, 2, divisor_override=0)),
        (rudnn.InvalidArgument, r"^avg_pool: count_include_pad must be a bool",
         lambda: rudnn.avg_pool(x, 2, count_include_pad=1)),
        (rudnn.Error, r"^max_pool: ", lambda: rudnn.max_pool(x, [2, 2, 2])),
        (rudnn.Error, r"^max_pool: ", lambda: rudnn.max_pool(x, 0)),
        (rudnn.Error, r"^max_pool: ", lambda: rudnn.max_pool(x, 2, padding=2)),
        (rudnn.Error, r"^avg_pool: ", lambda: rudnn.avg_pool(x, 2, divisor_override=-3)),
        (rudnn.Error, r"^max_pool: ", lambda: rudnn.max_pool(x[0, 0], 2)),
        (rudnn.Error, r"^avg_pool: ", lambda: rudnn.avg_pool(x, 9)),
        (rudnn.DTypeMismatch, r"^max_pool: input", lambda: rudnn.max_pool(x.astype(np.int32), 2)),
        (rudnn.InvalidArgument, r"^max_pool: input is None", lambda: rudnn.max_pool(None, 2)),
    ]
    out, idx = rudnn.max_pool(x, 2)
    cases += [
        (rudnn.Error, r"^max_pool_backward: ", lambda: rudnn.max_pool_backward(out, idx.astype(np.int32), x, 2)),
        (rudnn.Error, r"^max_pool_backward: ", lambda: rudnn.max_pool_backward(out[..., :3], idx, x, 2)),
        (rudnn.Error, r"^max_pool_backward: ", lambda: rudnn.max_pool_backward(out.astype(F16), idx, x, 2)),
        (rudnn.Error, r"^avg_pool_backward: ", lambda: rudnn.avg_pool_backward(out, x, 3)),
    ]
    for exc, pattern, call in cases:
        with pytest.raises(exc, match=pattern):
            call()
