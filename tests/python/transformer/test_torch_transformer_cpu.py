"""The transformer family's torch ops on CPU tensors (skipped without torch >= 2.4): the
rudnn.torch_autograd wrappers against torch autograd, gradcheck in float64 against the CPU
reference, torch.library.opcheck of every custom op (schema, fake implementation, autograd
registration), and torch.compile(fullgraph=True) over functions using them. The GPU round
is test_gpu_transformer.py.
"""

import numpy as np
import pytest
from support import F32, Ctx, randn

torch = pytest.importorskip("torch", reason="torch is not installed")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("torch >= 2.4 (torch.library.custom_op) is needed", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import rudnn  # noqa: E402
from rudnn import torch_autograd as ta  # noqa: E402


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def llama_rope(x, pos, base=10000.0):
    """Hugging Face Llama's rotation of x [B, H, T, D] at positions pos [B, T], in x's dtype."""
    D = x.shape[-1]
    inv = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    freqs = pos.double()[..., None] * inv
    emb = torch.cat((freqs, freqs), -1)
    cos, sin = emb.cos()[:, None].to(x.dtype), emb.sin()[:, None].to(x.dtype)
    return x * cos + rotate_half(x) * sin


def _t(rng, shape, dtype=np.float64, **kw):
    return torch.from_numpy(randn(rng, shape, dtype, **kw))


@pytest.mark.parametrize("tdtype", ["float32", "bfloat16"])
def test_wrappers_against_torch_autograd(rng, tdtype):
    dt = getattr(torch, tdtype)
    tol = {"float32": 1e-5, "bfloat16": 1e-2}[tdtype]
    ctx = Ctx(rng, dtype=tdtype)

    def close(what, got, ref):
        assert got.dtype == dt and got.device.type == "cpu", ctx.msg(f"{what}: {got.dtype} on {got.device}")
        g, r = got.detach().double(), ref.detach().double()
        err = (g - r).norm().item() / max(r.norm().item(), 1e-12)
        assert err <= tol, ctx.msg(f"{what}: relative L2 error {err:.3g} > {tol}")

    x0 = _t(rng, (2, 3, 7, 16), F32).to(dt)
    dy = _t(rng, (2, 3, 7, 16), F32).to(dt)
    pos = torch.from_numpy(rng.integers(0, 5000, size=(2, 7)))
    xa = x0.clone().requires_grad_()
    y = ta.rope(xa, positions=pos)  # Hugging Face's defaults: halves, base 10000
    y.backward(dy)
    x64 = x0.double().requires_grad_()
    ref = llama_rope(x64, pos)
    ref.backward(dy.double())
    close("ta.rope", y, ref)
    close("ta.rope dx", xa.grad, x64.grad)

    gate, up = _t(rng, (4, 5, 24), F32, scale=2.0).to(dt), _t(rng, (4, 5, 24), F32).to(dt)
    dout = _t(rng, (4, 5, 24), F32).to(dt)
    for name, fn, act in [("swiglu", ta.swiglu, F.silu), ("geglu", ta.geglu, F.gelu)]:
        ga, ua = gate.clone().requires_grad_(), up.clone().requires_grad_()
        y = fn(ga, ua)
        y.backward(dout)
        g64, u64 = gate.double().requires_grad_(), up.double().requires_grad_()
        ref = act(g64) * u64
        ref.backward(dout.double())
        close(name, y, ref)
        close(f"{name} dgate", ga.grad, g64.grad)
        close(f"{name} dup", ua.grad, u64.grad)


def test_gradcheck_float64(rng):
    gc = torch.autograd.gradcheck
    x = _t(rng, (2, 3, 4, 8)).requires_grad_()
    pos = torch.from_numpy(rng.integers(0, 100, size=(2, 4)).astype(np.int32))
    offsets = torch.tensor([3, 11])
    freqs = torch.from_numpy((10000.0 ** (np.arange(3) / 3.0)).astype(F32))
    assert gc(lambda z: ta.rope(z, positions=pos), (x,))
    assert gc(lambda z: ta.rope(z, 6, traditional=True, freqs=freqs, offsets=offsets, scale=0.5), (x,))
    assert gc(lambda z: torch.ops.rudnn.rope_backward(z, 8, False, 10000.0, None, 1.0, 4, None, None), (x,))
    w = _t(rng, (8,), offset=1.0).requires_grad_()
    assert gc(lambda z, v: ta.norm_rope(z, v, 1e-6, offset=2), (x, w))
    assert gc(lambda z: ta.norm_rope(z, None, normalize=False, traditional=True), (x,))
    g, u = _t(rng, (3, 10), scale=2.0).requires_grad_(), _t(rng, (3, 10)).requires_grad_()
    fused = _t(rng, (3, 20), scale=2.0).requires_grad_()
    for fn in (ta.swiglu, ta.geglu, lambda a, b=None: ta.geglu(a, b, "tanh")):
        assert gc(fn, (g, u))
        assert gc(fn, (fused,))


def test_custom_ops_pass_opcheck(rng):
    x = _t(rng, (2, 3, 4, 8)).requires_grad_()
    w = _t(rng, (8,), offset=1.0).requires_grad_()
    pos = torch.from_numpy(rng.integers(0, 100, size=(4,)))
    g, u = _t(rng, (3, 10)).requires_grad_(), _t(rng, (3, 10)).requires_grad_()
    lib = torch.ops.rudnn
    utils = ("test_schema", "test_faketensor", "test_autograd_registration")
    for op, args in [
        (lib.rope, (x, 8, False, 10000.0, None, 1.0, 0, None, pos)),
        (lib.rope_backward, (x, 6, True, 500000.0, None, 0.5, 3, None, None)),
        (lib.norm_rope, (x, w, 1e-6, True, 8, False, 10000.0, None, 1.0, 2)),
        (lib.swiglu, (g, u)),
        (lib.swiglu, (torch.cat([g, u], -1).detach().requires_grad_(), None)),
        (lib.geglu, (g, u, "tanh")),
        (lib.swiglu_backward, (g.detach(), g.detach(), u.detach())),
        (lib.geglu_backward, (g.detach(), torch.cat([g, u], -1).detach(), None, "none")),
    ]:
        torch.library.opcheck(op, args, test_utils=utils)
    cache = torch.zeros(2, 3, 9, 8, dtype=torch.float64)
    torch.library.opcheck(lib.norm_rope_cache_, (x.detach(), None, 1e-6, True, 8, False, 1e4, None, 1.0, 5, cache),
                          test_utils=("test_schema", "test_faketensor"))


def test_norm_rope_cache_write(rng):
    x = _t(rng, (2, 3, 4, 8))
    cache = torch.zeros(2, 3, 10, 8, dtype=torch.float64)
    assert ta.norm_rope(x, None, offset=3, cache=cache) is cache
    torch.testing.assert_close(cache[:, :, 3:7], ta.norm_rope(x, None, offset=3))
    assert not cache[:, :, :3].any() and not cache[:, :, 7:].any()


def test_wrapper_argument_rules(rng):
    x = _t(rng, (2, 3, 4, 8))
    with pytest.raises(rudnn.InvalidArgument, match=r"^rope: traditional must be a bool"):
        ta.rope(x, traditional=1)
    with pytest.raises(rudnn.InvalidArgument, match=r"^rope: offset must be an int"):
        ta.rope(x, offset=True)
    with pytest.raises(rudnn.InvalidArgument, match=r"^geglu: approximate must be 'none' or 'tanh'"):
        ta.geglu(x, x, "exact")
    with pytest.raises(rudnn.InvalidArgument, match=r"^rope: dims is 7"):
        ta.rope(x, 7)


def test_compile_fullgraph_cpu(rng):
    def block(x, pos, w, fused):
        q = ta.rope(x, positions=pos)
        k = ta.norm_rope(x, w, 1e-6)
        return (q * k).sum() + ta.swiglu(fused).sum() + ta.geglu(fused, None, "tanh").sum()

    x = _t(rng, (2, 3, 5, 8), F32).requires_grad_()
    w = _t(rng, (8,), F32, offset=1.0).requires_grad_()
    fused = _t(rng, (6, 32), F32).requires_grad_()
    pos = torch.from_numpy(rng.integers(0, 100, size=(2, 5)))
    compiled = torch.compile(block, fullgraph=True)
    grads = []
    for fn in (compiled, block):
        for t in (x, w, fused):
            t.grad = None
        out = fn(x, pos, w, fused)
        out.backward()
        grads.append((out.detach(), x.grad.clone(), w.grad.clone(), fused.grad.clone()))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)

    def plain(x, pos, fused):  # the rudnn functions on torch tensors, traced as custom ops
        return rudnn.rope(x, positions=pos, base=1e4).sum() + rudnn.swiglu(fused).sum()

    xd = x.detach()
    torch.testing.assert_close(torch.compile(plain, fullgraph=True)(xd, pos, fused.detach()),
                               plain(xd, pos, fused.detach()), rtol=1e-5, atol=1e-5)
