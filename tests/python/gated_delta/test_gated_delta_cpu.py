"""CPU tests of the gated delta family through the rudnn package: gated_delta,
gated_delta_steps, gated_delta_slots (spec 003's layout, grouped key heads) and
gated_delta_rule (spec 000's layout) against a NumPy float64 recurrence written here, over
dtypes; its chunked prefill (chunk_size=) and spec 003's chunk_gated_delta(_slots, varlen)
against the recurrence; chaining (T steps equal T one-step calls through the returned state); the pool updated
in place and only at the named slots; the varlen forms against each sequence alone; both
backward passes against finite differences of the forward in float64; out=; inputs unchanged;
errors reaching Python as the
rudnn.Error subclass naming the op and the argument. Inputs are random with a fresh seed per
run (printed in every failure message); RUDNN_TEST_SEED=<int> replays one.
"""

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
        # The recurrence compounds one rounding of each input per step: a looser bound than
        # one op's rounding, scaled by the result's largest value.
        got = np.asarray(got)
        assert got.dtype == np.dtype(dtype) and got.shape == ref.shape, ctx.msg(f"{what}: {got.dtype} {got.shape}")
        if ref.size:
            tol = {F32: 1e-5, F16: 2e-3}[dtype]
            err = np.max(np.abs(f64(got) - ref))
            assert err <= tol * max(1.0, np.max(np.abs(ref))), ctx.msg(f"{what}: max error {err:.3g}")
        return
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-10, atol=1e-10, err_msg=ctx.msg(what))


# ---- NumPy float64 reference --------------------------------------------------------------------


def ref_gated_delta(q, k, v, g, beta, state):
    """Spec 003: (y [B, T, Hv, Dv], every step's state [B, T, Hv, Dv, Dk])."""
    q, k, v, g, beta, S = f64(q), f64(k), f64(v), f64(g), f64(beta), f64(state).copy()
    B, T, Hk, _ = q.shape
    Hv, Dv = v.shape[2], v.shape[3]
    group = Hv // Hk
    y = np.zeros((B, T, Hv, Dv))
    states = np.zeros((B, T) + S.shape[1:])
    for b in range(B):
        for h in range(Hv):
            hk = h // group
            for t in range(T):
                S[b, h] *= g[b, t, h]
                kt = k[b, t, hk]
                S[b, h] += beta[b, t, h] * np.outer(v[b, t, h] - S[b, h] @ kt, kt)
                y[b, t, h] = S[b, h] @ q[b, t, hk]
                states[b, t, h] = S[b, h]
    return y, states


def inputs(rng, dtype, B=2, T=5, Hk=2, Hv=4, Dk=8, Dv=6, state_dtype=F32):
    k = randn(rng, (B, T, Hk, Dk), F64)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)  # as models feed it: l2-normalised keys
    return dict(
        q=randn(rng, (B, T, Hk, Dk), dtype),
        k=k.astype(dtype),
        v=randn(rng, (B, T, Hv, Dv), dtype),
        g=rng.uniform(0.5, 1.0, (B, T, Hv)).astype(dtype),
        beta=rng.uniform(0.0, 1.0, (B, T, Hv)).astype(dtype),
        state=randn(rng, (B, Hv, Dv, Dk), state_dtype, scale=0.5),
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("dims", [(2, 5, 2, 4, 8, 6), (1, 1, 1, 1, 4, 4), (3, 7, 1, 3, 16, 5), (0, 3, 1, 1, 4, 4),
                                  (1, 0, 2, 2, 4, 4)], ids=str)
def test_gated_delta_and_steps_against_numpy(rng, dtype, dims):
    B, T, Hk, Hv, Dk, Dv = dims
    ctx = Ctx(rng, dtype=dname(dtype), dims=dims)
    a = inputs(rng, dtype, B, T, Hk, Hv, Dk, Dv)
    before = snapshot(*a.values())
    y, state = rudnn.gated_delta(**a)
    ref_y, ref_states = ref_gated_delta(**a)
    verify(ctx, "y", y, ref_y, dtype)
    assert state.dtype == F32, ctx.msg(f"state dtype {state.dtype}")
    final = ref_states[:, -1] if T else f64(a["state"])
    verify(ctx, "final state", state, final, F32 if dtype != F64 else F32)
    y2, states = rudnn.gated_delta_steps(**a)
    np.testing.assert_array_equal(y2, y, err_msg=ctx.msg("gated_delta_steps' y"))
    assert states.shape == (B, T, Hv, Dv, Dk), ctx.msg(f"states shape {states.shape}")
    verify(ctx, "states", states, ref_states, F32)
    if T:
        np.testing.assert_array_equal(states[:, -1], state, err_msg=ctx.msg("last step state"))
    assert_unchanged(ctx, before, list(a.values()))


def test_float64_state_and_chained_steps(rng):
    ctx = Ctx(rng)
    a = inputs(rng, F64, state_dtype=F64)
    y, state = rudnn.gated_delta(**a)
    ref_y, ref_states = ref_gated_delta(**a)
    verify(ctx, "y", y, ref_y, F64)
    verify(ctx, "state", state, ref_states[:, -1], F64)
    # T steps equal T one-step calls chained through the state (on the CPU up to the float32
    # rounding of the state between the calls; bit for bit on the GPU: test_torch_gated_delta).
    b = inputs(rng, F32)
    y_all, s_all = rudnn.gated_delta(**b)
    s = b["state"]
    for t in range(b["q"].shape[1]):
        step = {n: b[n][:, t : t + 1] for n in ("q", "k", "v", "g", "beta")}
        y_t, s = rudnn.gated_delta(**step, state=s)
        check(ctx, f"chained y at step {t}", y_t[:, 0], f64(y_all[:, t]), F32)
    check(ctx, "chained final state", s, f64(s_all), F32)


@pytest.mark.parametrize("slot_dtype", [np.int32, np.int64])
def test_gated_delta_slots_updates_the_pool_in_place(rng, slot_dtype):
    ctx = Ctx(rng, slot_dtype=np.dtype(slot_dtype).name)
    a = inputs(rng, F32, B=3)
    pool = randn(rng, (6,) + a["state"].shape[1:], F32)
    slots = rng.permutation(6)[:3].astype(slot_dtype)
    original = pool.copy()
    state = pool[slots]
    del a["state"]
    y = rudnn.gated_delta_slots(**a, pool=pool, slots=slots)
    ref_y, ref_state = rudnn.gated_delta(**a, state=state)
    np.testing.assert_array_equal(y, ref_y, err_msg=ctx.msg("slots' y"))
    np.testing.assert_array_equal(pool[slots], ref_state, err_msg=ctx.msg("pool at the slots"))
    others = np.setdiff1d(np.arange(6), slots)
    np.testing.assert_array_equal(pool[others], original[others], err_msg=ctx.msg("pool elsewhere"))
    ro = pool.copy()
    ro.flags.writeable = False
    with pytest.raises(rudnn.InvalidArgument, match="^gated_delta_slots: pool is read-only"):
        rudnn.gated_delta_slots(**a, pool=ro, slots=slots)
    with pytest.raises(rudnn.Error, match="^gated_delta_slots: "):
        rudnn.gated_delta_slots(**a, pool=pool, slots=np.array([0, 0, 1], slot_dtype))
    with pytest.raises(rudnn.Error, match="^gated_delta_slots: "):
        rudnn.gated_delta_slots(**a, pool=pool, slots=np.array([0, 6, 1], slot_dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_gated_delta_rule_against_numpy(rng, dtype):
    ctx = Ctx(rng, dtype=dname(dtype))
    B, H, T, K, V = 2, 3, 6, 8, 5
    query = randn(rng, (B, H, T, K), dtype)
    key = randn(rng, (B, H, T, K), F64)
    key = (key / np.linalg.norm(key, axis=-1, keepdims=True)).astype(dtype)
    value = randn(rng, (B, H, T, V), dtype)
    beta = rng.uniform(0, 1, (B, H, T)).astype(dtype)
    log_decay = rng.uniform(-0.7, 0.0, (B, H, T)).astype(F32)
    init = randn(rng, (B, H, K, V), F32, scale=0.5)
    scale = float(np.float32(K**-0.5))  # the op takes it as a float32
    out, final = rudnn.gated_delta_rule(query, key, value, beta, log_decay, init, scale)
    # The same recurrence in spec 003's layout: [B, T, H, D], g = exp(log_decay), S = state^T.
    t = lambda a: np.moveaxis(f64(a), 2, 1)  # noqa: E731
    ref_y, ref_states = ref_gated_delta(
        t(query) * scale, t(key), t(value), np.exp(f64(log_decay)).transpose(0, 2, 1), f64(beta).transpose(0, 2, 1),
        np.swapaxes(f64(init), -1, -2),
    )
    verify(ctx, "output", out, np.moveaxis(ref_y, 1, 2), dtype)
    assert final.dtype == F32 and final.shape == (B, H, K, V), ctx.msg(f"final_state {final.dtype} {final.shape}")
    verify(ctx, "final_state", final, np.swapaxes(ref_states[:, -1], -1, -2), F32)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("chunk_size", [1, 4, 64])
def test_chunked_prefill_equals_the_recurrence(rng, dtype, chunk_size):
    ctx = Ctx(rng, dtype=dname(dtype), chunk_size=chunk_size)
    B, H, T, K, V = 2, 2, 11, 8, 5  # T not a multiple of 4: the last chunk is padded
    key = randn(rng, (B, H, T, K), F64)
    args = (
        randn(rng, (B, H, T, K), dtype),
        (key / np.linalg.norm(key, axis=-1, keepdims=True)).astype(dtype),
        randn(rng, (B, H, T, V), dtype),
        rng.uniform(0, 1, (B, H, T)).astype(dtype),
        rng.uniform(-0.7, 0.0, (B, H, T)).astype(F32),
        randn(rng, (B, H, K, V), F32, scale=0.5),
    )
    before = snapshot(*args)
    out, final = rudnn.gated_delta_rule(*args, 0.3, chunk_size=chunk_size)
    ref_out, ref_final = rudnn.gated_delta_rule(*[f64(a) if a.dtype != F32 or i < 4 else a for i, a in enumerate(args)],
                                                0.3)
    verify(ctx, "output", out, f64(ref_out), dtype)
    verify(ctx, "final_state", final, f64(ref_final), F32)
    assert_unchanged(ctx, before, args)
    # out= reaches chunk_gated_delta_rule_into; cu_seqlens its varlen form.
    bufs = (np.full(out.shape, np.nan, out.dtype), np.full(final.shape, np.nan, F32))
    assert rudnn.gated_delta_rule(*args, 0.3, chunk_size=chunk_size, out=bufs) is bufs
    np.testing.assert_array_equal(bufs[0], out, err_msg=ctx.msg("out="))
    packed = [np.concatenate([a[0:1], a[1:2]], axis=2) if i < 5 else a for i, a in enumerate(args)]
    cu = np.array([0, T, 2 * T], np.int32)
    vout, vfinal = rudnn.gated_delta_rule(*packed, 0.3, cu_seqlens=cu, chunk_size=chunk_size)
    verify(ctx, "varlen output", vout, np.concatenate([f64(ref_out)[0:1], f64(ref_out)[1:2]], axis=2), dtype)
    verify(ctx, "varlen final_state", vfinal, f64(ref_final), F32)


def directional(ctx, what, f, args, grads, weights, h=1e-6, rtol=1e-6):
    """sum_i <w_i, (f(x + h u) - f(x - h u))_i> / 2h equals sum_j <grad_j, u_j>, u random."""
    gen = np.random.default_rng(ctx.seed)
    us = [gen.standard_normal(a.shape) for a in args]
    plus = f(*[a + h * u for a, u in zip(args, us)])
    minus = f(*[a - h * u for a, u in zip(args, us)])
    numeric = sum(float(np.sum(w * (f64(p) - f64(m)))) for w, p, m in zip(weights, plus, minus)) / (2 * h)
    analytic = sum(float(np.sum(f64(gr) * u)) for gr, u in zip(grads, us))
    assert abs(numeric - analytic) <= rtol * max(1.0, abs(analytic)), ctx.msg(
        f"{what}: directional derivative {analytic!r}, finite differences {numeric!r}"
    )


@pytest.mark.parametrize("with_dstate", [True, False])
def test_gated_delta_backward_matches_finite_differences(rng, with_dstate):
    ctx = Ctx(rng, with_dstate=with_dstate)
    a = inputs(rng, F64, B=2, T=4, Hk=1, Hv=2, Dk=4, Dv=3, state_dtype=F64)
    y, state = rudnn.gated_delta(**a)
    dy = randn(rng, y.shape, F64)
    dstate = randn(rng, state.shape, F64) if with_dstate else None
    grads = rudnn.gated_delta_backward(dy, dstate, **a)
    assert len(grads) == 6
    for gr, (name, x) in zip(grads, a.items()):
        assert gr.shape == x.shape and gr.dtype == x.dtype, ctx.msg(f"d{name}: {gr.shape} {gr.dtype}")
    weights = [dy, dstate if with_dstate else np.zeros(state.shape)]
    directional(ctx, "gated_delta_backward", lambda *x: rudnn.gated_delta(*x), list(a.values()), grads, weights)


def test_gated_delta_rule_backward_matches_finite_differences(rng):
    ctx = Ctx(rng)
    B, H, T, K, V = 1, 2, 4, 4, 3
    args = [randn(rng, (B, H, T, K), F64), randn(rng, (B, H, T, K), F64, scale=0.5), randn(rng, (B, H, T, V), F64),
            rng.uniform(0, 1, (B, H, T)), rng.uniform(-0.5, 0, (B, H, T)).astype(F32),
            randn(rng, (B, H, K, V), F32)]
    out, final = rudnn.gated_delta_rule(*args, 0.7)
    dout, dfinal = randn(rng, out.shape, F64), randn(rng, final.shape, F64)
    grads = rudnn.gated_delta_rule_backward(dout, None, *args, 0.7)
    assert grads[4].dtype == F32 and grads[5].dtype == F32, ctx.msg("dlog_decay / dinitial_state must be float32")
    # Differentiate along the float64 inputs only (log_decay and the state are float32
    # operands: a 1e-6 step is below their resolution).
    f = lambda q, k, v, b: rudnn.gated_delta_rule(q, k, v, b, args[4], args[5], 0.7)  # noqa: E731
    directional(ctx, "gated_delta_rule_backward (doutput)", f, args[:4], grads[:4], [dout, np.zeros(final.shape)])
    # The final state is float32 whatever the inputs: a larger step keeps its rounding small.
    grads = rudnn.gated_delta_rule_backward(np.zeros(out.shape), dfinal, *args, 0.7)
    directional(ctx, "gated_delta_rule_backward (dfinal_state)", f, args[:4], grads[:4], [np.zeros(out.shape), dfinal],
                h=1e-3, rtol=1e-3)

    # chunk_size=: the chunked form's backward, on the CPU the same float64 reference.
    for chunk in (1, 2, 64):
        chunked = rudnn.gated_delta_rule_backward(np.zeros(out.shape), dfinal, *args, 0.7, chunk_size=chunk)
        for got, want in zip(chunked, grads):
            np.testing.assert_array_equal(got, want, err_msg=ctx.msg(f"chunk_size={chunk}"))
    with pytest.raises(rudnn.Error, match=r"^chunk_gated_delta_rule_backward: chunk_size = 0"):
        rudnn.gated_delta_rule_backward(dout, None, *args, 0.7, chunk_size=0)


def test_varlen_forms_equal_each_sequence_alone(rng):
    ctx = Ctx(rng)
    lens = [3, 0, 5, 2]
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    T, N = int(cu[-1]), len(lens)
    a = inputs(rng, F32, B=1, T=T, Hk=1, Hv=2, Dk=8, Dv=4)
    states = randn(rng, (N,) + a["state"].shape[1:], F32)
    seq = {n: a[n] for n in ("q", "k", "v", "g", "beta")}
    y, final = rudnn.gated_delta(**seq, state=states, cu_seqlens=cu)
    pool = randn(rng, (6,) + states.shape[1:], F32)
    slots = np.array([5, 1, 0, 3], np.int64)
    pool_before = pool.copy()
    y_slots = rudnn.gated_delta_slots(**seq, pool=pool, slots=slots, cu_seqlens=cu)
    y_steps, steps = rudnn.gated_delta_steps(**seq, state=states, cu_seqlens=cu)
    np.testing.assert_array_equal(y_steps, y, err_msg=ctx.msg("varlen steps' y"))
    assert steps.shape == (1, T) + states.shape[1:], ctx.msg(f"{steps.shape}")
    for n in range(N):
        part = {name: x[:, cu[n] : cu[n + 1]] for name, x in seq.items()}
        y_n, s_n = rudnn.gated_delta(**part, state=states[n : n + 1])
        np.testing.assert_array_equal(y[:, cu[n] : cu[n + 1]], y_n, err_msg=ctx.msg(f"varlen y of sequence {n}"))
        np.testing.assert_array_equal(final[n : n + 1], s_n, err_msg=ctx.msg(f"varlen state of sequence {n}"))
        _, st_n = rudnn.gated_delta_steps(**part, state=states[n : n + 1])
        np.testing.assert_array_equal(steps[:, cu[n] : cu[n + 1]], st_n, err_msg=ctx.msg(f"varlen steps {n}"))
        y_p, s_p = rudnn.gated_delta(**part, state=pool_before[slots[n] : slots[n] + 1])
        np.testing.assert_array_equal(y_slots[:, cu[n] : cu[n + 1]], y_p, err_msg=ctx.msg(f"slots varlen y {n}"))
        np.testing.assert_array_equal(pool[slots[n]], s_p[0], err_msg=ctx.msg(f"slots varlen state {n}"))
    # The rule form, and both backward passes, take the same offsets.
    rq = np.moveaxis(a["q"], 1, 2)
    out, fs = rudnn.gated_delta_rule(rq, np.moveaxis(a["k"], 1, 2), np.moveaxis(a["v"][:, :, :1], 1, 2),
                                     np.moveaxis(a["beta"][..., :1], 1, 2), np.zeros((1, 1, T), F32),
                                     np.zeros((N, 1, 8, 4), F32), cu_seqlens=cu)
    assert out.shape == (1, 1, T, 4) and fs.shape == (N, 1, 8, 4), ctx.msg(f"{out.shape} {fs.shape}")
    grads = rudnn.gated_delta_backward(np.ones(y.shape, F32), None, **seq, state=states, cu_seqlens=cu)
    assert grads[5].shape == states.shape
    # The varlen form's errors name the C++ op that ran: gated_delta_varlen.
    with pytest.raises(rudnn.DTypeMismatch, match="^gated_delta_varlen: cu_seqlens"):
        rudnn.gated_delta(**seq, state=states, cu_seqlens=cu.astype(np.int64))
    with pytest.raises(rudnn.Error, match="^gated_delta_varlen: "):
        rudnn.gated_delta(**seq, state=states, cu_seqlens=np.array([0, 3, 2, 8, 10], np.int32))
    with pytest.raises(rudnn.Error, match="^gated_delta_steps_varlen: "):
        rudnn.gated_delta_steps(**seq, state=states, cu_seqlens=np.array([0, 3, 2, 8, 10], np.int32))


def test_out_is_written_in_place(rng):
    a = inputs(rng, F32)
    y_ref, s_ref = rudnn.gated_delta(**a)
    y, s = np.full(y_ref.shape, np.nan, F32), np.full(s_ref.shape, np.nan, F32)
    r = rudnn.gated_delta(**a, out=(y, s))
    assert r[0] is y and r[1] is s
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(s, s_ref)
    steps = rudnn.gated_delta_steps(**a)
    o = (np.empty_like(steps[0]), np.empty_like(steps[1]))
    rudnn.gated_delta_steps(**a, out=o)
    np.testing.assert_array_equal(o[1], steps[1])
    grads = rudnn.gated_delta_backward(y_ref, None, **a)
    o = tuple(np.full(x.shape, np.nan, x.dtype) for x in a.values())
    rudnn.gated_delta_backward(y_ref, None, **a, out=o)
    for got, ref in zip(o, grads):
        np.testing.assert_array_equal(got, ref)
    with pytest.raises(rudnn.InvalidArgument, match="^gated_delta: out must be a tuple of 2"):
        rudnn.gated_delta(**a, out=y)
    with pytest.raises(rudnn.Error, match="^gated_delta: "):
        rudnn.gated_delta(**a, out=(y[:, :1], s))


def test_errors_name_the_op_and_argument(rng):
    a = inputs(rng, F32)
    q, k, v, g, beta, state = a.values()
    cases = [
        (rudnn.InvalidArgument, r"^gated_delta: state is None", lambda: rudnn.gated_delta(q, k, v, g, beta, None)),
        (rudnn.DTypeMismatch, r"^gated_delta: ", lambda: rudnn.gated_delta(q.astype(F16), k, v, g, beta, state)),
        (rudnn.DTypeMismatch, r"^gated_delta: ",
         lambda: rudnn.gated_delta(q, k, v, g, beta, state.astype(np.int32))),
        (rudnn.ShapeMismatch, r"^gated_delta: ", lambda: rudnn.gated_delta(q, k, v, g[:, :, :2], beta, state)),
        (rudnn.ShapeMismatch, r"^gated_delta_steps: ", lambda: rudnn.gated_delta_steps(q, k, v, g, beta, state[:1])),
        (rudnn.Error, r"^gated_delta: ", lambda: rudnn.gated_delta(q, k, v[:, :, :3], g[:, :, :3], beta[:, :, :3],
                                                                   state[:, :3])),
    ]
    B, H, T, K, V = 1, 2, 3, 4, 4
    qr = randn(rng, (B, H, T, K), F32)
    ld = np.zeros((B, H, T), F32)
    init = np.zeros((B, H, K, V), F32)
    cases += [
        (rudnn.DTypeMismatch, r"^gated_delta_rule: ",
         lambda: rudnn.gated_delta_rule(qr, qr, qr, ld, ld.astype(F16), init)),
        (rudnn.DTypeMismatch, r"^gated_delta_rule: ",
         lambda: rudnn.gated_delta_rule(qr, qr, qr, ld, ld, init.astype(F64))),
        (rudnn.InvalidArgument, r"^gated_delta_rule: query_scale",
         lambda: rudnn.gated_delta_rule(qr, qr, qr, ld, ld, init, float("nan"))),
        (rudnn.InvalidArgument, r"^gated_delta_rule: query_scale must be a number",
         lambda: rudnn.gated_delta_rule(qr, qr, qr, ld, ld, init, True)),
        (rudnn.InvalidArgument, r"^gated_delta_rule: log_decay is None",
         lambda: rudnn.gated_delta_rule(qr, qr, qr, ld, None, init)),
        (rudnn.InvalidArgument, r"^chunk_gated_delta_rule: chunk_size = 0; expected a positive",
         lambda: rudnn.gated_delta_rule(qr, qr, qr, ld, ld, init, chunk_size=0)),
        (rudnn.InvalidArgument, r"^chunk_gated_delta_rule: chunk_size = 1000 needs",
         lambda: rudnn.gated_delta_rule(qr, qr, qr, ld, ld, init, chunk_size=1000)),
        (rudnn.InvalidArgument, r"^gated_delta_rule: chunk_size must be an int or None",
         lambda: rudnn.gated_delta_rule(qr, qr, qr, ld, ld, init, chunk_size=4.0)),
        (rudnn.InvalidArgument, r"^gated_delta_backward: dy is None",
         lambda: rudnn.gated_delta_backward(None, None, q, k, v, g, beta, state)),
        (rudnn.Error, r"^gated_delta_backward: ",
         lambda: rudnn.gated_delta_backward(q, None, q, k, v, g, beta, state)),
        (rudnn.Error, r"^gated_delta_rule_backward: ",
         lambda: rudnn.gated_delta_rule_backward(qr[..., :2], None, qr, qr, qr, ld, ld, init)),
    ]
    for exc, pattern, call in cases:
        with pytest.raises(exc, match=pattern):
            call()


# ---- spec 003's chunked prefill (chunk_gated_delta, CPU only) -----------------------------------


@pytest.mark.parametrize("chunk_size", [1, 3, 4, 64])
def test_chunk_gated_delta_equals_the_recurrence(rng, chunk_size):
    ctx = Ctx(rng, chunk_size=chunk_size)
    a = inputs(rng, F64, B=2, T=9, Hk=2, Hv=4, Dk=8, Dv=6, state_dtype=F64)
    a["g"][0, 4, 1] = 0.0  # a reset is exact (decays multiplied, never logged)
    before = snapshot(*a.values())
    y, s = rudnn.chunk_gated_delta(**a, chunk_size=chunk_size)
    assert_unchanged(ctx, before, list(a.values()))
    ref_y, ref_s = rudnn.gated_delta(**a)
    np_y, np_states = ref_gated_delta(**a)
    assert y.shape == (2, 9, 4, 6) and y.dtype == F64 and s.shape == a["state"].shape and s.dtype == F64
    np.testing.assert_allclose(y, ref_y, rtol=1e-12, atol=1e-12, err_msg=ctx.msg("y vs gated_delta"))
    np.testing.assert_allclose(s, ref_s, rtol=1e-12, atol=1e-12, err_msg=ctx.msg("state vs gated_delta"))
    np.testing.assert_allclose(y, np_y, rtol=1e-10, atol=1e-10, err_msg=ctx.msg("y vs numpy"))
    np.testing.assert_allclose(s, np_states[:, -1], rtol=1e-10, atol=1e-10, err_msg=ctx.msg("state vs numpy"))
    # out= writes the caller's arrays; float32 operands keep their dtypes.
    out = (np.full(y.shape, np.nan), np.full(s.shape, np.nan))
    assert rudnn.chunk_gated_delta(**a, chunk_size=chunk_size, out=out) is out
    np.testing.assert_array_equal(out[0], y, err_msg=ctx.msg("out= y"))
    np.testing.assert_array_equal(out[1], s, err_msg=ctx.msg("out= state"))
    a32 = {n: x.astype(F32) for n, x in a.items()}
    y32, s32 = rudnn.chunk_gated_delta(**a32, chunk_size=chunk_size)
    assert y32.dtype == F32 and s32.dtype == F32
    verify(ctx, "float32 y", y32, np_y, F32)


def test_chunk_gated_delta_slots_and_varlen(rng):
    ctx = Ctx(rng)
    a = inputs(rng, F64, B=3, T=6, Hk=1, Hv=2, Dk=4, Dv=3, state_dtype=F64)
    pool = randn(rng, (5,) + a["state"].shape[1:], F64)
    slots = np.array([4, 0, 2], np.int32)
    original = pool.copy()
    state = pool[slots]
    del a["state"]
    y = rudnn.chunk_gated_delta_slots(**a, pool=pool, slots=slots, chunk_size=4)
    ref_y, ref_s = rudnn.gated_delta(**a, state=state)
    np.testing.assert_allclose(y, ref_y, rtol=1e-12, atol=1e-12, err_msg=ctx.msg("slots y"))
    np.testing.assert_allclose(pool[slots], ref_s, rtol=1e-12, atol=1e-12, err_msg=ctx.msg("pool at the slots"))
    np.testing.assert_array_equal(pool[[1, 3]], original[[1, 3]], err_msg=ctx.msg("pool elsewhere"))
    # Packed sequences: each chunked on its own, equal to the recurrence's varlen form.
    lens = [3, 0, 5, 2]
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    b = inputs(rng, F64, B=1, T=int(cu[-1]), Hk=1, Hv=2, Dk=4, Dv=3, state_dtype=F64)
    states = randn(rng, (len(lens),) + b["state"].shape[1:], F64)
    b["state"] = states
    yv, sv = rudnn.chunk_gated_delta(**b, chunk_size=2, cu_seqlens=cu)
    ref_yv, ref_sv = rudnn.gated_delta(**b, cu_seqlens=cu)
    np.testing.assert_allclose(yv, ref_yv, rtol=1e-12, atol=1e-12, err_msg=ctx.msg("varlen y"))
    np.testing.assert_allclose(sv, ref_sv, rtol=1e-12, atol=1e-12, err_msg=ctx.msg("varlen state"))
    del b["state"]
    pool = states.copy()
    ys = rudnn.chunk_gated_delta_slots(**b, pool=pool, slots=np.arange(4), chunk_size=2, cu_seqlens=cu)
    np.testing.assert_allclose(ys, ref_yv, rtol=1e-12, atol=1e-12, err_msg=ctx.msg("slots varlen y"))
    np.testing.assert_allclose(pool, ref_sv, rtol=1e-12, atol=1e-12, err_msg=ctx.msg("slots varlen pool"))


def test_chunk_gated_delta_errors(rng):
    a = inputs(rng, F64, state_dtype=F64)
    for bad in (0, -4, 1 << 20):
        with pytest.raises(rudnn.InvalidArgument, match="^chunk_gated_delta: .*chunk_size"):
            rudnn.chunk_gated_delta(**a, chunk_size=bad)
    with pytest.raises(rudnn.InvalidArgument, match="^chunk_gated_delta: chunk_size"):
        rudnn.chunk_gated_delta(**a, chunk_size=True)
    q, k, v, g, beta, state = a.values()
    with pytest.raises(rudnn.InvalidArgument, match="^chunk_gated_delta: v has Hv = 3 .*multiple of q's Hk = 2"):
        rudnn.chunk_gated_delta(q, k, v[:, :, :3], g[:, :, :3], beta[:, :, :3], state[:, :3])
    pool = np.zeros((4,) + state.shape[1:])
    with pytest.raises(rudnn.Error, match="^chunk_gated_delta_slots: .*chunk_size"):
        rudnn.chunk_gated_delta_slots(q, k, v, g, beta, pool, np.array([0, 1]), 0)
    with pytest.raises(rudnn.Error, match="^chunk_gated_delta_slots: "):
        rudnn.chunk_gated_delta_slots(q, k, v, g, beta, pool, np.array([1, 1]), 4)
    assert not pool.any()
