"""CPU tests of the convolution family through the rudnn package: conv_forward 1-D/2-D/3-D
(stride, symmetric, asymmetric, "same" and "valid" padding, dilation, groups and depthwise,
bias, the fused residual + activation epilogue, both layouts, strided and channels-last views)
against a NumPy float64 reference written here; the data and weight gradients against the
adjoint identities of that reference (<dout, conv(u, w)> = <dinput, u>, likewise for the
weight); causal_conv1d (bias, SiLU, carried state updated in place, varlen) and its backward
against a NumPy reference and finite differences; plan_conv; out=; errors reaching Python as
the rudnn.Error subclass naming the op and the argument. Inputs are random with a fresh seed
per run (printed in every failure message); RUDNN_TEST_SEED=<int> replays one.
"""

import itertools
import math

import numpy as np
import pytest
from support import F16, F32, Ctx, assert_unchanged, check, f64, randn, snapshot

import rudnn

F64 = np.float64
DTYPES = [F32, F16, F64]
ERF = np.vectorize(math.erf)


def dname(dtype):
    return np.dtype(dtype).name


def verify(ctx, what, got, ref, dtype):
    if dtype != F64:
        check(ctx, what, got, ref, dtype)
        return
    got = np.asarray(got)
    assert got.dtype == F64 and got.shape == ref.shape, ctx.msg(f"{what}: {got.dtype} {got.shape}")
    if ref.size:
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10 * max(1.0, np.abs(ref).max()), err_msg=ctx.msg(what))


# ---- NumPy float64 references -----------------------------------------------------------------


def per_axis(value, rank, fill):
    if value is None:
        return [fill] * rank
    return [value] * rank if isinstance(value, int) else list(value)


def geometry(x_shape, w_shape, stride, padding, dilation, padding_end=None):
    """(stride, pad_begin, pad_end, dilation) per spatial axis, with torch's "same" rule."""
    rank = len(x_shape) - 2
    s, d = per_axis(stride, rank, 1), per_axis(dilation, rank, 1)
    if padding == "valid":
        return s, [0] * rank, [0] * rank, d
    if padding == "same":
        total = [d[i] * (w_shape[2 + i] - 1) for i in range(rank)]
        return s, [t // 2 for t in total], [t - t // 2 for t in total], d
    p = per_axis(padding, rank, 0)
    return s, p, (p if padding_end is None else per_axis(padding_end, rank, 0)), d


def ref_conv(x, w, b, stride, pad, pad_end, dil, groups):
    """float64 cross-correlation, NCHW shapes: x [N, C, *in], w [K, C/groups, *k]."""
    x, w = f64(x), f64(w)
    N, C = x.shape[:2]
    K, rank = w.shape[0], x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pad[i], pad_end[i]) for i in range(rank)])
    ks = w.shape[2:]
    out_sz = [(xp.shape[2 + i] - dil[i] * (ks[i] - 1) - 1) // stride[i] + 1 for i in range(rank)]
    out = np.zeros((N, K) + tuple(out_sz))
    cg, kg = C // groups, K // groups
    for taps in itertools.product(*[range(k) for k in ks]):
        sl = tuple(slice(taps[i] * dil[i], taps[i] * dil[i] + stride[i] * (out_sz[i] - 1) + 1, stride[i])
                   for i in range(rank))
        patch = xp[(slice(None), slice(None)) + sl]
        for g in range(groups):
            wt = w[(slice(g * kg, (g + 1) * kg), slice(None)) + taps]  # [kg, cg]
            out[:, g * kg:(g + 1) * kg] += np.einsum("nc...,kc->nk...", patch[:, g * cg:(g + 1) * cg], wt)
    if b is not None:
        out += f64(b).reshape((1, K) + (1,) * rank)
    return out


def activate(y, activation):
    if activation == "relu":
        return np.maximum(y, 0)
    if activation == "silu":
        return y / (1 + np.exp(-y))
    if activation == "gelu":
        return 0.5 * y * (1 + ERF(y / math.sqrt(2)))
    return y


def to_nhwc(a):
    return np.ascontiguousarray(np.moveaxis(a, 1, -1))


def from_nhwc(a):
    return np.moveaxis(np.asarray(a), -1, 1)


# ---- conv_forward and its gradients -----------------------------------------------------------

CASES = [
    # (x shape, w shape, stride, padding, dilation, groups, padding_end)
    ((2, 3, 11), (4, 3, 3), 1, 0, 1, 1, None),
    ((2, 4, 13), (6, 2, 4), 2, 1, 2, 2, None),
    ((1, 3, 9), (3, 3, 4), 1, "same", 1, 1, None),
    ((2, 3, 7, 8), (5, 3, 3, 3), 1, 1, 1, 1, None),
    ((2, 4, 9, 7), (4, 1, 3, 3), (2, 1), (1, 0), (1, 2), 4, None),  # depthwise
    ((1, 6, 8, 9), (6, 1, 5, 5), 1, 2, 1, 6, None),  # depthwise 5x5
    ((2, 4, 8, 8), (6, 2, 2, 3), 1, (0, 1), 1, 2, (1, 2)),  # grouped, asymmetric
    ((1, 3, 7, 6), (2, 3, 4, 2), 1, "same", (2, 1), 1, None),  # even kernel: the extra zero after
    ((1, 2, 6, 5), (3, 2, 3, 3), 1, "valid", 1, 1, None),
    ((1, 2, 5, 6, 7), (3, 2, 2, 3, 3), (1, 2, 2), 1, 1, 1, None),
    ((2, 4, 4, 5, 6), (4, 2, 3, 1, 2), 1, (1, 0, 1), (2, 1, 1), 2, None),
    ((0, 3, 5, 5), (4, 3, 3, 3), 1, 1, 1, 1, None),
]


def case_id(c):
    return f"x{c[0]}-w{c[1]}-s{c[2]}-p{c[3]}-d{c[4]}-g{c[5]}-pe{c[6]}"


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_conv_against_numpy(rng, dtype, case):
    xs, ws, stride, padding, dilation, groups, padding_end = case
    ctx = Ctx(rng, dtype=dname(dtype), case=case)
    x, w, b = randn(rng, xs, dtype), randn(rng, ws, dtype, scale=0.5), randn(rng, (ws[0],), dtype)
    before = snapshot(x, w, b)
    s, p, pe, d = geometry(xs, ws, stride, padding, dilation, padding_end)
    ref = ref_conv(x, w, b, s, p, pe, d, groups)
    y = rudnn.conv_forward(x, w, b, stride, padding, dilation, groups, padding_end=padding_end)
    verify(ctx, "conv_forward", y, ref, dtype)
    assert_unchanged(ctx, before, [x, w, b])
    # channels-last shapes give the same numbers
    yn = rudnn.conv_forward(to_nhwc(x), to_nhwc(w), b, stride, padding, dilation, groups, padding_end=padding_end,
                            layout="nhwc")
    verify(ctx, "conv_forward nhwc", from_nhwc(yn), ref, dtype)
    # gradients: the adjoint identities of the reference (exact for a linear map)
    dy = randn(rng, y.shape, dtype)
    dx = rudnn.conv_data_backward(dy, w, xs, stride, padding, dilation, groups, padding_end=padding_end)
    dw, db = rudnn.conv_weight_backward(dy, x, ws, stride, padding, dilation, groups, padding_end=padding_end)
    assert dx.shape == xs and dw.shape == ws and db.shape == (ws[0],)
    if dtype == F64:
        u, v = randn(rng, xs, F64), randn(rng, ws, F64)
        lhs_x = float(np.sum(dy * ref_conv(u, w, None, s, p, pe, d, groups)))
        lhs_w = float(np.sum(dy * ref_conv(x, v, None, s, p, pe, d, groups)))
        assert math.isclose(lhs_x, float(np.sum(dx * u)), rel_tol=1e-9, abs_tol=1e-9), ctx.msg("dinput adjoint")
        assert math.isclose(lhs_w, float(np.sum(dw * v)), rel_tol=1e-9, abs_tol=1e-9), ctx.msg("dweight adjoint")
        verify(ctx, "dbias", db, np.moveaxis(dy, 1, 0).reshape(dy.shape[1], -1).sum(1), F64)
    else:  # against the float64 CPU reference of the same op
        verify(ctx, "dinput", dx, f64(rudnn.conv_data_backward(f64(dy), f64(w), xs, stride, padding, dilation, groups,
                                                               padding_end=padding_end)), dtype)
        ref_dw, ref_db = rudnn.conv_weight_backward(f64(dy), f64(x), ws, stride, padding, dilation, groups,
                                                    padding_end=padding_end)
        verify(ctx, "dweight", dw, ref_dw, dtype)
        verify(ctx, "dbias", db, ref_db, dtype)
    dxn = rudnn.conv_data_backward(to_nhwc(dy), to_nhwc(w), to_nhwc(np.empty(xs)).shape, stride, padding, dilation,
                                   groups, padding_end=padding_end, layout="nhwc")
    np.testing.assert_allclose(from_nhwc(dxn).astype(F64), f64(dx), rtol=1e-2 if dtype == F16 else 1e-5,
                               atol=1e-2 if dtype == F16 else 1e-5, err_msg=ctx.msg("dinput nhwc"))
    dwn, dbn = rudnn.conv_weight_backward(to_nhwc(dy), to_nhwc(x), to_nhwc(np.empty(ws)).shape, stride, padding,
                                          dilation, groups, padding_end=padding_end, with_bias=False, layout="nhwc")
    assert dbn is None
    np.testing.assert_allclose(from_nhwc(dwn).astype(F64), f64(dw), rtol=1e-2 if dtype == F16 else 1e-5,
                               atol=1e-2 if dtype == F16 else 1e-5, err_msg=ctx.msg("dweight nhwc"))


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("activation", ["none", "relu", "silu", "gelu"])
def test_epilogue_residual_and_activation(rng, dtype, activation):
    ctx = Ctx(rng, dtype=dname(dtype), activation=activation)
    x, w, b = randn(rng, (2, 3, 6, 7), dtype), randn(rng, (4, 3, 3, 3), dtype, scale=0.5), randn(rng, (4,), dtype)
    res = randn(rng, (2, 4, 6, 7), dtype)
    ref = activate(ref_conv(x, w, b, [1, 1], [1, 1], [1, 1], [1, 1], 1) + f64(res), activation)
    verify(ctx, "epilogue", rudnn.conv_forward(x, w, b, 1, 1, activation=activation, residual=res), ref, dtype)
    ref = activate(ref_conv(x, w, None, [1, 1], [1, 1], [1, 1], [1, 1], 1), activation)
    verify(ctx, "activation only", rudnn.conv_forward(x, w, None, 1, 1, activation=activation), ref, dtype)


def test_strided_and_channels_last_views_and_out(rng):
    ctx = Ctx(rng)
    base = randn(rng, (2, 9, 8, 3), F32)
    x = base.transpose(0, 3, 1, 2)  # a channels-last view of logical [2, 3, 9, 8]
    w = randn(rng, (5, 3, 3, 3), F32)
    y = rudnn.conv_forward(x, w, None, 1, 1)
    verify(ctx, "channels-last view", y, ref_conv(x, w, None, [1, 1], [1, 1], [1, 1], [1, 1], 1), F32)
    assert y.strides[1] == y.itemsize, "a channels-last input gives a channels-last result, as torch"
    xs = randn(rng, (2, 3, 18, 8), F32)[:, :, ::2]
    verify(ctx, "strided", rudnn.conv_forward(xs, w, None, 2, 0, 2),
           ref_conv(xs, w, None, [2, 2], [0, 0], [0, 0], [2, 2], 1), F32)
    o = np.full((2, 5, 9, 8), np.nan, F32)
    assert rudnn.conv_forward(x, w, None, 1, 1, out=o) is o
    np.testing.assert_array_equal(o, y)
    dy = randn(rng, o.shape, F32)
    dx = np.full(x.shape, np.nan, F32)
    assert rudnn.conv_data_backward(dy, w, x.shape, 1, 1, out=dx) is dx
    np.testing.assert_array_equal(dx, rudnn.conv_data_backward(dy, w, x.shape, 1, 1))
    dw, db = np.full(w.shape, np.nan, F32), np.full((5,), np.nan, F32)
    r = rudnn.conv_weight_backward(dy, x, w.shape, 1, 1, out=(dw, db))
    assert r[0] is dw and r[1] is db
    ref = rudnn.conv_weight_backward(dy, x, w.shape, 1, 1)
    np.testing.assert_array_equal(dw, ref[0])
    np.testing.assert_array_equal(db, ref[1])
    dw2 = np.full(w.shape, np.nan, F32)
    rudnn.conv_weight_backward(dy, x, w.shape, 1, 1, out=(dw2, None))
    np.testing.assert_array_equal(dw2, ref[0])


def test_large_values(rng):
    ctx = Ctx(rng)
    x, w = randn(rng, (1, 2, 5, 5), F32, scale=1e18), randn(rng, (2, 2, 3, 3), F32, scale=1e18)
    verify(ctx, "large", rudnn.conv_forward(x, w, None, 1, 1), ref_conv(x, w, None, [1, 1], [1, 1], [1, 1], [1, 1], 1),
           F32)


def test_plan_conv():
    p = rudnn.plan_conv("forward", (2, 3, 8, 8), (4, 3, 3, 3), "float32", padding=1, device="cpu")
    assert p["kernel"] == "Reference" and p["workspace_bytes"] == 0 and isinstance(p["why"], str)
    p = rudnn.plan_conv("data_backward", (2, 8, 8, 4), (4, 3, 3, 1), np.float16, groups=4, layout="nhwc",
                        device="cpu")
    assert p["kernel"] == "Reference"
    if rudnn.built_with_cuda():
        p = rudnn.plan_conv("forward", (2, 4, 8, 8), (4, 1, 3, 3), "float16", groups=4, device="cuda:0")
        assert p["kernel"] in ("Depthwise", "Direct"), p
    with pytest.raises(rudnn.InvalidArgument, match=r"^plan_conv: direction must be one of"):
        rudnn.plan_conv("backward", (2, 3, 8, 8), (4, 3, 3, 3), "float32", device="cpu")
    with pytest.raises(rudnn.InvalidArgument, match=r"^plan_conv: dtype must be"):
        rudnn.plan_conv("forward", (2, 3, 8, 8), (4, 3, 3, 3), "int8", device="cpu")
    with pytest.raises(rudnn.InvalidArgument, match=r"^plan_conv: device must be"):
        rudnn.plan_conv("forward", (2, 3, 8, 8), (4, 3, 3, 3), "float32", device="tpu")
    with pytest.raises(rudnn.ShapeMismatch, match=r"^plan_conv: "):
        rudnn.plan_conv("forward", (2, 3, 8, 8), (4, 2, 3, 3), "float32", device="cpu")


def test_conv_errors_name_the_op_and_argument(rng):
    x, w = randn(rng, (1, 4, 6, 6), F32), randn(rng, (4, 4, 3, 3), F32)
    cases = [
        (rudnn.ShapeMismatch, r"^conv_forward: input is 2-d; expected 3-, 4- or 5-d",
         lambda: rudnn.conv_forward(x[0, 0], w)),
        (rudnn.ShapeMismatch, r"^conv_forward: ", lambda: rudnn.conv_forward(x, w[..., 0])),
        (rudnn.ShapeMismatch, r"^conv_forward: ", lambda: rudnn.conv_forward(x, w, np.zeros(3, F32))),
        (rudnn.InvalidArgument, r"^conv_forward: stride has 3 entries; expected 1 or 2",
         lambda: rudnn.conv_forward(x, w, None, (1, 1, 1))),
        (rudnn.InvalidArgument, r"^conv_forward: ", lambda: rudnn.conv_forward(x, w, None, 0)),
        (rudnn.InvalidArgument, r"^conv_forward: ", lambda: rudnn.conv_forward(x, w, None, 1, -1)),
        (rudnn.InvalidArgument, r"^conv_forward: ", lambda: rudnn.conv_forward(x, w, None, 1, 0, 0)),
        (rudnn.InvalidArgument, r"^conv_forward: ", lambda: rudnn.conv_forward(x, w, None, 1, 0, 1, 3)),
        (rudnn.InvalidArgument, r"^conv_forward: ", lambda: rudnn.conv_forward(x, w, None, 1, 0, 4)),
        (rudnn.InvalidArgument, r"^conv_forward: padding is 'same' with a stride",
         lambda: rudnn.conv_forward(x, w, None, 2, "same")),
        (rudnn.InvalidArgument, r"^conv_forward: padding must be an int, ints, 'valid' or 'same'",
         lambda: rudnn.conv_forward(x, w, None, 1, "full")),
        (rudnn.InvalidArgument, r"^conv_forward: padding_end must be None",
         lambda: rudnn.conv_forward(x, w, None, 1, "same", padding_end=1)),
        (rudnn.InvalidArgument, r"^conv_forward: groups must be an int", lambda: rudnn.conv_forward(x, w, None, 1, 0, 1, True)),
        (rudnn.InvalidArgument, r"^conv_forward: activation must be one of",
         lambda: rudnn.conv_forward(x, w, activation="tanh")),
        (rudnn.InvalidArgument, r"^conv_forward: layout must be one of", lambda: rudnn.conv_forward(x, w, layout="nhcw")),
        (rudnn.InvalidArgument, r"^conv_forward: strategy must be one of",
         lambda: rudnn.conv_forward(x, w, strategy="winograd")),
        (rudnn.InvalidArgument, r"^conv_forward: allow_tf32 must be a bool",
         lambda: rudnn.conv_forward(x, w, allow_tf32=1)),
        (rudnn.ShapeMismatch, r"^conv_forward: ", lambda: rudnn.conv_forward(x, w, residual=np.zeros((1, 4, 3, 3), F32))),
        (rudnn.DTypeMismatch, r"^conv_forward: ", lambda: rudnn.conv_forward(x, w.astype(F16))),
        (rudnn.DTypeMismatch, r"^conv_forward: ", lambda: rudnn.conv_forward(x.astype(np.int32), w.astype(np.int32))),
        (rudnn.InvalidArgument, r"^conv_forward: weight is None", lambda: rudnn.conv_forward(x, None)),
        (rudnn.InvalidArgument, r"^conv_forward: ",
         lambda: rudnn.conv_forward(randn(rng, (1, 4, 2, 2), F32), w)),  # output size < 1
        (rudnn.ShapeMismatch, r"^conv_forward: ", lambda: rudnn.conv_forward(x, w, out=np.zeros((1, 4, 5, 4), F32))),
        (rudnn.ShapeMismatch, r"^conv_forward_nhwc: ", lambda: rudnn.conv_forward(x, w, layout="nhwc")),
        (rudnn.ShapeMismatch, r"^conv_data_backward: ",
         lambda: rudnn.conv_data_backward(np.zeros((1, 4, 3, 3), F32), w, x.shape)),
        (rudnn.InvalidArgument, r"^conv_data_backward: input_size must be a sequence",
         lambda: rudnn.conv_data_backward(np.zeros((1, 4, 4, 4), F32), w, 6)),
        (rudnn.ShapeMismatch, r"^conv_weight_backward: ",
         lambda: rudnn.conv_weight_backward(np.zeros((1, 4, 3, 3), F32), x, w.shape)),
        (rudnn.InvalidArgument, r"^conv_weight_backward: with_bias must be a bool",
         lambda: rudnn.conv_weight_backward(np.zeros((1, 4, 4, 4), F32), x, w.shape, with_bias=None)),
        (rudnn.InvalidArgument, r"^conv_weight_backward: out must be a tuple of 2 arrays",
         lambda: rudnn.conv_weight_backward(np.zeros((1, 4, 4, 4), F32), x, w.shape, out=np.zeros(w.shape, F32))),
    ]
    for exc, pattern, call in cases:
        with pytest.raises(exc, match=pattern):
            call()


# ---- causal_conv1d --------------------------------------------------------------------------------


def ref_causal(x, w, b, state, cu, silu):
    """(out, new_state) in float64; x [B, L, C], w [C, W], state [B or S, C, W-1]."""
    x, w = f64(x), f64(w)
    B, L, C = x.shape
    W = w.shape[1]
    seqs = [(bi, 0, L) for bi in range(B)] if cu is None else [(0, int(cu[s]), int(cu[s + 1])) for s in range(len(cu) - 1)]
    out = np.zeros_like(x)
    new_state = None if state is None else f64(state).copy()
    for si, (bi, lo, hi) in enumerate(seqs):
        row = si if cu is not None else bi
        left = np.zeros((W - 1, C)) if state is None else f64(state)[row].T  # [W-1, C]
        xs = np.concatenate([left, x[bi, lo:hi]], 0)
        for t in range(hi - lo):
            pre = (xs[t:t + W] * w.T).sum(0) + (0 if b is None else f64(b))
            out[bi, lo + t] = pre / (1 + np.exp(-pre)) if silu else pre
        if new_state is not None:
            new_state[row] = xs[len(xs) - (W - 1):].T if W > 1 else new_state[row]
    return out, new_state


CAUSAL = [
    # (B, L, C, W, bias, state, varlen)
    (2, 9, 5, 4, True, False, None),
    (2, 9, 5, 4, False, True, None),
    (1, 1, 6, 4, True, True, None),  # decode step
    (3, 7, 3, 1, True, False, None),
    (1, 12, 4, 3, True, True, [0, 5, 5, 12]),  # an empty sequence too
    (2, 10, 9, 11, True, True, None),  # W beyond the register window
]


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("case", CAUSAL, ids=str)
@pytest.mark.parametrize("silu", [False, True])
def test_causal_conv1d_against_numpy(rng, dtype, case, silu):
    B, L, C, W, with_bias, with_state, varlen = case
    ctx = Ctx(rng, dtype=dname(dtype), case=case, silu=silu)
    x, w = randn(rng, (B, L, C), dtype), randn(rng, (C, W), dtype, scale=0.5)
    b = randn(rng, (C,), dtype) if with_bias else None
    rows = B if varlen is None else len(varlen) - 1
    state = randn(rng, (rows, C, W - 1), dtype) if with_state else None
    cu = None if varlen is None else np.array(varlen, np.int32)
    ref, ref_state = ref_causal(x, w, b, state, cu, silu)
    initial = None if state is None else state.copy()
    before = snapshot(x, w, b)
    y = rudnn.causal_conv1d(x, w, b, state, cu, silu)
    verify(ctx, "causal_conv1d", y, ref, dtype)
    assert_unchanged(ctx, before, [x, w, b])
    if state is not None:
        verify(ctx, "updated state", state, ref_state, dtype)
    dy = randn(rng, y.shape, dtype)
    dx, dw, db, dst = rudnn.causal_conv1d_backward(dy, x, w, b, initial, cu, silu)
    assert (db is None) == (b is None) and (dst is None) == (initial is None)
    if dtype == F64:  # finite differences of the forward (the state copied: it is written)
        h = 1e-6
        args = [x, w] + ([b] if b is not None else []) + ([initial] if initial is not None else [])
        grads = [dx, dw] + ([db] if b is not None else []) + ([dst] if initial is not None else [])
        us = [rng.standard_normal(a.shape) for a in args]

        def f(*a):
            xx, ww = a[0], a[1]
            bb = a[2] if b is not None else None
            ss = a[-1].copy() if initial is not None else None
            return rudnn.causal_conv1d(xx, ww, bb, ss, cu, silu)

        plus = f(*[a + h * u for a, u in zip(args, us)])
        minus = f(*[a - h * u for a, u in zip(args, us)])
        numeric = float(np.sum(dy * (plus - minus)) / (2 * h))
        analytic = float(sum(np.sum(g * u) for g, u in zip(grads, us)))
        assert abs(numeric - analytic) <= 1e-5 * max(1.0, abs(analytic)), ctx.msg(
            f"causal_conv1d_backward: directional derivative {analytic!r}, finite differences {numeric!r}")
    else:
        r = rudnn.causal_conv1d_backward(f64(dy), f64(x), f64(w), f64(b), f64(initial), cu, silu)
        for name, got, want in zip(("dx", "dweight", "dbias", "dinitial_state"), (dx, dw, db, dst), r):
            if want is not None:
                verify(ctx, name, got, want, dtype)


def test_causal_conv1d_decode_steps_match_the_sequence(rng):
    ctx = Ctx(rng)
    x, w, b = randn(rng, (2, 6, 4), F32), randn(rng, (4, 4), F32), randn(rng, (4,), F32)
    full = rudnn.causal_conv1d(x, w, b, None, None, True)
    state = np.zeros((2, 4, 3), F32)
    steps = [rudnn.causal_conv1d(np.ascontiguousarray(x[:, t:t + 1]), w, b, state, None, True) for t in range(6)]
    check(ctx, "decode", np.concatenate(steps, 1), f64(full), F32)


def test_causal_conv1d_out_and_errors(rng):
    x, w = randn(rng, (2, 5, 3), F32), randn(rng, (3, 4), F32)
    o = np.full(x.shape, np.nan, F32)
    assert rudnn.causal_conv1d(x, w, out=o) is o
    np.testing.assert_array_equal(o, rudnn.causal_conv1d(x, w))
    dy = randn(rng, x.shape, F32)
    outs = (np.full(x.shape, np.nan, F32), np.full(w.shape, np.nan, F32), None, None)
    assert rudnn.causal_conv1d_backward(dy, x, w, out=outs) is outs
    ref = rudnn.causal_conv1d_backward(dy, x, w)
    np.testing.assert_array_equal(outs[0], ref[0])
    np.testing.assert_array_equal(outs[1], ref[1])
    ro_state = np.zeros((2, 3, 3), F32)
    ro_state.flags.writeable = False
    cases = [
        (rudnn.ShapeMismatch, r"^causal_conv1d: ", lambda: rudnn.causal_conv1d(x, w.T)),
        (rudnn.ShapeMismatch, r"^causal_conv1d: ", lambda: rudnn.causal_conv1d(x, w, np.zeros(4, F32))),
        (rudnn.ShapeMismatch, r"^causal_conv1d: ", lambda: rudnn.causal_conv1d(x, w, None, np.zeros((2, 3, 2), F32))),
        (rudnn.InvalidArgument, r"^causal_conv1d: conv_state", lambda: rudnn.causal_conv1d(x, w, None, ro_state)),
        (rudnn.DTypeMismatch, r"^causal_conv1d: ", lambda: rudnn.causal_conv1d(x, w.astype(F16))),
        (rudnn.Error, r"^causal_conv1d: ", lambda: rudnn.causal_conv1d(x, w, None, None, np.array([0, 5], np.int32))),
        (rudnn.Error, r"^causal_conv1d: ",
         lambda: rudnn.causal_conv1d(x[:1], w, None, None, np.array([0, 5], np.int64))),
        (rudnn.InvalidArgument, r"^causal_conv1d: silu must be a bool", lambda: rudnn.causal_conv1d(x, w, silu=1)),
        (rudnn.Error, r"^causal_conv1d: ", lambda: rudnn.causal_conv1d(x, np.zeros((3, 0), F32))),
        (rudnn.ShapeMismatch, r"^causal_conv1d_backward: ", lambda: rudnn.causal_conv1d_backward(x[:, :2], x, w)),
        (rudnn.Error, r"^causal_conv1d_backward: ",
         lambda: rudnn.causal_conv1d_backward(dy, x, w, out=(None, None, None, None))),
    ]
    for exc, pattern, call in cases:
        with pytest.raises(exc, match=pattern):
            call()
