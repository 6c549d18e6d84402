"""CPU tests of the attention family through the rudnn package: attention against a NumPy
float64 reference written here (grouped heads, Lq != Lk, causal, sliding window, bool and
additive masks, bias, sinks, softcap, ALiBi, both layouts, varlen packed sequences, fully
masked rows), the logsumexp, every strategy name; attention_backward against finite
differences of the forward in float64 (dq, dk, dv, dsinks, dbias); out= / grads_out=;
plan_attention on the CPU; errors reaching Python as the rudnn.Error subclass naming the op
and the argument. Inputs are random with a fresh seed per run (printed in every failure
message); RUDNN_TEST_SEED=<int> replays one.
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
    """Infinities (the lse of a fully masked row) must match exactly; the rest as support.check
    (float32 / float16) or within 1e-10 (float64)."""
    got = np.asarray(got)
    assert got.dtype == np.dtype(dtype) and got.shape == ref.shape, ctx.msg(f"{what}: {got.dtype} {got.shape}")
    inf = np.isinf(ref)
    assert np.array_equal(np.isinf(got), inf) and np.array_equal(got[inf], ref[inf]), ctx.msg(
        f"{what}: infinities differ"
    )
    got, ref = np.where(inf, 0, got).astype(got.dtype), np.where(inf, 0.0, ref)
    if dtype != F64:
        check(ctx, what, got, ref, dtype)
    elif ref.size:
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10, err_msg=ctx.msg(what))


# ---- NumPy float64 reference (bhsd) -----------------------------------------------------------------


def ref_attention(q, k, v, scale=None, is_causal=False, mask=None, bias=None, sinks=None, window=None,
                  softcap=None, alibi_slopes=None):
    """(out [B, Hq, Lq, Dv], lse [B, Hq, Lq]) by the header's definition."""
    q, k, v = f64(q), f64(k), f64(v)
    B, Hq, Lq, D = q.shape
    Lk = k.shape[2]
    group = Hq // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    # The scale is a float32 option (default 1 / sqrt(D) in float32).
    scale = float(np.float32(1.0 / np.sqrt(D) if scale is None else scale))
    x = scale * np.einsum("bhid,bhjd->bhij", q, k)
    if softcap is not None:
        x = softcap * np.tanh(x / softcap)
    o = Lk - Lq
    i, j = np.arange(Lq)[:, None], np.arange(Lk)[None, :]
    s = x.copy()
    if alibi_slopes is not None:
        s -= f64(alibi_slopes)[None, :, None, None] * np.abs(i + o - j)
    if bias is not None:
        s = s + f64(bias)
    if mask is not None and mask.dtype == np.bool_:
        s = np.where(mask, s, -np.inf)
    elif mask is not None:
        s = s + f64(mask)
    if is_causal:
        s = np.where(j > i + o, -np.inf, s)
    if window is not None:
        s = np.where(j <= i + o - window, -np.inf, s)
    m = s.max(-1, initial=-np.inf)
    if sinks is not None:
        m = np.maximum(m, f64(sinks)[None, :, None])
    m_safe = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m_safe[..., None])
    denom = p.sum(-1)
    if sinks is not None:
        denom = denom + np.exp(f64(sinks)[None, :, None] - m_safe)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.einsum("bhij,bhjd->bhid", p, v) / np.where(denom > 0, denom, 1.0)[..., None]
        lse = m_safe + np.log(denom)
    return out, lse


def bshd(a):
    return np.ascontiguousarray(np.swapaxes(a, 1, 2))


CASES = {
    # name: (B, Hq, Hkv, Lq, Lk, D, Dv, options)
    "plain": (2, 2, 2, 5, 5, 8, 8, {}),
    "gqa_causal_lq<lk": (2, 4, 2, 3, 7, 16, 8, {"is_causal": True}),
    "mqa_window": (1, 3, 1, 6, 6, 8, 4, {"is_causal": True, "window": 2}),
    "scale_softcap": (1, 2, 2, 4, 9, 8, 8, {"scale": 0.3, "softcap": 5.0}),
    "bool_mask": (2, 2, 1, 4, 6, 8, 8, {"mask": "bool"}),
    "additive_mask_bias": (2, 2, 2, 4, 5, 8, 8, {"mask": "float", "bias": True}),
    "sinks_alibi": (1, 4, 2, 5, 5, 8, 8, {"sinks": True, "alibi_slopes": True, "is_causal": True}),
    "fully_masked_rows": (1, 2, 2, 3, 4, 8, 8, {"mask": "none_row"}),
    "empty_keys": (1, 2, 2, 3, 0, 8, 8, {}),
    "empty_batch": (0, 2, 2, 3, 4, 8, 8, {}),
}


def make_options(rng, spec, B, Hq, Lq, Lk, dtype):
    opts = dict(spec)
    if opts.get("mask") == "bool":
        opts["mask"] = rng.uniform(size=(B, 1, Lq, Lk)) < 0.7
    elif opts.get("mask") == "float":
        opts["mask"] = randn(rng, (Lq, Lk), F32)
    elif opts.get("mask") == "none_row":
        m = np.ones((Lq, Lk), bool)
        m[1] = False
        opts["mask"] = m
    if opts.get("bias"):
        opts["bias"] = randn(rng, (1, Hq, Lq, Lk), dtype)
    if opts.get("sinks"):
        opts["sinks"] = randn(rng, (Hq,), F32)
    if opts.get("alibi_slopes"):
        opts["alibi_slopes"] = rng.uniform(0.05, 0.5, Hq).astype(F32)
    return opts


def qkv(rng, B, Hq, Hkv, Lq, Lk, D, Dv, dtype):
    return randn(rng, (B, Hq, Lq, D), dtype), randn(rng, (B, Hkv, Lk, D), dtype), randn(rng, (B, Hkv, Lk, Dv), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_attention_against_numpy(rng, dtype, case, layout):
    B, Hq, Hkv, Lq, Lk, D, Dv, spec = CASES[case]
    ctx = Ctx(rng, dtype=dname(dtype), case=case, layout=layout)
    q, k, v = qkv(rng, B, Hq, Hkv, Lq, Lk, D, Dv, dtype)
    opts = make_options(rng, spec, B, Hq, Lq, Lk, dtype)
    ref_out, ref_lse = ref_attention(q, k, v, **opts)
    args = (q, k, v) if layout == "bhsd" else tuple(bshd(a) for a in (q, k, v))
    before = snapshot(*args)
    out, lse = rudnn.attention(*args, layout=layout, return_lse=True, **opts)
    verify(ctx, "out", out if layout == "bhsd" else np.swapaxes(out, 1, 2), ref_out, dtype)
    assert lse.dtype == (F64 if dtype == F64 else F32), ctx.msg(f"lse dtype {lse.dtype}")
    verify(ctx, "lse", lse, ref_lse, F64 if dtype == F64 else F32)
    assert_unchanged(ctx, before, list(args))
    plain = rudnn.attention(*args, layout=layout, **opts)
    np.testing.assert_array_equal(plain, out, err_msg=ctx.msg("attention without lse"))


@pytest.mark.parametrize(
    "strategy", ["auto", "Auto", "flash_scalar", "FlashScalar", "composed", "split_kv", "autotune"]
)
def test_every_strategy_runs_the_reference_on_the_cpu(rng, strategy):
    ctx = Ctx(rng, strategy=strategy)
    q, k, v = qkv(rng, 2, 4, 2, 4, 6, 8, 8, F32)
    got = rudnn.attention(q, k, v, is_causal=True, strategy=strategy)
    check(ctx, "out", got, ref_attention(q, k, v, is_causal=True)[0], F32)


def test_varlen_equals_each_sequence_alone(rng):
    ctx = Ctx(rng)
    lens_q, lens_k = [3, 1, 4], [5, 2, 4]
    Hq, Hkv, D, Dv = 4, 2, 8, 8
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q = randn(rng, (cu_q[-1], Hq, D), F64)
    k = randn(rng, (cu_k[-1], Hkv, D), F64)
    v = randn(rng, (cu_k[-1], Hkv, Dv), F64)
    out, lse = rudnn.attention(q, k, v, is_causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                               max_seqlen_q=max(lens_q), max_seqlen_k=max(lens_k), return_lse=True)
    assert out.shape == (cu_q[-1], Hq, Dv) and lse.shape == (Hq, cu_q[-1]), ctx.msg(f"{out.shape} {lse.shape}")
    for n in range(3):
        sq, sk = slice(cu_q[n], cu_q[n + 1]), slice(cu_k[n], cu_k[n + 1])
        per = [np.swapaxes(a[s], 0, 1)[None] for a, s in ((q, sq), (k, sk), (v, sk))]
        ro, rl = ref_attention(*per, is_causal=True)
        verify(ctx, f"out of sequence {n}", np.swapaxes(out[sq], 0, 1)[None], ro, F64)
        verify(ctx, f"lse of sequence {n}", lse[:, sq][None], rl, F64)


def directional(ctx, what, f, args, grads, dy, h=1e-6, rtol=1e-6):
    gen = np.random.default_rng(ctx.seed)
    us = [gen.standard_normal(a.shape) for a in args]
    numeric = float(np.sum(dy * (f(*[a + h * u for a, u in zip(args, us)]) - f(*[a - h * u for a, u in zip(args, us)])))
                    / (2 * h))
    analytic = float(sum(np.sum(g * u) for g, u in zip(grads, us)))
    assert abs(numeric - analytic) <= rtol * max(1.0, abs(analytic)) + 1e-7, ctx.msg(
        f"{what}: directional derivative {analytic!r}, finite differences {numeric!r}"
    )


@pytest.mark.parametrize("case", [c for c in CASES if c not in ("empty_keys", "empty_batch")])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_backward_matches_finite_differences(rng, case, layout):
    B, Hq, Hkv, Lq, Lk, D, Dv, spec = CASES[case]
    ctx = Ctx(rng, case=case, layout=layout)
    q, k, v = qkv(rng, B, Hq, Hkv, Lq, Lk, D, Dv, F64)
    opts = make_options(rng, spec, B, Hq, Lq, Lk, F64)
    if layout == "bshd":
        q, k, v = bshd(q), bshd(k), bshd(v)
    sinks, bias = opts.pop("sinks", None), opts.pop("bias", None)
    if sinks is not None:
        sinks = sinks.astype(F64)

    def fwd(q_, k_, v_, sinks_=None, bias_=None):
        return rudnn.attention(q_, k_, v_, layout=layout, sinks=sinks_, bias=bias_, **opts)

    out, lse = rudnn.attention(q, k, v, layout=layout, sinks=sinks, bias=bias, return_lse=True, **opts)
    dout = randn(rng, out.shape, F64)
    before = snapshot(dout, q, k, v, out, lse)
    dq, dk, dv, dsinks, dbias = rudnn.attention_backward(
        dout, q, k, v, out, lse, layout=layout, sinks=sinks, bias=bias, bias_requires_grad=bias is not None, **opts
    )
    assert_unchanged(ctx, before, [dout, q, k, v, out, lse])
    assert (dsinks is None) == (sinks is None) and (dbias is None) == (bias is None), ctx.msg("optional grads")
    args, grads = [q, k, v], [dq, dk, dv]
    if sinks is not None:
        args.append(sinks)
        grads.append(dsinks)
    if bias is not None:
        args.append(bias)
        grads.append(dbias)

    def f(*a):
        named = dict(zip(["q_", "k_", "v_"], a[:3]))
        rest = list(a[3:])
        if sinks is not None:
            named["sinks_"] = rest.pop(0)
        if bias is not None:
            named["bias_"] = rest.pop(0)
        return fwd(**named)

    directional(ctx, "attention_backward", f, args, grads, dout)


def test_out_and_grads_out(rng):
    q, k, v = qkv(rng, 1, 2, 2, 3, 4, 8, 8, F32)
    ref_out, ref_lse = rudnn.attention(q, k, v, return_lse=True)
    o = np.full(ref_out.shape, np.nan, F32)
    assert rudnn.attention(q, k, v, out=o) is o
    np.testing.assert_array_equal(o, ref_out)
    o2, l2 = np.full(ref_out.shape, np.nan, F32), np.full(ref_lse.shape, np.nan, F32)
    r = rudnn.attention(q, k, v, return_lse=True, out=(o2, l2))
    assert r[0] is o2 and r[1] is l2
    np.testing.assert_array_equal(l2, ref_lse)
    dout = randn(rng, o.shape, F32)
    ref = rudnn.attention_backward(dout, q, k, v, ref_out, ref_lse)
    g = tuple(np.full(a.shape, np.nan, F32) for a in (q, k, v))
    assert rudnn.attention_backward(dout, q, k, v, ref_out, ref_lse, grads_out=g) is g
    for a, b in zip(g, ref[:3]):
        np.testing.assert_array_equal(a, b)
    sinks = randn(rng, (2,), F32)
    out, lse = rudnn.attention(q, k, v, sinks=sinks, return_lse=True)
    g5 = tuple(np.full(a.shape, np.nan, F32) for a in (q, k, v, sinks)) + (None,)
    rudnn.attention_backward(dout, q, k, v, out, lse, sinks=sinks, grads_out=g5)
    np.testing.assert_array_equal(g5[3], rudnn.attention_backward(dout, q, k, v, out, lse, sinks=sinks)[3])
    with pytest.raises(rudnn.InvalidArgument, match="attention: out must be a tuple of 2"):
        rudnn.attention(q, k, v, return_lse=True, out=o)
    with pytest.raises(rudnn.Error, match="^attention_backward: "):
        rudnn.attention_backward(dout, q, k, v, out, lse, sinks=sinks, grads_out=g)


def test_plan_attention_on_the_cpu(rng):
    p = rudnn.plan_attention((2, 4, 16, 64), (2, 2, 16, 64), (2, 2, 16, 64), "float32", device="cpu",
                             is_causal=True)
    assert p["kernel"] == "Reference" and p["scratch_bytes"] == 0, p
    assert set(p) == {"kernel", "block_rows", "block_heads", "splits", "split_keys", "passes", "dispatches",
                      "scratch_bytes", "max_intermediate_bytes", "capped", "flash_wgmma",
                      "split_tensor_cores"}
    # The Hopper kernel is never the CPU's (nor, in a CPU-only build, anyone's).
    for dt in ("float32", "bfloat16", "float16"):
        f = rudnn.plan_attention((2, 4, 256, 128), (2, 2, 256, 128), (2, 2, 256, 128), dt, device="cpu",
                                 strategy="auto")
        assert f["flash_wgmma"] is False, (dt, f)
        d = rudnn.plan_attention((2, 4, 1, 128), (2, 2, 256, 128), (2, 2, 256, 128), dt, device="cpu")
        assert d["split_tensor_cores"] is False, (dt, d)
    b = rudnn.plan_attention_backward((2, 4, 16, 64), (2, 2, 16, 64), (2, 2, 16, 64), np.float64, device="cpu")
    assert b["kernel"] == "Reference", b
    with pytest.raises(rudnn.Error, match="^plan_attention: "):
        rudnn.plan_attention((2, 3, 16, 64), (2, 2, 16, 64), (2, 2, 16, 64), "float32", device="cpu")
    with pytest.raises(rudnn.InvalidArgument, match="^plan_attention: dtype must be"):
        rudnn.plan_attention((1, 1, 1, 8), (1, 1, 1, 8), (1, 1, 1, 8), "int8", device="cpu")
    with pytest.raises(rudnn.InvalidArgument, match="^plan_attention: device must be"):
        rudnn.plan_attention((1, 1, 1, 8), (1, 1, 1, 8), (1, 1, 1, 8), "float32", device="tpu")


def test_errors_name_the_op_and_argument(rng):
    q, k, v = qkv(rng, 1, 4, 2, 3, 5, 8, 8, F32)
    cases = [
        (rudnn.InvalidArgument, r"^attention: strategy must be one of 'Auto', 'Flash', 'FlashScalar'",
         lambda: rudnn.attention(q, k, v, strategy="fastest")),
        (rudnn.InvalidArgument, r"^attention: option 'dropout' is not an option of attention",
         lambda: rudnn._rudnn.attention(q, k, v, dropout=0.1)),
        (rudnn.InvalidArgument, r"^attention: option 'deterministic' is not an option of attention",
         lambda: rudnn._rudnn.attention(q, k, v, deterministic=True)),
        (rudnn.InvalidArgument, r"^attention: layout must be one of 'bhsd', 'bshd'",
         lambda: rudnn.attention(q, k, v, layout="sbhd")),
        (rudnn.InvalidArgument, r"^attention: is_causal must be a bool", lambda: rudnn.attention(q, k, v, is_causal=1)),
        (rudnn.InvalidArgument, r"^attention: window must be an int",
         lambda: rudnn.attention(q, k, v, is_causal=True, window=2.0)),
        (rudnn.InvalidArgument, r"^attention: max_score_bytes is -1",
         lambda: rudnn.attention(q, k, v, max_score_bytes=-1)),
        (rudnn.InvalidArgument, r"^attention: scale must be a number", lambda: rudnn.attention(q, k, v, scale="x")),
        (rudnn.InvalidArgument, r"^attention: q is None", lambda: rudnn.attention(None, k, v)),
        (rudnn.Error, r"^attention: ", lambda: rudnn.attention(q, k, v, window=2)),
        (rudnn.Error, r"^attention: ", lambda: rudnn.attention(q, k, v, scale=float("inf"))),
        (rudnn.Error, r"^attention: ", lambda: rudnn.attention(q, k, v, softcap=-1.0)),
        (rudnn.Error, r"^attention: ", lambda: rudnn.attention(q[:, :3], k, v)),
        (rudnn.DTypeMismatch, r"^attention: ", lambda: rudnn.attention(q, k.astype(F16), v)),
        (rudnn.Error, r"^attention: ", lambda: rudnn.attention(q, k, v, mask=np.ones((2, 4, 3, 5), bool))),
        (rudnn.Error, r"^attention: ", lambda: rudnn.attention(q, k, v, sinks=np.zeros(3, F32))),
        (rudnn.Error, r"^attention: ", lambda: rudnn.attention(q, k, v, max_score_bytes=0)),
        (rudnn.Error, r"^attention: ",
         lambda: rudnn.attention(q[0], k[0], v[0], cu_seqlens_q=np.array([0, 2], np.int64),
                                 cu_seqlens_k=np.array([0, 2], np.int32), max_seqlen_q=2, max_seqlen_k=2)),
    ]
    out, lse = rudnn.attention(q, k, v, return_lse=True)
    cases += [
        (rudnn.Error, r"^attention_backward: ", lambda: rudnn.attention_backward(out, q, k, v, out, lse[..., :2])),
        (rudnn.InvalidArgument, r"^attention_backward: option 'return_lse' is not an option",
         lambda: rudnn._rudnn.attention_backward(out, q, k, v, out, lse, return_lse=True)),
        (rudnn.InvalidArgument, r"^attention_backward: deterministic must be a bool",
         lambda: rudnn.attention_backward(out, q, k, v, out, lse, deterministic="yes")),
        (rudnn.Error, r"^attention_backward: ",
         lambda: rudnn.attention_backward(out, q, k, v, out, lse, strategy="split_kv")),
    ]
    for exc, pattern, call in cases:
        with pytest.raises(exc, match=pattern):
            call()
