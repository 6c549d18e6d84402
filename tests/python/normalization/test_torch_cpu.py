"""The torch-facing ops on CPU tensors (skipped without torch, as in CI): rudnn's functions on
torch tensors, rudnn.torch_autograd against torch autograd, the torch.library custom ops
(fake implementations, gradcheck in float64 against the CPU reference, torch.compile with
fullgraph=True over a training step). The GPU round covers CUDA tensors
(test_gpu_torch.py).
"""

import numpy as np
import pytest
from support import F32, Ctx, randn, ref_layer_norm, ref_logsumexp, ref_rms_norm, ref_softmax

torch = pytest.importorskip("torch", reason="torch is not installed")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("torch >= 2.4 (torch.library.custom_op) is needed", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import rudnn  # noqa: E402
from rudnn import torch_autograd as ta  # noqa: E402
from support_torch import TinyModel, check_compiled_training_step  # noqa: E402


@pytest.mark.parametrize("tdtype", ["float32", "float16", "bfloat16"])
def test_torch_cpu_ops_and_autograd(rng, tdtype):
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


# ---- torch's defaults --------------------------------------------------------------------------


def test_cross_entropy_takes_torch_defaults(rng):
    # torch pads targets with -100; a wrapper whose default ignored nothing gave a NaN mean.
    logits = torch.from_numpy(randn(rng, (6, 11), F32))
    targets = torch.tensor([1, -100, 3, 0, -100, 10])
    loss = ta.cross_entropy(logits, targets)
    ref = F.cross_entropy(logits.double(), targets)
    assert loss.dim() == 0 and torch.isfinite(loss)
    torch.testing.assert_close(loss.double(), ref, rtol=1e-5, atol=1e-6)
    # ignore_index=None ignores nothing (-100 wraps to no valid class: NaN, as documented).
    assert torch.isnan(ta.cross_entropy(logits, targets, ignore_index=None))
    with pytest.raises(rudnn.InvalidArgument, match="ignore_index"):
        ta.cross_entropy(logits, targets, ignore_index=True)


# ---- autograd of add_rms_norm and logsumexp ------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_add_rms_norm_and_logsumexp_autograd(rng, dtype):
    x0 = torch.from_numpy(randn(rng, (3, 5, 40), F32)).to(dtype)
    r0 = torch.from_numpy(randn(rng, (3, 5, 40), F32)).to(dtype)
    w0 = torch.from_numpy(randn(rng, (40,), F32, offset=1.0))
    ds, dn = (torch.from_numpy(randn(rng, (3, 5, 40), F32)).to(dtype) for _ in range(2))
    tol = 1e-4 if dtype == torch.float32 else 3e-2

    x, r, w = (t.clone().requires_grad_() for t in (x0, r0, w0))
    s, n = ta.add_rms_norm(x, r, w)
    torch.autograd.backward([s, n], [ds, dn])
    x64, r64, w64 = (t.double().requires_grad_() for t in (x0, r0, w0))
    s64 = x64 + r64
    n64 = s64 * torch.rsqrt(s64.pow(2).mean(-1, keepdim=True) + 1e-6) * w64
    torch.autograd.backward([s64, n64], [ds.double(), dn.double()])
    for got, ref in [(x.grad, x64.grad), (r.grad, r64.grad), (w.grad, w64.grad)]:
        rel = (got.double() - ref).norm() / ref.norm()
        assert rel < tol, rel

    x = x0.clone().requires_grad_()
    g = torch.from_numpy(randn(rng, (3, 5), F32)).to(dtype)
    ta.logsumexp(x).backward(g)
    x64 = x0.double().requires_grad_()
    torch.logsumexp(x64, -1).backward(g.double())
    assert (x.grad.double() - x64.grad).norm() / x64.grad.norm() < tol


# ---- float64 on the CPU: gradcheck against the reference ----------------------------------------


def _f64(rng, shape, offset=0.0, grad=True):
    return torch.from_numpy(randn(rng, shape, np.float64, offset=offset)).requires_grad_(grad)


def test_gradcheck_float64(rng):
    x, r, w, b = _f64(rng, (3, 7)), _f64(rng, (3, 7)), _f64(rng, (7,), 1.0), _f64(rng, (7,))
    gc = torch.autograd.gradcheck
    assert gc(lambda x, w: ta.rms_norm(x, w), (x, w))
    assert gc(lambda x, w, b: ta.layer_norm(x, w, b), (x, w, b))
    assert gc(lambda x, r, w: ta.add_rms_norm(x, r, w), (x, r, w))
    assert gc(ta.softmax, (x,))
    assert gc(ta.logsumexp, (x,))
    targets = torch.tensor([2, -100, 6])
    assert gc(lambda z: ta.cross_entropy(z, targets, reduction="none"), (x,))
    # A reduced loss whose logits need a gradient takes the fused path, whose backward scales
    # the saved gradient in place and so runs once (a second, as gradcheck's reentrancy check
    # makes, is torch's "modified by an inplace operation" error); the unfused op is checked.
    for reduction in ("mean", "sum"):
        assert gc(lambda z: torch.ops.rudnn.cross_entropy(z, targets, -100, reduction, False)[0], (x,))
    loss = ta.cross_entropy(x, targets)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="inplace"):
        loss.backward()


def test_custom_ops_pass_opcheck(rng):
    # Schema, fake implementation and autograd registration agree with the real op.
    x, w = _f64(rng, (4, 9)), _f64(rng, (9,), 1.0)
    t = torch.tensor([0, 3, -100, 8])
    lib = torch.ops.rudnn
    for op, args in [
        (lib.rms_norm, (x, w, 1e-6)),
        (lib.layer_norm, (x, w, None, 1e-5)),
        (lib.add_rms_norm, (x, x.detach().clone(), w, 1e-6)),
        (lib.softmax, (x,)),
        (lib.logsumexp, (x,)),
        (lib.cross_entropy, (x, t, -100, "mean", False)),
        (lib.cross_entropy, (x, t, -100, "none", False)),
    ]:
        torch.library.opcheck(op, args, test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))


# ---- torch.compile ----------------------------------------------------------------------------------


def test_torch_compile_fullgraph_cpu():
    check_compiled_training_step("cpu")


def test_torch_compile_export_sees_custom_ops():
    gm = torch.export.export(TinyModel(8, 5), (torch.randn(2, 8), torch.tensor([1, 4]))).graph_module
    names = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    assert {"rudnn.add_rms_norm.default", "rudnn.rms_norm.default", "rudnn.cross_entropy.default"} <= names, names


def test_plain_functions_compile_without_graph_breaks():
    # rudnn.rms_norm & co. on torch tensors call their custom op while torch.compile traces.
    def f(x, w, t):
        h, n = rudnn.add_rms_norm(x, x, w)
        y = rudnn.layer_norm(rudnn.rms_norm(n, w), w, None) + rudnn.softmax(h)
        return rudnn.cross_entropy(y, t, -100).sum() + rudnn.logsumexp(y).sum()

    x, w, t = torch.randn(3, 8), torch.rand(8) + 0.5, torch.tensor([1, -100, 7])
    torch.testing.assert_close(torch.compile(f, fullgraph=True)(x, w, t), f(x, w, t), rtol=1e-5, atol=1e-5)
