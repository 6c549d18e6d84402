"""The gated delta family's torch ops (skipped without torch >= 2.4; the CUDA cases also without a
GPU or a CUDA build of ruDNN): rudnn.torch_autograd.gated_delta / gated_delta_rule (and its chunked
prefill, chunk_size=) against a torch float64 recurrence (grouped key heads, Dk up to 256 on the GPU, float32 / float16 /
bfloat16; varlen), their gradients against torch autograd of that reference, gradcheck in
float64 on the CPU, torch.library.opcheck of the custom ops (schema, fake implementation,
autograd registration), and torch.compile(fullgraph=True) of a step, forward and backward. Inputs are random with a fresh seed per test (conftest's
rng; RUDNN_TEST_SEED=<int> replays one).
"""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("torch >= 2.4 (torch.library.custom_op) is needed", allow_module_level=True)

import rudnn  # noqa: E402
from rudnn import torch_autograd as ta  # noqa: E402

CUDA = torch.cuda.is_available() and rudnn.built_with_cuda()
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])
TOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}


def close(what, got, ref, dtype, seed, case=None, tol=None):
    msg = f"{what} [{dtype}] (seed={seed}; RUDNN_TEST_SEED={seed} replays; case={case})"
    assert got.dtype == ref.dtype and got.shape == ref.shape, f"{msg}: {got.dtype} {tuple(got.shape)}"
    if ref.numel():
        g, r = got.detach().double(), ref.detach().double()
        err = (g - r).norm().item() / max(r.norm().item(), 1e-12)
        assert err <= (tol or TOL[dtype]), f"{msg}: relative L2 error {err:.3g}"


def ref_gated_delta(q, k, v, g, beta, state):
    """Spec 003's recurrence in float64: (y [B, T, Hv, Dv], final state [B, Hv, Dv, Dk])."""
    q, k, v, g, beta, S = (t.double() for t in (q, k, v, g, beta, state))
    S = S.clone()
    group = v.shape[2] // q.shape[2]
    qh, kh = q.repeat_interleave(group, 2), k.repeat_interleave(group, 2)
    ys = [v[:, :0].new_zeros(v.shape[0], 0, v.shape[2], v.shape[3])] if q.shape[1] == 0 else []
    for t in range(q.shape[1]):
        S = S * g[:, t, :, None, None]
        kt = kh[:, t]
        err = v[:, t] - torch.einsum("bhvk,bhk->bhv", S, kt)
        S = S + beta[:, t, :, None, None] * torch.einsum("bhv,bhk->bhvk", err, kt)
        ys.append(torch.einsum("bhvk,bhk->bhv", S, qh[:, t]))
    return (ys[0] if q.shape[1] == 0 else torch.stack(ys, 1)), S


def inputs(gen, B, T, Hk, Hv, Dk, Dv, dtype, device):
    def r(*shape):
        return torch.randn(shape, generator=gen, dtype=torch.float64)

    k = torch.nn.functional.normalize(r(B, T, Hk, Dk), dim=-1)
    t = dict(q=r(B, T, Hk, Dk) * Dk**-0.5, k=k, v=r(B, T, Hv, Dv),
             g=torch.rand(B, T, Hv, generator=gen, dtype=torch.float64) * 0.5 + 0.5,
             beta=torch.rand(B, T, Hv, generator=gen, dtype=torch.float64))
    t = {n: a.to(device=device, dtype=dtype) for n, a in t.items()}
    t["state"] = (r(B, Hv, Dv, Dk) * 0.5).to(device=device, dtype=torch.float32)
    return t


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dims", [(2, 7, 2, 4, 64, 32), (1, 1, 1, 2, 128, 128), (2, 3, 4, 8, 256, 64),
                                  (3, 16, 1, 1, 32, 96)], ids=str)
def test_gated_delta_against_torch_reference(rng, gen, device, dtype, dims):
    B, T, Hk, Hv, Dk, Dv = dims
    a = inputs(gen, B, T, Hk, Hv, Dk, Dv, dtype, device)
    y, state = ta.gated_delta(**a)
    ref_y, ref_state = ref_gated_delta(**a)
    assert y.device.type == device and state.dtype == torch.float32
    close("y", y, ref_y.to(dtype), dtype, rng.seed_value, dims)
    # The state is float32 whatever the inputs' dtype, computed from their rounded values.
    close("state", state, ref_state.float(), torch.float32, rng.seed_value, dims)
    states = rudnn.gated_delta_steps(**a)[1]
    assert torch.equal(states[:, -1], state), f"gated_delta_steps' last state differs (seed={rng.seed_value})"


@pytest.mark.parametrize("device", DEVICES)
def test_gated_delta_rule_matches_the_other_form(rng, gen, device):
    a = inputs(gen, 2, 5, 3, 3, 32, 16, torch.float32, device)
    log_decay = a["g"].log().transpose(1, 2).contiguous()
    out, final = ta.gated_delta_rule(
        a["q"].transpose(1, 2), a["k"].transpose(1, 2), a["v"].transpose(1, 2), a["beta"].transpose(1, 2),
        log_decay, a["state"].transpose(-1, -2).contiguous(), 1.0,
    )
    y, state = ref_gated_delta(a["q"], a["k"], a["v"], log_decay.exp().transpose(1, 2), a["beta"], a["state"])
    close("output", out, y.transpose(1, 2).float(), torch.float32, rng.seed_value)
    close("final_state", final, state.transpose(-1, -2).float(), torch.float32, rng.seed_value)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("varlen", [False, True])
def test_chunked_prefill_and_its_gradients(rng, gen, device, dtype, varlen):
    # chunk_size=16 over T = 37 (a padded last chunk; with varlen, sequences of 0, 20 and 17
    # steps): the forward against the float64 recurrence, the gradients (the chunked form's
    # backward) against torch autograd of it.
    B, T, H, K, V = (1, 37, 2, 64, 32) if varlen else (2, 37, 2, 64, 32)
    a = inputs(gen, B, T, H, H, K, V, dtype, device)
    cu = torch.tensor([0, 0, 20, 37], dtype=torch.int32, device=device) if varlen else None
    N = 3 if varlen else B
    t = lambda x: x.transpose(1, 2).contiguous()  # noqa: E731  [B, T, H, D] -> [B, H, T, D]
    names = ("query", "key", "value", "beta", "log_decay", "initial_state")
    rule = dict(zip(names, (t(a["q"]), t(a["k"]), t(a["v"]), t(a["beta"]), t(a["g"].log().float()),
                            torch.randn((N, H, K, V), generator=gen).to(device) * 0.5)))
    mine = {n: x.clone().requires_grad_() for n, x in rule.items()}
    ref = {n: x.detach().double().requires_grad_() for n, x in rule.items()}
    out, final = ta.gated_delta_rule(*mine.values(), 0.25, cu, chunk_size=16)
    spans = [(0, 0), (0, 20), (20, 37)] if varlen else None

    def recurrence(b, s, e, n):
        tt = lambda x: x[b:b + 1, :, s:e].transpose(1, 2)  # noqa: E731
        return ref_gated_delta(tt(ref["query"]) * 0.25, tt(ref["key"]), tt(ref["value"]), tt(ref["log_decay"]).exp(),
                               tt(ref["beta"]), ref["initial_state"][n:n + 1].transpose(-1, -2))

    parts = [recurrence(0, s, e, n) for n, (s, e) in enumerate(spans)] if varlen else \
        [recurrence(b, 0, T, b) for b in range(B)]
    ry = torch.cat([p[0] for p in parts], 1 if varlen else 0).transpose(1, 2)
    rs = torch.cat([p[1] for p in parts], 0).transpose(-1, -2)
    dy = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(device)
    ds = torch.randn(final.shape, generator=gen, dtype=torch.float64).to(device)
    ((out.double() * dy).sum() + (final.double() * ds).sum()).backward()
    ((ry * dy).sum() + (rs * ds).sum()).backward()
    case = dict(varlen=varlen, device=device, chunk_size=16)
    # F32 on the GPU: FP32 chunk products (forward and backward), whose rounding the header
    # puts near 1e-5.
    tol = 1e-4 if dtype == torch.float32 and device == "cuda" else None
    close("output", out, ry.to(dtype), dtype, rng.seed_value, case, tol)
    close("final_state", final, rs.float(), torch.float32 if tol else dtype, rng.seed_value, case, tol)
    for n in names:
        close(f"d{n}", mine[n].grad, ref[n].grad.to(mine[n].dtype), dtype, rng.seed_value, case, tol)


@pytest.mark.parametrize("device", DEVICES)
def test_slots_update_the_pool_in_place(rng, gen, device):
    a = inputs(gen, 3, 4, 2, 2, 16, 16, torch.float32, device)
    pool = torch.randn((5,) + a["state"].shape[1:], generator=gen).to(device)
    slots = torch.tensor([4, 0, 2], device=device)
    state = pool[slots].clone()
    del a["state"]
    y = rudnn.gated_delta_slots(**a, pool=pool, slots=slots)
    ref_y, ref_state = rudnn.gated_delta(**a, state=state)
    assert torch.equal(y, ref_y) and torch.equal(pool[slots], ref_state), f"seed={rng.seed_value}"


@pytest.mark.parametrize("device", DEVICES)
def test_chunked_slots_update_the_pool_in_place(rng, gen, device):
    # The chunked prefill over a pool equals chunk_gated_delta on the gathered states, bit for
    # bit (the same algorithm on the CPU, the same kernels on the GPU); slot 1 and 3 untouched.
    a = inputs(gen, 3, 37, 2, 4, 32, 16, torch.bfloat16, device)
    pool = torch.randn((5,) + a["state"].shape[1:], generator=gen).to(device)
    slots = torch.tensor([4, 0, 2], device=device, dtype=torch.int32)
    state, spare = pool[slots].clone(), pool[[1, 3]].clone()
    del a["state"]
    y = rudnn.chunk_gated_delta_slots(**a, pool=pool, slots=slots, chunk_size=16)
    ref_y, ref_state = rudnn.chunk_gated_delta(**a, state=state, chunk_size=16)
    case = f"seed={rng.seed_value}, device={device}"
    assert torch.equal(y, ref_y) and torch.equal(pool[slots.long()], ref_state), case
    assert torch.equal(pool[[1, 3]], spare), case


@pytest.mark.skipif(not CUDA, reason="no CUDA GPU (or ruDNN built without CUDA)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_chained_steps_are_bit_equal_on_the_gpu(rng, gen, dtype):
    # The header's promise: with a float32 state, T steps equal T one-step calls chained
    # through the returned state, bit for bit (the decode loop of an engine).
    a = inputs(gen, 2, 6, 2, 4, 128, 64, dtype, "cuda")
    y_all, s_all = rudnn.gated_delta(**a)
    s = a["state"]
    for t in range(6):
        y_t, s = rudnn.gated_delta(*(a[n][:, t : t + 1] for n in ("q", "k", "v", "g", "beta")), s)
        assert torch.equal(y_t[:, 0], y_all[:, t]), f"step {t}: y differs (seed={rng.seed_value})"
    assert torch.equal(s, s_all), f"chained final state differs (seed={rng.seed_value})"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("varlen", [False, True])
def test_gradients_against_torch_autograd(rng, gen, device, dtype, varlen):
    B, T = (1, 9) if varlen else (2, 5)
    a = inputs(gen, B, T, 1, 2, 32, 16, dtype, device)
    cu = torch.tensor([0, 4, 4, 9], dtype=torch.int32, device=device) if varlen else None
    if varlen:
        a["state"] = torch.randn((3,) + a["state"].shape[1:], generator=gen).to(device) * 0.5
    mine = {n: t.clone().requires_grad_() for n, t in a.items()}
    ref = {n: t.detach().double().requires_grad_() for n, t in a.items()}
    y, state = ta.gated_delta(**mine, cu_seqlens=cu)
    if varlen:  # each sequence alone, from its own state
        parts = [ref_gated_delta(*(ref[n][:, s:e] for n in ("q", "k", "v", "g", "beta")), ref["state"][i : i + 1])
                 for i, (s, e) in enumerate([(0, 4), (4, 4), (4, 9)])]
        ry, rs = torch.cat([p[0] for p in parts], 1), torch.cat([p[1] for p in parts], 0)
    else:
        ry, rs = ref_gated_delta(**ref)
    dy = torch.randn(y.shape, generator=gen, dtype=torch.float64).to(device)
    ds = torch.randn(state.shape, generator=gen, dtype=torch.float64).to(device)
    ((y.double() * dy).sum() + (state.double() * ds).sum()).backward()
    ((ry * dy).sum() + (rs * ds).sum()).backward()
    case = dict(varlen=varlen, device=device)
    close("y", y, ry.to(dtype), dtype, rng.seed_value, case)
    for n in mine:
        close(f"d{n}", mine[n].grad, ref[n].grad.to(mine[n].dtype), dtype, rng.seed_value, case)


def test_gradcheck_float64_cpu(gen):
    a = inputs(gen, 1, 3, 1, 2, 4, 3, torch.float64, "cpu")
    a["state"] = a["state"].double()
    args = tuple(t.requires_grad_() for t in a.values())
    assert torch.autograd.gradcheck(lambda *x: ta.gated_delta(*x), args)
    q, k, v, beta = (a[n].detach().transpose(1, 2).contiguous().requires_grad_() for n in ("q", "k", "v", "beta"))
    log_decay = torch.full((1, 1, 3), -0.2, dtype=torch.float32)
    init = torch.randn(1, 1, 4, 3, generator=gen).float()
    # The output only: final_state is float32 whatever the inputs (the state's dtype), too coarse
    # for finite differences; its gradient is checked in test_gradients_against_torch_autograd.
    assert torch.autograd.gradcheck(
        lambda *x: ta.gated_delta_rule(*x, log_decay, init, 0.5)[0], (q, k, v[:, :1].detach().requires_grad_(),
                                                                       beta[:, :1].detach().requires_grad_()))


def test_custom_ops_pass_opcheck(gen):
    a = inputs(gen, 2, 3, 1, 2, 8, 4, torch.float64, "cpu")
    utils = ("test_schema", "test_faketensor", "test_autograd_registration")
    a = {n: t.requires_grad_() for n, t in a.items()}
    torch.library.opcheck(torch.ops.rudnn.gated_delta, tuple(a.values()) + (None,), test_utils=utils)
    args = (a["q"].transpose(1, 2), a["k"].transpose(1, 2), a["q"].transpose(1, 2), a["beta"][..., :1].transpose(1, 2),
            torch.zeros(2, 1, 3), torch.zeros(2, 1, 8, 8), 0.5, None)
    torch.library.opcheck(torch.ops.rudnn.gated_delta_rule, args, test_utils=utils)
    torch.library.opcheck(torch.ops.rudnn.gated_delta_rule, args + (2,), test_utils=utils)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(rng, gen, device):
    def step(q, k, v, g, beta, state):
        y, state = ta.gated_delta(q, k, v, g, beta, state)
        y2, state2 = rudnn.gated_delta(q.detach(), k.detach(), v.detach(), g.detach(), beta.detach(), state.detach())
        return (y**2).sum() + state.sum() + y2.sum(), state2

    a = inputs(gen, 2, 3, 2, 4, 16, 16, torch.float32, device)
    results = []
    for fn in (torch.compile(step, fullgraph=True), step):
        leaves = {n: t.clone().requires_grad_() for n, t in a.items()}
        loss, state2 = fn(**leaves)
        loss.backward()
        results.append([loss.detach(), state2] + [t.grad for t in leaves.values()])
    for x, y in zip(*results):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)


# ---- fla's signature (Qwen3-Next's gated-delta core) -------------------------------------------


def ref_fla(q, k, v, g, beta, scale, state, l2norm):
    """fla's chunk / fused_recurrent gated delta rule as a float64 recurrence over [B, T, H, D]
    operands, log-space g, state [B, Hv, K, V]: (o [B, T, Hv, V], final state)."""
    q, k, v, g, beta, S = (t.double() for t in (q, k, v, g, beta, state))
    if l2norm:
        q, k = (x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6) for x in (q, k))
    group = v.shape[2] // q.shape[2]
    q, k = q.repeat_interleave(group, 2) * scale, k.repeat_interleave(group, 2)
    outs = []
    for t in range(q.shape[1]):
        S = S * g[:, t].exp()[..., None, None]
        err = (v[:, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, t])) * beta[:, t, :, None]
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, t], err)
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
    o = torch.stack(outs, 1) if outs else v.new_zeros(v.shape[0], 0, v.shape[2], v.shape[3])
    return o, S


def fla_inputs(gen, B, T, Hk, Hv, K, V, dtype, device, sequences):
    def r(*shape):
        return torch.randn(shape, generator=gen, dtype=torch.float64)

    t = dict(q=r(B, T, Hk, K), k=r(B, T, Hk, K), v=r(B, T, Hv, V),
             g=-torch.nn.functional.softplus(r(B, T, Hv)) * 0.3,  # log decay, as Qwen3-Next's -A * softplus(.)
             beta=torch.sigmoid(r(B, T, Hv)))
    t = {n: x.to(device=device, dtype=torch.float32 if n == "g" else dtype) for n, x in t.items()}
    t["initial_state"] = (r(sequences, Hv, K, V) * 0.3).to(device=device, dtype=torch.float32)
    return t


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("form", ["chunk", "fused_recurrent"])
@pytest.mark.parametrize("varlen", [False, True])
def test_fla_signature_against_a_float64_recurrence(rng, gen, device, dtype, form, varlen):
    # Qwen3-Next's call: l2-normalised q and k in the kernel, grouped value heads (Hv = 2 Hk),
    # the default scale K**-0.5, an initial state, the final state returned; the gradients of
    # every input against torch autograd of the float64 recurrence.
    B, T, Hk, Hv, K, V = (1, 29, 2, 4, 64, 32) if varlen else (2, 21, 2, 4, 64, 32)
    spans = [(0, 11), (11, 11), (11, 29)] if varlen else [(0, T)] * B
    cu = torch.tensor([0, 11, 11, 29], dtype=torch.int64, device=device) if varlen else None
    a = fla_inputs(gen, B, T, Hk, Hv, K, V, dtype, device, len(spans))
    mine = {n: x.clone().requires_grad_() for n, x in a.items()}
    ref = {n: x.detach().double().requires_grad_() for n, x in a.items()}
    fn = ta.chunk_gated_delta_rule if form == "chunk" else ta.fused_recurrent_gated_delta_rule
    extra = dict(chunk_size=16) if form == "chunk" else {}
    o, final = fn(**mine, output_final_state=True, cu_seqlens=cu, use_qk_l2norm_in_kernel=True, **extra)
    assert o.shape == (B, T, Hv, V) and o.dtype == dtype and o.is_contiguous()
    assert final.shape == (len(spans), Hv, K, V) and final.dtype == torch.float32
    parts = []
    for n, (s, e) in enumerate(spans):
        b = 0 if varlen else n
        parts.append(ref_fla(*(ref[x][b:b + 1, s:e] for x in ("q", "k", "v", "g", "beta")), K**-0.5,
                             ref["initial_state"][n:n + 1], True))
    ro = torch.cat([p[0] for p in parts], 1 if varlen else 0)
    rs = torch.cat([p[1] for p in parts], 0)
    do = torch.randn(o.shape, generator=gen, dtype=torch.float64).to(device)
    ds = torch.randn(final.shape, generator=gen, dtype=torch.float64).to(device)
    ((o.double() * do).sum() + (final.double() * ds).sum()).backward()
    ((ro * do).sum() + (rs * ds).sum()).backward()
    case = dict(form=form, varlen=varlen, device=device)
    tol = 1e-4 if dtype == torch.float32 and device == "cuda" and form == "chunk" else None
    close("o", o, ro.to(dtype), dtype, rng.seed_value, case, tol)
    close("final_state", final, rs.float(), torch.float32 if tol else dtype, rng.seed_value, case, tol)
    for n in mine:
        close(f"d{n}", mine[n].grad, ref[n].grad.to(mine[n].dtype), dtype, rng.seed_value, case, tol)


@pytest.mark.parametrize("device", DEVICES)
def test_qwen3_next_prefill_then_decode(rng, gen, device):
    # A Qwen3-Next gated-delta layer's core as the model runs it: a chunked prefill without an
    # initial state returning its final state, then decode steps through the recurrent form from
    # that state; the outputs equal one recurrence over the whole sequence.
    B, T, steps, Hk, Hv, K, V = 2, 40, 3, 2, 4, 64, 64
    a = fla_inputs(gen, B, T + steps, Hk, Hv, K, V, torch.bfloat16, device, B)
    pre = {n: a[n][:, :T] for n in ("q", "k", "v", "g", "beta")}
    o, state = ta.chunk_gated_delta_rule(**pre, output_final_state=True, use_qk_l2norm_in_kernel=True)
    outs = [o]
    for t in range(T, T + steps):
        step = {n: a[n][:, t:t + 1] for n in ("q", "k", "v", "g", "beta")}
        o_t, state = ta.fused_recurrent_gated_delta_rule(**step, initial_state=state, output_final_state=True,
                                                          use_qk_l2norm_in_kernel=True)
        outs.append(o_t)
    none = ta.chunk_gated_delta_rule(**pre, use_qk_l2norm_in_kernel=True)[1]
    assert none is None, "output_final_state=False must give None"
    ro, rs = ref_fla(*(a[n] for n in ("q", "k", "v", "g", "beta")), K**-0.5,
                     torch.zeros(B, Hv, K, V, dtype=torch.float64, device=device), True)
    close("o", torch.cat(outs, 1), ro.to(torch.bfloat16), torch.bfloat16, rng.seed_value)
    close("state", state, rs.float(), torch.bfloat16, rng.seed_value)


def test_fla_signature_errors(gen):
    a = fla_inputs(gen, 1, 3, 2, 3, 8, 8, torch.float32, "cpu", 1)
    with pytest.raises(rudnn.ShapeMismatch, match="^chunk_gated_delta_rule: v has 3 heads and q 2"):
        ta.chunk_gated_delta_rule(**a)
    a = fla_inputs(gen, 1, 3, 2, 2, 8, 8, torch.float32, "cpu", 1)
    with pytest.raises(rudnn.ShapeMismatch, match="^fused_recurrent_gated_delta_rule: q has rank 3"):
        ta.fused_recurrent_gated_delta_rule(**dict(a, q=a["q"][0]))
    with pytest.raises(rudnn.InvalidArgument, match="use_qk_l2norm_in_kernel must be a bool"):
        ta.chunk_gated_delta_rule(**a, use_qk_l2norm_in_kernel=1)
    with pytest.raises(rudnn.Error, match="chunk_size"):
        ta.chunk_gated_delta_rule(**a, chunk_size=0)


@pytest.mark.parametrize("device", DEVICES)
def test_fla_signature_compiles_fullgraph(rng, gen, device):
    a = fla_inputs(gen, 2, 9, 1, 2, 16, 16, torch.float32, device, 2)

    def loss(q, k, v, g, beta, initial_state):
        o, s = ta.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=initial_state, output_final_state=True,
                                         use_qk_l2norm_in_kernel=True, chunk_size=4)
        return (o**2).sum() + s.sum()

    results = []
    for fn in (torch.compile(loss, fullgraph=True), loss):
        leaves = {n: t.clone().requires_grad_() for n, t in a.items()}
        value = fn(**leaves)
        value.backward()
        results.append([value.detach()] + [t.grad for t in leaves.values()])
    for x, y in zip(*results):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not CUDA, reason="no CUDA GPU (or ruDNN built without CUDA)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_spec003_chunked_form_on_the_gpu(rng, gen, dtype):
    # rudnn.chunk_gated_delta on torch CUDA tensors (grouped value heads, a padded last chunk,
    # a float32 and a bfloat16 state) against the float64 recurrence; varlen equal to separate calls.
    a = inputs(gen, 2, 37, 2, 4, 64, 32, dtype, "cuda")
    tol = 1e-4 if dtype == torch.float32 else None
    for state_dtype in (torch.float32, torch.bfloat16):
        a["state"] = a["state"].to(state_dtype)
        y, state = rudnn.chunk_gated_delta(**a, chunk_size=16)
        ref_y, ref_state = ref_gated_delta(**a)
        assert y.device.type == "cuda" and state.dtype == state_dtype
        close("y", y, ref_y.to(dtype), dtype, rng.seed_value, state_dtype, tol)
        close("state", state, ref_state.to(state_dtype), torch.bfloat16 if state_dtype == torch.bfloat16 else dtype,
              rng.seed_value, state_dtype, tol if state_dtype == torch.float32 else None)
    packed = {n: a[n][:1] for n in ("q", "k", "v", "g", "beta")}
    states = a["state"].float().repeat(2, 1, 1, 1)[:3]
    cu = torch.tensor([0, 10, 10, 37], dtype=torch.int32, device="cuda")
    y, s = rudnn.chunk_gated_delta(**packed, state=states, chunk_size=16, cu_seqlens=cu)
    for n, (t0, t1) in enumerate([(0, 10), (10, 10), (10, 37)]):
        y_n, s_n = rudnn.chunk_gated_delta(*(packed[x][:, t0:t1] for x in ("q", "k", "v", "g", "beta")),
                                           states[n:n + 1], chunk_size=16)
        assert torch.equal(y[:, t0:t1], y_n) and torch.equal(s[n:n + 1], s_n), f"sequence {n} (seed={rng.seed_value})"
