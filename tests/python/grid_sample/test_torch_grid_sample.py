"""The grid_sample family's torch ops (skipped without torch >= 2.4; the CUDA cases also without
a GPU or a CUDA build of ruDNN): rudnn.torch_autograd.grid_sample / affine_grid against
torch.nn.functional.grid_sample / affine_grid option for option (every mode, padding mode and
align_corners; values and the input, grid and theta gradients of torch's autograd, torch run
in float64 on the same inputs), gradcheck in float64 on the CPU, torch.library.opcheck of the
custom ops, and torch.compile(fullgraph=True) of a spatial-transformer step, forward and
backward. Inputs are random with a fresh seed per test (conftest's rng; RUDNN_TEST_SEED=<int>
replays one).
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
# Relative L2 error bounds by dtype (the input gradient of F16/BF16 goes through an FP32
# accumulator on the GPU, rounded once).
TOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def rand(gen, shape, dtype, device, lo=None, hi=None):
    t = torch.randn(shape, generator=gen, dtype=torch.float64)
    if lo is not None:
        t = torch.rand(shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo
    return t.to(device=device, dtype=dtype)


def close(what, got, ref, dtype, seed, case=None):
    msg = f"{what} [{dtype}] (seed={seed}; RUDNN_TEST_SEED={seed} replays; case={case})"
    assert got.dtype == dtype and got.shape == ref.shape, f"{msg}: {got.dtype} {tuple(got.shape)}"
    if ref.numel():
        g, r = got.detach().double(), ref.detach().double()
        err = (g - r).norm().item() / max(r.norm().item(), 1e-6 * r.numel() ** 0.5)
        assert err <= TOL[dtype], f"{msg}: relative L2 error {err:.3g}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_against_torch(rng, gen, device, dtype, dims, mode, padding_mode, align_corners):
    if mode == "bicubic" and dims == 3:
        pytest.skip("bicubic is 2-D only, as in torch")
    case = dict(dims=dims, mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    xs, gs = ((2, 3, 7, 9), (2, 5, 6, 2)) if dims == 2 else ((2, 3, 4, 5, 6), (2, 3, 4, 5, 3))
    x0 = rand(gen, xs, dtype, device)
    g0 = rand(gen, gs, dtype, device, -1.2, 1.2)
    x, g = x0.clone().requires_grad_(), g0.clone().requires_grad_()
    y = ta.grid_sample(x, g, mode, padding_mode, align_corners)
    x64, g64 = x0.double().requires_grad_(), g0.double().requires_grad_()
    ref = F.grid_sample(x64, g64, mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    close("grid_sample", y, ref.to(dtype), dtype, rng.seed_value, case)
    dy = rand(gen, y.shape, dtype, device)
    y.backward(dy)
    ref.backward(dy.double())
    close("dinput", x.grad, x64.grad.to(dtype), dtype, rng.seed_value, case)
    if mode != "nearest":
        close("dgrid", g.grad, g64.grad.to(dtype), dtype, rng.seed_value, case)
    else:
        assert not g.grad.any(), f"nearest: dgrid must be zero (case={case})"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("size", [(2, 3, 5, 7), (2, 1, 3, 4, 5), (3, 2, 1, 6)], ids=str)
@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid_against_torch(rng, gen, device, dtype, size, align_corners):
    r = len(size) - 2
    t0 = rand(gen, (size[0], r, r + 1), dtype, device)
    t = t0.clone().requires_grad_()
    grid = ta.affine_grid(t, torch.Size(size), align_corners)
    t64 = t0.double().requires_grad_()
    ref = F.affine_grid(t64, size, align_corners=align_corners)
    close("affine_grid", grid, ref.to(dtype), dtype, rng.seed_value, size)
    dg = rand(gen, grid.shape, dtype, device)
    grid.backward(dg)
    ref.backward(dg.double())
    close("dtheta", t.grad, t64.grad.to(dtype), dtype, rng.seed_value, size)


@pytest.mark.skipif(not CUDA, reason="no CUDA GPU (or ruDNN built without CUDA)")
def test_cuda_input_gradient_sums_and_non_contiguous_inputs(rng, gen):
    # Many grid points on few pixels: the atomic scatter of the input gradient must add up.
    x = rand(gen, (2, 4, 3, 3), torch.float32, "cuda").requires_grad_()
    g = rand(gen, (2, 64, 64, 2), torch.float32, "cuda", -1, 1).requires_grad_()
    ta.grid_sample(x, g, "bilinear", "border", True).sum().backward()
    x64 = x.detach().double().requires_grad_()
    F.grid_sample(x64, g.detach().double(), padding_mode="border", align_corners=True).sum().backward()
    close("dinput (many-to-few)", x.grad, x64.grad.float(), torch.float32, rng.seed_value)
    # deterministic=True: the gather gives the same gradient, identical bits run to run.
    dy = rand(gen, (2, 4, 64, 64), torch.float32, "cuda")
    runs = [rudnn.grid_sample_backward(dy, x.detach(), g.detach(), "bilinear", "border", True, deterministic=True)
            for _ in range(2)]
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1]), "deterministic runs differ"
    atomic = rudnn.grid_sample_backward(dy, x.detach(), g.detach(), "bilinear", "border", True)
    close("dinput (deterministic vs atomics)", runs[0][0], atomic[0], torch.float32, rng.seed_value)
    assert torch.equal(runs[0][1], atomic[1]), "the grid gradient must not depend on deterministic"
    for dtype in (torch.float16, torch.bfloat16):
        xd, gd, dyd = x.detach().to(dtype), g.detach().to(dtype), dy.to(dtype)
        a = rudnn.grid_sample_backward(dyd, xd, gd, "bicubic", "reflection", False, deterministic=True)[0]
        b = rudnn.grid_sample_backward(dyd, xd, gd, "bicubic", "reflection", False, deterministic=True)[0]
        assert torch.equal(a, b), f"deterministic {dtype} runs differ"
    xt = rand(gen, (2, 9, 8, 3), torch.float32, "cuda").permute(0, 3, 1, 2)  # channels-last view
    gt = rand(gen, (2, 2, 5, 6), torch.float32, "cuda", -1, 1).permute(0, 2, 3, 1)
    close("grid_sample (strided)", rudnn.grid_sample(xt, gt), F.grid_sample(xt, gt, align_corners=False),
          torch.float32, rng.seed_value)


def test_gradcheck_float64_cpu(gen):
    x = rand(gen, (1, 2, 4, 5), torch.float64, "cpu").requires_grad_()
    g = rand(gen, (1, 3, 3, 2), torch.float64, "cpu", -1.1, 1.1).requires_grad_()
    for mode in ("bilinear", "bicubic"):
        for pad in ("zeros", "border", "reflection"):
            assert torch.autograd.gradcheck(lambda a, b: ta.grid_sample(a, b, mode, pad, False), (x, g))
    theta = rand(gen, (2, 3, 4), torch.float64, "cpu").requires_grad_()
    assert torch.autograd.gradcheck(lambda t: ta.affine_grid(t, (2, 1, 2, 3, 4), True), (theta,))


def test_custom_ops_pass_opcheck(gen):
    x = rand(gen, (2, 3, 5, 4), torch.float64, "cpu").requires_grad_()
    g = rand(gen, (2, 3, 2, 2), torch.float64, "cpu", -1, 1).requires_grad_()
    theta = rand(gen, (2, 2, 3), torch.float64, "cpu").requires_grad_()
    lib = torch.ops.rudnn
    utils = ("test_schema", "test_faketensor", "test_autograd_registration")
    torch.library.opcheck(lib.grid_sample, (x, g, "bicubic", "reflection", True), test_utils=utils)
    torch.library.opcheck(lib.grid_sample, (x, g, "nearest", "zeros", False), test_utils=utils)
    torch.library.opcheck(lib.affine_grid, (theta, [2, 3, 4, 5], False), test_utils=utils)
    torch.library.opcheck(lib.grid_sample_backward, (x.detach()[:, :, :3, :2], x.detach(), g.detach(), "bilinear",
                                                     "zeros", False, True), test_utils=("test_schema", "test_faketensor"))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(gen, device):
    def stn(x, theta):  # a spatial transformer: affine grid, then sampling
        grid = ta.affine_grid(theta, x.shape, False)
        return (ta.grid_sample(x, grid, "bilinear", "border") ** 2).sum() + rudnn.grid_sample(
            x.detach(), grid.detach()).sum()

    x = rand(gen, (2, 3, 8, 8), torch.float32, device).requires_grad_()
    theta = (torch.eye(2, 3, dtype=torch.float32, device=device) + 0.1 * rand(gen, (2, 2, 3), torch.float32, device))
    theta.requires_grad_()
    results = []
    for fn in (torch.compile(stn, fullgraph=True), stn):
        x.grad = theta.grad = None
        y = fn(x, theta)
        y.backward()
        results.append((y.detach(), x.grad.clone(), theta.grad.clone()))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_wrapper_argument_rules(gen):
    x = rand(gen, (1, 2, 4, 4), torch.float32, "cpu")
    g = rand(gen, (1, 2, 2, 2), torch.float32, "cpu", -1, 1)
    with pytest.raises(rudnn.InvalidArgument, match=r"^grid_sample: align_corners must be a bool"):
        ta.grid_sample(x, g, align_corners=None)
    with pytest.raises(rudnn.InvalidArgument, match=r"^grid_sample: mode must be one of"):
        ta.grid_sample(x, g, "area")
