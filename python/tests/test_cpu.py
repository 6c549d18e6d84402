"""CPU tests of the rudnn Python package: every op against an independent NumPy float64
reference, the DLPack / buffer-protocol plumbing (zero-copy, lifetimes), and the error
mapping.

Inputs are random with a fresh seed per run (printed in every failure message); set
RUDNN_TEST_SEED=<int> to replay one.
"""

import ctypes
import gc
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import rudnn

F32, F16 = np.float32, np.float16
FLOAT_DTYPES = [F32, F16]

# Elementwise tolerance |got - ref| <= RTOL * |ref| + ATOL * max|ref| + FLOOR per result dtype:
# ruDNN computes in float32 and rounds once to the result dtype (FLOOR: half a subnormal step
# of float16, where tiny gradients land).
TOL = {F32: (2e-5, 2e-5, 0.0), F16: (2e-3, 2e-3, 2.0**-25)}

SHAPES = [(1, 64), (5, 1), (7, 37), (3, 128), (4, 1000), (2, 3, 24), (0, 16)]


# ---- Helpers --------------------------------------------------------------------------------


class SeededGenerator(np.random.Generator):
    """numpy's default generator, remembering its seed for failure messages."""

    def __init__(self, seed):
        super().__init__(np.random.PCG64(seed))  # what numpy.random.default_rng(seed) builds
        self.seed_value = seed


@pytest.fixture
def rng():
    # A fresh seed per test and run, itself drawn from numpy.random.default_rng().
    seed = int(os.environ.get("RUDNN_TEST_SEED", np.random.default_rng().integers(2**63)))
    return SeededGenerator(seed)


class Ctx:
    """Carries the seed and case name into assertion messages."""

    def __init__(self, rng, **case):
        self.seed = rng.seed_value
        self.case = case

    def msg(self, what):
        return f"{what} (seed={self.seed}, RUDNN_TEST_SEED={self.seed} to replay; case={self.case})"


def check(ctx, what, got, ref, dtype):
    got = np.asarray(got)
    assert got.dtype == np.dtype(dtype), ctx.msg(f"{what}: dtype {got.dtype}, expected {np.dtype(dtype)}")
    assert got.shape == ref.shape, ctx.msg(f"{what}: shape {got.shape}, expected {ref.shape}")
    if ref.size == 0:
        return
    g = got.astype(np.float64)
    nan_ref = np.isnan(ref)
    assert np.array_equal(np.isnan(g), nan_ref), ctx.msg(f"{what}: NaN pattern differs")
    g, r = g[~nan_ref], ref[~nan_ref]
    if r.size == 0:
        return
    rtol, atol, floor = TOL[dtype]
    scale = max(float(np.max(np.abs(r))), 1e-30)
    err = np.abs(g - r)
    bound = rtol * np.abs(r) + atol * scale + floor
    worst = int(np.argmax(err - bound))
    assert np.all(err <= bound), ctx.msg(
        f"{what}: max error {err.max():.3g} (worst element got {g.flat[worst]!r}, ref {r.flat[worst]!r}, "
        f"bound {bound.flat[worst]:.3g})"
    )


def randn(rng, shape, dtype, scale=1.0, offset=0.0):
    return (rng.standard_normal(shape) * scale + offset).astype(dtype)


def f64(a):
    return None if a is None else np.asarray(a).astype(np.float64)


# ---- NumPy float64 references ---------------------------------------------------------------


def ref_layer_norm(x, g, b, eps):
    x = f64(x)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    if g is not None:
        y = y * f64(g)
    if b is not None:
        y = y + f64(b)
    return y


def ref_rms_norm(x, g, eps):
    x = f64(x)
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return y if g is None else y * f64(g)


def ref_softmax(x):
    x = f64(x)
    m = x.max(-1, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(-1, keepdims=True)


def ref_logsumexp(x):
    x = f64(x)
    m = x.max(-1, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(-1, keepdims=True)))[..., 0]


def _ce_rows(logits, targets, ignore_index):
    """Flattened rows, wrapped targets, and masks (ignored, invalid)."""
    C = logits.shape[-1]
    x = f64(logits).reshape(-1, C)
    t = np.asarray(targets).reshape(-1).astype(np.int64)
    ignored = np.zeros(t.shape, bool) if ignore_index is None else (t == ignore_index)
    wrapped = np.where(t < 0, t + C, t)
    invalid = ~ignored & ((wrapped < 0) | (wrapped >= C))
    return x, wrapped, ignored, invalid


def ref_cross_entropy(logits, targets, ignore_index):
    x, t, ignored, invalid = _ce_rows(logits, targets, ignore_index)
    lse = ref_logsumexp(x)
    safe = np.clip(t, 0, x.shape[-1] - 1)
    loss = lse - x[np.arange(x.shape[0]), safe]
    loss = np.where(ignored, 0.0, loss)
    loss = np.where(invalid, np.nan, loss)
    return loss.reshape(np.asarray(targets).shape)


def ref_cross_entropy_backward(logits, targets, dloss, ignore_index):
    x, t, ignored, invalid = _ce_rows(logits, targets, ignore_index)
    p = ref_softmax(x)
    onehot = np.zeros_like(p)
    rows = np.arange(x.shape[0])
    ok = ~ignored & ~invalid
    onehot[rows[ok], t[ok]] = 1.0
    d = np.broadcast_to(f64(dloss), np.asarray(targets).shape).reshape(-1, 1)
    g = d * (p - onehot)
    g[ignored] = 0.0
    g[invalid] = np.nan
    return g.reshape(logits.shape)


def ref_layer_norm_backward(dy, x, g, b, eps):
    x, dy = f64(x), f64(dy)
    H = x.shape[-1]
    mean = x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    gg = np.ones(H) if g is None else f64(g)
    dxhat = dy * gg
    dx = rstd * (dxhat - dxhat.mean(-1, keepdims=True) - xhat * (dxhat * xhat).mean(-1, keepdims=True))
    dgamma = None if g is None else (dy * xhat).reshape(-1, H).sum(0)
    dbeta = None if b is None else dy.reshape(-1, H).sum(0)
    return dx, dgamma, dbeta


def ref_rms_norm_backward(dy, x, g, eps):
    x, dy = f64(x), f64(dy)
    H = x.shape[-1]
    r = 1.0 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    gg = np.ones(H) if g is None else f64(g)
    dxhat = dy * gg
    dx = r * dxhat - x * r**3 * (dxhat * x).mean(-1, keepdims=True)
    dgamma = None if g is None else (dy * x * r).reshape(-1, H).sum(0)
    return dx, dgamma


def ref_softmax_backward(dy, y):
    dy, y = f64(dy), f64(y)
    return y * (dy - (dy * y).sum(-1, keepdims=True))


# ---- Layout variants ------------------------------------------------------------------------


def make_layout(rng, shape, dtype, layout, **kw):
    """An array of `shape` in the given memory layout (values random)."""
    if layout == "contiguous":
        return randn(rng, shape, dtype, **kw)
    if layout == "transposed":  # last axis strided: the op copies it
        base = randn(rng, shape[::-1], dtype, **kw)
        return base.transpose(tuple(range(len(shape)))[::-1])
    if layout == "col_slice":  # every other element of a wider last axis
        base = randn(rng, shape[:-1] + (2 * shape[-1],), dtype, **kw)
        return base[..., ::2]
    if layout == "row_slice":  # every other row: dense rows, row stride 2H
        base = randn(rng, (2 * shape[0],) + shape[1:], dtype, **kw)
        return base[::2]
    if layout == "reversed":  # negative strides: the wrapper copies
        return randn(rng, shape, dtype, **kw)[..., ::-1]
    raise AssertionError(layout)


LAYOUTS = ["contiguous", "transposed", "col_slice", "row_slice", "reversed"]


def snapshot(*arrays):
    return [None if a is None else np.array(a, copy=True) for a in arrays]


def assert_unchanged(ctx, before, arrays):
    for i, (b, a) in enumerate(zip(before, arrays)):
        if a is not None:
            assert np.array_equal(b, a, equal_nan=True), ctx.msg(f"input {i} was modified")


# ---- Forward ops ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("affine", ["none", "gamma", "gamma_beta_f32", "gamma_beta_xdtype"])
def test_layer_norm(rng, dtype, shape, affine):
    ctx = Ctx(rng, dtype=np.dtype(dtype).name, shape=shape, affine=affine)
    H = shape[-1]
    x = randn(rng, shape, dtype, scale=2.0, offset=3.0)
    pdtype = dtype if affine == "gamma_beta_xdtype" else F32
    g = None if affine == "none" else randn(rng, (H,), pdtype, offset=1.0)
    b = randn(rng, (H,), pdtype) if affine.startswith("gamma_beta") else None
    eps = 1e-5
    before = snapshot(x, g, b)
    y = rudnn.layer_norm(x, g, b, eps)
    assert isinstance(y, np.ndarray)
    check(ctx, "layer_norm", y, ref_layer_norm(x, g, b, eps), dtype)
    assert_unchanged(ctx, before, (x, g, b))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("gamma", [None, "f32", "xdtype"])
def test_rms_norm(rng, dtype, shape, gamma):
    ctx = Ctx(rng, dtype=np.dtype(dtype).name, shape=shape, gamma=gamma)
    H = shape[-1]
    x = randn(rng, shape, dtype)
    g = None if gamma is None else randn(rng, (H,), F32 if gamma == "f32" else dtype, offset=1.0)
    eps = 1e-6
    before = snapshot(x, g)
    y = rudnn.rms_norm(x, g, eps)
    check(ctx, "rms_norm", y, ref_rms_norm(x, g, eps), dtype)
    assert_unchanged(ctx, before, (x, g))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("with_gamma", [False, True])
def test_add_rms_norm(rng, dtype, shape, with_gamma):
    ctx = Ctx(rng, dtype=np.dtype(dtype).name, shape=shape, gamma=with_gamma)
    H = shape[-1]
    x = randn(rng, shape, dtype)
    res = randn(rng, shape, dtype)
    g = randn(rng, (H,), F32, offset=1.0) if with_gamma else None
    eps = 1e-6
    before = snapshot(x, res, g)
    s, n = rudnn.add_rms_norm(x, res, g, eps)
    ref_sum = f64(x) + f64(res)
    check(ctx, "add_rms_norm sum", s, ref_sum, dtype)
    # normed reads the sum as rounded to x's dtype.
    check(ctx, "add_rms_norm normed", n, ref_rms_norm(ref_sum.astype(dtype), g, eps), dtype)
    assert_unchanged(ctx, before, (x, res, g))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax(rng, dtype, shape):
    ctx = Ctx(rng, dtype=np.dtype(dtype).name, shape=shape)
    x = randn(rng, shape, dtype, scale=3.0)
    before = snapshot(x)
    y = rudnn.softmax(x)
    check(ctx, "softmax", y, ref_softmax(x), dtype)
    assert_unchanged(ctx, before, (x,))
    assert rudnn.softmax_last_axis is rudnn.softmax


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", SHAPES + [(9,)])
def test_logsumexp(rng, dtype, shape):
    ctx = Ctx(rng, dtype=np.dtype(dtype).name, shape=shape)
    x = randn(rng, shape, dtype, scale=3.0)
    before = snapshot(x)
    y = rudnn.logsumexp(x)
    check(ctx, "logsumexp", y, ref_logsumexp(x), dtype)
    assert y.shape == shape[:-1]
    assert_unchanged(ctx, before, (x,))


def test_softmax_logsumexp_nonfinite_rows():
    x = np.array(
        [[0.0, 1.0, 2.0], [-np.inf, -np.inf, -np.inf], [0.0, np.inf, 1.0], [0.0, np.nan, 1.0]], dtype=F32
    )
    y = rudnn.softmax(x)
    assert np.all(np.isfinite(y[0]))
    assert np.all(np.isnan(y[1:])), y
    lse = rudnn.logsumexp(x)
    assert np.isfinite(lse[0]) and lse[1] == -np.inf and lse[2] == np.inf and np.isnan(lse[3])


def ce_targets(rng, shape, C, tdtype, ignore_index, with_invalid=True):
    """Targets in [-C, C) plus (for signed dtypes) out-of-range values and ignored rows."""
    signed = np.issubdtype(tdtype, np.signedinteger)
    lo = -C if signed else 0
    t = rng.integers(lo, C, size=shape).astype(np.int64)
    flat = t.reshape(-1)
    if flat.size >= 4:
        idx = rng.permutation(flat.size)
        if with_invalid:
            flat[idx[0]] = C + 3  # beyond the last class
            if signed:
                flat[idx[1]] = -C - 2  # still negative after the wrap
        if ignore_index is not None:
            flat[idx[2]] = ignore_index
            flat[idx[3]] = ignore_index
    return t.astype(tdtype)


CE_CASES = [
    # (logits shape, target dtype, ignore_index)
    ((6, 10), np.int64, None),
    ((6, 10), np.int64, -100),
    ((6, 10), np.int32, 3),  # a valid class can be ignored
    ((1, 7), np.int64, None),
    ((5, 1), np.int64, None),
    ((8, 37), np.int32, -1),  # compared before the wrap: -1 is ignored, not class C-1
    ((2, 3, 33), np.int64, -100),
    ((9, 200), np.uint8, 255),
    ((4, 1000), np.uint32, None),
    ((0, 5), np.int64, None),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape,tdtype,ignore_index", CE_CASES)
def test_cross_entropy(rng, dtype, shape, tdtype, ignore_index):
    ctx = Ctx(rng, dtype=np.dtype(dtype).name, shape=shape, tdtype=np.dtype(tdtype).name, ignore=ignore_index)
    C = shape[-1]
    logits = randn(rng, shape, dtype, scale=2.0)
    targets = ce_targets(rng, shape[:-1], C, tdtype, ignore_index)
    before = snapshot(logits, targets)
    loss = rudnn.cross_entropy(logits, targets, ignore_index=ignore_index)
    ref = ref_cross_entropy(logits, targets, ignore_index)
    check(ctx, "cross_entropy", loss, ref, F32)
    if ignore_index is not None:
        ig = targets == np.asarray(ignore_index).astype(targets.dtype)
        assert np.all(loss[ig] == 0), ctx.msg("ignored rows must have loss 0")
    assert_unchanged(ctx, before, (logits, targets))


def test_cross_entropy_negative_targets_wrap(rng):
    logits = randn(rng, (4, 6), F32)
    t_neg = np.array([-1, -6, -3, 2], dtype=np.int64)
    t_pos = np.array([5, 0, 3, 2], dtype=np.int64)
    np.testing.assert_array_equal(rudnn.cross_entropy(logits, t_neg), rudnn.cross_entropy(logits, t_pos))
    bad = rudnn.cross_entropy(logits, np.array([6, -7, 100, 0], dtype=np.int64))
    assert np.all(np.isnan(bad[:3])) and np.isfinite(bad[3])


# ---- Backward ops ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("affine", ["none", "gamma", "gamma_beta", "gamma_beta_xdtype"])
def test_layer_norm_backward(rng, dtype, shape, affine):
    ctx = Ctx(rng, dtype=np.dtype(dtype).name, shape=shape, affine=affine)
    H = shape[-1]
    x = randn(rng, shape, dtype, offset=1.0)
    dy = randn(rng, shape, dtype)
    pdtype = dtype if affine == "gamma_beta_xdtype" else F32
    g = None if affine == "none" else randn(rng, (H,), pdtype, offset=1.0)
    b = randn(rng, (H,), pdtype) if affine.startswith("gamma_beta") else None
    eps = 1e-5
    before = snapshot(dy, x, g, b)
    dx, dg, db = rudnn.layer_norm_backward(dy, x, g, b, eps)
    rdx, rdg, rdb = ref_layer_norm_backward(dy, x, g, b, eps)
    check(ctx, "layer_norm_backward dx", dx, rdx, dtype)
    if g is None:
        assert dg is None
    else:
        check(ctx, "layer_norm_backward dgamma", dg, rdg, pdtype)
    if b is None:
        assert db is None
    else:
        check(ctx, "layer_norm_backward dbeta", db, rdb, pdtype)
    assert_unchanged(ctx, before, (dy, x, g, b))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("gamma", [None, "f32", "xdtype"])
def test_rms_norm_backward(rng, dtype, shape, gamma):
    ctx = Ctx(rng, dtype=np.dtype(dtype).name, shape=shape, gamma=gamma)
    H = shape[-1]
    x = randn(rng, shape, dtype)
    dy = randn(rng, shape, dtype)
    pdtype = F32 if gamma == "f32" else dtype
    g = None if gamma is None else randn(rng, (H,), pdtype, offset=1.0)
    eps = 1e-6
    before = snapshot(dy, x, g)
    dx, dg = rudnn.rms_norm_backward(dy, x, g, eps)
    rdx, rdg = ref_rms_norm_backward(dy, x, g, eps)
    check(ctx, "rms_norm_backward dx", dx, rdx, dtype)
    if g is None:
        assert dg is None
    else:
        check(ctx, "rms_norm_backward dgamma", dg, rdg, pdtype)
    assert_unchanged(ctx, before, (dy, x, g))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_backward(rng, dtype, shape):
    ctx = Ctx(rng, dtype=np.dtype(dtype).name, shape=shape)
    y = rudnn.softmax(randn(rng, shape, dtype, scale=2.0))  # a result fed back as an input
    dy = randn(rng, shape, dtype)
    before = snapshot(dy, y)
    dx = rudnn.softmax_backward(dy, y)
    check(ctx, "softmax_backward", dx, ref_softmax_backward(dy, y), dtype)
    assert_unchanged(ctx, before, (dy, y))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape,tdtype,ignore_index", CE_CASES)
@pytest.mark.parametrize("dloss_kind", ["random", "broadcast_scalar"])
def test_cross_entropy_backward(rng, dtype, shape, tdtype, ignore_index, dloss_kind):
    ctx = Ctx(rng, dtype=np.dtype(dtype).name, shape=shape, tdtype=np.dtype(tdtype).name, ignore=ignore_index,
              dloss=dloss_kind)
    C = shape[-1]
    logits = randn(rng, shape, dtype, scale=2.0)
    targets = ce_targets(rng, shape[:-1], C, tdtype, ignore_index)
    if dloss_kind == "random":
        dloss = rng.standard_normal(shape[:-1]).astype(F32)
    else:  # stride-0 view, as a mean reduction's upstream gradient
        dloss = np.broadcast_to(np.float32(0.25), shape[:-1])
    before = snapshot(logits, targets, dloss)
    d = rudnn.cross_entropy_backward(logits, targets, dloss, ignore_index=ignore_index)
    check(ctx, "cross_entropy_backward", d, ref_cross_entropy_backward(logits, targets, dloss, ignore_index), dtype)
    assert_unchanged(ctx, before, (logits, targets, dloss))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape,tdtype,ignore_index", CE_CASES)
def test_cross_entropy_with_grad(rng, dtype, shape, tdtype, ignore_index):
    ctx = Ctx(rng, dtype=np.dtype(dtype).name, shape=shape, tdtype=np.dtype(tdtype).name, ignore=ignore_index)
    C = shape[-1]
    logits = randn(rng, shape, dtype, scale=2.0)
    targets = ce_targets(rng, shape[:-1], C, tdtype, ignore_index)
    rows = int(np.prod(shape[:-1]))
    scale = 1.0 / max(rows, 1)
    before = snapshot(logits, targets)
    loss, d = rudnn.cross_entropy_with_grad(logits, targets, grad_scale=scale, ignore_index=ignore_index)
    check(ctx, "cross_entropy_with_grad loss", loss, ref_cross_entropy(logits, targets, ignore_index), F32)
    dref = ref_cross_entropy_backward(logits, targets, np.full(shape[:-1], scale), ignore_index)
    check(ctx, "cross_entropy_with_grad dlogits", d, dref, dtype)
    # An upstream gradient per row, as an array.
    dloss = rng.standard_normal(shape[:-1]).astype(F32)
    loss2, d2 = rudnn.cross_entropy_with_grad(logits, targets, dloss, ignore_index)
    check(ctx, "cross_entropy_with_grad (per row) loss", loss2, ref_cross_entropy(logits, targets, ignore_index), F32)
    check(ctx, "cross_entropy_with_grad (per row) dlogits", d2,
          ref_cross_entropy_backward(logits, targets, dloss, ignore_index), dtype)
    assert_unchanged(ctx, before, (logits, targets))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_scale_unless_one(rng, dtype):
    ctx = Ctx(rng, dtype=np.dtype(dtype).name)
    x = randn(rng, (5, 33), dtype)
    original = x.copy()
    assert rudnn.scale_unless_one(x, np.ones(1, F32)) is x
    assert x.tobytes() == original.tobytes(), ctx.msg("scale 1 changed x")
    rudnn.scale_unless_one(x, np.array([-0.5], F32))
    expected = (original.astype(F32) * np.float32(-0.5)).astype(dtype)
    assert x.tobytes() == expected.tobytes(), ctx.msg("scale -0.5")
    with pytest.raises(rudnn.InvalidArgument, match="scale_unless_one: scale"):
        rudnn.scale_unless_one(x, np.ones(2, F32))
    with pytest.raises(rudnn.InvalidArgument, match="dense last axis"):
        rudnn.scale_unless_one(x.T, np.ones(1, F32))


# ---- Layouts --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", [(6, 40), (3, 4, 17), (1, 9)])
def test_layouts_all_ops(rng, dtype, layout, shape):
    ctx = Ctx(rng, dtype=np.dtype(dtype).name, layout=layout, shape=shape)
    H = shape[-1]
    x = make_layout(rng, shape, dtype, layout, offset=0.5)
    dy = make_layout(rng, shape, dtype, layout)
    res = make_layout(rng, shape, dtype, layout)
    g_base = randn(rng, (2 * H,), F32, offset=1.0)
    g = g_base[::2] if layout != "contiguous" else g_base[:H]  # strided gamma too
    b = randn(rng, (H,), F32)
    if layout != "contiguous" and shape[0] > 1:
        assert not x.flags.c_contiguous
    before = snapshot(x, dy, res, g, b)

    check(ctx, "layer_norm", rudnn.layer_norm(x, g, b, 1e-5), ref_layer_norm(x, g, b, 1e-5), dtype)
    check(ctx, "rms_norm", rudnn.rms_norm(x, g, 1e-6), ref_rms_norm(x, g, 1e-6), dtype)
    s, n = rudnn.add_rms_norm(x, res, g, 1e-6)
    check(ctx, "add_rms_norm sum", s, f64(x) + f64(res), dtype)
    check(ctx, "add_rms_norm normed", n, ref_rms_norm((f64(x) + f64(res)).astype(dtype), g, 1e-6), dtype)
    check(ctx, "softmax", rudnn.softmax(x), ref_softmax(x), dtype)
    check(ctx, "logsumexp", rudnn.logsumexp(x), ref_logsumexp(x), dtype)
    dx, dg, db = rudnn.layer_norm_backward(dy, x, g, b, 1e-5)
    rdx, rdg, rdb = ref_layer_norm_backward(dy, x, g, b, 1e-5)
    check(ctx, "layer_norm_backward dx", dx, rdx, dtype)
    check(ctx, "layer_norm_backward dgamma", dg, rdg, F32)
    check(ctx, "layer_norm_backward dbeta", db, rdb, F32)
    dx, dg = rudnn.rms_norm_backward(dy, x, g, 1e-6)
    rdx, rdg = ref_rms_norm_backward(dy, x, g, 1e-6)
    check(ctx, "rms_norm_backward dx", dx, rdx, dtype)
    check(ctx, "rms_norm_backward dgamma", dg, rdg, F32)
    y = make_layout(rng, shape, dtype, layout)
    check(ctx, "softmax_backward", rudnn.softmax_backward(dy, y), ref_softmax_backward(dy, y), dtype)

    targets_base = ce_targets(rng, shape[:-1] + (2,), H, np.int64, -100)
    targets = targets_base[..., 0]  # strided targets
    check(ctx, "cross_entropy", rudnn.cross_entropy(x, targets, -100), ref_cross_entropy(x, targets, -100), F32)
    dloss = rng.standard_normal(shape[:-1] + (3,)).astype(F32)[..., 1]
    check(ctx, "cross_entropy_backward", rudnn.cross_entropy_backward(x, targets, dloss, -100),
          ref_cross_entropy_backward(x, targets, dloss, -100), dtype)
    loss, d = rudnn.cross_entropy_with_grad(x, targets, 0.5, -100)
    check(ctx, "cross_entropy_with_grad dlogits", d,
          ref_cross_entropy_backward(x, targets, np.full(targets.shape, 0.5), -100), dtype)
    assert_unchanged(ctx, before, (x, dy, res, g, b))


def test_read_only_inputs(rng):
    # numpy will not export read-only arrays through DLPack; they come in through the buffer
    # protocol (still zero-copy).
    x = randn(rng, (4, 16), F32)
    x.flags.writeable = False
    g = np.broadcast_to(np.float32(2.0), (16,))  # read-only, stride 0
    check(Ctx(rng), "rms_norm read-only", rudnn.rms_norm(x, g), ref_rms_norm(x, g, 1e-6), F32)
    t = rudnn.from_dlpack(x)
    assert t.data_ptr == x.ctypes.data
    assert t.strides == (16, 1)


# ---- out= -----------------------------------------------------------------------------------


def test_out_arguments(rng):
    ctx = Ctx(rng)
    x = randn(rng, (5, 24), F16)
    dy = randn(rng, (5, 24), F16)
    g = randn(rng, (24,), F32, offset=1.0)
    b = randn(rng, (24,), F32)

    out = np.empty_like(x)
    r = rudnn.layer_norm(x, g, b, 1e-5, out=out)
    assert r is out
    check(ctx, "layer_norm out", out, ref_layer_norm(x, g, b, 1e-5), F16)

    out = np.empty_like(x)
    assert rudnn.rms_norm(x, g, out=out) is out
    check(ctx, "rms_norm out", out, ref_rms_norm(x, g, 1e-6), F16)

    outs = (np.empty_like(x), np.empty_like(x))
    assert rudnn.add_rms_norm(x, dy, g, out=outs) is outs
    check(ctx, "add_rms_norm out sum", outs[0], f64(x) + f64(dy), F16)

    out = np.empty_like(x)
    rudnn.softmax(x, out=out)
    check(ctx, "softmax out", out, ref_softmax(x), F16)

    out = np.empty((5,), F16)
    rudnn.logsumexp(x, out=out)
    check(ctx, "logsumexp out", out, ref_logsumexp(x), F16)

    outs = (np.empty_like(x), np.empty((24,), F32), None)
    rudnn.layer_norm_backward(dy, x, g, None, 1e-5, out=outs)
    rdx, rdg, _ = ref_layer_norm_backward(dy, x, g, None, 1e-5)
    check(ctx, "layer_norm_backward out dx", outs[0], rdx, F16)
    check(ctx, "layer_norm_backward out dgamma", outs[1], rdg, F32)

    outs = (np.empty_like(x), np.empty((24,), F32))
    rudnn.rms_norm_backward(dy, x, g, out=outs)
    check(ctx, "rms_norm_backward out dx", outs[0], ref_rms_norm_backward(dy, x, g, 1e-6)[0], F16)

    y = rudnn.softmax(x)
    out = np.empty_like(x)
    rudnn.softmax_backward(dy, y, out=out)
    check(ctx, "softmax_backward out", out, ref_softmax_backward(dy, y), F16)

    t = np.array([1, 2, -100, 3, 0], dtype=np.int64)
    out = np.empty((5,), F32)
    rudnn.cross_entropy(x, t, -100, out=out)
    check(ctx, "cross_entropy out", out, ref_cross_entropy(x, t, -100), F32)

    dloss = np.ones(5, F32)
    out = np.empty_like(x)
    rudnn.cross_entropy_backward(x, t, dloss, -100, out=out)
    check(ctx, "cross_entropy_backward out", out, ref_cross_entropy_backward(x, t, dloss, -100), F16)

    outs = (np.empty((5,), F32), np.empty_like(x))
    rudnn.cross_entropy_with_grad(x, t, 1.0, -100, out=outs)
    check(ctx, "cross_entropy_with_grad out loss", outs[0], ref_cross_entropy(x, t, -100), F32)

    # Wrong shape / dtype of out, read-only out.
    with pytest.raises(rudnn.Error):
        rudnn.rms_norm(x, g, out=np.empty((5, 23), F16))
    with pytest.raises(rudnn.Error):
        rudnn.rms_norm(x, g, out=np.empty((5, 24), F32))
    ro = np.empty_like(x)
    ro.flags.writeable = False
    with pytest.raises(BufferError):
        rudnn.rms_norm(x, g, out=ro)
    with pytest.raises(ValueError):
        rudnn.add_rms_norm(x, dy, g, out=(np.empty_like(x),))


# ---- Result types, zero-copy and lifetimes ------------------------------------------------------


def test_result_types(rng):
    x = randn(rng, (3, 8), F32)
    y = rudnn.rms_norm(x)
    assert isinstance(y, np.ndarray) and y.flags.writeable and y.flags.c_contiguous
    y *= 2  # numpy results are writable
    t = rudnn.from_dlpack(x)
    r = rudnn.rms_norm(t)
    assert isinstance(r, rudnn.Tensor)
    assert r.shape == (3, 8) and r.strides == (8, 1) and r.dtype == "float32" and r.device == "cpu"
    assert r.ndim == 2 and r.size == 24 and r.itemsize == 4 and len(r) == 3 and r.is_contiguous()
    assert r.__dlpack_device__() == (1, 0)
    assert "f32" in repr(r)
    # Results that are rudnn Tensors feed other ops directly, and export to numpy both ways.
    check(Ctx(rng), "rudnn Tensor input", np.asarray(rudnn.softmax(r)), ref_softmax(np.asarray(r)), F32)
    a1, a2 = np.from_dlpack(r), np.asarray(r)
    assert a1.ctypes.data == a2.ctypes.data == r.data_ptr
    h = rudnn.from_dlpack(randn(rng, (2, 4), F16))
    assert h.dtype == "float16" and np.asarray(h).dtype == F16
    # 0-d result
    z = rudnn.logsumexp(x[0])
    assert isinstance(z, np.ndarray) and z.shape == ()
    # a rudnn Tensor cannot be built from Python
    with pytest.raises(TypeError):
        rudnn.Tensor()


def test_zero_copy_roundtrip(rng):
    for a in [randn(rng, (4, 6), F32), randn(rng, (4, 6), F16)[:, 1::2], np.arange(10, dtype=np.int64)]:
        t = rudnn.from_dlpack(a)
        assert t.data_ptr == a.ctypes.data
        assert t.strides == tuple(s // a.itemsize for s in a.strides)
        back = np.from_dlpack(t)
        assert np.shares_memory(a, back) and np.array_equal(a, back)
        back2 = np.asarray(t)
        assert np.shares_memory(a, back2) and back2.flags.writeable
        back2.flat[0] = 7  # writes through to the original
        assert a.flat[0] == 7


def test_outputs_are_new_memory(rng):
    x = randn(rng, (4, 8), F32)
    y = rudnn.rms_norm(x)
    assert not np.shares_memory(x, y)


def test_lifetimes_no_leak():
    a = np.ones((64, 32), F32)
    base = sys.getrefcount(a)
    t = rudnn.from_dlpack(a)
    assert sys.getrefcount(a) > base  # the imported tensor keeps the array alive
    cap = t.__dlpack__()  # an unconsumed capsule owns a reference to the storage
    del t
    gc.collect()
    assert sys.getrefcount(a) > base
    del cap  # destructor of an unconsumed capsule runs the deleter
    gc.collect()
    assert sys.getrefcount(a) == base

    t = rudnn.from_dlpack(a)
    b = np.from_dlpack(t)  # consumed capsule: numpy owns it now
    c = np.asarray(t)
    del t
    gc.collect()
    assert sys.getrefcount(a) > base
    assert np.shares_memory(a, b) and np.shares_memory(a, c)
    del b, c
    gc.collect()
    assert sys.getrefcount(a) == base

    # The memory of a result outlives the handle it came from.
    y = np.asarray(rudnn.rms_norm(rudnn.from_dlpack(a)))
    gc.collect()
    assert np.allclose(y, 1.0, atol=1e-5)


def capsule_name(cap):
    get = ctypes.pythonapi.PyCapsule_GetName
    get.restype = ctypes.c_char_p
    get.argtypes = [ctypes.py_object]
    return get(cap).decode()


def test_dlpack_capsule_protocol(rng):
    t = rudnn.from_dlpack(randn(rng, (3, 4), F32))
    cap = t.__dlpack__()
    assert capsule_name(cap) == "dltensor"
    assert capsule_name(t.__dlpack__(stream=None)) == "dltensor"
    # Keyword arguments of newer protocol versions are accepted.
    cap2 = t.__dlpack__(stream=None, max_version=(1, 0), dl_device=(1, 0), copy=False)
    assert capsule_name(cap2) == "dltensor"
    with pytest.raises(BufferError):
        t.__dlpack__(dl_device=(2, 0))
    c = np.from_dlpack(_Producer(t.__dlpack__(copy=True), (1, 0)))
    assert not np.shares_memory(c, np.asarray(t)) and np.array_equal(c, np.asarray(t))

    # rudnn consumes a capsule by renaming it; a consumed capsule cannot be imported again.
    p = _Producer(t.__dlpack__(), (1, 0))
    u = rudnn.from_dlpack(p)
    assert capsule_name(p.capsule) == "used_dltensor"
    assert u.data_ptr == t.data_ptr
    with pytest.raises(ValueError, match="consumed"):
        rudnn.from_dlpack(p)


class _Producer:
    """A minimal DLPack producer handing out one fixed capsule."""

    def __init__(self, capsule, device):
        self.capsule = capsule
        self.device = device
        self.stream_seen = "unset"

    def __dlpack__(self, stream=None, **kwargs):
        self.stream_seen = stream
        return self.capsule

    def __dlpack_device__(self):
        return self.device


def test_cpu_producer_gets_stream_none(rng):
    t = rudnn.from_dlpack(randn(rng, (2, 3), F32))
    p = _Producer(t.__dlpack__(), (1, 0))
    rudnn.softmax(p, stream=1234)  # a stream argument does not apply to CPU operands
    assert p.stream_seen is None


def test_unsupported_dtypes_and_layouts():
    with pytest.raises(rudnn.Unsupported) as e:
        rudnn.from_dlpack(np.zeros(4, np.int16))
    assert isinstance(e.value, NotImplementedError)
    with pytest.raises(NotImplementedError):
        rudnn.from_dlpack(np.zeros(4, np.complex64))
    with pytest.raises(NotImplementedError, match="negative"):
        rudnn.from_dlpack(np.zeros(4, F32)[::-1])
    # Through the high-level functions a negative-stride numpy view is copied first.
    x = np.arange(12, dtype=F32).reshape(3, 4)[::-1, ::-1]
    np.testing.assert_allclose(rudnn.softmax(x), ref_softmax(x), rtol=1e-5)


def test_buffer_protocol_inputs():
    mv = memoryview(np.arange(8, dtype=F32).reshape(2, 4))
    t = rudnn.from_dlpack(mv)
    assert t.shape == (2, 4) and t.dtype == "float32"
    y = rudnn.softmax(mv)
    assert isinstance(y, rudnn.Tensor)
    with pytest.raises(TypeError):
        rudnn.softmax([[1.0, 2.0]])
    with pytest.raises(TypeError):
        rudnn.softmax(object())


# ---- Errors ---------------------------------------------------------------------------------


def test_exception_hierarchy():
    assert issubclass(rudnn.Error, Exception)
    expected = {
        rudnn.InvalidArgument: ValueError,
        rudnn.ShapeMismatch: ValueError,
        rudnn.DeviceMismatch: ValueError,
        rudnn.DTypeMismatch: TypeError,
        rudnn.Unsupported: NotImplementedError,
        rudnn.OutOfMemory: MemoryError,
        rudnn.CudaError: RuntimeError,
    }
    for cls, builtin in expected.items():
        assert issubclass(cls, rudnn.Error) and issubclass(cls, builtin), cls
        assert cls.__module__ == "rudnn"
    assert rudnn.InvalidArgument.code == "InvalidArgument" and rudnn.CudaError.code == "Cuda"


@pytest.mark.parametrize("eps", [0.0, -1e-5, float("nan"), float("inf"), 1e300, 1e-60])
def test_bad_eps(eps):
    x = np.ones((2, 8), F32)
    for call in [
        lambda: rudnn.layer_norm(x, eps=eps),
        lambda: rudnn.rms_norm(x, eps=eps),
        lambda: rudnn.add_rms_norm(x, x, eps=eps),
        lambda: rudnn.layer_norm_backward(x, x, eps=eps),
        lambda: rudnn.rms_norm_backward(x, x, eps=eps),
    ]:
        with pytest.raises(ValueError, match="eps") as e:
            call()
        assert isinstance(e.value, rudnn.InvalidArgument)


def test_error_mapping(rng):
    x = randn(rng, (4, 8), F32)
    with pytest.raises(TypeError) as e:
        rudnn.rms_norm(x.astype(np.float64))
    assert isinstance(e.value, rudnn.DTypeMismatch) and "rms_norm" in str(e.value)
    with pytest.raises(ValueError, match="gamma") as e:
        rudnn.rms_norm(x, np.ones(7, F32))
    assert isinstance(e.value, rudnn.ShapeMismatch)
    with pytest.raises(ValueError, match="gamma"):
        rudnn.layer_norm(x, np.ones((2, 4), F32))
    with pytest.raises(TypeError, match="gamma"):
        rudnn.rms_norm(x, np.ones(8, np.float64))
    with pytest.raises(rudnn.ShapeMismatch):
        rudnn.add_rms_norm(x, np.ones((4, 9), F32))
    with pytest.raises(rudnn.DTypeMismatch):
        rudnn.add_rms_norm(x, np.ones((4, 8), F16))
    with pytest.raises(rudnn.ShapeMismatch):
        rudnn.rms_norm(np.array(1.0, F32))
    with pytest.raises(rudnn.InvalidArgument):
        rudnn.softmax(np.ones((3, 0), F32))
    with pytest.raises(rudnn.DTypeMismatch):
        rudnn.cross_entropy(x, np.zeros(4, F32))
    with pytest.raises(rudnn.ShapeMismatch):
        rudnn.cross_entropy(x, np.zeros(5, np.int64))
    with pytest.raises(rudnn.DTypeMismatch):
        rudnn.cross_entropy_backward(x, np.zeros(4, np.int64), np.ones(4, F16))
    with pytest.raises(ValueError, match="grad_scale"):
        rudnn.cross_entropy_with_grad(x, np.zeros(4, np.int64), grad_scale=float("inf"))
    with pytest.raises(rudnn.ShapeMismatch):
        rudnn.softmax_backward(x, np.ones((4, 9), F32))
    with pytest.raises(ValueError):
        rudnn.rms_norm(x, stream=-1)
    with pytest.raises(TypeError):
        rudnn.rms_norm(x, stream="s")


def test_error_base_catches_all(rng):
    x = randn(rng, (4, 8), F32)
    bad_calls = [
        lambda: rudnn.rms_norm(x, eps=0),
        lambda: rudnn.rms_norm(x.astype(np.float64)),
        lambda: rudnn.rms_norm(x, np.ones(3, F32)),
        lambda: rudnn.from_dlpack(np.zeros(3, np.int16)),
        lambda: rudnn.cross_entropy(x, np.zeros(4, F32)),
        lambda: rudnn.softmax(np.ones((2, 0), F32)),
    ]
    for call in bad_calls:
        with pytest.raises(rudnn.Error) as e:
            call()
        assert str(e.value)  # carries the C++ message


def test_inputs_unchanged_after_errors(rng):
    x = randn(rng, (4, 8), F32)
    before = x.copy()
    with pytest.raises(rudnn.Error):
        rudnn.rms_norm(x, np.ones(3, F32))
    np.testing.assert_array_equal(x, before)


# ---- Module facts, threads, lazy imports --------------------------------------------------------


def test_module_facts():
    assert rudnn.version() == rudnn.__version__
    assert len(rudnn.version().split(".")) == 3
    assert isinstance(rudnn.built_with_cuda(), bool)
    n = rudnn.cuda_device_count()
    assert isinstance(n, int) and n >= 0


def test_threads(rng):
    # The GIL is released while ops run; concurrent calls must be independent.
    xs = [randn(rng, (64, 256), F32) for _ in range(8)]
    results = [None] * len(xs)

    def work(i):
        for _ in range(5):
            results[i] = rudnn.layer_norm(xs[i], None, None, 1e-5)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x, y in zip(xs, results):
        check(Ctx(rng), "threaded layer_norm", y, ref_layer_norm(x, None, None, 1e-5), F32)


def test_import_is_lazy():
    code = (
        "import sys, rudnn\n"
        "assert 'torch' not in sys.modules, 'rudnn imported torch'\n"
        "assert 'numpy' not in sys.modules, 'rudnn imported numpy'\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_torch_autograd_is_lazy():
    try:
        import torch  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError):
            rudnn.torch_autograd  # noqa: B018
    else:
        assert hasattr(rudnn.torch_autograd, "RMSNormFunction")
    with pytest.raises(AttributeError):
        rudnn.no_such_attribute  # noqa: B018


def test_torch_cpu_tensors(rng):
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(randn(rng, (4, 16), F32)).requires_grad_()
    g = torch.ones(16)
    y = rudnn.rms_norm(x, g)
    assert isinstance(y, torch.Tensor) and y.device.type == "cpu" and y.dtype == torch.float32
    check(Ctx(rng), "rms_norm torch cpu", y.numpy(), ref_rms_norm(x.detach().numpy(), g.numpy(), 1e-6), F32)
    t = rudnn.from_dlpack(x.detach())
    assert t.data_ptr == x.data_ptr()


# ---- torch CPU tensors (when torch is installed; the GPU suite covers CUDA) -------------------


@pytest.mark.parametrize("tdtype", ["float32", "float16", "bfloat16"])
def test_torch_cpu_ops_and_autograd(rng, tdtype):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    from rudnn import torch_autograd as ta

    dt = getattr(torch, tdtype)
    tol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}[tdtype]
    ctx = Ctx(rng, dtype=tdtype)

    def close(what, got, ref, dtype=dt, t=tol):
        assert isinstance(got, torch.Tensor) and got.device.type == "cpu", ctx.msg(f"{what}: {type(got)}")
        assert got.dtype == dtype, ctx.msg(f"{what}: dtype {got.dtype}, expected {dtype}")
        g, r = got.detach().double(), ref.detach().double()
        err = (g - r).norm().item() / max(r.norm().item(), 1e-6 * r.numel() ** 0.5)
        assert err <= t, ctx.msg(f"{what}: relative L2 error {err:.3g} > {t}")

    H = 96
    x = torch.from_numpy(randn(rng, (4, 3, H), F32, offset=0.5)).to(dt)
    dy = torch.from_numpy(randn(rng, (4, 3, H), F32)).to(dt)
    w = torch.from_numpy(randn(rng, (H,), F32, offset=1.0))
    b = torch.from_numpy(randn(rng, (H,), F32))

    # Forward ops against numpy float64 references of the same values.
    xn = x.double().numpy()
    close("rms_norm", rudnn.rms_norm(x, w), torch.from_numpy(ref_rms_norm(xn, w.numpy(), 1e-6)))
    close("layer_norm", rudnn.layer_norm(x, w, b), torch.from_numpy(ref_layer_norm(xn, w.numpy(), b.numpy(), 1e-5)))
    close("softmax", rudnn.softmax(x), torch.from_numpy(ref_softmax(xn)))
    close("logsumexp", rudnn.logsumexp(x), torch.from_numpy(ref_logsumexp(xn)))
    assert rudnn.from_dlpack(x).data_ptr == x.data_ptr()

    # Autograd wrappers against torch autograd in float64.
    xa, wa = x.clone().requires_grad_(), w.clone().requires_grad_()
    ta.rms_norm(xa, wa).backward(dy)
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    (x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * w64).backward(dy.double())
    close("RMSNorm dx", xa.grad, x64.grad)
    close("RMSNorm dweight", wa.grad, w64.grad, torch.float32, 1e-5)

    xa, wa, ba = x.clone().requires_grad_(), w.clone().requires_grad_(), b.clone().requires_grad_()
    ta.layer_norm(xa, wa, ba).backward(dy)
    x64, w64, b64 = (t.double().requires_grad_() for t in (x, w, b))
    F.layer_norm(x64, (H,), w64, b64, 1e-5).backward(dy.double())
    close("LayerNorm dx", xa.grad, x64.grad)
    close("LayerNorm dweight", wa.grad, w64.grad, torch.float32, 1e-5)
    close("LayerNorm dbias", ba.grad, b64.grad, torch.float32, 1e-5)

    xa = x.clone().requires_grad_()
    ta.softmax(xa).backward(dy)
    x64 = x.double().requires_grad_()
    torch.softmax(x64, -1).backward(dy.double())
    close("softmax dx", xa.grad, x64.grad)

    C = 50
    logits = torch.from_numpy(randn(rng, (6, C), F32, scale=2.0)).to(dt)
    targets = torch.from_numpy(rng.integers(0, C, size=6)).to(torch.int64)
    targets[1] = -100
    for reduction in ("mean", "sum", "none"):
        la = logits.clone().requires_grad_()
        loss = ta.cross_entropy(la, targets, ignore_index=-100, reduction=reduction)
        l64 = logits.double().requires_grad_()
        ref = F.cross_entropy(l64, targets, ignore_index=-100, reduction=reduction)
        up = torch.from_numpy(rng.standard_normal(6)).float() if reduction == "none" else torch.tensor(1.0)
        loss.backward(up if reduction == "none" else None)
        ref.backward(up.double() if reduction == "none" else None)
        close(f"cross_entropy {reduction}", loss, ref, torch.float32, 1e-5)
        close(f"cross_entropy {reduction} dlogits", la.grad, l64.grad)
    m = ta.RMSNorm(H)
    m(x.clone().requires_grad_()).sum().backward()
    assert m.weight.grad is not None and m.weight.grad.shape == (H,)
    with pytest.raises(ValueError):
        ta.cross_entropy(logits, targets, reduction="avg")
