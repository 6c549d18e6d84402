"""The pooling family's torch ops (skipped without torch >= 2.4; the CUDA cases also without a
GPU or a CUDA build of ruDNN): rudnn.torch_autograd.max_pool / avg_pool / adaptive_max_pool /
adaptive_avg_pool / lp_pool against torch.nn.functional's max_pool{1,2,3}d, avg_pool{1,2,3}d,
adaptive_{max,avg}_pool{1,2,3}d and lp_pool{1,2,3}d option for option (values, indices and the
gradients of torch's autograd; channels-last inputs), gradcheck in float64 on the CPU,
torch.library.opcheck of the custom ops (schema, fake implementation, autograd registration),
and torch.compile(fullgraph=True) of a function using them, forward and backward. Inputs are
random with a fresh seed per test (conftest's rng; RUDNN_TEST_SEED=<int> replays one).
"""

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
TOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}

# (input shape, kernel, stride, padding, dilation, ceil_mode)
CASES = [
    ((2, 3, 17), 3, None, 1, 1, False),
    ((2, 4, 16), 4, 3, 2, 2, True),
    ((2, 3, 9, 11), 3, 2, 1, 1, False),
    ((2, 2, 9, 11), (2, 3), (2, 1), (1, 0), (2, 1), True),
    ((1, 2, 5, 6, 7), 3, 2, 1, 1, False),
    ((1, 2, 6, 5, 4), (2, 3, 2), (1, 2, 2), (1, 1, 0), (1, 1, 2), True),
]
TORCH_MAX = {3: F.max_pool1d, 4: F.max_pool2d, 5: F.max_pool3d}
TORCH_AVG = {3: F.avg_pool1d, 4: F.avg_pool2d, 5: F.avg_pool3d}


def rand(gen, shape, dtype, device):
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)


def close(what, got, ref, dtype, seed, ulps=1.0):
    """`ulps` scales the dtype's tolerance, for results that take an already rounded result in."""
    msg = f"{what} [{dtype}] (seed={seed}; RUDNN_TEST_SEED={seed} replays)"
    assert got.dtype == ref.dtype and got.shape == ref.shape, f"{msg}: {got.dtype} {tuple(got.shape)}"
    if ref.numel():
        err = (got.double() - ref.double()).abs().max().item()
        bound = ulps * TOL[dtype] * max(1.0, ref.double().abs().max().item())
        assert err <= bound, f"{msg}: max error {err:.3g}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_against_torch_functional(rng, gen, device, dtype, case):
    shape, k, s, p, d, ceil = case
    seed = rng.seed_value
    x0 = rand(gen, shape, dtype, device)
    # torch runs in float64 on the same (rounded) values: ties stay ties, and both keep the first.
    # max_pool: values and indices as torch's; gradients through each op's autograd.
    x, xr = x0.clone().requires_grad_(), x0.double().requires_grad_()
    out, idx = ta.max_pool(x, k, s, p, d, ceil, return_indices=True)
    ref, ref_idx = TORCH_MAX[len(shape)](xr, k, s, p, d, ceil_mode=ceil, return_indices=True)
    close("max_pool", out, ref.to(dtype), dtype, seed)
    assert torch.equal(idx, ref_idx), f"max_pool indices differ (seed={seed}, case={case})"
    dy = rand(gen, out.shape, dtype, device)
    out.backward(dy)
    ref.backward(dy.double())
    close("max_pool dx", x.grad, xr.grad.to(dtype), dtype, seed)
    for cip in (True, False):
        for divisor in (None, 5):
            if len(shape) == 3 and divisor is not None:
                continue  # avg_pool1d has no divisor_override
            x, xr = x0.clone().requires_grad_(), x0.double().requires_grad_()
            kw = {} if divisor is None else {"divisor_override": divisor}
            out = ta.avg_pool(x, k, s, p, ceil, cip, divisor)
            ref = TORCH_AVG[len(shape)](xr, k, s, p, ceil_mode=ceil, count_include_pad=cip, **kw)
            close(f"avg_pool cip={cip} divisor={divisor}", out, ref.to(dtype), dtype, seed)
            dy = rand(gen, out.shape, dtype, device)
            out.backward(dy)
            ref.backward(dy.double())
            close(f"avg_pool dx cip={cip} divisor={divisor}", x.grad, xr.grad.to(dtype), dtype, seed)


TORCH_ADAPTIVE_MAX = {3: F.adaptive_max_pool1d, 4: F.adaptive_max_pool2d, 5: F.adaptive_max_pool3d}
TORCH_ADAPTIVE_AVG = {3: F.adaptive_avg_pool1d, 4: F.adaptive_avg_pool2d, 5: F.adaptive_avg_pool3d}
TORCH_LP = {3: F.lp_pool1d, 4: F.lp_pool2d, 5: getattr(F, "lp_pool3d", None)}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", [((2, 3, 17), 5, [3], None), ((2, 4, 9, 11), (4, 3), (2, 3), (2, 2)),
                                  ((1, 2, 5, 6, 7), (2, 3, 4), 2, None), ((2, 3, 3, 4), (5, 6), 2, 1)], ids=str)
@pytest.mark.parametrize("channels_last", [False, True])
def test_adaptive_and_lp_against_torch_functional(rng, gen, device, dtype, case, channels_last):
    shape, osz, k, s = case
    seed = rng.seed_value
    x0 = rand(gen, shape, dtype, device)
    if channels_last:
        x0 = x0.movedim(1, -1).contiguous().movedim(-1, 1)  # channels-last dense
    nd = len(shape)
    x, xr = x0.clone().requires_grad_(), x0.double().requires_grad_()
    out, idx = ta.adaptive_max_pool(x, osz, return_indices=True)
    ref, ref_idx = TORCH_ADAPTIVE_MAX[nd](xr, osz, return_indices=True)
    close("adaptive_max_pool", out, ref.to(dtype), dtype, seed)
    assert torch.equal(idx, ref_idx), f"adaptive_max_pool indices differ (seed={seed}, case={case})"
    dy = rand(gen, out.shape, dtype, device)
    out.backward(dy)
    ref.backward(dy.double())
    close("adaptive_max_pool dx", x.grad, xr.grad.to(dtype), dtype, seed)
    x, xr = x0.clone().requires_grad_(), x0.double().requires_grad_()
    out = ta.adaptive_avg_pool(x, osz)
    ref = TORCH_ADAPTIVE_AVG[nd](xr, osz)
    close("adaptive_avg_pool", out, ref.to(dtype), dtype, seed)
    out.backward(dy)
    ref.backward(dy.double())
    close("adaptive_avg_pool dx", x.grad, xr.grad.to(dtype), dtype, seed)
    if TORCH_LP[nd] is None or any(e > n for e, n in zip([k] * (nd - 2) if isinstance(k, int) else k, shape[2:])):
        return
    # torch's lp_pool1d multiplies by kernel_size itself, which must then be an int.
    torch_k = k[0] if nd == 3 and not isinstance(k, int) else k
    for p in (2.0, 3.0):
        xp = x0.abs() + 0.1
        x, xr = xp.clone().requires_grad_(), xp.double().requires_grad_()
        out = ta.lp_pool(x, p, k, s)
        ref = TORCH_LP[nd](xr, p, torch_k, s)
        close(f"lp_pool p={p}", out, ref.to(dtype), dtype, seed)
        dy = rand(gen, out.shape, dtype, device)
        out.backward(dy)
        ref.backward(dy.double())
        # dx = dy (x / y)^(p-1) takes the forward's result y as stored (rounded to a 16-bit type
        # as torch saves it too): its rounding enters p-1 times, so 16-bit types get twice the
        # tolerance (bfloat16 at p = 3 differed from the float64 reference by 2 ulps, round 63).
        close(f"lp_pool dx p={p}", x.grad, xr.grad.to(dtype), dtype, seed, ulps=2.0 if dtype != torch.float32 else 1.0)


@needs_cuda
def test_channels_last_and_strided_cuda_inputs(rng, gen):
    x = rand(gen, (2, 8, 12, 10), torch.float32, "cuda")
    for view in (x.to(memory_format=torch.channels_last), x[:, ::2, 1:, ::2], x.transpose(2, 3)):
        out, idx = rudnn.max_pool(view, 3, 2, 1)
        ref, ref_idx = F.max_pool2d(view, 3, 2, 1, return_indices=True)
        close("max_pool (layout)", out, ref, torch.float32, rng.seed_value)
        assert torch.equal(idx, ref_idx)
        close("avg_pool (layout)", rudnn.avg_pool(view, 3, 2, 1), F.avg_pool2d(view, 3, 2, 1), torch.float32,
              rng.seed_value)


def test_gradcheck_float64_cpu(gen):
    x = rand(gen, (2, 2, 7, 6), torch.float64, "cpu").requires_grad_()
    assert torch.autograd.gradcheck(lambda z: ta.max_pool(z, (3, 2), 2, 1, (1, 2), True), (x,))
    assert torch.autograd.gradcheck(lambda z: ta.avg_pool(z, 3, 2, 1, True, False), (x,))
    assert torch.autograd.gradcheck(lambda z: ta.avg_pool(z, 2, 1, 0, False, True, 3), (x,))
    assert torch.autograd.gradcheck(lambda z: ta.adaptive_max_pool(z, (4, 4)), (x,))
    assert torch.autograd.gradcheck(lambda z: ta.adaptive_avg_pool(z, (3, 4)), (x,))
    xp = (x.detach().abs() + 0.5).requires_grad_()
    assert torch.autograd.gradcheck(lambda z: ta.lp_pool(z, 3.0, 2, 1, True), (xp,))


def test_custom_ops_pass_opcheck(gen):
    x = rand(gen, (2, 3, 8, 7), torch.float64, "cpu").requires_grad_()
    lib = torch.ops.rudnn
    utils = ("test_schema", "test_faketensor", "test_autograd_registration")
    torch.library.opcheck(lib.max_pool, (x, [3, 2], [2, 2], [1, 1], [1, 1], True), test_utils=utils)
    torch.library.opcheck(lib.max_pool, (x[:, :, 0], [3], [], [0], [2], False), test_utils=utils)
    torch.library.opcheck(lib.avg_pool, (x, [2, 3], [1, 2], [1, 1], False, False, None), test_utils=utils)
    torch.library.opcheck(lib.avg_pool, (x, [2, 2], [], [0, 0], True, True, 7), test_utils=utils)
    torch.library.opcheck(lib.adaptive_max_pool, (x, [3, 5]), test_utils=utils)
    torch.library.opcheck(lib.adaptive_avg_pool, (x, [1, 1]), test_utils=utils)
    xp = (x.detach().abs() + 0.1).requires_grad_()
    torch.library.opcheck(lib.lp_pool, (xp, 2.0, [2, 3], [], False), test_utils=utils)
    cl = x.detach().to(memory_format=torch.channels_last).requires_grad_()
    torch.library.opcheck(lib.max_pool, (cl, [2, 2], [], [0, 0], [1, 1], False), test_utils=utils)
    torch.library.opcheck(lib.adaptive_avg_pool, (cl, [3, 2]), test_utils=utils)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(gen, device):
    def f(x):
        a = ta.max_pool(x, 3, 2, 1)
        b = ta.avg_pool(x, 2, ceil_mode=True)
        return a.sum() + (b * b).sum() + rudnn.avg_pool(x.detach(), 2).sum()

    x = rand(gen, (2, 3, 9, 8), torch.float32, device).requires_grad_()
    results = []
    for fn in (torch.compile(f, fullgraph=True), f):
        x.grad = None
        y = fn(x)
        y.backward()
        results.append((y.detach(), x.grad.clone()))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(results[0][1], results[1][1], rtol=1e-5, atol=1e-5)


def test_wrapper_argument_rules(gen):
    x = rand(gen, (1, 2, 6, 6), torch.float32, "cpu")
    with pytest.raises(rudnn.InvalidArgument, match=r"^max_pool: ceil_mode must be a bool"):
        ta.max_pool(x, 2, ceil_mode=1)
    with pytest.raises(rudnn.InvalidArgument, match=r"^avg_pool: divisor_override must be an int"):
        ta.avg_pool(x, 2, divisor_override=True)
    with pytest.raises(rudnn.Error, match=r"^max_pool: "):
        ta.max_pool(x, 0)
