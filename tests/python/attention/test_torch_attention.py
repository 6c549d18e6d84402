"""The attention family's torch ops (skipped without torch >= 2.4; the CUDA cases also without a
GPU or a CUDA build of ruDNN): rudnn.torch_autograd.attention / scaled_dot_product_attention
against torch.nn.functional.scaled_dot_product_attention run in float64 on the same inputs
(grouped heads, causal with Lq == Lk, bool and float masks) and against a torch float64
reference for what torch's function lacks (sinks, softcap, ALiBi, sliding window, bias,
bottom-right causal with Lq < Lk, varlen, bshd); gradients (q, k, v, sinks, bias) against torch
autograd of those references; every strategy on the GPU; gradcheck in float64 on the CPU;
torch.library.opcheck; torch.compile(fullgraph=True) of an attention block, forward and
backward. Inputs are random with a fresh seed per test (conftest's rng; RUDNN_TEST_SEED=<int>
replays one).
"""

import math

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("torch >= 2.4 (torch.library.custom_op) is needed", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import rudnn  # noqa: E402
from rudnn import torch_autograd as ta  # noqa: E402

CUDA = torch.cuda.is_available() and rudnn.built_with_cuda()
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA GPU (or ruDNN built without CUDA)")
TOL = {torch.float64: 1e-10, torch.float32: 2e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def rand(gen, shape, dtype, device, scale=1.0):
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(device=device, dtype=dtype)


def close(what, got, ref, dtype, seed, case=None):
    msg = f"{what} [{dtype}] (seed={seed}; RUDNN_TEST_SEED={seed} replays; case={case})"
    assert got.shape == ref.shape, f"{msg}: shape {tuple(got.shape)} vs {tuple(ref.shape)}"
    if ref.numel():
        g, r = got.detach().double(), ref.detach().double()
        err = (g - r).norm().item() / max(r.norm().item(), 1e-6 * r.numel() ** 0.5)
        assert err <= TOL[dtype], f"{msg}: relative L2 error {err:.3g}"


def ref_attention(q, k, v, scale=None, is_causal=False, mask=None, bias=None, sinks=None, window=None,
                  softcap=None, alibi_slopes=None):
    """The header's definition in torch (bhsd), differentiable: out [B, Hq, Lq, Dv]."""
    Hq, Lq, D = q.shape[1], q.shape[2], q.shape[3]
    Lk = k.shape[2]
    group = Hq // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    x = (1.0 / math.sqrt(D) if scale is None else scale) * q @ k.transpose(-1, -2)
    if softcap is not None:
        x = softcap * torch.tanh(x / softcap)
    i = torch.arange(Lq, device=q.device)[:, None] + (Lk - Lq)
    j = torch.arange(Lk, device=q.device)[None, :]
    if alibi_slopes is not None:
        x = x - alibi_slopes.to(x.dtype)[:, None, None] * (i - j).abs()
    if bias is not None:
        x = x + bias.to(x.dtype)
    if mask is not None:
        x = x.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else x + mask.to(x.dtype)
    if is_causal:
        x = x.masked_fill(j > i, float("-inf"))
    if window is not None:
        x = x.masked_fill(j <= i - window, float("-inf"))
    if sinks is not None:
        x = torch.cat([x, sinks.to(x.dtype)[None, :, None, None].expand(x.shape[0], -1, Lq, 1)], -1)
    p = torch.softmax(x, -1).nan_to_num(0.0)
    if sinks is not None:
        p = p[..., :-1]
    return p @ v


def run_both(gen, dtype, device, B, Hq, Hkv, Lq, Lk, D, Dv, extra, case, seed, layout="bhsd", use_sdpa=False):
    q0, k0, v0 = (rand(gen, s, dtype, device) for s in ((B, Hq, Lq, D), (B, Hkv, Lk, D), (B, Hkv, Lk, Dv)))
    tensors = {n: extra[n] for n in ("sinks", "bias") if n in extra}  # the options with a gradient
    leaves = [q0, k0, v0] + list(tensors.values())
    mine = [t.clone().requires_grad_() for t in leaves]
    ref = [t.detach().double().requires_grad_() for t in leaves]
    opts_mine = dict(extra, **dict(zip(tensors, mine[3:])))
    opts_ref = dict(extra, **dict(zip(tensors, ref[3:])))
    qm, km, vm = mine[:3]
    if layout == "bshd":
        out = ta.attention(qm.transpose(1, 2), km.transpose(1, 2), vm.transpose(1, 2), layout="bshd",
                           **opts_mine).transpose(1, 2)
    else:
        out = ta.attention(qm, km, vm, **opts_mine)
    if use_sdpa:
        m = opts_ref.get("mask")
        expected = F.scaled_dot_product_attention(
            ref[0], ref[1].repeat_interleave(Hq // Hkv, 1), ref[2].repeat_interleave(Hq // Hkv, 1),
            attn_mask=m.double() if m is not None and m.is_floating_point() else m,
            is_causal=opts_ref.get("is_causal", False), scale=opts_ref.get("scale"))
    else:
        expected = ref_attention(*ref[:3], **opts_ref)
    close("out", out, expected, dtype, seed, case)
    dout = rand(gen, out.shape, dtype, device)
    out.backward(dout)
    expected.backward(dout.double())
    for name, a, b in zip(["dq", "dk", "dv"] + list(tensors), mine, ref):
        if a.requires_grad:
            close(name, a.grad, b.grad, dtype, seed, case)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", ["plain", "gqa_causal", "bool_mask", "float_mask", "scale"])
def test_against_torch_sdpa(rng, gen, device, dtype, case):
    B, Hq, Hkv, L, D = 2, 4, 2 if case == "gqa_causal" else 4, 33, 64
    extra = {}
    if case == "gqa_causal":
        extra["is_causal"] = True
    if case == "bool_mask":
        extra["mask"] = torch.rand(B, 1, L, L, generator=gen).to(device) < 0.8
    if case == "float_mask":
        extra["mask"] = rand(gen, (L, L), torch.float32, device)
    if case == "scale":
        extra["scale"] = 0.05
    run_both(gen, dtype, device, B, Hq, Hkv, L, L, D, D, extra, case, rng.seed_value, use_sdpa=True)


EXTRAS = {
    "causal_lq<lk": lambda g, d, H: {"is_causal": True},
    "window": lambda g, d, H: {"is_causal": True, "window": 7},
    "softcap": lambda g, d, H: {"softcap": 3.0, "scale": 0.5},
    "sinks": lambda g, d, H: {"sinks": rand(g, (H,), torch.float32, d)},
    "alibi": lambda g, d, H: {"alibi_slopes": torch.rand(H, generator=g).to(d) * 0.3, "is_causal": True},
    "bias": lambda g, d, H: {"bias": rand(g, (1, H, 9, 21), torch.float32, d)},
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", list(EXTRAS))
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_against_torch_reference(rng, gen, device, dtype, case, layout):
    Hq = 4
    extra = EXTRAS[case](gen, device, Hq)
    run_both(gen, dtype, device, 2, Hq, 2, 9, 21, 32, 48, extra, case, rng.seed_value, layout=layout)


@needs_cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("strategy", ["auto", "flash_scalar", "composed", "split_kv", "flash"])
@pytest.mark.parametrize("Lq", [1, 4, 128])
def test_every_strategy_on_the_gpu(rng, gen, dtype, strategy, Lq):
    q, k, v = (rand(gen, s, dtype, "cuda") for s in ((2, 8, Lq, 128), (2, 2, 300, 128), (2, 2, 300, 128)))
    try:
        out = rudnn.attention(q, k, v, is_causal=True, strategy=strategy)
    except rudnn.Unsupported as e:  # a strategy that cannot take this shape says why
        assert str(e).startswith("attention: "), str(e)
        return
    ref = ref_attention(q.double(), k.double(), v.double(), is_causal=True)
    close(f"attention strategy={strategy}", out, ref, dtype, rng.seed_value, dict(Lq=Lq))


@needs_cuda
def test_plan_reports_the_hopper_kernel():
    """plan_attention's flash_wgmma: True for Flash with plain options on an sm_90 GPU (the
    builds under test hold sm_90a code), False elsewhere and for options it does not take."""
    hopper = torch.cuda.get_device_capability(0)[0] == 9
    shapes = ((2, 8, 512, 128), (2, 2, 512, 128), (2, 2, 512, 128))
    for dt in (torch.bfloat16, torch.float16):
        for causal in (False, True):
            p = rudnn.plan_attention(*shapes, dt, strategy="flash", device="cuda", is_causal=causal)
            assert p["kernel"] == "Flash" and p["flash_wgmma"] is hopper, (dt, causal, p)
        for d in (64, 256):
            s = (1, 4, 300, d)
            assert rudnn.plan_attention(s, s, s, dt, device="cuda")["flash_wgmma"] is hopper, (dt, d)
        p = rudnn.plan_attention(*shapes, dt, strategy="flash", device="cuda", softcap=30.0)
        assert p["flash_wgmma"] is False, ("softcap", dt, p)
        s96 = (1, 4, 300, 96)
        assert rudnn.plan_attention(s96, s96, s96, dt, device="cuda")["flash_wgmma"] is False, dt
    assert rudnn.plan_attention(*shapes, torch.float32, device="cuda")["flash_wgmma"] is False


@needs_cuda
def test_varlen_on_the_gpu(rng, gen):
    lens = [5, 1, 17, 9]
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    q = rand(gen, (cu[-1].item(), 4, 64), torch.bfloat16, "cuda").requires_grad_()
    k = rand(gen, (cu[-1].item(), 2, 64), torch.bfloat16, "cuda").requires_grad_()
    v = rand(gen, (cu[-1].item(), 2, 64), torch.bfloat16, "cuda").requires_grad_()
    out = ta.attention(q, k, v, is_causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=17, max_seqlen_k=17)
    dout = rand(gen, out.shape, torch.bfloat16, "cuda")
    out.backward(dout)
    for n in range(len(lens)):
        s = slice(cu[n].item(), cu[n + 1].item())
        per = [t.detach()[s].transpose(0, 1)[None].double().requires_grad_() for t in (q, k, v)]
        ref = ref_attention(*per, is_causal=True)
        close(f"varlen out[{n}]", out[s].transpose(0, 1)[None], ref, torch.bfloat16, rng.seed_value)
        ref.backward(dout[s].transpose(0, 1)[None].double())
        for name, t, r in zip("qkv", (q, k, v), per):
            if name in "qk" and lens[n] == 1:
                # One query seeing one key: p = 1, so dS = p (dP - D) = 0 and dq = scale dS k and
                # dk = scale dS q are exactly 0; a relative error means nothing. The kernels'
                # values are the rounding noise of D = rowsum(dO * O) with O = v rounded to bf16:
                # |dP - D| <= 2^-8 sum |dO * v| per query head; the bounds allow 4x that (dk:
                # summed over the two query heads of its KV head).
                kv = torch.arange(4, device="cuda") // 2
                dov = (dout[s].double() * v.detach()[s][:, kv].double()).abs().sum(-1)  # [1, Hq]
                other = (k.detach()[s][:, kv] if name == "q" else q.detach()[s]).double().abs().amax(-1)
                bound = 64 ** -0.5 * 2.0 ** -6 * dov * other
                if name == "k":
                    bound = bound.view(1, 2, 2).sum(-1)
                err = t.grad[s].double().abs().amax(-1)
                assert bool((err <= bound).all()), f"varlen d{name}[{n}] {err.tolist()} > {bound.tolist()} (seed={rng.seed_value})"
                continue
            close(f"varlen d{name}[{n}]", t.grad[s].transpose(0, 1)[None], r.grad, torch.bfloat16, rng.seed_value)


def test_gradcheck_float64_cpu(gen):
    q, k, v = (rand(gen, s, torch.float64, "cpu").requires_grad_() for s in ((1, 2, 3, 4), (1, 1, 5, 4), (1, 1, 5, 3)))
    sinks = rand(gen, (2,), torch.float64, "cpu").requires_grad_()
    bias = rand(gen, (1, 2, 3, 5), torch.float64, "cpu").requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b, c: ta.attention(a, b, c, is_causal=True), (q, k, v))
    assert torch.autograd.gradcheck(lambda a, b, c, s, t: ta.attention(a, b, c, sinks=s, bias=t, softcap=2.0),
                                    (q, k, v, sinks, bias))


def test_custom_ops_pass_opcheck(gen):
    q, k, v = (rand(gen, s, torch.float64, "cpu").requires_grad_() for s in ((2, 4, 3, 8), (2, 2, 5, 8), (2, 2, 5, 6)))
    sinks = rand(gen, (4,), torch.float64, "cpu").requires_grad_()
    utils = ("test_schema", "test_faketensor", "test_autograd_registration")
    lib = torch.ops.rudnn
    base = (None, None, None, None, None, None, None, False, None, None, "bhsd", 0, 0, None, "auto")
    torch.library.opcheck(lib.attention, (q, k, v) + base, test_utils=utils)
    with_sinks = (None, None, sinks, None, None, None, 0.3, True, 2, 4.0, "bhsd", 0, 0, None, "auto")
    torch.library.opcheck(lib.attention, (q, k, v) + with_sinks, test_utils=utils)
    bshd = tuple(t.detach().transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))
    torch.library.opcheck(lib.attention, bshd + base[:10] + ("bshd",) + base[11:], test_utils=utils)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(gen, device):
    def block(x, wq, wk, wv, sinks):
        B, L, _ = x.shape
        q = (x @ wq).view(B, L, 4, 16)
        k = (x @ wk).view(B, L, 2, 16)
        v = (x @ wv).view(B, L, 2, 16)
        o = ta.attention(q, k, v, is_causal=True, layout="bshd", sinks=sinks)
        return (o.float() ** 2).sum() + rudnn.attention(q.detach(), k.detach(), v.detach(), layout="bshd").sum()

    x = rand(gen, (2, 10, 32), torch.float32, device).requires_grad_()
    ws = [rand(gen, (32, n), torch.float32, device, 0.2).requires_grad_() for n in (64, 32, 32)]
    sinks = rand(gen, (4,), torch.float32, device).requires_grad_()
    results = []
    for fn in (torch.compile(block, fullgraph=True), block):
        for t in [x, sinks] + ws:
            t.grad = None
        y = fn(x, *ws, sinks)
        y.backward()
        results.append([y.detach()] + [t.grad.clone() for t in [x, sinks] + ws])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_sdpa_wrapper_and_argument_rules(gen):
    q, k, v = (rand(gen, (1, 2, 4, 8), torch.float32, "cpu") for _ in range(3))
    torch.testing.assert_close(ta.scaled_dot_product_attention(q, k, v, is_causal=True),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True), rtol=1e-5, atol=1e-6)
    with pytest.raises(rudnn.InvalidArgument, match=r"^attention: is_causal must be a bool"):
        ta.attention(q, k, v, is_causal=1)
    with pytest.raises(rudnn.InvalidArgument, match=r"^attention: strategy must be one of"):
        ta.attention(q, k, v, strategy="best")
