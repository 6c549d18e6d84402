"""The MoE family's torch ops (skipped without torch >= 2.4; the CUDA cases also without a GPU or
a CUDA build of ruDNN): rudnn.torch_autograd.moe against a torch float64 reference of the
routed SwiGLU branch (softmax top-k and group-limited sigmoid routing; values and the input,
logits and expert-weight gradients of torch's autograd), the expert strategies on the GPU
(scalar, tensor_core, auto: decode and prefill sizes), the step-by-step objects with torch
tensors (results come back as torch tensors on the caller's device), gradcheck-style
finite differences in float64 on the CPU, torch.library.opcheck of the custom ops,
torch.compile(fullgraph=True) forward and backward, errors as rudnn.Error subclasses (a second
derivative included), and the SparseMoE module against an eager Mixtral-style block (its
layout of per-expert Linear layers loaded through from_weights) and DeepSeek-V3's routing.
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
# Relative L2 error bounds by dtype: the experts round their two projections and the SiLU to
# the weights' dtype (moe.h), which the float64 reference does not.
TOL = {torch.float64: 1e-6, torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 5e-2}


def rand(gen, shape, dtype, device, scale=1.0):
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(device=device, dtype=dtype)


def close(what, got, ref, dtype, seed, case=None):
    msg = f"{what} [{dtype}] (seed={seed}; RUDNN_TEST_SEED={seed} replays; case={case})"
    assert got.shape == ref.shape, f"{msg}: {tuple(got.shape)} vs {tuple(ref.shape)}"
    if ref.numel():
        g, r = got.detach().double(), ref.detach().double()
        err = (g - r).norm().item() / max(r.norm().item(), 1e-6 * r.numel() ** 0.5)
        assert err <= TOL[dtype], f"{msg}: relative L2 error {err:.3g}"


def select_softmax(logits, k):
    idx = torch.sort(-logits.detach(), dim=1, stable=True).indices[:, :k]  # ties to the lower id
    return idx, logits.softmax(-1).gather(1, idx)


def select_grouped(logits, bias, k, groups, selected, top_two):
    s = logits.detach().sigmoid()
    c = s + bias.double()
    T, E = c.shape
    top = c.view(T, groups, E // groups).topk(2 if top_two else 1, dim=2).values
    score = top.sum(2)
    keep = torch.sort(-score, dim=1, stable=True).indices[:, :selected]
    mask = torch.zeros(T, groups, dtype=torch.bool, device=c.device).scatter_(1, keep, True)
    masked = c.masked_fill(~mask.repeat_interleave(E // groups, 1), float("-inf"))
    idx = torch.sort(-masked, dim=1, stable=True).indices[:, :k]
    return idx, logits.sigmoid().gather(1, idx)


def ref_moe(x, logits, gate, up, down, k, renormalize=False, bias=None, groups=1, selected=1, top_two=False,
            scale=1.0):
    if bias is None:
        idx, w = select_softmax(logits, k)
    else:
        idx, w = select_grouped(logits, bias, k, groups, selected, top_two)
    if renormalize:
        w = w / w.sum(1, keepdim=True)
    w = w * scale
    out = torch.zeros_like(x)
    for j in range(k):
        e = idx[:, j]
        h = F.silu(torch.einsum("tih,th->ti", gate[e], x)) * torch.einsum("tih,th->ti", up[e], x)
        out = out + w[:, j:j + 1] * torch.einsum("thi,ti->th", down[e], h)
    return out


def operands(gen, T, H, E, I, dtype, device):
    x, logits = rand(gen, (T, H), dtype, device), rand(gen, (T, E), dtype, device)
    ws = [rand(gen, s, dtype, device, 0.3) for s in ((E, I, H), (E, I, H), (E, H, I))]
    return [x, logits] + ws


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("renormalize", [False, True])
@pytest.mark.parametrize("shape", [(16, 32, 8, 24, 2), (5, 16, 4, 8, 1), (33, 64, 16, 32, 4)], ids=str)
def test_moe_against_torch(rng, gen, device, dtype, renormalize, shape):
    T, H, E, I, k = shape
    case = dict(shape=shape, renormalize=renormalize)
    base = operands(gen, T, H, E, I, dtype, device)
    mine = [t.clone().requires_grad_() for t in base]
    y = ta.moe(*mine, top_k=k, renormalize=renormalize)
    ref_in = [t.double().requires_grad_() for t in base]
    ref = ref_moe(*ref_in, k, renormalize)
    close("moe", y, ref, dtype, rng.seed_value, case)
    assert y.dtype == dtype and y.device.type == device
    dy = rand(gen, y.shape, dtype, device)
    y.backward(dy)
    ref.backward(dy.double())
    for name, got, want in zip(("dinput", "dlogits", "dgate", "dup", "ddown"), mine, ref_in):
        assert got.grad.dtype == got.dtype, f"{name}: {got.grad.dtype}"
        if name == "dlogits" and k == 1 and renormalize:
            # one renormalised weight is 1 whatever the logits: the gradient is zero (up to rounding)
            assert got.grad.abs().max().item() <= 1e-3, f"dlogits must vanish (case={case})"
            continue
        close(name, got.grad, want.grad, dtype, rng.seed_value, case)


@pytest.mark.parametrize("device", DEVICES)
def test_moe_sigmoid_grouped_against_torch(rng, gen, device):
    T, H, E, I = 12, 16, 16, 8
    base = operands(gen, T, H, E, I, torch.float32, device)
    bias = rand(gen, (E,), torch.float32, device, 0.2)
    opts = dict(top_k=4, groups=4, selected_groups=2, group_top_two=True, renormalize=True, route_scale=2.5)
    mine = [t.clone().requires_grad_() for t in base]
    y = ta.moe(*mine, bias=bias, routing="sigmoid_grouped", **opts)
    ref_in = [t.double().requires_grad_() for t in base]
    ref = ref_moe(*ref_in, 4, True, bias, 4, 2, True, 2.5)
    close("sigmoid_grouped", y, ref, torch.float32, rng.seed_value)
    dy = rand(gen, y.shape, torch.float32, device)
    y.backward(dy)
    ref.backward(dy.double())
    for name, got, want in zip(("dinput", "dlogits", "dgate", "dup", "ddown"), mine, ref_in):
        close(name, got.grad, want.grad, torch.float32, rng.seed_value)


@pytest.mark.skipif(not CUDA, reason="no CUDA GPU (or ruDNN built without CUDA)")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("strategy", ["scalar", "tensor_core", "auto"])
@pytest.mark.parametrize("T", [3, 300], ids=lambda t: f"T{t}")  # auto: decode (<= 512 rows) and prefill
def test_cuda_expert_strategies(rng, gen, dtype, strategy, T):
    H, E, I, k = 64, 8, 32, 2
    case = dict(strategy=strategy, T=T)
    base = operands(gen, T, H, E, I, dtype, "cuda")
    mine = [t.clone().requires_grad_() for t in base]
    y = ta.moe(*mine, top_k=k, forward=strategy, backward="auto" if strategy == "auto" else strategy)
    ref_in = [t.double().requires_grad_() for t in base]
    ref = ref_moe(*ref_in, k)
    close("moe", y, ref, dtype, rng.seed_value, case)
    dy = rand(gen, y.shape, dtype, "cuda")
    y.backward(dy)
    ref.backward(dy.double())
    for name, got, want in zip(("dinput", "dlogits", "dgate", "dup", "ddown"), mine, ref_in):
        close(name, got.grad, want.grad, dtype, rng.seed_value, case)
    again = rudnn.moe_inference(*base, top_k=k, forward=strategy)
    assert torch.equal(again, rudnn.moe_inference(*base, top_k=k, forward=strategy)), "runs differ"


@pytest.mark.parametrize("device", DEVICES)
def test_step_by_step_objects_with_torch_tensors(rng, gen, device):
    T, H, E, I, k = 10, 16, 4, 8, 2
    x, logits, gate, up, down = operands(gen, T, H, E, I, torch.float32, device)
    plan = rudnn.route(logits, k)
    assert isinstance(plan.weights, torch.Tensor) and plan.weights.device == logits.device
    idx = plan.expert_indices
    assert isinstance(idx, torch.Tensor) and idx.shape == (T, k)
    ref_idx, ref_w = select_softmax(logits.double(), k)
    assert torch.equal(idx.to(torch.int64).cpu(), ref_idx.cpu()), "indices"
    close("route weights", plan.weights, ref_w, torch.float32, rng.seed_value)
    tokens = plan.dispatch(x)
    assert torch.equal(tokens.rows, x[tokens.token_of_row.long()])
    experts = rudnn.SwiGluExperts(gate, up, down)
    eo, cache = experts.forward_dispatched_training(tokens)
    out = tokens.combine(eo)
    close("combine", out, ref_moe(x.double(), logits.double(), gate.double(), up.double(), down.double(), k),
          torch.float32, rng.seed_value)
    dy = rand(gen, out.shape, torch.float32, device)
    dexpert, dweights = tokens.combine_backward(eo, dy)
    dinput_rows, dgate, dup, ddown = cache.backward(dexpert)
    dx = tokens.dispatch_backward(dinput_rows)
    assert all(isinstance(t, torch.Tensor) and t.device == x.device for t in (dexpert, dweights, dx, dgate))
    y, state = rudnn.moe_forward(x, logits, gate, up, down, top_k=k)
    grads = rudnn.moe_backward(state, dy)
    # the one-call forward weights with selected_router_weights (float32): the same numbers
    close("moe_forward vs steps", y, out, torch.float32, rng.seed_value)
    close("dinput vs steps", grads[0], dx, torch.float32, rng.seed_value)
    close("dgate vs steps", grads[2], dgate, torch.float32, rng.seed_value)
    assert state.route_indices().shape == (T, k)


def test_custom_ops_pass_opcheck(gen):
    x, logits, gate, up, down = (t.requires_grad_() for t in operands(gen, 6, 8, 4, 5, torch.float64, "cpu"))
    lib = torch.ops.rudnn
    options = ("softmax", 2, True, 1, 1, False, 1.0, "softmax", True, 1.0, "scalar", "scalar")
    torch.library.opcheck(lib.moe, (x, logits, None, gate, up, down) + options,
                          test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))
    dy = torch.randn(6, 8, dtype=torch.float64)
    torch.library.opcheck(lib.moe_backward, (dy, x.detach(), logits.detach(), None, gate.detach(), up.detach(),
                                             down.detach()) + options, test_utils=("test_schema", "test_faketensor"))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(gen, device):
    T, H, E, I = 8, 16, 4, 8
    x, _, gate, up, down = operands(gen, T, H, E, I, torch.float32, device)
    router = rand(gen, (E, H), torch.float32, device, 0.3)

    def layer(x, router, gate, up, down):
        logits = x @ router.T
        return (ta.moe(x, logits, gate, up, down, top_k=2, renormalize=True) ** 2).sum()

    params = [t.clone().requires_grad_() for t in (x, router, gate, up, down)]
    results = []
    for fn in (torch.compile(layer, fullgraph=True), layer):
        for p in params:
            p.grad = None
        y = fn(*params)
        y.backward()
        results.append([y.detach()] + [p.grad.clone() for p in params])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_errors_as_rudnn_exceptions(gen):
    x, logits, gate, up, down = operands(gen, 4, 8, 4, 5, torch.float32, "cpu")
    with pytest.raises(rudnn.InvalidArgument, match=r"^route: "):
        ta.moe(x, logits, gate, up, down, top_k=5)
    with pytest.raises(rudnn.InvalidArgument, match=r"^moe: top_k must be an int"):
        ta.moe(x, logits, gate, up, down, top_k=True)
    with pytest.raises(rudnn.InvalidArgument, match=r"^moe_inference: bias is given to a softmax selection"):
        ta.moe(x, logits, gate, up, down, bias=torch.zeros(4))
    with pytest.raises(rudnn.ShapeMismatch, match=r"^SwiGluExperts: "):
        ta.moe(x, logits, gate, up[:, :3], down)
    with pytest.raises(rudnn.InvalidArgument, match=r"^moe_inference: forward must be one of"):
        ta.moe(x, logits, gate, up, down, forward="fast")


def test_second_derivative_is_unsupported(gen):
    x, logits, gate, up, down = (t.requires_grad_() for t in operands(gen, 5, 8, 4, 6, torch.float64, "cpu"))
    y = ta.moe(x, logits, gate, up, down, top_k=2)
    (dx,) = torch.autograd.grad((y ** 2).sum(), x, create_graph=True)
    assert dx.requires_grad
    with pytest.raises(rudnn.Unsupported, match=r"^moe: only first-order derivatives exist"):
        dx.sum().backward()


class MixtralStyleBlock(torch.nn.Module):
    """Hugging Face's MixtralSparseMoeBlock computation, written out: a router Linear, E experts
    of three Linear layers (w1 gate, w3 up, w2 down), float32 softmax, top-k, renormalised
    weights cast to the activations' dtype, index_add over each expert's tokens."""

    def __init__(self, H, I, E, k, dtype, device):
        super().__init__()
        self.k = k
        self.gate = torch.nn.Linear(H, E, bias=False, dtype=dtype, device=device)
        self.experts = torch.nn.ModuleList(torch.nn.ModuleDict({
            name: torch.nn.Linear(*dims, bias=False, dtype=dtype, device=device)
            for name, dims in (("w1", (H, I)), ("w3", (H, I)), ("w2", (I, H)))}) for _ in range(E))

    def forward(self, x):
        h = x.reshape(-1, x.shape[-1])
        logits = self.gate(h)
        w = F.softmax(logits, dim=1, dtype=torch.float)
        w, idx = torch.topk(w, self.k, dim=-1)
        w = (w / w.sum(dim=-1, keepdim=True)).to(h.dtype)
        out = torch.zeros_like(h)
        for e, ex in enumerate(self.experts):
            tok, slot = torch.where(idx == e)
            if tok.numel():
                y = ex["w2"](F.silu(ex["w1"](h[tok])) * ex["w3"](h[tok]))
                out.index_add_(0, tok, y * w[tok, slot, None])
        return out.reshape(x.shape), logits


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
def test_sparse_moe_replaces_a_mixtral_block(rng, gen, device, dtype):
    if dtype == torch.float64 and device != "cpu":
        pytest.skip("float64 runs on the CPU only")
    B, T, H, I, E, k = 2, 7, 32, 24, 8, 2
    torch.manual_seed(rng.seed_value)
    block = MixtralStyleBlock(H, I, E, k, dtype, device)
    layer = ta.SparseMoE.from_weights(block.gate.weight, [e["w1"].weight for e in block.experts],
                                      [e["w3"].weight for e in block.experts],
                                      [e["w2"].weight for e in block.experts], top_k=k, renormalize=True)
    assert layer.gate_proj.dtype == dtype and layer.gate_proj.device.type == device
    x = rand(gen, (B, T, H), dtype, device)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    got, got_logits = layer(xa, return_router_logits=True)
    want, want_logits = block(xb)
    assert got.shape == x.shape and got.dtype == dtype
    torch.testing.assert_close(got_logits, want_logits, rtol=0, atol=0)  # the same Linear
    close("SparseMoE vs Mixtral block", got, want, dtype, rng.seed_value)
    dy = rand(gen, x.shape, dtype, device)
    got.backward(dy)
    want.backward(dy)
    close("dinput", xa.grad, xb.grad, dtype, rng.seed_value)
    close("drouter", layer.router.weight.grad, block.gate.weight.grad, dtype, rng.seed_value)
    for mine, name in ((layer.gate_proj, "w1"), (layer.up_proj, "w3"), (layer.down_proj, "w2")):
        # an expert no token chose has no .grad in the block (ours: zeros)
        want_grad = torch.stack([torch.zeros_like(e[name].weight) if e[name].weight.grad is None
                                 else e[name].weight.grad for e in block.experts])
        assert mine.grad.dtype == dtype
        close(f"d{name}", mine.grad, want_grad, dtype, rng.seed_value)


@pytest.mark.parametrize("device", DEVICES)
def test_sparse_moe_deepseek_v3_routing(rng, gen, device):
    T, H, I, E = 9, 16, 8, 16
    opts = dict(routing="sigmoid_grouped", groups=4, selected_groups=2, group_top_two=True, renormalize=True,
                route_scale=2.5, router_dtype=torch.float32)
    _, _, gate, up, down = operands(gen, T, H, E, I, torch.float32, device)
    router = rand(gen, (E, H), torch.float32, device, 0.3)
    bias = rand(gen, (E,), torch.float32, device, 0.2)
    layer = ta.SparseMoE.from_weights(router, gate, up, down, 4, e_score_correction_bias=bias, **opts)
    assert torch.equal(layer.e_score_correction_bias, bias)
    x = rand(gen, (T, H), torch.float32, device).requires_grad_()
    y, logits = layer(x, return_router_logits=True)
    xr = x.detach().double().requires_grad_()
    exact = xr @ router.double().T
    # the layer's float32 logits as values (the same selection), float64 ones for the gradient
    ref_logits = logits.detach().double() + (exact - exact.detach())
    ref = ref_moe(xr, ref_logits, gate.double(), up.double(), down.double(), 4, True, bias, 4, 2, True, 2.5)
    close("SparseMoE sigmoid_grouped", y, ref, torch.float32, rng.seed_value)
    dy = rand(gen, y.shape, torch.float32, device)
    y.backward(dy)
    ref.backward(dy.double())
    close("dinput", x.grad, xr.grad, torch.float32, rng.seed_value)
    assert layer.e_score_correction_bias.grad is None and not layer.e_score_correction_bias.requires_grad


@pytest.mark.parametrize("device", DEVICES)
def test_sparse_moe_compiles_without_graph_breaks(gen, device):
    layer = ta.SparseMoE(16, 8, 4, 2, renormalize=True, device=device, dtype=torch.float32)
    x = rand(gen, (3, 5, 16), torch.float32, device)
    results = []
    for fn in (torch.compile(layer, fullgraph=True), layer):
        layer.zero_grad()
        xi = x.clone().requires_grad_()
        y = fn(xi)
        (y ** 2).sum().backward()
        results.append([y.detach(), xi.grad] + [p.grad.clone() for p in layer.parameters()])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_sparse_moe_errors(gen):
    with pytest.raises(rudnn.InvalidArgument, match=r"^SparseMoE: routing must be"):
        ta.SparseMoE(8, 4, 4, 2, routing="topk")
    with pytest.raises(rudnn.InvalidArgument, match=r"^SparseMoE: top_k must be an int"):
        ta.SparseMoE(8, 4, 4, True)
    _, _, gate, up, down = operands(gen, 2, 8, 4, 6, torch.float32, "cpu")
    with pytest.raises(rudnn.ShapeMismatch, match=r"^SparseMoE.from_weights: gate"):
        ta.SparseMoE.from_weights(torch.zeros(4, 8), gate, up, down.transpose(1, 2), 2)
    with pytest.raises(rudnn.ShapeMismatch, match=r"^SparseMoE.from_weights: router_weight"):
        ta.SparseMoE.from_weights(torch.zeros(4, 6), gate, up, down, 2)
    with pytest.raises(rudnn.InvalidArgument, match=r"e_score_correction_bias is given to a softmax"):
        ta.SparseMoE.from_weights(torch.zeros(4, 8), gate, up, down, 2, e_score_correction_bias=torch.zeros(4))
    layer = ta.SparseMoE(8, 6, 4, 5)  # top_k > E: route's own error, at the first call
    with pytest.raises(rudnn.InvalidArgument, match=r"^route: "):
        layer(torch.zeros(3, 8))
