"""The CTC family's torch ops (skipped without torch >= 2.4): rudnn.torch_autograd.ctc_loss
against torch.nn.functional.ctc_loss option for option in float64 on the CPU (padded and
concatenated targets, tensor and tuple lengths, every reduction, zero_infinity; the loss and
torch autograd's gradient), gradcheck through log_softmax, torch.library.opcheck of the custom
op, torch.compile(fullgraph=True) of a loss step; on a GPU (float32, float16, bfloat16) against
torch's CUDA ctc_loss in float32 / float64, and a bad label giving a NaN loss for its sample
(checked on the device) rather than an error. Inputs are random with a fresh seed per test (conftest's rng;
RUDNN_TEST_SEED=<int> replays one).
"""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("torch >= 2.4 (torch.library.custom_op) is needed", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import rudnn  # noqa: E402
from rudnn import torch_autograd as ta  # noqa: E402

CUDA = torch.cuda.is_available() and rudnn.built_with_cuda()


def problem(gen, T=20, N=4, C=7, S=6, blank=0, concatenated=False, impossible=False):
    z = torch.randn(T, N, C, generator=gen, dtype=torch.float64)
    il = torch.randint(T - 5, T + 1, (N,), generator=gen)
    tl = torch.randint(0, S + 1, (N,), generator=gen)
    if impossible:
        il[0], tl[0] = 3, 5  # 5 labels cannot align in 3 steps: an infinite loss
    labels = torch.tensor([c for c in range(C) if c != blank])
    targets = labels[torch.randint(0, C - 1, (N, S), generator=gen)]
    if concatenated:
        targets = torch.cat([targets[n, : tl[n]] for n in range(N)])
    return z, targets, il, tl


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("concatenated", [False, True])
@pytest.mark.parametrize("zero_infinity", [False, True])
@pytest.mark.parametrize("blank", [0, 4])
def test_against_torch_functional(rng, gen, reduction, concatenated, zero_infinity, blank):
    z, targets, il, tl = problem(gen, blank=blank, concatenated=concatenated, impossible=True)
    case = dict(reduction=reduction, concatenated=concatenated, zero_infinity=zero_infinity, blank=blank,
                seed=rng.seed_value)
    a, b = z.clone().requires_grad_(), z.clone().requires_grad_()
    loss = ta.ctc_loss(a.log_softmax(-1), targets, il, tl, blank, reduction, zero_infinity)
    ref = F.ctc_loss(b.log_softmax(-1), targets, il, tl, blank, reduction, zero_infinity)
    torch.testing.assert_close(loss, ref, rtol=1e-10, atol=1e-12, equal_nan=True, msg=lambda m: f"{case}: {m}")
    if zero_infinity or reduction == "none":
        # Without zero_infinity the infinite sample's gradient is NaN in both.
        up = torch.randn(loss.shape, generator=gen, dtype=torch.float64)
        loss.backward(up)
        ref.backward(up)
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-9, atol=1e-12, equal_nan=True,
                                   msg=lambda m: f"{case}: {m}")
    plain = ta.ctc_loss(z.log_softmax(-1), targets, il, tl, blank, reduction, zero_infinity)
    tuple_loss = ta.ctc_loss(z.log_softmax(-1), targets, tuple(il.tolist()), tl.tolist(), blank, reduction,
                             zero_infinity)
    torch.testing.assert_close(tuple_loss, plain, rtol=0, atol=0, equal_nan=True)


def test_gradcheck_through_log_softmax(gen):
    z, targets, il, tl = problem(gen, T=8, N=3, C=5, S=3)
    z.requires_grad_()
    for reduction in ("mean", "sum", "none"):
        assert torch.autograd.gradcheck(lambda x: ta.ctc_loss(x.log_softmax(-1), targets, il, tl, 0, reduction), (z,))


def test_custom_op_passes_opcheck(gen):
    z, targets, il, tl = problem(gen, T=8, N=3, C=5, S=3)
    lp = z.log_softmax(-1).detach().requires_grad_()
    utils = ("test_schema", "test_faketensor", "test_autograd_registration")
    for reduction in ("none", "mean"):
        torch.library.opcheck(torch.ops.rudnn.ctc_loss, (lp, targets, il, tl, 0, reduction, False), test_utils=utils)


def test_compile_fullgraph(gen):
    z, targets, il, tl = problem(gen)

    def step(z):
        return ta.ctc_loss(z.log_softmax(-1), targets, il, tl) + rudnn.ctc_loss(z.detach().log_softmax(-1), targets,
                                                                                il, tl, reduction="sum")

    z.requires_grad_()
    results = []
    for fn in (torch.compile(step, fullgraph=True), step):
        z.grad = None
        loss = fn(z)
        loss.backward()
        results.append((loss.detach(), z.grad.clone()))
    torch.testing.assert_close(results[0][0], results[1][0])
    torch.testing.assert_close(results[0][1], results[1][1])


@pytest.mark.skipif(not CUDA, reason="no CUDA GPU (or ruDNN built without CUDA)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("concatenated", [False, True])
def test_cuda_against_torch(rng, gen, dtype, reduction, concatenated):
    z, targets, il, tl = problem(gen, T=60, N=8, C=30, S=20, concatenated=concatenated)
    z = z.cuda()
    a = z.to(dtype).requires_grad_()
    b = z.to(dtype).double().requires_grad_()  # torch on the same rounded values, in float64
    loss = ta.ctc_loss(a.log_softmax(-1), targets.cuda(), il.cuda(), tl.cuda(), 0, reduction)
    ref = F.ctc_loss(b.log_softmax(-1), targets.cuda(), il.cuda(), tl.cuda(), 0, reduction)
    assert loss.dtype == dtype and loss.device.type == "cuda"
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}[dtype]
    msg = f"(seed={rng.seed_value}; reduction={reduction}, concatenated={concatenated}, dtype={dtype})"
    err = ((loss.double() - ref).abs() / ref.abs().clamp_min(1.0)).max().item()
    assert err <= tol, f"loss relative error {err:.3g} {msg}"
    up = torch.randn(loss.shape, generator=gen, dtype=torch.float64).cuda()
    loss.backward(up.to(dtype))
    ref.backward(up.to(dtype).double())
    g, r = a.grad.double(), b.grad
    rel = (g - r).norm().item() / max(r.norm().item(), 1e-12)
    gtol = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 2e-2}[dtype]
    assert rel <= gtol, f"gradient relative L2 error {rel:.3g} {msg}"


@pytest.mark.skipif(not CUDA, reason="no CUDA GPU (or ruDNN built without CUDA)")
def test_cuda_bad_label_is_a_nan_loss_for_its_sample(gen):
    z, targets, il, tl = problem(gen, S=4)
    tl[:] = 3
    targets[1, 0] = 0  # the blank as a label: a bad sample, found on the device
    loss = rudnn.ctc_loss(z.cuda().float().log_softmax(-1), targets.cuda(), il.cuda(), tl.cuda(), reduction="none")
    assert torch.isnan(loss[1]) and torch.isfinite(loss[[0, 2, 3]]).all(), loss
    with pytest.raises(rudnn.Error, match="^ctc_loss: "):  # on the CPU the same sample is an error
        rudnn.ctc_loss(z.float().log_softmax(-1), targets, il, tl)


@pytest.mark.skipif(not CUDA, reason="no CUDA GPU (or ruDNN built without CUDA)")
def test_cuda_host_lengths_are_checked_like_torch(gen):
    """Host lengths (CPU tensors, lists) with GPU log_probs: moved to the device and the loss
    equals the device-lengths call; a bad host length or a bad label of CPU targets raises
    rudnn.Error on the host (as torch raises), for the functional ops and torch_autograd."""
    z, targets, il, tl = problem(gen, S=4)
    lp = z.cuda().float().log_softmax(-1)
    want = rudnn.ctc_loss(lp, targets.cuda(), il.cuda(), tl.cuda(), reduction="none")
    for t, i, l in ((targets.cuda(), il, tl), (targets, il, tl), (targets.cuda(), il.tolist(), tl.tolist())):
        got = rudnn.ctc_loss(lp, t, i, l, reduction="none")
        assert torch.equal(got, want)
        assert torch.equal(ta.ctc_loss(lp, t, i, l, reduction="none"), want)
    bad = il.clone()
    bad[0] = lp.shape[0] + 1
    for fn in (rudnn.ctc_loss, ta.ctc_loss):
        with pytest.raises(rudnn.InvalidArgument, match="^ctc_loss_check: input_lengths"):
            fn(lp, targets.cuda(), bad, tl)
    blank_label = targets.clone()
    tl2 = tl.clone()
    tl2[1] = 3
    blank_label[1, 0] = 0
    with pytest.raises(rudnn.InvalidArgument, match="^ctc_loss_check: .*label != blank"):
        rudnn.ctc_loss(lp, blank_label, il, tl2)
