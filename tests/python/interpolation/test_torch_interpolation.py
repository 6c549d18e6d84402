"""The interpolation family's torch ops (skipped without torch >= 2.4; the CUDA cases also
without a GPU or a CUDA build of ruDNN): rudnn.torch_autograd.interpolate against
torch.nn.functional.interpolate option for option (every mode and rank, size and
scale_factor, align_corners, recompute_scale_factor, antialias for bilinear and bicubic in both
layouts; values and input gradients of torch's autograd, torch run in float64 on the same
inputs, and float32 antialias against torch's float32 kernel), bit-exact nearest indices against torch's
CUDA kernels, gradcheck in float64 on the CPU, torch.library.opcheck of the custom ops,
torch.compile(fullgraph=True) forward and backward, and errors as rudnn.Error subclasses.
Inputs are random with a fresh seed per test (conftest's rng; RUDNN_TEST_SEED=<int> replays).
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
# Relative L2 error bounds by dtype (one rounding of a float32 result).
TOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


@pytest.fixture
def gen(rng):
    g = torch.Generator()
    g.manual_seed(int(rng.seed_value))
    return g


def rand(gen, shape, dtype, device):
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)


def close(what, got, ref, dtype, seed, case=None):
    msg = f"{what} [{dtype}] (seed={seed}; RUDNN_TEST_SEED={seed} replays; case={case})"
    assert got.dtype == dtype and got.shape == ref.shape, f"{msg}: {got.dtype} {tuple(got.shape)} vs {tuple(ref.shape)}"
    if ref.numel():
        g, r = got.detach().double(), ref.detach().double()
        err = (g - r).norm().item() / max(r.norm().item(), 1e-6 * r.numel() ** 0.5)
        assert err <= TOL[dtype], f"{msg}: relative L2 error {err:.3g}"


MODES = {  # mode -> ranks it takes
    "nearest": (1, 2, 3),
    "nearest-exact": (1, 2, 3),
    "linear": (1,),
    "bilinear": (2,),
    "trilinear": (3,),
    "bicubic": (2,),
    "area": (1, 2, 3),
}
SHAPES = {1: (2, 3, 11), 2: (2, 3, 9, 7), 3: (1, 2, 5, 4, 6)}
RESIZES = [  # (size, scale_factor, recompute_scale_factor) per rank
    lambda r: ((17, 5, 8)[:r] if r > 1 else 17, None, None),
    lambda r: ((4, 3, 5)[:r], None, None),
    lambda r: (None, 2.0, None),
    lambda r: (None, (1.7, 0.6, 2.5)[:r], None),
    lambda r: (None, 2.3, True),
]


def cases():
    for mode, ranks in MODES.items():
        for rank in ranks:
            for i, resize in enumerate(RESIZES):
                for align in ([None, False, True] if mode in ("linear", "bilinear", "trilinear", "bicubic") else [None]):
                    yield mode, rank, i, align


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("mode,rank,resize,align", list(cases()), ids=str)
def test_interpolate_against_torch(rng, gen, device, dtype, mode, rank, resize, align):
    size, scale, recompute = RESIZES[resize](rank)
    case = dict(mode=mode, rank=rank, size=size, scale_factor=scale, align_corners=align, recompute=recompute)
    x0 = rand(gen, SHAPES[rank], dtype, device)
    x = x0.clone().requires_grad_()
    y = ta.interpolate(x, size, scale, mode, align, recompute)
    x64 = x0.double().requires_grad_()
    ref = F.interpolate(x64, size, scale, mode, align, recompute)
    close("interpolate", y, ref.to(dtype), dtype, rng.seed_value, case)
    assert y.device == x.device and y.is_contiguous()
    dy = rand(gen, y.shape, dtype, device)
    y.backward(dy)
    ref.backward(dy.double())
    close("dinput", x.grad, x64.grad.to(dtype), dtype, rng.seed_value, case)


AA_RESIZES = [  # (input shape, size, scale_factor, recompute_scale_factor)
    ((2, 3, 32, 34), None, 0.5, None),
    ((2, 3, 33, 31), None, 1 / 3, None),
    ((1, 4, 37, 45), None, 0.37, None),
    ((1, 4, 37, 45), None, (0.37, 0.61), True),
    ((2, 2, 9, 13), None, (1.7, 2.0), None),
    ((1, 3, 17, 11), (6, 29), None, None),
    ((1, 2, 1, 19), (4, 5), None, None),
    ((1, 2, 15, 2), (1, 1), None, None),
    ((1, 2, 40, 36), (3, 7), None, None),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("align", [None, True], ids=str)
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("resize", range(len(AA_RESIZES)), ids=str)
def test_antialias_against_torch(rng, gen, device, dtype, mode, align, layout, resize):
    shape, size, scale, recompute = AA_RESIZES[resize]
    case = dict(mode=mode, shape=shape, size=size, scale_factor=scale, align_corners=align,
                recompute=recompute, layout=layout)
    x0 = rand(gen, shape, dtype, device)
    if layout == "channels_last":
        x0 = x0.contiguous(memory_format=torch.channels_last)
    x = x0.clone().requires_grad_()
    y = ta.interpolate(x, size, scale, mode, align, recompute, antialias=True)
    x64 = x0.double().requires_grad_()
    ref = F.interpolate(x64, size, scale, mode, align, recompute, antialias=True)
    close("interpolate antialias", y, ref.to(dtype), dtype, rng.seed_value, case)
    assert y.device == x.device and y.is_contiguous()
    dy = rand(gen, y.shape, dtype, device)
    y.backward(dy)
    ref.backward(dy.double())
    close("dinput antialias", x.grad, x64.grad.to(dtype), dtype, rng.seed_value, case)
    # torch's own kernel in the same dtype on the same device (its F16/BF16 CUDA kernel rounds
    # its weights and row sums to the dtype, so only float32 is held to the tight bound)
    if dtype == torch.float32:
        same = F.interpolate(x0, size, scale, mode, align, recompute, antialias=True)
        close("vs torch float32", y.detach(), same, dtype, rng.seed_value, case)


@pytest.mark.skipif(not CUDA, reason="no CUDA GPU (or ruDNN built without CUDA)")
def test_cuda_antialias_bench_shape_and_deterministic_gather(rng, gen):
    x = rand(gen, (4, 16, 128, 128), torch.float32, "cuda")
    for mode in ("bilinear", "bicubic"):
        y = rudnn.interpolate(x, scale_factor=0.5, mode=mode, antialias=True)
        close(f"{mode} 1/2", y, F.interpolate(x, scale_factor=0.5, mode=mode, antialias=True),
              torch.float32, rng.seed_value)
        dy = rand(gen, y.shape, torch.float32, "cuda")
        a = rudnn.interpolate_backward(dy, x.shape, None, 0.5, mode, None, None, True)
        b = rudnn.interpolate_backward(dy, x.shape, None, 0.5, mode, None, None, True, deterministic=False)
        assert torch.equal(a, b), f"{mode}: the antialias backward is one deterministic gather"


@pytest.mark.skipif(not CUDA, reason="no CUDA GPU (or ruDNN built without CUDA)")
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_cuda_nearest_picks_torchs_pixels_bit_for_bit(gen, mode):
    x = rand(gen, (2, 3, 37, 23), torch.float32, "cuda")
    for scale in (0.37, 1.7, 2.3, 3.0):
        assert torch.equal(rudnn.interpolate(x, scale_factor=scale, mode=mode),
                           F.interpolate(x, scale_factor=scale, mode=mode)), f"{mode} x{scale}"
    assert torch.equal(rudnn.interpolate(x, (50, 9), mode=mode), F.interpolate(x, (50, 9), mode=mode))


@pytest.mark.skipif(not CUDA, reason="no CUDA GPU (or ruDNN built without CUDA)")
def test_cuda_atomic_backward_strided_input_and_stream(rng, gen):
    x = rand(gen, (2, 4, 5, 6), torch.float32, "cuda")
    dy = rand(gen, (2, 4, 40, 48), torch.float32, "cuda")
    for mode in ("nearest", "bilinear", "bicubic"):
        det = rudnn.interpolate_backward(dy, x.shape, (40, 48), mode=mode)
        again = rudnn.interpolate_backward(dy, x.shape, (40, 48), mode=mode)
        assert torch.equal(det, again), f"{mode}: deterministic runs differ"
        atomic = rudnn.interpolate_backward(dy, x.shape, (40, 48), mode=mode, deterministic=False)
        close(f"atomic {mode}", atomic, det, torch.float32, rng.seed_value)
    xt = rand(gen, (2, 9, 8, 3), torch.float32, "cuda").permute(0, 3, 1, 2)  # channels-last view
    close("strided", rudnn.interpolate(xt, (13, 5), mode="bilinear", align_corners=True),
          F.interpolate(xt, (13, 5), mode="bilinear", align_corners=True), torch.float32, rng.seed_value)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = rudnn.interpolate(x, scale_factor=2, mode="bilinear")
    s.synchronize()
    close("on a side stream", y, F.interpolate(x, scale_factor=2, mode="bilinear"), torch.float32, rng.seed_value)


def test_gradcheck_float64_cpu(gen):
    x = rand(gen, (1, 2, 4, 5), torch.float64, "cpu").requires_grad_()
    for mode, align in (("bilinear", False), ("bilinear", True), ("bicubic", False), ("area", None),
                        ("nearest", None)):
        assert torch.autograd.gradcheck(lambda a: ta.interpolate(a, (7, 3), None, mode, align), (x,))
    for mode, align in (("bilinear", None), ("bicubic", True)):
        assert torch.autograd.gradcheck(
            lambda a: ta.interpolate(a, (2, 9), None, mode, align, antialias=True), (x,))
    x3 = rand(gen, (1, 2, 3, 4, 2), torch.float64, "cpu").requires_grad_()
    assert torch.autograd.gradcheck(lambda a: ta.interpolate(a, None, 1.5, "trilinear", True), (x3,))


def test_custom_ops_pass_opcheck(gen):
    x = rand(gen, (2, 3, 5, 4), torch.float64, "cpu").requires_grad_()
    lib = torch.ops.rudnn
    utils = ("test_schema", "test_faketensor", "test_autograd_registration")
    torch.library.opcheck(lib.interpolate, (x, [7, 9], [], "bicubic", True, False), test_utils=utils)
    torch.library.opcheck(lib.interpolate, (x, [], [1.5, 2.5], "nearest-exact", None, False), test_utils=utils)
    torch.library.opcheck(lib.interpolate, (x, [], [2.3], "bilinear", None, True), test_utils=utils)
    torch.library.opcheck(lib.interpolate, (x, [2, 7], [], "bicubic", None, False, True), test_utils=utils)
    dy = rand(gen, (2, 3, 3, 3), torch.float64, "cpu")
    torch.library.opcheck(lib.interpolate_backward, (dy, [2, 3, 5, 4], [3, 3], [], "area", None, False),
                          test_utils=("test_schema", "test_faketensor"))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(gen, device):
    def upsample(x):
        y = ta.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        # the package function (its custom op under compile; no gradient: it takes y detached)
        z = rudnn.interpolate(y.detach(), (5, 7), mode="area")
        aa = ta.interpolate(x, (3, 5), mode="bilinear", antialias=True)
        return (y**2).sum() + z.sum() + ta.interpolate(x, (3, 3), mode="bicubic").sum() + (aa**2).sum()

    x = rand(gen, (2, 3, 6, 8), torch.float32, device).requires_grad_()
    results = []
    for fn in (torch.compile(upsample, fullgraph=True), upsample):
        x.grad = None
        y = fn(x)
        y.backward()
        results.append((y.detach(), x.grad.clone()))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_errors_as_rudnn_exceptions(gen):
    x = rand(gen, (1, 2, 4, 4), torch.float32, "cpu")
    with pytest.raises(rudnn.InvalidArgument, match=r"^interpolate: mode must be one of"):
        ta.interpolate(x, 8, mode="cubic")
    with pytest.raises(rudnn.InvalidArgument, match=r"^interpolate: "):
        ta.interpolate(x, 8, 2.0)
    with pytest.raises(rudnn.InvalidArgument, match=r"^interpolate: align_corners must be a bool"):
        ta.interpolate(x, 8, mode="bilinear", align_corners=1)
    with pytest.raises(rudnn.InvalidArgument, match=r"^interpolate: "):
        ta.interpolate(x, 8, mode="nearest", align_corners=True)
    with pytest.raises(rudnn.InvalidArgument, match=r"^interpolate: options.antialias is set with mode nearest"):
        ta.interpolate(x, 8, mode="nearest", antialias=True)
    with pytest.raises(rudnn.InvalidArgument, match=r"^interpolate: antialias must be a bool"):
        ta.interpolate(x, 8, mode="bilinear", antialias="yes")
    with pytest.raises(rudnn.InvalidArgument, match=r"^interpolate: "):
        ta.interpolate(x[:, :, :3], 8, mode="trilinear")
