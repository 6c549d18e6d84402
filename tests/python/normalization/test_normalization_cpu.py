"""CPU tests of the normalization ops through the rudnn package: every op against an
independent NumPy float64 reference, over dtypes, shapes, layouts and out= (helpers in
tests/python/support.py). Inputs are random with a fresh seed per run (printed in every
failure message); RUDNN_TEST_SEED=<int> replays one.
"""

import threading

import numpy as np
import pytest
from support import (
    CE_CASES,
    F16,
    F32,
    FLOAT_DTYPES,
    LAYOUTS,
    SHAPES,
    Ctx,
    assert_unchanged,
    ce_targets,
    check,
    f64,
    make_layout,
    randn,
    ref_cross_entropy,
    ref_cross_entropy_backward,
    ref_layer_norm,
    ref_layer_norm_backward,
    ref_logsumexp,
    ref_rms_norm,
    ref_rms_norm_backward,
    ref_softmax,
    ref_softmax_backward,
    snapshot,
)

import rudnn


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
    with pytest.raises(ValueError):
        rudnn.add_rms_norm(x, dy, g, out=(np.empty_like(x),))



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

