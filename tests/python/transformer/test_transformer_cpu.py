"""CPU tests of the transformer family through the rudnn package: rope / rope_backward (every
position source, halves and interleaved pairs, base and freqs, partial rotation, layouts,
packed variable-length batches), norm_rope (with and without a cache), the Llama 3 and YaRN
frequency helpers, and swiglu / geglu forward and backward in both forms, each against a
NumPy float64 reference written here; error paths (each naming the op and the argument);
out= (written in place and returned, refused when wrong). Inputs are random with a fresh seed
per run (printed in every failure message); RUDNN_TEST_SEED=<int> replays one.
"""

import math

import numpy as np
import pytest
from support import F16, F32, Ctx, check, f64, randn, ref_rms_norm, snapshot, assert_unchanged

import rudnn

F64 = np.float64
# float64 runs on the CPU only (the reference computes in float64).
DTYPES = [F32, F16, F64]


def verify(ctx, what, got, ref, dtype):
    """support.check for float32 / float16; float64 results (the op computes in float64 too)
    within 1e-9 of the reference's scale."""
    if dtype != F64:
        check(ctx, what, got, ref, dtype)
        return
    got = np.asarray(got)
    assert got.dtype == F64, ctx.msg(f"{what}: dtype {got.dtype}, expected float64")
    assert got.shape == ref.shape, ctx.msg(f"{what}: shape {got.shape}, expected {ref.shape}")
    if ref.size:
        err = np.abs(got - ref)
        bound = 1e-9 * (np.abs(ref) + np.max(np.abs(ref)))
        assert np.all(err <= bound), ctx.msg(f"{what}: max error {err.max():.3g} in float64")


def dname(dtype):
    return np.dtype(dtype).name


# ---- NumPy float64 references -------------------------------------------------------------


def ref_positions(shape, offset=0, offsets=None, positions=None):
    """p[b, t] of x [B, ..., T, D]: offset + t, offsets[b] + t, positions[t] or positions[b, t]."""
    B, T = shape[0], shape[-2]
    t = np.arange(T, dtype=F64)
    if offsets is not None:
        return np.asarray(offsets, F64)[:, None] + t[None, :]
    if positions is not None:
        p = np.asarray(positions, F64)
        return np.broadcast_to(p, (B, T)) if p.ndim == 1 else p
    return np.broadcast_to(offset + t, (B, T))


def ref_rope(x, dims=None, traditional=False, base=None, freqs=None, scale=1.0, offset=0, offsets=None,
             positions=None, inverse=False):
    """rope in float64: x [B, ..., T, D], the first dims features rotated pairwise."""
    x = f64(x)
    D = x.shape[-1]
    dims = D if dims is None else dims
    j = np.arange(dims // 2, dtype=F64)
    theta = 1.0 / f64(freqs) if freqs is not None else float(np.float32(base)) ** (-2.0 * j / dims)
    p = ref_positions(x.shape, offset, offsets, positions)  # [B, T]
    angle = p[..., None] * float(np.float32(scale)) * theta  # [B, T, dims/2]
    angle = angle.reshape((x.shape[0],) + (1,) * (x.ndim - 3) + angle.shape[1:])
    c, s = np.cos(angle), np.sin(angle)
    if inverse:
        s = -s
    y = x.copy()
    if traditional:
        a, b = x[..., 0:dims:2], x[..., 1:dims:2]
        y[..., 0:dims:2] = a * c - b * s
        y[..., 1:dims:2] = a * s + b * c
    else:
        h = dims // 2
        a, b = x[..., :h], x[..., h:dims]
        y[..., :h] = a * c - b * s
        y[..., h:dims] = a * s + b * c
    return y


_erf = np.vectorize(math.erf, otypes=[F64])


def ref_act(g, kind):
    """(act(g), act'(g)) in float64 for swiglu, geglu (erf) and geglu_tanh."""
    g = f64(g)
    if kind == "swiglu":
        sig = 1.0 / (1.0 + np.exp(-g))
        return g * sig, sig * (1.0 + g * (1.0 - sig))
    if kind == "geglu":
        cdf = 0.5 * (1.0 + _erf(g / math.sqrt(2.0)))
        pdf = np.exp(-0.5 * g * g) / math.sqrt(2.0 * math.pi)
        return g * cdf, cdf + g * pdf
    k, c = math.sqrt(2.0 / math.pi), 0.044715
    u = k * (g + c * g**3)
    th = np.tanh(u)
    return 0.5 * g * (1.0 + th), 0.5 * (1.0 + th) + 0.5 * g * (1.0 - th * th) * k * (1.0 + 3.0 * c * g * g)


def ref_glu(gate, up, kind):
    a, _ = ref_act(gate, kind)
    return a * f64(up)


def ref_glu_backward(dy, gate, up, kind):
    a, da = ref_act(gate, kind)
    dy = f64(dy)
    return dy * f64(up) * da, dy * a


GLU = {
    # name: (forward, backward, kwargs, reference kind)
    "swiglu": (rudnn.swiglu, rudnn.swiglu_backward, {}, "swiglu"),
    "geglu": (rudnn.geglu, rudnn.geglu_backward, {}, "geglu"),
    "geglu_tanh": (rudnn.geglu, rudnn.geglu_backward, {"approximate": "tanh"}, "geglu_tanh"),
}


# ---- rope ------------------------------------------------------------------------------------

ROPE_SHAPES = [(2, 3, 7, 8), (1, 5, 16), (2, 2, 3, 4, 12), (3, 1, 1, 2), (1, 4, 33, 128), (0, 2, 3, 8)]
SOURCES = ["offset", "offsets_i32", "offsets_i64", "positions_t", "positions_bt_i32", "positions_bt_i64"]


def position_kwargs(rng, source, B, T):
    if source == "offset":
        return {"offset": int(rng.integers(0, 5000))}
    dtype = np.int32 if source.endswith("i32") else np.int64
    if source.startswith("offsets"):
        return {"offsets": rng.integers(0, 100000, size=B).astype(dtype)}
    if source == "positions_t":
        return {"positions": rng.integers(0, 100000, size=T).astype(np.int64)}
    return {"positions": rng.integers(0, 100000, size=(B, T)).astype(dtype)}


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("shape", ROPE_SHAPES)
@pytest.mark.parametrize("traditional", [False, True])
@pytest.mark.parametrize("source", SOURCES)
def test_rope_against_numpy(rng, dtype, shape, traditional, source):
    B, T, D = shape[0], shape[-2], shape[-1]
    partial = bool(rng.integers(0, 2)) and D >= 4
    dims = 2 * int(rng.integers(1, D // 2 + 1)) if partial else None
    ndims = D if dims is None else dims
    use_freqs = bool(rng.integers(0, 2))
    ctx = Ctx(rng, dtype=dname(dtype), shape=shape, traditional=traditional, source=source, dims=dims,
              freqs=use_freqs)
    x = randn(rng, shape, dtype)
    kw = position_kwargs(rng, source, B, T)
    if use_freqs:
        kw["freqs"] = (10000.0 ** (2.0 * np.arange(ndims // 2) / ndims) * rng.uniform(0.5, 2.0, ndims // 2)).astype(F32)
    else:
        kw["base"] = float(rng.choice([10000.0, 500000.0]))
    kw["scale"] = float(rng.choice([1.0, 0.25, 2.0]))
    before = snapshot(x, *[v for v in kw.values() if isinstance(v, np.ndarray)])
    y = rudnn.rope(x, dims, traditional=traditional, **kw)
    assert isinstance(y, np.ndarray)
    verify(ctx, "rope", y, ref_rope(x, dims, traditional, **kw), dtype)
    dx = rudnn.rope_backward(x, dims, traditional=traditional, **kw)
    verify(ctx, "rope_backward", dx, ref_rope(x, dims, traditional, inverse=True, **kw), dtype)
    assert_unchanged(ctx, before, [x] + [v for v in kw.values() if isinstance(v, np.ndarray)])
    if dtype != F16 and x.size:
        # The backward pass is the inverse: it takes the result back to x.
        back = rudnn.rope_backward(y, dims, traditional=traditional, **kw)
        verify(ctx, "rope_backward(rope(x))", back, f64(x), dtype)


def test_rope_passes_the_tail_through_and_position_zero_is_identity(rng):
    x = randn(rng, (2, 3, 5, 12), F32)
    y = rudnn.rope(x, 8, base=10000.0, offset=7)
    assert np.array_equal(y[..., 8:], x[..., 8:]), "features past dims must be copied unchanged"
    y0 = rudnn.rope(x[:, :, :1], base=10000.0)  # position 0 everywhere: no rotation
    assert np.array_equal(y0, x[:, :, :1])


def test_rope_heads_share_their_tokens_position(rng):
    # [B, H, T, D]: each head of (b, t) is rotated by the same angle, so rope of one head
    # alone (a [B, 1, T, D] slice) equals that head of the whole.
    x = randn(rng, (2, 4, 6, 16), F32)
    pos = rng.integers(0, 1000, size=(2, 6)).astype(np.int64)
    whole = rudnn.rope(x, base=10000.0, positions=pos)
    for h in range(4):
        part = rudnn.rope(x[:, h : h + 1], base=10000.0, positions=pos)
        np.testing.assert_array_equal(whole[:, h : h + 1], part)


@pytest.mark.parametrize("dtype", [F32, F16], ids=dname)
def test_rope_layouts_and_out(rng, dtype):
    ctx = Ctx(rng, dtype=dname(dtype))
    B, T, H, D = 2, 9, 3, 16
    # A [B, T, H, D] projection seen as [B, H, T, D] (Hugging Face's transpose(1, 2)).
    proj = randn(rng, (B, T, H, D), dtype)
    x = proj.transpose(0, 2, 1, 3)
    pos = rng.integers(0, 4096, size=(B, T)).astype(np.int32)
    ref = ref_rope(x, base=10000.0, positions=pos)
    verify(ctx, "rope of a transposed view", rudnn.rope(x, base=10000.0, positions=pos), ref, dtype)
    # A strided last axis (copied by the op), and a slice of a longer last axis.
    wide = randn(rng, (B, H, T, 2 * D), dtype)
    for view in (wide[..., ::2], wide[..., :D]):
        check(ctx, "rope of a strided view", rudnn.rope(view, base=10000.0), ref_rope(view, base=10000.0), dtype)
    # out=: the transposed view of a [B, T, H, D] buffer, written in place.
    buf = np.full((B, T, H, D), np.nan, dtype)
    out = buf.transpose(0, 2, 1, 3)
    assert rudnn.rope(x, base=10000.0, positions=pos, out=out) is out
    check(ctx, "rope out= (transposed buffer)", out, ref, dtype)
    check(ctx, "rope out= seen as [B, T, H, D]", buf, ref.transpose(0, 2, 1, 3), dtype)
    out2 = np.full(x.shape, np.nan, dtype)
    assert rudnn.rope_backward(x, base=10000.0, positions=pos, out=out2) is out2
    check(ctx, "rope_backward out=", out2, ref_rope(x, base=10000.0, positions=pos, inverse=True), dtype)


def test_rope_packed_variable_length_batch(rng):
    # Three sequences of lengths 5, 1, 7 packed into [total, H, D] tokens with position ids
    # restarting per sequence: x.transpose(0, 1) is [H, total, D] with positions [total].
    ctx = Ctx(rng)
    lengths = [5, 1, 7]
    H, D = 4, 32
    total = sum(lengths)
    tokens = randn(rng, (total, H, D), F32)
    ids = np.concatenate([np.arange(n) for n in lengths]).astype(np.int32)
    out = np.full_like(tokens, np.nan)
    rudnn.rope(tokens.transpose(1, 0, 2), base=10000.0, positions=ids, out=out.transpose(1, 0, 2))
    start = 0
    for n in lengths:
        seq = tokens[start : start + n].transpose(1, 0, 2)[None]  # [1, H, n, D]
        check(ctx, f"packed sequence at {start}", out[start : start + n].transpose(1, 0, 2)[None],
              ref_rope(seq, base=10000.0), F32)
        start += n


def test_rope_errors(rng):
    x = randn(rng, (2, 3, 4, 8), F32)
    cases = [
        (dict(dims=7, base=1e4), rudnn.InvalidArgument, r"^rope: dims is 7; expected an even number"),
        (dict(dims=10, base=1e4), rudnn.InvalidArgument, r"^rope: dims is 10"),
        (dict(), rudnn.InvalidArgument, r"^rope: base and freqs are neither given"),
        (dict(base=1e4, freqs=np.ones(4, F32)), rudnn.InvalidArgument, r"^rope: base and freqs are both given"),
        (dict(base=-1.0), rudnn.InvalidArgument, r"^rope: base"),
        (dict(base=1e4, scale=float("nan")), rudnn.InvalidArgument, r"^rope: scale"),
        (dict(freqs=np.ones(3, F32)), rudnn.ShapeMismatch, r"^rope: freqs has shape \[3\]"),
        (dict(freqs=np.ones(4, F64)), rudnn.DTypeMismatch, r"^rope: freqs"),
        (dict(base=1e4, offset=-1), rudnn.InvalidArgument, r"^rope: offset is -1"),
        (dict(base=1e4, offsets=np.zeros(3, np.int64)), rudnn.ShapeMismatch, r"^rope: offsets"),
        (dict(base=1e4, offsets=np.zeros(2, F32)), rudnn.DTypeMismatch, r"^rope: offsets"),
        (dict(base=1e4, positions=np.zeros(5, np.int32)), rudnn.ShapeMismatch, r"^rope: positions has shape \[5\]"),
        (dict(base=1e4, positions=np.zeros((2, 4), F32)), rudnn.DTypeMismatch, r"^rope: positions"),
        (dict(base=1e4, offset=3, positions=np.zeros(4, np.int32)), rudnn.InvalidArgument,
         r"^rope: positions given together with a non-zero offset"),
        (dict(base=1e4, traditional=1), rudnn.InvalidArgument, r"^rope: traditional must be a bool"),
        (dict(base=1e4, dims=True), rudnn.InvalidArgument, r"^rope: dims must be an int"),
        (dict(base=True), rudnn.InvalidArgument, r"^rope: base must be a number"),
    ]
    for kw, exc, pattern in cases:
        for fn, name in ((rudnn.rope, "rope"), (rudnn.rope_backward, "rope_backward")):
            with pytest.raises(exc, match=pattern.replace("rope:", f"{name}:")):
                fn(x, **kw)
    with pytest.raises(rudnn.ShapeMismatch, match=r"^rope: x has shape \[4, 8\]; expected at least 3 axes"):
        rudnn.rope(x[0, 0], base=1e4)
    with pytest.raises(rudnn.DTypeMismatch, match=r"^rope: x"):
        rudnn.rope(np.zeros((2, 3, 4), np.int32), base=1e4)
    with pytest.raises(rudnn.InvalidArgument, match=r"^rope: x is None"):
        rudnn.rope(None, base=1e4)
    # Outputs: shape, dtype, overlap, read-only; untouched after a refusal.
    for out, exc, pattern in [
        (np.zeros((2, 3, 4, 6), F32), rudnn.ShapeMismatch, r"^rope: out has shape"),
        (np.zeros((2, 3, 4, 8), F16), rudnn.DTypeMismatch, r"^rope: out has dtype"),
        (x, rudnn.InvalidArgument, r"^rope: out overlaps x"),
    ]:
        before = np.array(out, copy=True)
        with pytest.raises(exc, match=pattern):
            rudnn.rope(x, base=1e4, out=out)
        assert np.array_equal(out, before), f"out written before the error {pattern}"
    ro = np.zeros_like(x)
    ro.flags.writeable = False
    with pytest.raises(rudnn.InvalidArgument, match=r"^rope: out"):
        rudnn.rope(x, base=1e4, out=ro)
    with pytest.raises(rudnn.ShapeMismatch, match=r"^rope_backward: dx_out has shape"):
        rudnn.rope_backward(x, base=1e4, out=np.zeros((2, 3, 4, 6), F32))


# ---- norm_rope -------------------------------------------------------------------------------


def ref_norm_rope(x, weight, eps, dtype, normalize=True, **rotation):
    """rms_norm rounded to x's dtype (the composition the op equals), then rope."""
    normed = ref_rms_norm(x, weight, eps).astype(dtype) if normalize else x
    return ref_rope(normed, **rotation)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("weight", [None, "f32", "xdtype", "no_norm"])
@pytest.mark.parametrize("traditional", [False, True])
def test_norm_rope_without_cache(rng, dtype, weight, traditional):
    ctx = Ctx(rng, dtype=dname(dtype), weight=weight, traditional=traditional)
    B, H, L, D = 2, 3, 5, 16
    x = randn(rng, (B, H, L, D), dtype, scale=2.0)
    normalize = weight != "no_norm"
    w = None if weight in (None, "no_norm") else randn(rng, (D,), F32 if weight == "f32" else dtype, offset=1.0)
    rot = dict(dims=12, traditional=traditional, base=10000.0, offset=int(rng.integers(0, 100)))
    before = snapshot(x, w)
    y = rudnn.norm_rope(x, w, 1e-6, normalize=normalize, **rot)
    ref = ref_norm_rope(x, w, 1e-6, dtype, normalize, **rot)
    verify(ctx, "norm_rope", y, ref, dtype)
    # The composition it equals.
    composed = rudnn.rope(rudnn.rms_norm(x, w, 1e-6) if normalize else x, **rot)
    np.testing.assert_array_equal(y, composed)
    out = np.full_like(x, np.nan)
    assert rudnn.norm_rope(x, w, 1e-6, normalize=normalize, out=out, **rot) is out
    np.testing.assert_array_equal(out, y)
    assert_unchanged(ctx, before, (x, w))


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("normalize", [True, False])
def test_norm_rope_writes_its_positions_of_the_cache(rng, dtype, normalize):
    ctx = Ctx(rng, dtype=dname(dtype), normalize=normalize)
    B, H, L, C, D = 2, 3, 4, 11, 8
    offset = int(rng.integers(0, C - L + 1))
    proj = randn(rng, (B, L, H, D), dtype)
    x = proj.transpose(0, 2, 1, 3)  # the transposed projection, read in place
    w = randn(rng, (D,), dtype, offset=1.0) if normalize else None
    cache = randn(rng, (B, H, C, D), dtype)
    original = cache.copy()
    r = rudnn.norm_rope(x, w, 1e-6, normalize=normalize, base=10000.0, offset=offset, cache=cache)
    assert r is cache
    ref = ref_norm_rope(x, w, 1e-6, dtype, normalize, base=10000.0, offset=offset)
    verify(ctx, "norm_rope cache positions", cache[:, :, offset : offset + L], ref, dtype)
    untouched = np.ones(C, bool)
    untouched[offset : offset + L] = False
    assert np.array_equal(cache[:, :, untouched], original[:, :, untouched]), ctx.msg("other positions written")


def test_norm_rope_errors(rng):
    x = randn(rng, (2, 3, 4, 8), F32)
    cache = np.zeros((2, 3, 6, 8), F32)
    cases = [
        (dict(weight=np.ones(7, F32)), rudnn.ShapeMismatch, r"^norm_rope: weight has shape \[7\]"),
        (dict(weight=np.ones(8, np.int32)), rudnn.DTypeMismatch, r"^norm_rope: weight"),
        (dict(eps=0.0), rudnn.InvalidArgument, r"^norm_rope: eps"),
        (dict(weight=np.ones(8, F32), normalize=False), rudnn.InvalidArgument,
         r"^norm_rope: weight is given with normalize=False"),
        (dict(dims=3), rudnn.InvalidArgument, r"^norm_rope: dims is 3"),
        (dict(cache=np.zeros((2, 3, 5, 8), F32), offset=2), rudnn.ShapeMismatch,
         r"^norm_rope: cache holds C = 5 positions; offset \+ L = 6"),
        (dict(cache=np.zeros((2, 4, 6, 8), F32)), rudnn.ShapeMismatch, r"^norm_rope: cache has shape \[2, 4, 6, 8\]"),
        (dict(cache=np.zeros((2, 3, 6, 8), F16)), rudnn.DTypeMismatch, r"^norm_rope: cache has dtype f16"),
        (dict(cache=cache, out=np.zeros_like(x)), rudnn.InvalidArgument, r"^norm_rope: out is given with a cache"),
        (dict(out=np.zeros((2, 3, 4, 9), F32)), rudnn.ShapeMismatch, r"^norm_rope: out has shape"),
        (dict(out=x), rudnn.InvalidArgument, r"^norm_rope: out overlaps x"),
    ]
    for kw, exc, pattern in cases:
        kw.setdefault("base", 1e4)
        with pytest.raises(exc, match=pattern):
            rudnn.norm_rope(x, **kw)
    assert not cache.any(), "cache written by a refused call"
    with pytest.raises(rudnn.ShapeMismatch, match=r"^norm_rope: x has shape \[2, 3, 1, 4, 8\]; with a cache"):
        rudnn.norm_rope(x[:, :, None], base=1e4, cache=cache)
    with pytest.raises(rudnn.InvalidArgument, match=r"^norm_rope: cache overlaps x"):
        big = randn(rng, (2, 3, 8, 8), F32)
        rudnn.norm_rope(big[:, :, :4], base=1e4, cache=big)


# ---- Frequency helpers ---------------------------------------------------------------------


def ref_llama3_inv_freq(dims, base, factor, low, high, old):
    inv = base ** (-np.arange(0, dims, 2, dtype=F64) / dims)
    wavelen = 2 * math.pi / inv
    lo_wl, hi_wl = old / low, old / high
    out = np.where(wavelen > lo_wl, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    mid = (1 - smooth) * inv / factor + smooth * inv
    between = ~(wavelen < hi_wl) & ~(wavelen > lo_wl)
    return np.where(between, mid, out)


def ref_yarn(dims, base, factor, old, beta_fast, beta_slow, mscale, mscale_all_dim, truncate):
    def corr(rot):
        return dims * math.log(old / (rot * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = corr(beta_fast), corr(beta_slow)
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, dims - 1)
    if lo == hi:
        hi += 0.001
    inv = base ** (-np.arange(0, dims, 2, dtype=F64) / dims)
    ramp = np.clip((np.arange(dims // 2, dtype=F64) - lo) / (hi - lo), 0, 1)
    extra = 1 - ramp
    inv = inv / factor * (1 - extra) + inv * extra

    def m(s, k):
        return 1.0 if s <= 1 else 0.1 * k * math.log(s) + 1.0

    att = m(factor, mscale) / m(factor, mscale_all_dim) if mscale and mscale_all_dim else m(factor, 1.0)
    return inv, att


def test_llama3_freqs():
    for dims, base, factor, low, high, old in [
        (128, 500000.0, 8.0, 1.0, 4.0, 8192),  # Llama 3.1
        (64, 10000.0, 32.0, 1.0, 4.0, 8192),
        (96, 500000.0, 4.0, 2.0, 8.0, 2048),
    ]:
        like = np.zeros(1, F32)
        f = rudnn.rope_llama3_freqs(dims, base, factor, low, high, old, like=like)
        assert isinstance(f, np.ndarray) and f.dtype == F32 and f.shape == (dims // 2,)
        ref = 1.0 / ref_llama3_inv_freq(dims, base, factor, low, high, old)
        np.testing.assert_allclose(f, ref, rtol=2e-7)
    t = rudnn.rope_llama3_freqs(8, 10000.0)  # no `like`: a CPU rudnn.Tensor
    assert isinstance(t, rudnn.Tensor) and t.device == "cpu" and t.shape == (4,)


def test_yarn_freqs():
    for args in [
        (64, 10000.0, 4.0, 4096, 32.0, 1.0, 0.0, 0.0, True),
        (128, 10000.0, 40.0, 4096, 32.0, 1.0, 1.0, 1.0, True),  # DeepSeek's mscale pair
        (64, 1000000.0, 16.0, 8192, 32.0, 1.0, 0.707, 1.0, False),
    ]:
        dims, base, factor, old, bf, bs, ms, msa, trunc = args
        f, att = rudnn.rope_yarn_freqs(dims, base, factor, old, bf, bs, ms, msa, 0.0, trunc, like=np.zeros(1, F32))
        inv, ref_att = ref_yarn(dims, base, factor, old, bf, bs, ms, msa, trunc)
        np.testing.assert_allclose(f, 1.0 / inv, rtol=2e-7)
        assert att == pytest.approx(ref_att, rel=1e-6)
    _, att = rudnn.rope_yarn_freqs(64, 10000.0, 4.0, attention_factor=1.5)
    assert att == pytest.approx(1.5)


def test_rope_takes_the_helpers_freqs(rng):
    ctx = Ctx(rng)
    x = randn(rng, (1, 2, 9, 32), F32)
    freqs = rudnn.rope_llama3_freqs(32, 500000.0, like=x)
    y = rudnn.rope(x, freqs=freqs, offset=10000)
    check(ctx, "rope with llama3 freqs", y, ref_rope(x, freqs=freqs, offset=10000), F32)


def test_frequency_helper_errors():
    for call, pattern in [
        (lambda: rudnn.rope_llama3_freqs(7, 10000.0), r"^rope_llama3_freqs: dims is 7"),
        (lambda: rudnn.rope_llama3_freqs(8, 1.0), r"^rope_llama3_freqs: base"),
        (lambda: rudnn.rope_llama3_freqs(8, 1e4, low_freq_factor=4.0, high_freq_factor=1.0),
         r"^rope_llama3_freqs: high_freq_factor"),
        (lambda: rudnn.rope_llama3_freqs(8, 1e4, original_max_position=0),
         r"^rope_llama3_freqs: original_max_position"),
        (lambda: rudnn.rope_yarn_freqs(8, 1e4, beta_fast=1.0, beta_slow=2.0), r"^rope_yarn_freqs: beta_fast"),
        (lambda: rudnn.rope_yarn_freqs(8, 1e4, factor=0.0), r"^rope_yarn_freqs: factor"),
        (lambda: rudnn.rope_yarn_freqs(8, 1e4, truncate=1), r"^rope_yarn_freqs: truncate must be a bool"),
    ]:
        with pytest.raises(rudnn.InvalidArgument, match=pattern):
            call()


# ---- swiglu, geglu ---------------------------------------------------------------------------

GLU_SHAPES = [(1, 8), (7, 37), (3, 1), (2, 3, 64), (5,), (0, 16), (4, 1000)]


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("shape", GLU_SHAPES)
@pytest.mark.parametrize("op", list(GLU))
def test_glu_forward_and_backward(rng, dtype, shape, op):
    ctx = Ctx(rng, dtype=dname(dtype), shape=shape, op=op)
    fwd, bwd, kw, kind = GLU[op]
    gate = randn(rng, shape, dtype, scale=3.0)
    up = randn(rng, shape, dtype)
    dy = randn(rng, shape, dtype)
    before = snapshot(gate, up, dy)
    verify(ctx, f"{op}", fwd(gate, up, **kw), ref_glu(gate, up, kind), dtype)
    dgate, dup = bwd(dy, gate, up, **kw)
    rdg, rdu = ref_glu_backward(dy, gate, up, kind)
    verify(ctx, f"{op}_backward dgate", dgate, rdg, dtype)
    verify(ctx, f"{op}_backward dup", dup, rdu, dtype)
    # The one-tensor form: gate then up along the last axis.
    x = np.concatenate([gate, up], axis=-1)
    verify(ctx, f"{op} (halves)", fwd(x, **kw), ref_glu(gate, up, kind), dtype)
    dx = bwd(dy, x, **kw)
    verify(ctx, f"{op}_backward (halves)", dx, np.concatenate([rdg, rdu], axis=-1), dtype)
    assert_unchanged(ctx, before, (gate, up, dy))


@pytest.mark.parametrize("op", list(GLU))
def test_glu_tails_and_special_values(op):
    fwd, bwd, kw, kind = GLU[op]
    g = np.array([-80.0, -30.0, -5.0, 0.0, 5.0, 30.0, 80.0, np.inf, -np.inf, np.nan], F32)
    u = np.full_like(g, 2.0)
    y = fwd(g, u, **kw)
    ref = ref_glu(g[:7], u[:7], kind)
    np.testing.assert_allclose(y[:7], ref, rtol=1e-5, atol=1e-30)
    assert y[3] == 0.0 and y[7] == np.inf and np.isnan(y[9])
    assert np.isnan(y[8]), f"act(-inf) = -inf · 0 is NaN (as in torch), got {y[8]}"


@pytest.mark.parametrize("dtype", [F32, F16], ids=dname)
def test_glu_strided_inputs_and_outputs(rng, dtype):
    ctx = Ctx(rng, dtype=dname(dtype))
    # gate and up as views of a fused [rows, 2I] projection (row stride 2I), a transposed up.
    fused = randn(rng, (6, 2 * 40), dtype, scale=2.0)
    gate, up = fused[:, :40], fused[:, 40:]
    up_t = randn(rng, (40, 6), dtype).T
    for name, (g, u) in {"views of a fused projection": (gate, up), "transposed up": (gate, up_t)}.items():
        check(ctx, f"swiglu, {name}", rudnn.swiglu(g, u), ref_glu(g, u, "swiglu"), dtype)
    # out= a slice of a wider buffer (dense last axis, one row stride).
    buf = np.full((6, 100), np.nan, dtype)
    out = buf[:, 10:50]
    assert rudnn.geglu(gate, up, out=out) is out
    check(ctx, "geglu out= slice", out, ref_glu(gate, up, "geglu"), dtype)
    assert np.isnan(buf[:, :10]).all() and np.isnan(buf[:, 50:]).all(), "written outside out"


def test_glu_out_arguments(rng):
    ctx = Ctx(rng)
    gate, up, dy = (randn(rng, (5, 24), F32) for _ in range(3))
    x = np.concatenate([gate, up], -1)
    out = np.full_like(gate, np.nan)
    assert rudnn.swiglu(gate, up, out=out) is out
    check(ctx, "swiglu out", out, ref_glu(gate, up, "swiglu"), F32)
    out = np.full_like(gate, np.nan)
    assert rudnn.geglu(x, approximate="tanh", out=out) is out
    check(ctx, "geglu (halves) out", out, ref_glu(gate, up, "geglu_tanh"), F32)
    outs = (np.full_like(gate, np.nan), np.full_like(gate, np.nan))
    assert rudnn.swiglu_backward(dy, gate, up, out=outs) is outs
    rdg, rdu = ref_glu_backward(dy, gate, up, "swiglu")
    check(ctx, "swiglu_backward out dgate", outs[0], rdg, F32)
    check(ctx, "swiglu_backward out dup", outs[1], rdu, F32)
    dx = np.full_like(x, np.nan)
    assert rudnn.geglu_backward(dy, x, out=dx) is dx
    rdg, rdu = ref_glu_backward(dy, gate, up, "geglu")
    check(ctx, "geglu_backward (halves) out", dx, np.concatenate([rdg, rdu], -1), F32)
    # Refusals leave out as it was.
    for call, exc, pattern in [
        (lambda o: rudnn.swiglu(gate, up, out=o), rudnn.ShapeMismatch, r"^swiglu: out has shape"),
        (lambda o: rudnn.geglu(x, out=o), rudnn.ShapeMismatch, r"^geglu: out has shape"),
    ]:
        o = np.full((5, 23), 7.0, F32)
        with pytest.raises(exc, match=pattern):
            call(o)
        assert (o == 7.0).all()
    with pytest.raises(rudnn.DTypeMismatch, match=r"^swiglu: out has dtype f16"):
        rudnn.swiglu(gate, up, out=np.zeros((5, 24), F16))
    with pytest.raises(rudnn.InvalidArgument, match=r"^swiglu: out overlaps gate"):
        rudnn.swiglu(gate, up, out=gate)
    with pytest.raises(rudnn.InvalidArgument, match=r"^swiglu: out overlaps x"):
        rudnn.swiglu(x, out=x[:, :24])
    with pytest.raises(rudnn.InvalidArgument, match=r"^swiglu_backward: dgate_out overlaps dup_out"):
        rudnn.swiglu_backward(dy, gate, up, out=(outs[0], outs[0]))
    with pytest.raises(rudnn.InvalidArgument, match=r"^swiglu_backward: out must be a tuple of 2 arrays"):
        rudnn.swiglu_backward(dy, gate, up, out=outs[0])
    with pytest.raises(rudnn.InvalidArgument, match=r"^geglu_backward: dx_out has strides"):
        rudnn.geglu_backward(dy, x, out=np.zeros((48, 5), F32).T)
    ro = np.zeros_like(gate)
    ro.flags.writeable = False
    with pytest.raises(rudnn.InvalidArgument, match=r"^swiglu: out"):
        rudnn.swiglu(gate, up, out=ro)


def test_glu_errors(rng):
    g = randn(rng, (4, 6), F32)
    for op, fwd, bwd in [("swiglu", rudnn.swiglu, rudnn.swiglu_backward), ("geglu", rudnn.geglu, rudnn.geglu_backward)]:
        with pytest.raises(rudnn.ShapeMismatch, match=rf"^{op}: up has shape \[4, 5\], gate has \[4, 6\]"):
            fwd(g, g[:, :5])
        with pytest.raises(rudnn.DTypeMismatch, match=rf"^{op}: up has dtype f16, gate has f32"):
            fwd(g, g.astype(F16))
        with pytest.raises(rudnn.InvalidArgument, match=rf"^{op}: x has shape \[4, 5\]; its last axis .* must be even"):
            fwd(g[:, :5])
        with pytest.raises(rudnn.ShapeMismatch, match=rf"^{op}: gate is 0-d"):
            fwd(np.float32(1.0), np.float32(2.0))
        with pytest.raises(rudnn.DTypeMismatch, match=rf"^{op}: gate"):
            fwd(g.astype(np.int32), g.astype(np.int32))
        with pytest.raises(rudnn.InvalidArgument, match=rf"^{op}: gate is None"):
            fwd(None, g)
        with pytest.raises(rudnn.ShapeMismatch, match=rf"^{op}_backward: dy has shape \[4, 5\], gate has"):
            bwd(g[:, :5], g, g)
        with pytest.raises(rudnn.ShapeMismatch, match=rf"^{op}_backward: dy has shape \[4, 6\]"):
            bwd(g, g)  # the one-tensor form: dy must be [4, 3]
        with pytest.raises(rudnn.DTypeMismatch, match=rf"^{op}_backward: dy has dtype f16, x has f32"):
            bwd(g[:, :3].astype(F16), g)
    for bad in ("exact", "TANH", None, 1):
        with pytest.raises(rudnn.InvalidArgument, match=r"^geglu: approximate must be 'none' or 'tanh'"):
            rudnn.geglu(g, g, approximate=bad)
        with pytest.raises(rudnn.InvalidArgument, match=r"^geglu_backward: approximate"):
            rudnn.geglu_backward(g, g, g, approximate=bad)
