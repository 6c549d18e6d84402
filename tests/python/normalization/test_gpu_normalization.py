"""GPU tests of the rudnn Python package against PyTorch, on torch CUDA tensors.

Skipped (the whole module, reported as skipped) unless torch is importable, CUDA is
available to it, and ruDNN was built with CUDA. References are PyTorch's own ops
(F.layer_norm, F.rms_norm, torch.softmax, torch.logsumexp, F.cross_entropy with
reduction='none', autograd for the backward passes) run in float64 on the same inputs;
results are compared by relative L2 error with per-dtype tolerances. Inputs are random with a
fresh seed per test (printed on failure; RUDNN_TEST_SEED=<int> replays one).
"""

import os
import random

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("torch.cuda is not available (no GPU)", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import rudnn  # noqa: E402

if not rudnn.built_with_cuda():
    pytest.skip("ruDNN was built without CUDA", allow_module_level=True)

DEV = torch.device("cuda", 0)
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Relative L2 error bounds, by the dtype of the result.
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
SHAPES = [(1, 64), (7, 1), (9, 37), (4, 1000), (33, 4096), (2, 3, 96), (0, 16)]


@pytest.fixture
def seed():
    return int(os.environ.get("RUDNN_TEST_SEED", random.SystemRandom().randrange(2**63)))


def gen(seed, device=DEV):
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def randn(g, shape, dtype, scale=1.0, offset=0.0, device=DEV):
    return (torch.randn(shape, generator=g, device=device, dtype=torch.float32) * scale + offset).to(dtype)


def dname(dtype):
    return str(dtype).replace("torch.", "")


def check(what, got, ref, dtype, seed, device=DEV, floor=0.0):
    msg = f"{what} [{dname(dtype)}] (seed={seed}; RUDNN_TEST_SEED={seed} replays)"
    assert isinstance(got, torch.Tensor), f"{msg}: result is {type(got)}, expected a torch tensor"
    assert got.device == device, f"{msg}: result on {got.device}, expected {device}"
    assert got.dtype == dtype, f"{msg}: dtype {got.dtype}, expected {dtype}"
    assert tuple(got.shape) == tuple(ref.shape), f"{msg}: shape {tuple(got.shape)}, expected {tuple(ref.shape)}"
    if ref.numel() == 0:
        return
    g, r = got.double(), ref.double()
    nan = torch.isnan(r)
    assert torch.equal(torch.isnan(g), nan), f"{msg}: NaN pattern differs"
    g, r = g[~nan], r[~nan]
    if r.numel() == 0:
        return
    # The floor keeps results that are 0 up to the reference's own rounding (LayerNorm of H = 1)
    # from reading as a relative error of 1; `floor` does the same for results that are a
    # near-total cancellation of larger terms (see norm_grad_scale).
    den = max(r.norm().item(), 1e-6 * r.numel() ** 0.5, floor)
    err = (g - r).norm().item() / den
    assert err <= TOL[dtype], f"{msg}: relative L2 error {err:.3g} > {TOL[dtype]:.1g}"


def norm_grad_scale(x64, w64, dy64, eps, layer):
    """‖rstd · gamma · dy‖: the size of the terms whose difference is a norm's dx. At H = 1 or 2
    dx nearly cancels (y barely depends on x), and its rounding error is relative to these."""
    xm = x64 - x64.mean(-1, keepdim=True) if layer else x64
    rstd = torch.rsqrt((xm * xm).mean(-1, keepdim=True) + eps)
    return (rstd * dy64 * (1.0 if w64 is None else w64)).norm().item()


def ref_rms_norm(x, g, eps):
    H = x.shape[-1]
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (H,), g, eps)
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if g is None else y * g


def d64(t):
    return None if t is None else t.detach().double()


def ce_targets(g, shape, C, ignore_index=None, device=DEV):
    t = torch.randint(0, C, shape, generator=g, device=device, dtype=torch.int64)
    if ignore_index is not None and t.numel() >= 3:
        flat = t.view(-1)
        flat[0] = ignore_index
        flat[flat.numel() // 2] = ignore_index
    return t


def ref_ce(logits, targets, ignore_index):
    C = logits.shape[-1]
    kw = {} if ignore_index is None else {"ignore_index": ignore_index}
    loss = F.cross_entropy(d64(logits).reshape(-1, C), targets.reshape(-1), reduction="none", **kw)
    return loss.reshape(targets.shape)


def ce_loss_floor(logits):
    """Size of the terms of a cross-entropy loss, lse - logit[target]: each is exact only to
    FP32 rounding of its own size, so a loss near 0 is a cancellation and is judged against
    them (check's floor)."""
    x = d64(logits).reshape(-1, logits.shape[-1])
    if x.numel() == 0:
        return 0.0
    return torch.logsumexp(x, -1).norm().item() + x.abs().amax(-1).norm().item()


# ---- Forward ops ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("shape", SHAPES)
def test_layer_norm(seed, dtype, shape):
    g = gen(seed)
    H = shape[-1]
    x = randn(g, shape, dtype, scale=2.0, offset=3.0)
    for pdtype in (torch.float32, dtype):
        w = randn(g, (H,), pdtype, offset=1.0)
        b = randn(g, (H,), pdtype)
        x0 = x.clone()
        y = rudnn.layer_norm(x, w, b, 1e-5)
        check("layer_norm", y, F.layer_norm(d64(x), (H,), d64(w), d64(b), 1e-5), dtype, seed)
        assert torch.equal(x, x0), "input modified"
    check("layer_norm no affine", rudnn.layer_norm(x), F.layer_norm(d64(x), (H,), None, None, 1e-5), dtype, seed)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("shape", SHAPES)
def test_rms_norm(seed, dtype, shape):
    g = gen(seed)
    H = shape[-1]
    x = randn(g, shape, dtype)
    for w in (None, randn(g, (H,), torch.float32, offset=1.0), randn(g, (H,), dtype, offset=1.0)):
        y = rudnn.rms_norm(x, w, 1e-6)
        check("rms_norm", y, ref_rms_norm(d64(x), d64(w), 1e-6), dtype, seed)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("shape", SHAPES)
def test_add_rms_norm(seed, dtype, shape):
    g = gen(seed)
    H = shape[-1]
    x, res = randn(g, shape, dtype), randn(g, shape, dtype)
    w = randn(g, (H,), torch.float32, offset=1.0)
    s, n = rudnn.add_rms_norm(x, res, w, 1e-6)
    ref_sum = d64(x) + d64(res)
    check("add_rms_norm sum", s, ref_sum, dtype, seed)
    check("add_rms_norm normed", n, ref_rms_norm(ref_sum.to(dtype).double(), d64(w), 1e-6), dtype, seed)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("shape", SHAPES + [(5,)])
def test_softmax_logsumexp(seed, dtype, shape):
    g = gen(seed)
    x = randn(g, shape, dtype, scale=3.0)
    check("softmax", rudnn.softmax(x), torch.softmax(d64(x), -1), dtype, seed)
    check("logsumexp", rudnn.logsumexp(x), torch.logsumexp(d64(x), -1), dtype, seed)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("shape", [(8, 10), (1, 7), (5, 1), (64, 32000), (2, 3, 50), (0, 4)])
@pytest.mark.parametrize("ignore_index", [None, -100, 2])
def test_cross_entropy(seed, dtype, shape, ignore_index):
    g = gen(seed)
    C = shape[-1]
    logits = randn(g, shape, dtype, scale=2.0)
    targets = ce_targets(g, shape[:-1], C, ignore_index)
    loss = rudnn.cross_entropy(logits, targets, ignore_index=ignore_index)
    floor = ce_loss_floor(logits)
    check("cross_entropy", loss, ref_ce(logits, targets, ignore_index), torch.float32, seed, floor=floor)
    # int32 targets, negative targets (class t + C) and out-of-range ones (NaN).
    t32 = targets.to(torch.int32)
    check("cross_entropy int32", rudnn.cross_entropy(logits, t32, ignore_index=ignore_index),
          ref_ce(logits, targets, ignore_index), torch.float32, seed, floor=floor)
    if ignore_index is None and targets.numel() > 0:
        neg = targets - C
        check("cross_entropy negative targets", rudnn.cross_entropy(logits, neg), ref_ce(logits, targets, None),
              torch.float32, seed, floor=floor)
        bad = targets.clone()
        bad.view(-1)[0] = C
        lb = rudnn.cross_entropy(logits, bad)
        assert torch.isnan(lb.view(-1)[0]) and not torch.isnan(lb.view(-1)[1:]).any()


# ---- Backward ops (references by autograd in float64) ----------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("pdtype", ["f32", "xdtype"])
def test_layer_norm_backward(seed, dtype, shape, pdtype):
    g = gen(seed)
    H = shape[-1]
    pd = torch.float32 if pdtype == "f32" else dtype
    x, dy = randn(g, shape, dtype, offset=1.0), randn(g, shape, dtype)
    w, b = randn(g, (H,), pd, offset=1.0), randn(g, (H,), pd)
    x64, w64, b64 = (d64(t).requires_grad_() for t in (x, w, b))
    F.layer_norm(x64, (H,), w64, b64, 1e-5).backward(d64(dy))
    dx, dw, db = rudnn.layer_norm_backward(dy, x, w, b, 1e-5)
    scale = norm_grad_scale(d64(x), d64(w), d64(dy), 1e-5, True)
    check("layer_norm_backward dx", dx, x64.grad, dtype, seed, floor=scale)
    check("layer_norm_backward dgamma", dw, w64.grad, pd, seed)
    check("layer_norm_backward dbeta", db, b64.grad, pd, seed)
    dx2, dw2, db2 = rudnn.layer_norm_backward(dy, x, None, None, 1e-5)
    assert dw2 is None and db2 is None
    x64 = d64(x).requires_grad_()
    F.layer_norm(x64, (H,), None, None, 1e-5).backward(d64(dy))
    check("layer_norm_backward dx (no affine)", dx2, x64.grad, dtype, seed,
          floor=norm_grad_scale(d64(x), None, d64(dy), 1e-5, True))


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("shape", SHAPES)
def test_rms_norm_backward(seed, dtype, shape):
    g = gen(seed)
    H = shape[-1]
    x, dy = randn(g, shape, dtype), randn(g, shape, dtype)
    w = randn(g, (H,), torch.float32, offset=1.0)
    x64, w64 = d64(x).requires_grad_(), d64(w).requires_grad_()
    ref_rms_norm(x64, w64, 1e-6).backward(d64(dy))
    dx, dw = rudnn.rms_norm_backward(dy, x, w, 1e-6)
    check("rms_norm_backward dx", dx, x64.grad, dtype, seed, floor=norm_grad_scale(d64(x), d64(w), d64(dy), 1e-6, False))
    check("rms_norm_backward dgamma", dw, w64.grad, torch.float32, seed)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_backward(seed, dtype, shape):
    g = gen(seed)
    x, dy = randn(g, shape, dtype, scale=2.0), randn(g, shape, dtype)
    y = rudnn.softmax(x)
    y64 = d64(y)
    ref = y64 * (d64(dy) - (d64(dy) * y64).sum(-1, keepdim=True))  # autograd of softmax, at y
    check("softmax_backward", rudnn.softmax_backward(dy, y), ref, dtype, seed)
    x64 = d64(x).requires_grad_()
    torch.softmax(x64, -1).backward(d64(dy))
    check("softmax_backward vs autograd", rudnn.softmax_backward(dy, y), x64.grad, dtype, seed)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("shape", [(8, 10), (1, 7), (5, 1), (64, 32000), (2, 3, 50)])
@pytest.mark.parametrize("ignore_index", [None, -100])
def test_cross_entropy_backward(seed, dtype, shape, ignore_index):
    g = gen(seed)
    C = shape[-1]
    logits = randn(g, shape, dtype, scale=2.0)
    targets = ce_targets(g, shape[:-1], C, ignore_index)
    dloss = torch.randn(shape[:-1], generator=g, device=DEV)
    l64 = d64(logits).requires_grad_()
    kw = {} if ignore_index is None else {"ignore_index": ignore_index}
    F.cross_entropy(l64.reshape(-1, C), targets.reshape(-1), reduction="none", **kw).backward(d64(dloss).reshape(-1))
    d = rudnn.cross_entropy_backward(logits, targets, dloss, ignore_index=ignore_index)
    check("cross_entropy_backward", d, l64.grad, dtype, seed)
    rows = max(targets.numel(), 1)
    loss, d2 = rudnn.cross_entropy_with_grad(logits, targets, grad_scale=1.0 / rows, ignore_index=ignore_index)
    check("cross_entropy_with_grad loss", loss, ref_ce(logits, targets, ignore_index), torch.float32, seed,
          floor=ce_loss_floor(logits))
    l64 = d64(logits).requires_grad_()
    (F.cross_entropy(l64.reshape(-1, C), targets.reshape(-1), reduction="none", **kw).sum() / rows).backward()
    check("cross_entropy_with_grad dlogits", d2, l64.grad, dtype, seed)


# ---- Layouts, devices, streams, zero-copy -------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_non_contiguous_inputs(seed, dtype):
    g = gen(seed)
    base = randn(g, (48, 20), dtype)
    for x in (base.t(), base[::2], base[:, ::2], base.view(4, 12, 20).transpose(0, 1)):
        H = x.shape[-1]
        w = randn(g, (H,), torch.float32, offset=1.0)
        check("rms_norm strided", rudnn.rms_norm(x, w), ref_rms_norm(d64(x), d64(w), 1e-6), dtype, seed)
        check("softmax strided", rudnn.softmax(x), torch.softmax(d64(x), -1), dtype, seed)
        check("layer_norm strided", rudnn.layer_norm(x, w, None), F.layer_norm(d64(x), (H,), d64(w), None, 1e-5),
              dtype, seed)


def test_results_are_torch_cuda_zero_copy(seed):
    g = gen(seed)
    x = randn(g, (4, 64), torch.bfloat16)
    t = rudnn.from_dlpack(x)
    assert isinstance(t, rudnn.Tensor) and t.device == "cuda:0" and t.dtype == "bfloat16"
    assert t.data_ptr == x.data_ptr() and t.__dlpack_device__() == (2, 0)
    back = torch.from_dlpack(t)
    assert back.data_ptr() == x.data_ptr() and back.device == x.device
    r = rudnn.rms_norm(t)  # rudnn Tensor in, rudnn Tensor out (on the GPU)
    assert isinstance(r, rudnn.Tensor) and r.device == "cuda:0"
    y = torch.from_dlpack(r)
    assert y.data_ptr() == r.data_ptr and y.is_cuda
    y2 = rudnn.rms_norm(x)
    assert isinstance(y2, torch.Tensor) and y2.device == x.device and y2.dtype == x.dtype
    torch.testing.assert_close(y.float(), y2.float(), rtol=0, atol=0)
    # Inputs that require grad are read through a detached view.
    xr = x.float().requires_grad_()
    assert rudnn.softmax(xr).requires_grad is False


def test_non_default_stream(seed):
    g = gen(seed)
    src = randn(g, (256, 4096), torch.float32)
    w = randn(g, (4096,), torch.float32, offset=1.0)
    ref = ref_rms_norm(d64(src), d64(w), 1e-6)
    s = torch.cuda.Stream()
    x = torch.empty_like(src)
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(100_000_000)  # keep s busy, so a missing dependency would show
        x.copy_(src)
        y = rudnn.rms_norm(x, w)  # must run on s, after the copy
        z = torch.empty_like(y)
        z.copy_(y)  # torch work after the op on the same stream
    s.synchronize()
    check("rms_norm on a side stream", y, ref, torch.float32, seed)
    check("rms_norm on a side stream (torch consumer)", z, ref, torch.float32, seed)

    # Explicit stream= while torch's current stream is another one: the result is exported
    # to torch (current stream) only once the producing stream's work is done.
    x2 = torch.empty_like(src)
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(100_000_000)
        x2.copy_(src)
    t = rudnn.rms_norm(rudnn.from_dlpack(x2, stream=s.cuda_stream), rudnn.from_dlpack(w), stream=s.cuda_stream)
    assert isinstance(t, rudnn.Tensor)
    out = torch.from_dlpack(t).clone()  # consumer: the default stream
    torch.cuda.current_stream().synchronize()
    check("rms_norm stream= then exported", out, ref, torch.float32, seed)
    s.synchronize()


def test_out_argument(seed):
    g = gen(seed)
    x = randn(g, (16, 128), torch.float16)
    out = torch.empty_like(x)
    r = rudnn.softmax(x, out=out)
    assert r is out
    check("softmax out=", out, torch.softmax(d64(x), -1), torch.float16, seed)


def test_device_mismatch():
    x = torch.randn(4, 8, device=DEV)
    with pytest.raises(rudnn.DeviceMismatch) as e:
        rudnn.rms_norm(x, torch.ones(8))
    assert isinstance(e.value, ValueError) and "gamma" in str(e.value)
    with pytest.raises(TypeError):
        rudnn.rms_norm(x.double())


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_second_device(seed):
    dev = torch.device("cuda", 1)
    g = gen(seed, dev)
    x = randn(g, (8, 256), torch.bfloat16, device=dev)
    y = rudnn.rms_norm(x)
    check("rms_norm on cuda:1", y, ref_rms_norm(d64(x), None, 1e-6), torch.bfloat16, seed, device=dev)
    assert rudnn.from_dlpack(x).device == "cuda:1"


# ---- torch.autograd wrappers ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_autograd_wrappers(seed, dtype):
    from rudnn import torch_autograd as ta

    g = gen(seed)
    H = 384
    x = randn(g, (3, 5, H), dtype, offset=0.5)
    dy = randn(g, (3, 5, H), dtype)

    # RMSNorm with a float32 weight
    w = randn(g, (H,), torch.float32, offset=1.0)
    xa, wa = x.clone().requires_grad_(), w.clone().requires_grad_()
    ya = ta.rms_norm(xa, wa, 1e-6)
    ya.backward(dy)
    x64, w64 = d64(x).requires_grad_(), d64(w).requires_grad_()
    yr = ref_rms_norm(x64, w64, 1e-6)
    yr.backward(d64(dy))
    check("RMSNormFunction y", ya.detach(), yr.detach(), dtype, seed)
    check("RMSNormFunction dx", xa.grad, x64.grad, dtype, seed)
    check("RMSNormFunction dweight", wa.grad, w64.grad, torch.float32, seed)

    # LayerNorm
    w, b = randn(g, (H,), torch.float32, offset=1.0), randn(g, (H,), torch.float32)
    xa, wa, ba = x.clone().requires_grad_(), w.clone().requires_grad_(), b.clone().requires_grad_()
    ta.layer_norm(xa, wa, ba, 1e-5).backward(dy)
    x64, w64, b64 = (d64(t).requires_grad_() for t in (x, w, b))
    F.layer_norm(x64, (H,), w64, b64, 1e-5).backward(d64(dy))
    check("LayerNormFunction dx", xa.grad, x64.grad, dtype, seed)
    check("LayerNormFunction dweight", wa.grad, w64.grad, torch.float32, seed)
    check("LayerNormFunction dbias", ba.grad, b64.grad, torch.float32, seed)

    # Modules
    m = ta.RMSNorm(H, device=DEV)
    xa = x.clone().requires_grad_()
    m(xa).backward(dy)
    assert m.weight.grad is not None and m.weight.grad.shape == (H,)
    m2 = ta.LayerNorm(H, device=DEV)
    m2(x.clone().requires_grad_()).sum().backward()
    assert m2.bias.grad is not None

    # softmax
    xa = x.clone().requires_grad_()
    ta.softmax(xa).backward(dy)
    x64 = d64(x).requires_grad_()
    torch.softmax(x64, -1).backward(d64(dy))
    check("SoftmaxFunction dx", xa.grad, x64.grad, dtype, seed)

    # cross entropy, each reduction
    C = 1000
    logits = randn(g, (6, 7, C), dtype, scale=2.0)
    targets = ce_targets(g, (6, 7), C, -100)
    for reduction in ("mean", "sum", "none"):
        la = logits.clone().requires_grad_()
        loss = ta.cross_entropy(la, targets, ignore_index=-100, reduction=reduction)
        l64 = d64(logits).requires_grad_()
        ref = F.cross_entropy(l64.reshape(-1, C), targets.reshape(-1), ignore_index=-100, reduction=reduction)
        if reduction == "none":
            ref = ref.reshape(targets.shape)
            upstream = torch.randn(targets.shape, generator=g, device=DEV)
            loss.backward(upstream)
            ref.backward(d64(upstream))
        else:
            loss.backward()
            ref.backward()
        check(f"cross_entropy {reduction} loss", loss.detach(), ref.detach(), torch.float32, seed)
        check(f"cross_entropy {reduction} dlogits", la.grad, l64.grad, dtype, seed)
    # A reduced loss computes its gradient in the forward pass; an upstream gradient other
    # than 1 reaches it in backward (scale_unless_one), with and without ignored targets.
    for reduction in ("mean", "sum"):
        for ignore in (-100, None):
            t = targets if ignore is not None else targets.clamp(min=0)
            la = logits.clone().requires_grad_()
            (ta.cross_entropy(la, t, ignore_index=ignore, reduction=reduction) * 3.0).backward()
            l64 = d64(logits).requires_grad_()
            kw = {} if ignore is None else {"ignore_index": ignore}
            (F.cross_entropy(l64.reshape(-1, C), t.reshape(-1), reduction=reduction, **kw) * 3.0).backward()
            check(f"cross_entropy {reduction} x3 dlogits (ignore {ignore})", la.grad, l64.grad, dtype, seed)
