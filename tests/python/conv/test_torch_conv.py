"""The convolution family's torch ops (skipped without torch >= 2.4; the CUDA cases also without
a GPU or a CUDA build of ruDNN): rudnn.torch_autograd.conv1d / conv2d / conv3d against
torch.nn.functional.conv{1,2,3}d option for option (stride, padding including "same" and
"valid", dilation, groups and depthwise, bias; values and the input, weight and bias
gradients of torch's autograd, torch run in float64 on the same inputs), channels-last
tensors, the fused epilogue (residual, relu / silu / gelu) and the "nhwc" layout of
ta.conv, causal_conv1d (bias, SiLU, initial state, varlen) against a depthwise F.conv1d
reference with its gradients, gradcheck in float64 on the CPU, torch.library.opcheck of the
custom ops, torch.compile(fullgraph=True) forward and backward, and errors as rudnn.Error
subclasses. Inputs are random with a fresh seed per test (conftest's rng; RUDNN_TEST_SEED=<int>
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
# Relative L2 error bounds by dtype (float32 accumulation, one rounding per output).
TOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
TORCH_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
TA_CONV = {1: ta.conv1d, 2: ta.conv2d, 3: ta.conv3d}


def rand(gen, shape, dtype, device, scale=1.0):
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(device=device, dtype=dtype)


def close(what, got, ref, dtype, seed, case=None):
    msg = f"{what} [{dtype}] (seed={seed}; RUDNN_TEST_SEED={seed} replays; case={case})"
    assert got.dtype == dtype and got.shape == ref.shape, f"{msg}: {got.dtype} {tuple(got.shape)} vs {tuple(ref.shape)}"
    if ref.numel():
        g, r = got.detach().double(), ref.detach().double()
        err = (g - r).norm().item() / max(r.norm().item(), 1e-6 * r.numel() ** 0.5)
        assert err <= TOL[dtype], f"{msg}: relative L2 error {err:.3g}"


CASES = [
    # (input shape, weight shape, stride, padding, dilation, groups)
    ((2, 3, 17), (4, 3, 3), 1, 0, 1, 1),
    ((2, 4, 19), (6, 2, 4), 2, 3, 2, 2),
    ((2, 3, 12), (5, 3, 4), 1, "same", 2, 1),
    ((2, 3, 9, 11), (8, 3, 3, 3), 1, 1, 1, 1),
    ((2, 3, 9, 11), (8, 3, 3, 3), 2, 0, 1, 1),
    ((2, 8, 10, 9), (8, 1, 3, 3), 1, 1, 1, 8),  # depthwise
    ((1, 6, 12, 12), (6, 1, 5, 5), 2, 2, 1, 6),  # depthwise, stride 2
    ((2, 16, 7, 9), (16, 1, 7, 7), 1, 3, 1, 16),  # depthwise, large kernel
    ((2, 4, 9, 8), (6, 2, 2, 3), (1, 2), (1, 0), (2, 1), 2),
    ((1, 3, 8, 7), (4, 3, 4, 2), 1, "same", 1, 1),  # even kernel
    ((1, 3, 8, 7), (4, 3, 3, 2), 1, "valid", 1, 1),
    ((1, 2, 6, 7, 8), (4, 2, 3, 3, 3), 1, 1, 1, 1),
    ((2, 4, 5, 6, 7), (4, 2, 2, 3, 1), (2, 1, 1), (0, 1, 0), (1, 2, 1), 2),
    ((0, 3, 6, 6), (4, 3, 3, 3), 1, 1, 1, 1),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("with_bias", [True, False])
def test_conv_against_torch(rng, gen, device, dtype, case, with_bias):
    xs, ws, stride, padding, dilation, groups = case
    rank = len(xs) - 2
    x0, w0 = rand(gen, xs, dtype, device), rand(gen, ws, dtype, device, 0.3)
    b0 = rand(gen, (ws[0],), dtype, device) if with_bias else None
    x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    b = b0.clone().requires_grad_() if with_bias else None
    y = TA_CONV[rank](x, w, b, stride, padding, dilation, groups)
    x64, w64 = x0.double().requires_grad_(), w0.double().requires_grad_()
    b64 = b0.double().requires_grad_() if with_bias else None
    ref = TORCH_CONV[rank](x64, w64, b64, stride, padding, dilation, groups)
    close("conv", y, ref.to(dtype), dtype, rng.seed_value, case)
    dy = rand(gen, y.shape, dtype, device)
    y.backward(dy)
    ref.backward(dy.double())
    close("dinput", x.grad, x64.grad.to(dtype), dtype, rng.seed_value, case)
    close("dweight", w.grad, w64.grad.to(dtype), dtype, rng.seed_value, case)
    if with_bias:
        close("dbias", b.grad, b64.grad.to(dtype), dtype, rng.seed_value, case)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("activation", ["none", "relu", "silu", "gelu"])
def test_epilogue_and_channels_last(rng, gen, device, dtype, activation):
    case = dict(activation=activation)
    x0 = rand(gen, (2, 8, 9, 10), dtype, device).to(memory_format=torch.channels_last)
    w0, b0, r0 = rand(gen, (16, 8, 3, 3), dtype, device, 0.2), rand(gen, (16,), dtype, device), rand(
        gen, (2, 16, 9, 10), dtype, device)
    x, w, b, r = (t.clone().requires_grad_() for t in (x0, w0, b0, r0))
    y = ta.conv(x, w, b, 1, 1, activation=activation, residual=r)
    assert y.is_contiguous(memory_format=torch.channels_last), "a channels-last input gives a channels-last result"
    acts = {"none": lambda t: t, "relu": F.relu, "silu": F.silu, "gelu": F.gelu}
    x64, w64, b64, r64 = (t.detach().double().requires_grad_() for t in (x0, w0, b0, r0))
    ref = acts[activation](F.conv2d(x64, w64, b64, 1, 1) + r64)
    close("epilogue", y, ref.to(dtype), dtype, rng.seed_value, case)
    dy = rand(gen, y.shape, dtype, device)
    y.backward(dy)
    ref.backward(dy.double())
    for name, got, want in (("dinput", x, x64), ("dweight", w, w64), ("dbias", b, b64), ("dresidual", r, r64)):
        close(name, got.grad, want.grad.to(dtype), dtype, rng.seed_value, case)


@pytest.mark.parametrize("device", DEVICES)
def test_nhwc_layout_and_asymmetric_padding(rng, gen, device):
    x0, w0 = rand(gen, (2, 7, 8, 6), torch.float32, device), rand(gen, (5, 3, 2, 6), torch.float32, device)
    x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    y = ta.conv(x, w, None, 1, (1, 0), padding_end=(1, 1), layout="nhwc")  # [N, H, W, C] / [K, kH, kW, C]
    x64 = x0.permute(0, 3, 1, 2).double().requires_grad_()
    w64 = w0.permute(0, 3, 1, 2).double().requires_grad_()
    ref = F.conv2d(F.pad(x64, (0, 1, 1, 1)), w64).permute(0, 2, 3, 1)
    close("nhwc", y, ref.float(), torch.float32, rng.seed_value)
    dy = rand(gen, y.shape, torch.float32, device)
    y.backward(dy)
    ref.backward(dy.double())
    close("dinput nhwc", x.grad, x64.grad.permute(0, 2, 3, 1).float(), torch.float32, rng.seed_value)
    close("dweight nhwc", w.grad, w64.grad.permute(0, 2, 3, 1).float(), torch.float32, rng.seed_value)


@pytest.mark.skipif(not CUDA, reason="no CUDA GPU (or ruDNN built without CUDA)")
def test_cuda_plan_implicit_gemm_and_stream(rng, gen):
    p = rudnn.plan_conv("forward", (2, 16, 8, 8), (16, 1, 3, 3), torch.bfloat16, padding=1, groups=16,
                        device="cuda")
    assert p["kernel"] == "Depthwise", p
    x = rand(gen, (2, 16, 9, 9), torch.bfloat16, "cuda").to(memory_format=torch.channels_last)
    w = rand(gen, (32, 16, 3, 3), torch.bfloat16, "cuda", 0.2).to(memory_format=torch.channels_last)
    try:
        y = rudnn.conv_forward(x, w, None, 1, 1, strategy="implicit_gemm")
    except rudnn.Unsupported as e:  # allowed only with a message naming what is missing
        assert str(e).startswith("conv_forward: "), str(e)
    else:
        close("implicit_gemm", y, F.conv2d(x.double(), w.double(), None, 1, 1).to(torch.bfloat16),
              torch.bfloat16, rng.seed_value)
    with pytest.raises(rudnn.Unsupported, match=r"^conv_forward: "):
        rudnn.conv_forward(x.contiguous(), w.contiguous(), None, 1, 1, strategy="implicit_gemm")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = rudnn.conv_forward(x, w, None, 1, 1)
    s.synchronize()
    close("side stream", y, F.conv2d(x.double(), w.double(), None, 1, 1).to(torch.bfloat16), torch.bfloat16,
          rng.seed_value)


@pytest.mark.skipif(not CUDA, reason="no CUDA GPU (or ruDNN built without CUDA)")
@pytest.mark.parametrize("stride, padding, dilation", [(1, 1, 1), (2, 1, 1), (2, 3, 2), (3, 0, 1)])
def test_cuda_data_gradient_on_tensor_cores(rng, gen, stride, padding, dilation):
    # strategy="implicit_gemm": the forward kernel over dout per stride phase; "autotune"
    # measures it against Direct once and records the class.
    case = (stride, padding, dilation)
    x = rand(gen, (2, 24, 13, 12), torch.bfloat16, "cuda").to(memory_format=torch.channels_last)
    w = rand(gen, (16, 24, 3, 3), torch.bfloat16, "cuda", 0.2).to(memory_format=torch.channels_last)
    x64, w64 = x.double().requires_grad_(True), w.double()
    y64 = F.conv2d(x64, w64, None, stride, padding, dilation)
    dy = rand(gen, tuple(y64.shape), torch.bfloat16, "cuda").to(memory_format=torch.channels_last)
    (ref,) = torch.autograd.grad(y64, x64, dy.double())
    plan = rudnn.plan_conv("data_backward", (2, 13, 12, 24), (16, 3, 3, 24), torch.bfloat16, stride=stride,
                           padding=padding, dilation=dilation, layout="nhwc", strategy="implicit_gemm",
                           device="cuda")
    assert plan["kernel"] == "ImplicitGemm" and plan["workspace_bytes"] == 16 * 24 * 9 * 2, plan
    rudnn.autotune_clear()
    for strategy in ("implicit_gemm", "autotune"):
        dx = rudnn.conv_data_backward(dy, w, tuple(x.shape), stride, padding, dilation, strategy=strategy)
        close(f"dinput {strategy}", dx, ref.to(torch.bfloat16), torch.bfloat16, rng.seed_value, case)
    keys = [e["key"] for e in rudnn.autotune_entries()]
    assert any(k.startswith("conv_data_backward | ") for k in keys), keys
    rudnn.autotune_clear()


def ref_causal(x, w, b, state, silu):
    """torch reference: depthwise F.conv1d over [B, C, L] with the state (or zeros) on the left."""
    B, L, C = x.shape
    W = w.shape[1]
    xt = x.transpose(1, 2)
    left = state if state is not None else xt.new_zeros((B, C, W - 1))
    y = F.conv1d(torch.cat([left, xt], 2), w.unsqueeze(1), b, groups=C).transpose(1, 2)
    return F.silu(y) if silu else y


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(2, 33, 16, 4), (1, 7, 9, 3), (3, 64, 40, 8), (2, 19, 12, 11), (2, 5, 6, 1)],
                         ids=str)
@pytest.mark.parametrize("silu", [False, True])
@pytest.mark.parametrize("with_state", [False, True])
def test_causal_conv1d_against_torch(rng, gen, device, dtype, shape, silu, with_state):
    B, L, C, W = shape
    case = dict(shape=shape, silu=silu, with_state=with_state)
    x0, w0, b0 = rand(gen, (B, L, C), dtype, device), rand(gen, (C, W), dtype, device, 0.5), rand(gen, (C,), dtype,
                                                                                                   device)
    s0 = rand(gen, (B, C, W - 1), dtype, device) if with_state else None
    x, w, b = (t.clone().requires_grad_() for t in (x0, w0, b0))
    s = s0.clone().requires_grad_() if with_state else None
    y = ta.causal_conv1d(x, w, b, s, None, silu)
    if with_state:
        assert torch.equal(s.detach(), s0), "ta.causal_conv1d must not write the initial state"
    x64, w64, b64 = (t.double().requires_grad_() for t in (x0, w0, b0))
    s64 = s0.double().requires_grad_() if with_state else None
    ref = ref_causal(x64, w64, b64, s64, silu)
    close("causal_conv1d", y, ref.to(dtype), dtype, rng.seed_value, case)
    dy = rand(gen, y.shape, dtype, device)
    y.backward(dy)
    ref.backward(dy.double())
    pairs = [("dx", x, x64), ("dweight", w, w64), ("dbias", b, b64)] + ([("dstate", s, s64)] if with_state else [])
    for name, got, want in pairs:
        close(name, got.grad, want.grad.to(dtype), dtype, rng.seed_value, case)
    if with_state:  # the decode form writes the state in place: the last W-1 inputs
        state = s0.clone()
        y2 = rudnn.causal_conv1d(x0, w0, b0, state, None, silu)
        close("decode form", y2, ref.to(dtype), dtype, rng.seed_value, case)
        full = torch.cat([s0, x0.transpose(1, 2)], 2)
        assert torch.equal(state, full[:, :, full.shape[2] - (W - 1):]), f"updated state (case={case})"


@pytest.mark.parametrize("device", DEVICES)
def test_causal_conv1d_varlen(rng, gen, device):
    C, W = 12, 4
    lens = [5, 1, 9, 7]
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device=device)
    x0 = rand(gen, (1, sum(lens), C), torch.float32, device)
    w0, b0 = rand(gen, (C, W), torch.float32, device), rand(gen, (C,), torch.float32, device)
    s0 = rand(gen, (len(lens), C, W - 1), torch.float32, device)
    x, w, s = x0.clone().requires_grad_(), w0.clone().requires_grad_(), s0.clone().requires_grad_()
    y = ta.causal_conv1d(x, w, b0, s, cu, True)
    x64, w64, s64 = x0.double().requires_grad_(), w0.double().requires_grad_(), s0.double().requires_grad_()
    parts = torch.split(x64, lens, 1)
    ref = torch.cat([ref_causal(p, w64, b0.double(), s64[i:i + 1], True) for i, p in enumerate(parts)], 1)
    close("varlen", y, ref.float(), torch.float32, rng.seed_value)
    dy = rand(gen, y.shape, torch.float32, device)
    y.backward(dy)
    ref.backward(dy.double())
    for name, got, want in (("dx", x, x64), ("dweight", w, w64), ("dstate", s, s64)):
        close(f"varlen {name}", got.grad, want.grad.float(), torch.float32, rng.seed_value)


def test_gradcheck_float64_cpu(gen):
    x = rand(gen, (2, 4, 5, 6), torch.float64, "cpu").requires_grad_()
    w = rand(gen, (6, 2, 3, 2), torch.float64, "cpu").requires_grad_()
    b = rand(gen, (6,), torch.float64, "cpu").requires_grad_()
    r = rand(gen, (2, 6, 3, 7), torch.float64, "cpu").requires_grad_()  # the output: H (5+2-3)//2+1, W 6+2-2+1
    assert torch.autograd.gradcheck(lambda a, c, d: ta.conv2d(a, c, d, (2, 1), (1, 1), 1, 2),
                                    (x, w, b))
    assert torch.autograd.gradcheck(
        lambda a, c, d, e: ta.conv(a, c, d, (2, 1), 1, 1, 2, activation="silu", residual=e), (x, w, b, r))
    xc = rand(gen, (2, 6, 3), torch.float64, "cpu").requires_grad_()
    wc = rand(gen, (3, 4), torch.float64, "cpu").requires_grad_()
    sc = rand(gen, (2, 3, 3), torch.float64, "cpu").requires_grad_()
    assert torch.autograd.gradcheck(lambda a, c, d: ta.causal_conv1d(a, c, None, d, None, True), (xc, wc, sc))


def test_custom_ops_pass_opcheck(gen):
    x = rand(gen, (2, 4, 6, 5), torch.float64, "cpu").requires_grad_()
    w = rand(gen, (6, 2, 3, 3), torch.float64, "cpu").requires_grad_()
    b = rand(gen, (6,), torch.float64, "cpu").requires_grad_()
    lib = torch.ops.rudnn
    utils = ("test_schema", "test_faketensor", "test_autograd_registration")
    torch.library.opcheck(lib.conv, (x, w, b, None, [1, 1], "", [1, 0], [], [1, 2], 2, "none", "nchw", "auto"),
                          test_utils=utils)
    torch.library.opcheck(lib.conv, (x, w, None, None, [], "same", [], [], [], 2, "gelu", "nchw", "auto"),
                          test_utils=utils)
    xl = x.detach().to(memory_format=torch.channels_last).requires_grad_()
    torch.library.opcheck(lib.conv, (xl, w, b, None, [2, 1], "", [1, 1], [0, 2], [], 2, "relu", "nchw", "auto"),
                          test_utils=utils)
    dy = rand(gen, (2, 6, 4, 3), torch.float64, "cpu")
    torch.library.opcheck(lib.conv_data_backward, (dy, w.detach(), [2, 4, 6, 5], [], "", [], [], [], 2, "nchw"),
                          test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(lib.conv_weight_backward, (dy, x.detach(), [6, 2, 3, 3], [], "", [], [], [], 2, "nchw", True),
                          test_utils=("test_schema", "test_faketensor"))
    xc = rand(gen, (2, 7, 3), torch.float64, "cpu").requires_grad_()
    wc = rand(gen, (3, 4), torch.float64, "cpu").requires_grad_()
    sc = rand(gen, (2, 3, 3), torch.float64, "cpu").requires_grad_()
    torch.library.opcheck(lib.causal_conv1d, (xc, wc, None, sc, None, True), test_utils=utils)
    torch.library.opcheck(lib.causal_conv1d, (xc, wc, b[:3].detach(), None, None, False), test_utils=utils)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(gen, device):
    def block(x, w1, w2, wc):
        h = ta.conv2d(x, w1, None, 1, "same")
        h = ta.conv(h, w2, None, 1, 1, groups=8, activation="silu", residual=h)  # depthwise, fused
        seq = h.flatten(2).transpose(1, 2)  # [N, L, C]
        out = ta.causal_conv1d(seq, wc, None, None, None, True)
        return (out**2).sum() + rudnn.conv_forward(x.detach(), w1.detach()).sum()

    x = rand(gen, (2, 4, 6, 6), torch.float32, device).requires_grad_()
    params = [rand(gen, s, torch.float32, device, 0.3).requires_grad_() for s in ((8, 4, 3, 3), (8, 1, 3, 3), (8, 4))]
    results = []
    for fn in (torch.compile(block, fullgraph=True), block):
        for t in [x] + params:
            t.grad = None
        y = fn(x, *params)
        y.backward()
        results.append([y.detach()] + [t.grad.clone() for t in [x] + params])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_errors_as_rudnn_exceptions(gen):
    x, w = rand(gen, (1, 4, 6, 6), torch.float32, "cpu"), rand(gen, (4, 4, 3, 3), torch.float32, "cpu")
    with pytest.raises(rudnn.ShapeMismatch, match=r"^conv2d: input is 3-d; expected 4-d"):
        ta.conv2d(x[0], w)
    with pytest.raises(rudnn.InvalidArgument, match=r"^conv_forward: padding is 'same' with a stride"):
        ta.conv2d(x, w, None, 2, "same")
    with pytest.raises(rudnn.InvalidArgument, match=r"^conv_forward: "):
        ta.conv2d(x, w, None, 1, 0, 1, 3)
    with pytest.raises(rudnn.ShapeMismatch, match=r"^conv_forward: "):
        ta.conv2d(x, w[:, :3])
    with pytest.raises(rudnn.InvalidArgument, match=r"^conv_forward: activation must be one of"):
        ta.conv(x, w, activation="tanh")
    xc, wc = rand(gen, (1, 5, 4), torch.float32, "cpu"), rand(gen, (4, 3), torch.float32, "cpu")
    with pytest.raises(rudnn.InvalidArgument, match=r"^causal_conv1d: silu must be a bool"):
        ta.causal_conv1d(xc, wc, silu=1)
    with pytest.raises(rudnn.ShapeMismatch, match=r"^causal_conv1d: "):
        ta.causal_conv1d(xc, wc.T)
