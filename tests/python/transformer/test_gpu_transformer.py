"""GPU tests of the transformer family against PyTorch, on torch CUDA tensors.

Skipped (the whole module, reported as skipped) unless torch is importable, CUDA is
available to it, and ruDNN was built with CUDA. References are torch implementations run in
float64 on the same inputs: Hugging Face Llama's rotary embedding (``rotate_half``, the
halves, cos/sin of ``cat(freqs, freqs)``; partial rotation as GPT-NeoX's ``rotary_pct``),
GPT-J's interleaved pairs (``rotate_every_two``), at offsets, per-batch offsets and
position ids; ``F.silu(g) * u`` and ``F.gelu(g, approximate=...) * u``; their gradients by
torch autograd. Results are compared by relative L2 error with per-dtype tolerances
(bfloat16, float16, float32). The differentiable wrappers (rudnn.torch_autograd) are checked
against torch autograd, and a small transformer block using them is compiled with
``torch.compile(fullgraph=True)`` (a graph break fails). Inputs are random with a fresh
seed per test (conftest's ``rng``; printed on failure, RUDNN_TEST_SEED=<int> replays one).
"""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("torch.cuda is not available (no GPU)", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import rudnn  # noqa: E402

if not rudnn.built_with_cuda():
    pytest.skip("ruDNN was built without CUDA", allow_module_level=True)

HAS_CUSTOM_OP = hasattr(torch.library, "custom_op")
needs_custom_op = pytest.mark.skipif(not HAS_CUSTOM_OP, reason="torch >= 2.4 (torch.library.custom_op) is needed")
if HAS_CUSTOM_OP:
    from rudnn import torch_autograd as ta  # noqa: E402  (its ops need torch.library.custom_op)

DEV = torch.device("cuda", 0)
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Relative L2 error bounds, by the dtype of the result.
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


@pytest.fixture
def seed(rng):
    """A fresh seed per test and run from conftest's rng (RUDNN_TEST_SEED replays one)."""
    return int(rng.seed_value)


def gen(seed):
    g = torch.Generator(device=DEV)
    g.manual_seed(seed)
    return g


def randn(g, shape, dtype, scale=1.0, offset=0.0):
    return (torch.randn(shape, generator=g, device=DEV, dtype=torch.float32) * scale + offset).to(dtype)


def randint(g, lo, hi, shape, dtype=torch.int64):
    return torch.randint(lo, hi, shape, generator=g, device=DEV, dtype=torch.int64).to(dtype)


def dname(dtype):
    return str(dtype).replace("torch.", "")


def d64(t):
    return None if t is None else t.detach().double()


def check(what, got, ref, dtype, seed, device=DEV, tol=None):
    """got against a float64 reference: dtype, device, shape, finite values, and relative L2
    error within TOL[dtype] (or `tol`: a float32 result computed from rounded intermediates)."""
    tol = TOL[dtype] if tol is None else tol
    msg = f"{what} [{dname(dtype)}] (seed={seed}; RUDNN_TEST_SEED={seed} replays)"
    assert isinstance(got, torch.Tensor), f"{msg}: result is {type(got)}, expected a torch tensor"
    assert got.device == device, f"{msg}: result on {got.device}, expected {device}"
    assert got.dtype == dtype, f"{msg}: dtype {got.dtype}, expected {dtype}"
    assert tuple(got.shape) == tuple(ref.shape), f"{msg}: shape {tuple(got.shape)}, expected {tuple(ref.shape)}"
    if ref.numel() == 0:
        return
    g, r = got.detach().double(), ref.detach().double()
    assert torch.isfinite(g).all(), f"{msg}: non-finite values"
    den = max(r.norm().item(), 1e-6 * r.numel() ** 0.5)
    err = (g - r).norm().item() / den
    assert err <= tol, f"{msg}: relative L2 error {err:.3g} > {tol:.1g}"


# ---- torch references (float64) ---------------------------------------------------------------


def inv_freq(dims, base):
    """Hugging Face's default inverse frequencies, base ** (-2j / dims), in float64."""
    return 1.0 / (base ** (torch.arange(0, dims, 2, dtype=torch.float64, device=DEV) / dims))


def rotate_half(x):
    """Hugging Face Llama (modeling_llama.rotate_half)."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):
    """GPT-J (modeling_gptj.rotate_every_two): interleaved pairs."""
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def position_grid(B, T, offset=0, offsets=None, positions=None):
    """The position of every token, [B, T] float64."""
    t = torch.arange(T, device=DEV, dtype=torch.float64)
    if offsets is not None:
        return offsets.double()[:, None] + t[None, :]
    if positions is not None:
        p = positions.double()
        return p.expand(B, T) if p.dim() == 1 else p
    return (offset + t).expand(B, T)


def ref_rope(x, pos, dims, base=None, traditional=False, scale=1.0, inv=None):
    """x [B, H, T, D] (float64) rotated at positions pos [B, T]: Llama's halves or GPT-J's
    interleaved pairs on the first dims features; the rest passed through."""
    inv = inv_freq(dims, base) if inv is None else inv
    freqs = (pos * scale)[..., None] * inv  # [B, T, dims/2]
    rot, rest = x[..., :dims], x[..., dims:]
    if traditional:
        cos = freqs.cos().repeat_interleave(2, -1)[:, None]
        sin = freqs.sin().repeat_interleave(2, -1)[:, None]
        out = rot * cos + rotate_every_two(rot) * sin
    else:
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None], emb.sin()[:, None]
        out = rot * cos + rotate_half(rot) * sin
    return torch.cat((out, rest), dim=-1)


def ref_rms_norm(x, w, eps):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if w is None else y * w


def ref_llama3_inv_freq(dims, base, factor, low, high, old):
    """Hugging Face's _compute_llama3_parameters, in float64."""
    inv = inv_freq(dims, base)
    wavelen = 2 * torch.pi / inv
    low_wl, high_wl = old / low, old / high
    scaled = torch.where(wavelen > low_wl, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
    return torch.where(medium, smoothed, scaled)


# ---- rope ----------------------------------------------------------------------------------------

ROPE_SHAPES = [(2, 4, 33, 128), (1, 32, 16, 64), (3, 2, 7, 80), (2, 8, 5, 256), (1, 1, 1, 2), (0, 2, 3, 64)]
SOURCES = ["offset", "offsets", "position_ids", "shared_position_ids"]


def position_kwargs(g, source, B, T):
    if source == "offset":
        return {"offset": int(randint(g, 0, 100000, (1,)).item())}
    if source == "offsets":
        return {"offsets": randint(g, 0, 100000, (B,), torch.int32)}
    if source == "position_ids":
        return {"positions": randint(g, 0, 100000, (B, T))}
    return {"positions": randint(g, 0, 100000, (T,), torch.int32)}


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("shape", ROPE_SHAPES, ids=str)
@pytest.mark.parametrize("traditional", [False, True], ids=["llama_halves", "gptj_interleaved"])
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("partial", [False, True], ids=["all_dims", "partial"])
def test_rope_against_llama_and_gptj(seed, dtype, shape, traditional, source, partial):
    g = gen(seed)
    B, H, T, D = shape
    dims = max(2, D // 2) if partial else D  # GPT-NeoX rotary_pct = 0.5
    base = 500000.0 if source == "offsets" else 10000.0
    x = randn(g, shape, dtype)
    kw = position_kwargs(g, source, B, T)
    pos = position_grid(B, T, **kw)
    x0 = x.clone()
    y = rudnn.rope(x, dims, traditional=traditional, base=base, **kw)
    ref = ref_rope(d64(x), pos, dims, base, traditional)
    check(f"rope {source}", y, ref, dtype, seed)
    assert torch.equal(x, x0), "x modified"
    # Backward: torch autograd of the reference rotation.
    dy = randn(g, shape, dtype)
    x64 = d64(x).requires_grad_()
    ref_rope(x64, pos, dims, base, traditional).backward(d64(dy))
    dx = rudnn.rope_backward(dy, dims, traditional=traditional, base=base, **kw)
    check(f"rope_backward {source}", dx, x64.grad, dtype, seed)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_rope_scale_and_freqs(seed, dtype):
    g = gen(seed)
    x = randn(g, (2, 4, 9, 64), dtype)
    pos = randint(g, 0, 32768, (2, 9))
    # Linear position interpolation (scale = 1 / factor).
    check("rope scale 0.25", rudnn.rope(x, base=10000.0, scale=0.25, positions=pos),
          ref_rope(d64(x), pos.double(), 64, 10000.0, scale=0.25), dtype, seed)
    # Llama 3.1's scaled frequencies against Hugging Face's formula.
    freqs = rudnn.rope_llama3_freqs(64, 500000.0, 8.0, 1.0, 4.0, 8192, like=x)
    assert isinstance(freqs, torch.Tensor) and freqs.device == DEV and freqs.dtype == torch.float32
    inv = ref_llama3_inv_freq(64, 500000.0, 8.0, 1.0, 4.0, 8192)
    torch.testing.assert_close(freqs.double(), 1.0 / inv, rtol=2e-7, atol=0)
    # The rotation against the float32 frequencies it was given (their rounding, up to 2e-7
    # of each, would move angles of positions up to 32768 by more than float32's tolerance).
    check("rope llama3 freqs", rudnn.rope(x, freqs=freqs, positions=pos),
          ref_rope(d64(x), pos.double(), 64, inv=1.0 / freqs.double()), dtype, seed)
    # YaRN: rope takes the frequencies; the attention factor is the caller's.
    yfreqs, att = rudnn.rope_yarn_freqs(64, 10000.0, 4.0, 4096, like=x)
    assert att == pytest.approx(0.1 * torch.log(torch.tensor(4.0)).item() + 1.0, rel=1e-6)
    check("rope yarn freqs", rudnn.rope(x, freqs=yfreqs, traditional=True, positions=pos),
          ref_rope(d64(x), pos.double(), 64, traditional=True, inv=1.0 / yfreqs.double()), dtype, seed)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_rope_hugging_face_layouts(seed, dtype):
    g = gen(seed)
    B, T, H, D = 2, 17, 8, 128
    # q from a [B, T, H * D] projection, viewed [B, T, H, D] and transposed (read in place).
    proj = randn(g, (B, T, H * D), dtype)
    q = proj.view(B, T, H, D).transpose(1, 2)
    ids = randint(g, 0, 8192, (B, T))
    ref = ref_rope(d64(q), ids.double(), D, 10000.0)
    check("rope of the transposed projection", rudnn.rope(q, positions=ids, base=10000.0), ref, dtype, seed)
    # out= the transposed view of a [B, T, H, D] buffer.
    buf = torch.full((B, T, H, D), float("nan"), device=DEV, dtype=dtype)
    out = buf.transpose(1, 2)
    assert rudnn.rope(q, positions=ids, base=10000.0, out=out) is out
    check("rope out= transposed buffer", buf, ref.transpose(1, 2), dtype, seed)
    # A packed variable-length batch: [total, H, D] tokens, ids restarting per sequence.
    lengths = [5, 1, 11]
    tokens = randn(g, (sum(lengths), H, D), dtype)
    ids = torch.cat([torch.arange(n, device=DEV) for n in lengths]).to(torch.int32)
    packed = torch.empty_like(tokens)
    rudnn.rope(tokens.transpose(0, 1), positions=ids, base=10000.0, out=packed.transpose(0, 1))
    start = 0
    for n in lengths:
        seq = d64(tokens[start : start + n]).transpose(0, 1)[None]  # [1, H, n, D]
        want = ref_rope(seq, position_grid(1, n), D, 10000.0)[0].transpose(0, 1)
        check(f"packed sequence at {start}", packed[start : start + n], want, dtype, seed)
        start += n


# ---- norm_rope --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("weight", ["none", "f32", "xdtype", "no_norm"])
@pytest.mark.parametrize("with_cache", [False, True], ids=["new", "cache"])
def test_norm_rope(seed, dtype, weight, with_cache):
    g = gen(seed)
    B, L, H, D, C = 2, 7, 4, 128, 32
    offset = int(randint(g, 0, C - L + 1, (1,)).item())
    k = randn(g, (B, L, H * D), dtype, scale=2.0).view(B, L, H, D).transpose(1, 2)  # Qwen 3's k
    normalize = weight != "no_norm"
    wdtype = torch.float32 if weight == "f32" else dtype
    w = None if weight in ("none", "no_norm") else randn(g, (D,), wdtype, offset=1.0)
    # The composition it equals: rms_norm rounded to the dtype, then the rotation.
    normed = ref_rms_norm(d64(k), d64(w), 1e-6).to(dtype).double() if normalize else d64(k)
    ref = ref_rope(normed, position_grid(B, L, offset), D, 1000000.0)
    if not with_cache:
        y = rudnn.norm_rope(k, w, 1e-6, normalize=normalize, base=1000000.0, offset=offset)
        check("norm_rope", y, ref, dtype, seed)
        composed = rudnn.rope(rudnn.rms_norm(k, w, 1e-6) if normalize else k, base=1000000.0, offset=offset)
        assert torch.equal(y, composed), "norm_rope differs from rms_norm then rope"
        return
    cache = randn(g, (B, H, C, D), dtype)
    original = cache.clone()
    r = rudnn.norm_rope(k, w, 1e-6, normalize=normalize, base=1000000.0, offset=offset, cache=cache)
    assert r is cache
    check("norm_rope cache slice", cache[:, :, offset : offset + L], ref, dtype, seed)
    keep = torch.ones(C, dtype=torch.bool, device=DEV)
    keep[offset : offset + L] = False
    assert torch.equal(cache[:, :, keep], original[:, :, keep]), "positions outside offset .. offset + L written"


# ---- swiglu, geglu ---------------------------------------------------------------------------------

GLU_SHAPES = [(1, 64), (9, 37), (33, 4096), (2, 3, 1408), (7,), (0, 16)]
GLU_OPS = {
    # name: (rudnn forward, rudnn backward, kwargs, torch activation)
    "swiglu": (rudnn.swiglu, rudnn.swiglu_backward, {}, F.silu),
    "geglu_erf": (rudnn.geglu, rudnn.geglu_backward, {}, lambda t: F.gelu(t)),
    "geglu_tanh": (rudnn.geglu, rudnn.geglu_backward, {"approximate": "tanh"},
                   lambda t: F.gelu(t, approximate="tanh")),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("shape", GLU_SHAPES, ids=str)
@pytest.mark.parametrize("op", list(GLU_OPS))
@pytest.mark.parametrize("form", ["two_tensors", "halves"])
def test_glu_against_torch(seed, dtype, shape, op, form):
    g = gen(seed)
    fwd, bwd, kw, act = GLU_OPS[op]
    gate, up, dy = randn(g, shape, dtype, scale=3.0), randn(g, shape, dtype), randn(g, shape, dtype)
    g64, u64 = d64(gate).requires_grad_(), d64(up).requires_grad_()
    ref = act(g64) * u64
    ref.backward(d64(dy))
    if form == "two_tensors":
        check(op, fwd(gate, up, **kw), ref, dtype, seed)
        dgate, dup = bwd(dy, gate, up, **kw)
        check(f"{op} dgate", dgate, g64.grad, dtype, seed)
        check(f"{op} dup", dup, u64.grad, dtype, seed)
    else:
        x = torch.cat([gate, up], dim=-1)
        check(f"{op} (halves)", fwd(x, **kw), ref, dtype, seed)
        check(f"{op} dx (halves)", bwd(dy, x, **kw), torch.cat([g64.grad, u64.grad], dim=-1), dtype, seed)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_glu_views_of_a_fused_projection_and_out(seed, dtype):
    g = gen(seed)
    fused = randn(g, (64, 2 * 1408), dtype, scale=2.0)  # [tokens, 2I] from one gate/up matmul
    gate, up = fused.chunk(2, dim=-1)  # views with row stride 2I, read in place
    ref = F.silu(d64(gate)) * d64(up)
    check("swiglu of chunked views", rudnn.swiglu(gate, up), ref, dtype, seed)
    out = torch.empty(64, 1408, device=DEV, dtype=dtype)
    assert rudnn.swiglu(fused, out=out) is out
    check("swiglu (halves) out=", out, ref, dtype, seed)


# ---- torch.autograd wrappers and torch.compile -------------------------------------------------------


@needs_custom_op
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_autograd_wrappers(seed, dtype):
    g = gen(seed)
    B, H, T, D = 2, 4, 11, 64
    x = randn(g, (B, H, T, D), dtype)
    dy = randn(g, (B, H, T, D), dtype)
    ids = randint(g, 0, 4096, (B, T))

    # rope: Hugging Face's defaults (halves, base 10000), position ids; GPT-J interleaved.
    for traditional in (False, True):
        xa = x.clone().requires_grad_()
        y = ta.rope(xa, positions=ids, traditional=traditional)
        y.backward(dy)
        x64 = d64(x).requires_grad_()
        ref = ref_rope(x64, ids.double(), D, 10000.0, traditional)
        ref.backward(d64(dy))
        check(f"ta.rope traditional={traditional}", y.detach(), ref.detach(), dtype, seed)
        check(f"ta.rope dx traditional={traditional}", xa.grad, x64.grad, dtype, seed)

    # norm_rope with a float32 weight: gradients for x and the weight.
    w = randn(g, (D,), torch.float32, offset=1.0)
    xa, wa = x.clone().requires_grad_(), w.clone().requires_grad_()
    y = ta.norm_rope(xa, wa, 1e-6, offset=5)
    y.backward(dy)
    x64, w64 = d64(x).requires_grad_(), d64(w).requires_grad_()
    ref = ref_rope(ref_rms_norm(x64, w64, 1e-6), position_grid(B, T, 5), D, 10000.0)
    ref.backward(d64(dy))
    check("ta.norm_rope", y.detach(), ref.detach(), dtype, seed)
    check("ta.norm_rope dx", xa.grad, x64.grad, dtype, seed)
    # dweight is float32, but sums the rope gradient as rounded to x's dtype (the composition).
    check("ta.norm_rope dweight", wa.grad, w64.grad, torch.float32, seed, tol=TOL[dtype])

    # norm_rope into a cache at the same positions: the slice written, the cache returned.
    cache = torch.zeros(B, H, T + 7, D, device=DEV, dtype=dtype)
    with torch.no_grad():
        assert ta.norm_rope(x, w, 1e-6, offset=5, cache=cache) is cache
    check("ta.norm_rope cache", cache[:, :, 5 : 5 + T], ref.detach(), dtype, seed)
    assert not cache[:, :, :5].any() and not cache[:, :, 5 + T :].any(), "cache written outside its slice"

    # swiglu / geglu, both forms.
    I = 96
    gate, up, dout = randn(g, (5, 7, I), dtype, scale=2.0), randn(g, (5, 7, I), dtype), randn(g, (5, 7, I), dtype)
    for name, fn, act in [
        ("swiglu", ta.swiglu, F.silu),
        ("geglu", ta.geglu, F.gelu),
        ("geglu tanh", lambda a, b=None: ta.geglu(a, b, "tanh"), lambda t: F.gelu(t, approximate="tanh")),
    ]:
        ga, ua = gate.clone().requires_grad_(), up.clone().requires_grad_()
        y = fn(ga, ua)
        y.backward(dout)
        g64, u64 = d64(gate).requires_grad_(), d64(up).requires_grad_()
        ref = act(g64) * u64
        ref.backward(d64(dout))
        check(f"ta.{name}", y.detach(), ref.detach(), dtype, seed)
        check(f"ta.{name} dgate", ga.grad, g64.grad, dtype, seed)
        check(f"ta.{name} dup", ua.grad, u64.grad, dtype, seed)
        xa = torch.cat([gate, up], -1).requires_grad_()
        fn(xa).backward(dout)
        check(f"ta.{name} dx (halves)", xa.grad, torch.cat([g64.grad, u64.grad], -1), dtype, seed)


class Block(torch.nn.Module):
    """A Llama / Qwen 3 style block in miniature: rope on q at position ids, norm_rope on k
    (per-head RMSNorm then rope), causal attention, a SwiGLU MLP from a fused gate/up
    projection and a GeGLU branch. impl="rudnn" uses rudnn.torch_autograd; "torch" the torch
    references (float32 cos / sin as Hugging Face computes them)."""

    def __init__(self, hidden=64, heads=4, kv_heads=2, head_dim=16, inter=96, device=DEV):
        super().__init__()
        self.h, self.kv, self.d = heads, kv_heads, head_dim

        def lin(i, o):
            return torch.nn.Linear(i, o, bias=False, device=device)

        self.q, self.k, self.v = lin(hidden, heads * head_dim), lin(hidden, kv_heads * head_dim), lin(
            hidden, kv_heads * head_dim
        )
        self.o = lin(heads * head_dim, hidden)
        self.k_norm = torch.nn.Parameter(torch.rand(head_dim, device=device) + 0.5)
        self.gate_up, self.down = lin(hidden, 2 * inter), lin(inter, hidden)
        self.gate2, self.up2 = lin(hidden, inter), lin(hidden, inter)

    def forward(self, x, ids, impl="rudnn"):
        B, T, _ = x.shape
        q = self.q(x).view(B, T, self.h, self.d).transpose(1, 2)
        k = self.k(x).view(B, T, self.kv, self.d).transpose(1, 2)
        v = self.v(x).view(B, T, self.kv, self.d).transpose(1, 2)
        if impl == "rudnn":
            q = ta.rope(q, positions=ids)
            k = ta.norm_rope(k, self.k_norm, 1e-6)
        else:
            inv = (1.0 / (10000.0 ** (torch.arange(0, self.d, 2, device=x.device).float() / self.d)))
            freqs = ids.float()[..., None] * inv
            emb = torch.cat((freqs, freqs), -1)
            cos, sin = emb.cos()[:, None], emb.sin()[:, None]
            q = q * cos + rotate_half(q) * sin
            kn = ref_rms_norm(k, self.k_norm, 1e-6)
            k = kn * cos + rotate_half(kn) * sin  # ids are 0 .. T-1: k's positions too
        k = k.repeat_interleave(self.h // self.kv, 1)
        v = v.repeat_interleave(self.h // self.kv, 1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = x + self.o(a.transpose(1, 2).reshape(B, T, self.h * self.d))
        if impl == "rudnn":
            m = ta.swiglu(self.gate_up(h)) + ta.geglu(self.gate2(h), self.up2(h), "tanh")
        else:
            gate, up = self.gate_up(h).chunk(2, -1)
            m = F.silu(gate) * up + F.gelu(self.gate2(h), approximate="tanh") * self.up2(h)
        return h + self.down(m)


@needs_custom_op
def test_torch_compile_fullgraph_block(seed):
    torch.manual_seed(seed % 2**32)
    block = Block()
    B, T = 2, 12
    x = torch.randn(B, T, 64, device=DEV, requires_grad=True)
    # q's position ids equal k's positions 0 .. T-1 here (norm_rope takes an offset only).
    ids = torch.arange(T, device=DEV).expand(B, T).contiguous()
    compiled = torch.compile(block, fullgraph=True)
    results = {}
    for name, run in [("compiled", lambda: compiled(x, ids)), ("eager", lambda: block(x, ids)),
                      ("torch", lambda: block(x, ids, impl="torch"))]:
        x.grad = None
        block.zero_grad(set_to_none=True)
        y = run()
        y.pow(2).mean().backward()
        results[name] = (y.detach(), x.grad.clone(), [p.grad.clone() for p in block.parameters()])
    msg = f"(seed={seed}; RUDNN_TEST_SEED={seed} replays)"
    for other, (rtol, atol) in (("eager", (1e-4, 1e-5)), ("torch", (1e-4, 1e-4))):
        y0, gx0, gp0 = results["compiled"]
        y1, gx1, gp1 = results[other]
        torch.testing.assert_close(y0, y1, rtol=rtol, atol=atol, msg=lambda m: f"compiled vs {other}: {m} {msg}")
        torch.testing.assert_close(gx0, gx1, rtol=rtol, atol=atol, msg=lambda m: f"dx, compiled vs {other}: {m} {msg}")
        for p0, p1 in zip(gp0, gp1):
            torch.testing.assert_close(p0, p1, rtol=rtol, atol=atol, msg=lambda m: f"param grad vs {other}: {m} {msg}")


@needs_custom_op
def test_plain_functions_compile_without_graph_breaks(seed):
    # rudnn.rope & co. on torch tensors call their custom op while torch.compile traces.
    g = gen(seed)
    x = randn(g, (2, 4, 8, 32), torch.bfloat16)
    ids = randint(g, 0, 1000, (2, 8))
    w = randn(g, (32,), torch.float32, offset=1.0)
    fused = randn(g, (16, 128), torch.bfloat16)

    # The ops' own outputs are compared (bit for bit: the same kernels run); arithmetic around
    # them would be fused by inductor in FP32 and legitimately differ from eager's bf16 rounding.
    def f(x, ids, w, fused):
        return (rudnn.rope(x, positions=ids, base=10000.0), rudnn.norm_rope(x, w, base=10000.0, offset=3),
                rudnn.swiglu(fused), rudnn.geglu(fused))

    for got, want in zip(torch.compile(f, fullgraph=True)(x, ids, w, fused), f(x, ids, w, fused)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


# ---- Devices and dtypes -------------------------------------------------------------------------------


def test_device_and_dtype_rules():
    x = torch.randn(2, 3, 4, 8, device=DEV)
    with pytest.raises(rudnn.DeviceMismatch, match=r"^rope: positions is on cpu"):
        rudnn.rope(x, base=1e4, positions=torch.zeros(4, dtype=torch.int64))
    with pytest.raises(rudnn.DeviceMismatch, match=r"^norm_rope: weight"):
        rudnn.norm_rope(x, torch.ones(8), base=1e4)
    with pytest.raises(rudnn.DTypeMismatch, match=r"^rope: x"):
        rudnn.rope(x.double(), base=1e4)  # float64 runs on the CPU only
    with pytest.raises(rudnn.DeviceMismatch, match=r"^swiglu: up"):
        rudnn.swiglu(x, x.cpu())
    freqs = rudnn.rope_llama3_freqs(8, 500000.0, like=x)
    assert freqs.device == DEV
    empty = rudnn.rope(x[:0], base=1e4)
    assert empty.shape == (0, 3, 4, 8) and empty.device == DEV
