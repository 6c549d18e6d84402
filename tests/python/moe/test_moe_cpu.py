"""CPU tests of the mixture-of-experts family through the rudnn package: softmax top-k and
group-limited sigmoid routing, dispatch (a stable grouping by expert), SwiGLU experts, combine
and their backward passes, the router's training weights, native SwiGLU, expert projections
and the one-call moe_forward / moe_inference / moe_backward, against NumPy float64
references written here (moe.h's definitions) and finite differences in float64; out= of the
row-wise ops; the opaque plan and state objects; errors reaching Python as the rudnn.Error
subclass naming the op (the step) and the argument. Inputs are random with a fresh seed per
run (printed in every failure message); RUDNN_TEST_SEED=<int> replays one.
"""

import numpy as np
import pytest
from support import F16, F32, Ctx, assert_unchanged, check, f64, randn, snapshot

import rudnn
from rudnn import moe

F64 = np.float64
DTYPES = [F32, F16, F64]


def dname(dtype):
    return np.dtype(dtype).name


def verify(ctx, what, got, ref, dtype, tol=1e-10):
    if dtype != F64:
        check(ctx, what, got, ref, dtype)
        return
    got = np.asarray(got)
    assert got.shape == ref.shape, ctx.msg(f"{what}: shape {got.shape}, expected {ref.shape}")
    if ref.size:
        np.testing.assert_allclose(got.astype(F64), ref, rtol=tol, atol=tol, err_msg=ctx.msg(what))


# ---- NumPy float64 references ----------------------------------------------------------------


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def silu(x):
    return x * sigmoid(x)


def ref_route(logits, k, renormalize):
    l = f64(logits)
    idx = np.argsort(-l, axis=1, kind="stable")[:, :k]  # ranks the logits; ties to the lower id
    w = np.take_along_axis(softmax(l), idx, 1)
    if renormalize:
        w = w / w.sum(1, keepdims=True)
    return idx, w


def ref_route_grouped(logits, bias, k, groups, selected, top_two, renormalize, scale):
    s = sigmoid(f64(logits))
    c = s + (0 if bias is None else f64(bias))
    T, E = c.shape
    per = E // groups
    cg = c.reshape(T, groups, per)
    srt = -np.sort(-cg, axis=2)
    score = srt[:, :, 0] + (srt[:, :, 1] if top_two else 0)
    keep = np.argsort(-score, axis=1, kind="stable")[:, :selected]
    masked = np.full_like(c, -np.inf)
    for t in range(T):
        for g in keep[t]:
            masked[t, g * per:(g + 1) * per] = c[t, g * per:(g + 1) * per]
    idx = np.argsort(-masked, axis=1, kind="stable")[:, :k]
    w = np.take_along_axis(s, idx, 1)
    if renormalize:
        w = w / w.sum(1, keepdims=True)
    return idx, w * scale


def ref_dispatch(idx, E):
    """(token_of_row, row_of_slot, offsets): rows grouped by expert, tokens ascending."""
    T, k = idx.shape
    pairs = sorted(((int(idx[t, j]), t, j) for t in range(T) for j in range(k)))
    token_of_row = np.array([t for _, t, _ in pairs], np.int64)
    row_of_slot = np.zeros((T, k), np.int64)
    for r, (_, t, j) in enumerate(pairs):
        row_of_slot[t, j] = r
    counts = np.bincount(idx.reshape(-1), minlength=E)
    return token_of_row, row_of_slot, np.concatenate([[0], np.cumsum(counts)])


def ref_expert(x, e, gate, up, down):
    g, u, d = f64(gate)[e], f64(up)[e], f64(down)[e]
    return d @ (silu(g @ x) * (u @ x))


def ref_moe(x, logits, gate, up, down, k, renormalize):
    idx, w = ref_route(logits, k, renormalize)
    x = f64(x)
    out = np.zeros(x.shape)
    for t in range(x.shape[0]):
        for j in range(k):
            out[t] += w[t, j] * ref_expert(x[t], idx[t, j], gate, up, down)
    return out


def weights_of(rng, E, I, H, dtype, scale=0.3):
    return randn(rng, (E, I, H), dtype, scale), randn(rng, (E, I, H), dtype, scale), randn(rng, (E, H, I), dtype, scale)


# ---- routing -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("shape_k", [((7, 5), 2), ((1, 1), 1), ((9, 16), 4), ((0, 4), 2), ((6, 8), 8)], ids=str)
@pytest.mark.parametrize("renormalize", [False, True])
def test_route_against_numpy(rng, dtype, shape_k, renormalize):
    (T, E), k = shape_k
    ctx = Ctx(rng, dtype=dname(dtype), T=T, E=E, k=k, renormalize=renormalize)
    logits = randn(rng, (T, E), dtype)
    before = snapshot(logits)
    plan = rudnn.route(logits, k, renormalize)
    assert isinstance(plan, moe.RoutingPlan) and (plan.tokens, plan.top_k, plan.experts) == (T, k, E)
    idx, w = ref_route(logits, k, renormalize)
    assert plan.expert_indices.dtype == np.uint32
    np.testing.assert_array_equal(plan.expert_indices.astype(np.int64), idx, err_msg=ctx.msg("indices"))
    verify(ctx, "weights", plan.weights, w, dtype)
    assert_unchanged(ctx, before, [logits])
    io_, wo = np.full((T, k), 7, np.uint32), np.full((T, k), np.nan, dtype)
    assert rudnn.route(logits, k, renormalize, out=(io_, wo)) == (io_, wo)
    np.testing.assert_array_equal(io_, plan.expert_indices)
    np.testing.assert_array_equal(wo, plan.weights)


def test_route_special_rows(rng):
    logits = randn(rng, (3, 6), F32)
    logits[0, 2] = np.nan
    logits[1] = -np.inf
    plan = rudnn.route(logits, 2)
    assert np.all(np.isnan(plan.weights[:2])) and not np.any(np.isnan(plan.weights[2]))
    assert plan.expert_indices[0, 0] == 2, "NaN ranks first, as torch.topk"
    assert len(set(plan.expert_indices[1].tolist())) == 2


@pytest.mark.parametrize("dtype", [F32, F64], ids=dname)
@pytest.mark.parametrize("case", [
    # (E, groups, selected, k, top_two, renormalize, scale, bias)
    (16, 4, 2, 3, False, True, 2.5, True),
    (16, 4, 2, 3, True, False, 1.0, True),
    (8, 1, 1, 2, False, False, 1.0, False),
    (12, 3, 3, 12, True, True, 0.5, True),
], ids=str)
def test_route_sigmoid_grouped_against_numpy(rng, dtype, case):
    E, groups, selected, k, top_two, renormalize, scale, with_bias = case
    ctx = Ctx(rng, dtype=dname(dtype), case=case)
    logits = randn(rng, (10, E), dtype)
    bias = randn(rng, (E,), F32, 0.2) if with_bias else None
    plan = rudnn.route_sigmoid_grouped(logits, bias, k, groups, selected, top_two, renormalize, scale)
    idx, w = ref_route_grouped(logits, bias, k, groups, selected, top_two, renormalize, scale)
    np.testing.assert_array_equal(plan.expert_indices.astype(np.int64), idx, err_msg=ctx.msg("indices"))
    verify(ctx, "weights", plan.weights, w, dtype, tol=1e-6 if dtype == F32 else 1e-10)
    io_, wo = np.zeros((10, k), np.uint32), np.zeros((10, k), dtype)
    rudnn.route_sigmoid_grouped(logits, bias, k, groups, selected, top_two, renormalize, scale, out=(io_, wo))
    np.testing.assert_array_equal(io_, plan.expert_indices)
    np.testing.assert_array_equal(wo, plan.weights)


# ---- dispatch, experts, combine and their gradients -------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_pipeline_against_numpy(rng, dtype):
    T, H, E, I, k = 9, 8, 4, 6, 2
    ctx = Ctx(rng, dtype=dname(dtype))
    x, logits = randn(rng, (T, H), dtype), randn(rng, (T, E), F32)
    gate, up, down = weights_of(rng, E, I, H, dtype)
    plan = rudnn.route(logits, k)
    tokens = plan.dispatch(x)
    assert isinstance(tokens, moe.DispatchedTokens)
    assert (tokens.tokens, tokens.top_k, tokens.experts, tokens.hidden) == (T, k, E, H)
    idx = plan.expert_indices.astype(np.int64)
    token_of_row, row_of_slot, offsets = ref_dispatch(idx, E)
    np.testing.assert_array_equal(tokens.token_of_row, token_of_row, err_msg=ctx.msg("token_of_row"))
    np.testing.assert_array_equal(tokens.row_of_slot, row_of_slot, err_msg=ctx.msg("row_of_slot"))
    np.testing.assert_array_equal(tokens.offsets, offsets, err_msg=ctx.msg("offsets"))
    np.testing.assert_array_equal(tokens.rows, x[token_of_row])
    experts = rudnn.SwiGluExperts(gate, up, down)
    assert (experts.experts, experts.inter, experts.hidden) == (E, I, H)
    assert np.shares_memory(experts.gate, gate) and np.shares_memory(experts.down, down), "held, not copied"
    np.testing.assert_array_equal(experts.up, up)
    expert_rows = np.array(
        [ref_expert(f64(x)[token_of_row[r]], _expert_of(r, offsets), gate, up, down) for r in range(T * k)])
    for strategy in ("auto", "scalar"):
        got = experts.forward_dispatched(tokens, strategy=strategy)
        verify(ctx, f"forward_dispatched ({strategy})", got, expert_rows, dtype, tol=1e-9)
    eo = experts.forward_dispatched(tokens)
    w = f64(plan.weights)
    combined = np.array([sum(w[t, j] * f64(eo)[row_of_slot[t, j]] for j in range(k)) for t in range(T)])
    verify(ctx, "combine", tokens.combine(eo), combined, dtype)
    dy = randn(rng, (T, H), dtype)
    for strategy in ("serial", "plane"):
        dexpert, dweights = tokens.combine_backward(eo, dy, strategy=strategy)
        ref_de = np.zeros((T * k, H))
        for t in range(T):
            for j in range(k):
                ref_de[row_of_slot[t, j]] = w[t, j] * f64(dy)[t]
        verify(ctx, "dexpert", dexpert, ref_de, dtype)
        assert dweights.dtype == F32
        ref_dw = np.array([[f64(dy)[t] @ f64(eo)[row_of_slot[t, j]] for j in range(k)] for t in range(T)])
        check(ctx, "dweights", dweights, ref_dw, F32)
    drows = randn(rng, (T * k, H), dtype)
    ref_dx = np.array([sum(f64(drows)[row_of_slot[t, j]] for j in range(k)) for t in range(T)])
    verify(ctx, "dispatch_backward", tokens.dispatch_backward(drows), ref_dx, dtype)


def _expert_of(r, offsets):
    return int(np.searchsorted(offsets, r, side="right") - 1)


def test_expert_training_cache_backward_matches_finite_differences(rng):
    T, H, E, I, k = 6, 5, 3, 4, 2
    ctx = Ctx(rng)
    x, logits = randn(rng, (T, H), F64), randn(rng, (T, E), F64)
    gate, up, down = weights_of(rng, E, I, H, F64)
    tokens = rudnn.route(logits, k).dispatch(x)
    experts = rudnn.SwiGluExperts(gate, up, down)
    out, cache = experts.forward_dispatched_training(tokens)
    assert isinstance(cache, moe.ExpertTrainingCache)
    np.testing.assert_array_equal(out, experts.forward_dispatched(tokens, strategy="scalar"))
    dexpert = randn(rng, out.shape, F64)
    dinput, dgate, dup, ddown = cache.backward(dexpert)
    rows = f64(tokens.rows)
    h = 1e-6
    us = [rng.standard_normal(a.shape) for a in (rows, gate, up, down)]

    def f(r, g, u, d):
        eid = [_expert_of(i, f64(tokens.offsets).astype(np.int64)) for i in range(r.shape[0])]
        return np.array([ref_expert(r[i], eid[i], g, u, d) for i in range(r.shape[0])])

    plus = f(*[a + h * u for a, u in zip((rows, gate, up, down), us)])
    minus = f(*[a - h * u for a, u in zip((rows, gate, up, down), us)])
    numeric = float(np.sum(dexpert * (plus - minus)) / (2 * h))
    analytic = float(sum(np.sum(f64(g) * u) for g, u in zip((dinput, dgate, dup, ddown), us)))
    assert abs(numeric - analytic) <= 1e-5 * max(1.0, abs(analytic)), ctx.msg(f"{analytic} vs {numeric}")
    only = cache.backward(dexpert, input=False, up=False)
    assert only[0] is None and only[2] is None and only[1] is not None and only[3] is not None


# ---- router training weights, native SwiGLU, expert projections --------------------------------


@pytest.mark.parametrize("scoring", ["softmax", "sigmoid"])
@pytest.mark.parametrize("renormalize", [False, True])
def test_selected_router_weights_and_backward(rng, scoring, renormalize):
    ctx = Ctx(rng, scoring=scoring, renormalize=renormalize)
    T, E, k, scale = 5, 7, 3, 1.5
    logits = randn(rng, (T, E), F64)
    idx = np.stack([rng.permutation(E)[:k] for _ in range(T)]).astype(np.int32)
    idx[0, 1] = idx[0, 0]  # a repeated index counts twice

    def ref(l):
        q = np.take_along_axis(softmax(l) if scoring == "softmax" else sigmoid(l), idx.astype(np.int64), 1)
        return scale * q / (q.sum(1, keepdims=True) if renormalize else 1)

    w = rudnn.selected_router_weights(logits, idx, scoring, renormalize, scale)
    verify(ctx, "weights", w, ref(logits), F32) if w.dtype == F32 else verify(ctx, "weights", w, ref(logits), F64)
    g = randn(rng, (T, k), F32)
    dl = rudnn.selected_router_backward(logits, idx, g, scoring, renormalize, scale)
    assert dl.shape == logits.shape and dl.dtype == F64
    h, u = 1e-6, rng.standard_normal(logits.shape)
    numeric = float(np.sum(f64(g) * (ref(logits + h * u) - ref(logits - h * u))) / (2 * h))
    assert abs(numeric - float(np.sum(dl * u))) <= 1e-6 * max(1.0, abs(numeric)), ctx.msg("selected_router_backward")
    bad = idx.copy()
    bad[2, 0] = E + 3
    assert np.all(np.isnan(rudnn.selected_router_weights(logits, bad)[2]))
    plan = rudnn.route(logits, k).into_training(logits, scoring, renormalize, scale)
    assert isinstance(plan, moe.RouterTrainingPlan)
    np.testing.assert_array_equal(plan.routing.weights, rudnn.selected_router_weights(
        logits, plan.routing.expert_indices, scoring, renormalize, scale))
    np.testing.assert_array_equal(plan.backward(g), rudnn.selected_router_backward(
        logits, plan.routing.expert_indices, g, scoring, renormalize, scale))
    o = np.full((T, k), np.nan, w.dtype)
    assert rudnn.selected_router_weights(logits, idx, scoring, renormalize, scale, out=o) is o
    np.testing.assert_array_equal(o, w)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_native_swiglu(rng, dtype):
    ctx = Ctx(rng, dtype=dname(dtype))
    g, u, d = randn(rng, (4, 9), dtype, 2), randn(rng, (4, 9), dtype), randn(rng, (4, 9), dtype)
    s = silu(f64(g)).astype(dtype).astype(F64)  # the stored SiLU
    verify(ctx, "native_swiglu", rudnn.native_swiglu(g, u), s * f64(u), dtype)
    dg, du = rudnn.native_swiglu_backward(g, u, d)
    sg = sigmoid(f64(g))
    verify(ctx, "dup", du, f64(d) * s, dtype)
    verify(ctx, "dgate", dg, f64(d) * f64(u) * sg * (1 + f64(g) * (1 - sg)), dtype)
    only = rudnn.native_swiglu_backward(g, u, d, gate_grad=False)
    assert only[0] is None
    np.testing.assert_array_equal(only[1], du)
    o = np.full(g.shape, np.nan, dtype)
    assert rudnn.native_swiglu(g, u, out=o) is o
    outs = (np.full(g.shape, np.nan, dtype), None)
    rudnn.native_swiglu_backward(g, u, d, out=outs)
    np.testing.assert_array_equal(outs[0], dg)


def test_expert_projection(rng):
    ctx = Ctx(rng)
    R, K, N, E, start = 7, 5, 4, 3, 10
    x, w = randn(rng, (R, K), F64), randn(rng, (E, N, K), F64)
    ids = rng.integers(start, start + E, R).astype(np.uint32)
    ids[3] = start + E  # no expert here: a NaN row
    out, state = rudnn.expert_projection_forward(x, ids, w, expert_start=start)
    assert isinstance(state, moe.ExpertProjectionState)
    ok = np.arange(R) != 3
    ref = np.array([w[int(i) - start] @ x[r] if ok[r] else np.full(N, np.nan) for r, i in enumerate(ids)])
    verify(ctx, "expert_projection_forward", out[ok], ref[ok], F64)
    assert np.all(np.isnan(out[3]))
    g = randn(rng, (R, N), F64)
    dx, dw = rudnn.expert_projection_backward(state, g)
    ref_dw = np.zeros((E, N, K))
    for r in range(R):
        if ok[r]:
            ref_dw[int(ids[r]) - start] += np.outer(g[r], x[r])
    verify(ctx, "dinput", dx[ok], np.array([w[int(ids[r]) - start].T @ g[r] for r in range(R) if ok[r]]), F64)
    check(ctx, "dweights", dw, ref_dw, F32)
    assert rudnn.expert_projection_backward(state, g, weights=False)[1] is None
    with pytest.raises(rudnn.InvalidArgument, match=r"^expert_projection_forward: "):
        rudnn.expert_projection_forward(x, ids, w, expert_start=-1)


# ---- the one-call forward and backward ----------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("renormalize", [False, True])
def test_moe_forward_inference_and_backward(rng, dtype, renormalize):
    T, H, E, I, k = 8, 6, 4, 5, 2
    ctx = Ctx(rng, dtype=dname(dtype), renormalize=renormalize)
    x = randn(rng, (T, H), dtype)
    # No two logits of a row within 0.01: the finite differences below move them by a few
    # 1e-3, which must leave the selection as it is (a near tie made direction() give up on
    # about 1 draw in 80).
    logits = randn(rng, (T, E), dtype)
    while np.diff(np.sort(f64(logits), axis=1), axis=1).min() < 0.01:
        logits = randn(rng, (T, E), dtype)
    gate, up, down = weights_of(rng, E, I, H, dtype)
    before = snapshot(x, logits, gate, up, down)
    y, state = rudnn.moe_forward(x, logits, gate, up, down, top_k=k, renormalize=renormalize)
    assert isinstance(state, moe.MoeState) and state.has_expert_caches
    # the routing weights are float32 (selected_router_weights), whatever the dtype
    verify(ctx, "moe_forward", y, ref_moe(x, logits, gate, up, down, k, renormalize), dtype, tol=2e-6)
    np.testing.assert_array_equal(y, rudnn.moe_inference(x, logits, gate, up, down, top_k=k, renormalize=renormalize))
    np.testing.assert_array_equal(state.route_indices(), rudnn.route(logits, k).expert_indices)
    assert_unchanged(ctx, before, [x, logits, gate, up, down])
    dy = randn(rng, y.shape, dtype)
    grads = rudnn.moe_backward(state, dy)
    assert [g.shape for g in grads] == [x.shape, logits.shape, gate.shape, up.shape, down.shape]
    assert grads[2].dtype == F32
    if dtype == F64:
        args = [x, logits, gate, up, down]

        def f(*a):
            return rudnn.moe_inference(*a, top_k=k, renormalize=renormalize)

        # Logits apart, with a larger step: the routing weights are rounded to float32. The
        # selection is piecewise constant in the logits: a logits direction whose step changes
        # it (two logits of a row within the step) crosses a jump, and is drawn again.
        selected = rudnn.route(logits, k).expert_indices

        def direction(which, h):
            for _ in range(100):
                us = [rng.standard_normal(a.shape) if i in which else np.zeros(a.shape) for i, a in enumerate(args)]
                if all(np.array_equal(rudnn.route(logits + sign * h * us[1], k).expert_indices, selected)
                       for sign in (1, -1)):
                    return us
            raise AssertionError(ctx.msg("no direction keeps the selection within the step"))

        for which, h, rtol in (((0, 2, 3, 4), 1e-6, 1e-5), ((1,), 1e-3, 1e-3)):
            us = direction(which, h)
            plus = f(*[a + h * u for a, u in zip(args, us)])
            minus = f(*[a - h * u for a, u in zip(args, us)])
            numeric = float(np.sum(dy * (plus - minus)) / (2 * h))
            analytic = float(sum(np.sum(f64(g) * u) for g, u in zip(grads, us)))
            assert abs(numeric - analytic) <= rtol * max(1.0, abs(analytic)), ctx.msg(
                f"moe_backward {which}: directional derivative {analytic!r}, finite differences {numeric!r}")
    y2, state2 = rudnn.moe_forward(x, logits, gate, up, down, top_k=k, renormalize=renormalize, grads=["logits"])
    assert not state2.has_expert_caches
    g2 = rudnn.moe_backward(state2, dy, grads=("logits",))
    assert g2[0] is None and g2[2] is None
    np.testing.assert_array_equal(g2[1], grads[1])
    with pytest.raises(rudnn.InvalidArgument, match=r"^moe_backward: "):
        rudnn.moe_backward(state2, dy, grads=("input",))


def test_moe_sigmoid_grouped_forward(rng):
    T, H, E, I = 6, 4, 8, 3
    ctx = Ctx(rng)
    x, logits = randn(rng, (T, H), F64), randn(rng, (T, E), F64)
    bias = randn(rng, (E,), F32, 0.3)
    gate, up, down = weights_of(rng, E, I, H, F64)
    opts = dict(top_k=3, groups=4, selected_groups=2, group_top_two=True, renormalize=True, route_scale=2.0)
    y = rudnn.moe_inference(x, logits, gate, up, down, bias=bias, routing="sigmoid_grouped", **opts)
    idx, w = ref_route_grouped(logits, bias, 3, 4, 2, True, True, 2.0)
    ref = np.array([sum(w[t, j] * ref_expert(x[t], idx[t, j], gate, up, down) for j in range(3)) for t in range(T)])
    verify(ctx, "sigmoid_grouped", y, ref, F64, tol=2e-6)  # float32 routing weights
    with pytest.raises(rudnn.InvalidArgument, match=r"^moe_forward: "):
        rudnn.moe_forward(x, logits, gate, up, down, bias=bias)


def test_moe_errors_name_the_step_and_argument(rng):
    x, logits = randn(rng, (4, 6), F32), randn(rng, (4, 3), F32)
    gate, up, down = weights_of(rng, 3, 5, 6, F32)
    plan = rudnn.route(logits, 2)
    cases = [
        (rudnn.InvalidArgument, r"^route: ", lambda: rudnn.route(logits, 4)),
        (rudnn.InvalidArgument, r"^route: top_k must be an int", lambda: rudnn.route(logits, True)),
        (rudnn.InvalidArgument, r"^route: renormalize must be a bool", lambda: rudnn.route(logits, 1, 1)),
        (rudnn.ShapeMismatch, r"^route: ", lambda: rudnn.route(logits[0], 1)),
        (rudnn.DTypeMismatch, r"^route: ", lambda: rudnn.route(logits.astype(np.int32), 1)),
        (rudnn.InvalidArgument, r"^route: out must hold two arrays",
         lambda: rudnn.route(logits, 2, out=(None, np.zeros((4, 2), F32)))),
        (rudnn.InvalidArgument, r"^route_sigmoid_grouped: ", lambda: rudnn.route_sigmoid_grouped(logits, None, 1, 2)),
        (rudnn.InvalidArgument, r"^route_sigmoid_grouped: scale ",
         lambda: rudnn.route_sigmoid_grouped(logits, None, 1, scale=True)),
        (rudnn.Error, r"^dispatch: ", lambda: plan.dispatch(x[:3])),
        (rudnn.Error, r"^combine: ", lambda: plan.dispatch(x).combine(x)),
        (rudnn.InvalidArgument, r"^combine_backward: strategy must be one of",
         lambda: plan.dispatch(x).combine_backward(np.zeros((8, 6), F32), x, strategy="tree")),
        (rudnn.Error, r"^SwiGluExperts: ", lambda: rudnn.SwiGluExperts(gate, up[:, :4], down)),
        (rudnn.InvalidArgument, r"^forward_dispatched: strategy must be one of",
         lambda: rudnn.SwiGluExperts(gate, up, down).forward_dispatched(plan.dispatch(x), strategy="fast")),
        (rudnn.InvalidArgument, r"^moe_forward: routing must be one of",
         lambda: rudnn.moe_forward(x, logits, gate, up, down, routing="topk")),
        (rudnn.InvalidArgument, r"^moe_forward: grads element must be one of",
         lambda: rudnn.moe_forward(x, logits, gate, up, down, grads=["bias"])),
        (rudnn.InvalidArgument, r"^moe_forward: scoring must be one of",
         lambda: rudnn.moe_forward(x, logits, gate, up, down, scoring="relu")),
        (rudnn.Error, r"^route: ", lambda: rudnn.moe_forward(x, logits, gate, up, down, top_k=9)),
        (rudnn.InvalidArgument, r"^native_swiglu: up is None", lambda: rudnn.native_swiglu(x, None)),
        (rudnn.Error, r"^native_swiglu: ", lambda: rudnn.native_swiglu(x, x[:2])),
        (rudnn.Error, r"^selected_router_weights: ",
         lambda: rudnn.selected_router_weights(logits, np.zeros((4, 2), F32))),
    ]
    for exc, pattern, call in cases:
        with pytest.raises(exc, match=pattern):
            call()
