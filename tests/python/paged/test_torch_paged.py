"""The paged attention family from torch (skipped without torch; the CUDA cases also without a
GPU or a CUDA build of ruDNN): DevicePlan.attention over random mixed prefill/decode schedules
against torch.nn.functional.scaled_dot_product_attention on each sequence's gathered keys, in
float32, float16 and bfloat16; a decode loop (append + attention per step, a new plan per
step) against dense SDPA over the keys kept contiguously; the split workspace against the
unsplit call; the block-table form. Inputs are random with a fresh seed per test (conftest's
rng; RUDNN_TEST_SEED=<int> replays one).
"""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

import torch.nn.functional as F  # noqa: E402

if not hasattr(F, "scaled_dot_product_attention"):
    pytest.skip("the reference needs torch >= 2.0 (scaled_dot_product_attention)", allow_module_level=True)

import rudnn  # noqa: E402
from rudnn import paged  # noqa: E402

CUDA = torch.cuda.is_available() and rudnn.built_with_cuda()
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA GPU (or ruDNN built without CUDA)")
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])
TOL = {torch.float32: 3e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def schedule(gen, page_size, sequences, max_len):
    lengths = [int(torch.randint(1, max_len + 1, (1,), generator=gen)) for _ in range(sequences)]
    tables, nxt = [], 0
    for n in lengths:
        count = -(-n // page_size)
        tables.append(list(range(nxt, nxt + count)))
        nxt += count
    perm = torch.randperm(nxt + 2, generator=gen).tolist()
    tables = [[perm[p] for p in t] for t in tables]
    sids, pos = [], []
    for s, n in enumerate(lengths):
        run = 1 if s % 2 else min(n, 1 + int(torch.randint(0, 6, (1,), generator=gen)))  # decode and prefill mixed
        for p in range(n - run, n):
            sids.append(s)
            pos.append(p)
    return nxt + 2, tables, lengths, sids, pos


def gathered(cache, table, n, page_size):
    idx = torch.tensor([table[j // page_size] for j in range(n)], device=cache.device)
    rows = torch.tensor([j % page_size for j in range(n)], device=cache.device)
    return cache[idx, rows]  # [n, H, D]


def sdpa_reference(q, kc, vc, page_size, tables, lengths, sids, pos, scale):
    """Per query: float64 SDPA of its heads over its sequence's first pos + 1 keys (GQA by repeat)."""
    out = torch.empty(q.shape[0], q.shape[1], vc.shape[-1], dtype=torch.float64, device=q.device)
    group = q.shape[1] // kc.shape[2]
    for i, (s, p) in enumerate(zip(sids, pos)):
        k = gathered(kc, tables[s], p + 1, page_size).double().repeat_interleave(group, 1).transpose(0, 1)
        v = gathered(vc, tables[s], p + 1, page_size).double().repeat_interleave(group, 1).transpose(0, 1)
        out[i] = F.scaled_dot_product_attention(q[i].double()[:, None], k, v, scale=scale)[:, 0]
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("page_size,d,group", [(16, 128, 4), (1, 64, 1), (64, 96, 2), (256, 128, 8)])
def test_attention_against_sdpa(gen, rng, device, dtype, page_size, d, group):
    if device == "cpu" and dtype != torch.float32:
        pytest.skip("the CPU takes float32 / float64")
    hkv = 2
    pages, tables, lengths, sids, pos = schedule(gen, page_size, 5, 300)
    q = torch.randn(len(sids), hkv * group, d, generator=gen).to(device, dtype)
    kc = torch.randn(pages, page_size, hkv, d, generator=gen).to(device, dtype)
    vc = torch.randn(pages, page_size, hkv, d, generator=gen).to(device, dtype)
    plan = paged.DevicePlan.upload(paged.HostPlan(page_size, pages, tables, lengths, sids, pos), q)
    got = plan.attention(q, kc, vc, d**-0.5, True)
    assert isinstance(got, torch.Tensor) and got.dtype == dtype and got.device == q.device
    ref = sdpa_reference(q, kc, vc, page_size, tables, lengths, sids, pos, d**-0.5)
    err = (got.double() - ref).abs().max().item()
    assert err <= TOL[dtype], f"max error {err} (seed {rng.seed_value}, lengths {lengths})"
    ws = paged.SplitWorkspace(q, len(sids), hkv * group, d, 4)
    split = plan.attention_with_workspace(ws, q, kc, vc, d**-0.5, True)
    err = (split.double() - ref).abs().max().item()
    assert err <= TOL[dtype], f"split: max error {err} (seed {rng.seed_value})"


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_decode_loop_matches_dense_sdpa(gen, rng, dtype):
    """An engine's decode loop: each step appends one key/value per sequence into the paged
    cache and attends; the result equals SDPA over the same keys stored contiguously."""
    device, page_size, hkv, group, d, batch, steps = "cuda", 16, 2, 4, 128, 3, 20
    prompt = [int(torch.randint(1, 40, (1,), generator=gen)) for _ in range(batch)]
    capacity = [-(-(n + steps) // page_size) for n in prompt]
    pages = sum(capacity)
    perm = torch.randperm(pages, generator=gen).tolist()
    tables, at = [], 0
    for c in capacity:
        tables.append(perm[at : at + c])
        at += c
    kc = torch.zeros(pages, page_size, hkv, d, device=device, dtype=dtype)
    vc = torch.zeros_like(kc)
    dense_k = [torch.randn(n, hkv, d, generator=gen).to(device, dtype) for n in prompt]
    dense_v = [torch.randn(n, hkv, d, generator=gen).to(device, dtype) for n in prompt]
    # The prompts go in through the block-free append: one plan whose queries are every prompt position.
    sids = [s for s, n in enumerate(prompt) for _ in range(n)]
    pos = [p for n in prompt for p in range(n)]
    q0 = torch.zeros(len(sids), hkv * group, d, device=device, dtype=dtype)
    plan = paged.DevicePlan.upload(paged.HostPlan(page_size, pages, tables, prompt, sids, pos), q0)
    kc, vc = plan.append(torch.cat(dense_k), torch.cat(dense_v), kc, vc)
    lengths = list(prompt)
    for step in range(steps):
        lengths = [n + 1 for n in lengths]
        k_new = torch.randn(batch, hkv, d, generator=gen).to(device, dtype)
        v_new = torch.randn(batch, hkv, d, generator=gen).to(device, dtype)
        q = torch.randn(batch, hkv * group, d, generator=gen).to(device, dtype)
        plan = paged.DevicePlan.upload(
            paged.HostPlan(page_size, pages, tables, lengths, list(range(batch)), [n - 1 for n in lengths]), q
        )
        kc, vc = plan.append(k_new, v_new, kc, vc)
        out = plan.attention(q, kc, vc, d**-0.5, True)
        for s in range(batch):
            dense_k[s] = torch.cat([dense_k[s], k_new[s : s + 1]])
            dense_v[s] = torch.cat([dense_v[s], v_new[s : s + 1]])
            k = dense_k[s].double().repeat_interleave(group, 1).transpose(0, 1)
            v = dense_v[s].double().repeat_interleave(group, 1).transpose(0, 1)
            ref = F.scaled_dot_product_attention(q[s].double()[:, None], k, v, scale=d**-0.5)[:, 0]
            err = (out[s].double() - ref).abs().max().item()
            assert err <= TOL[dtype], f"step {step} sequence {s}: max error {err} (seed {rng.seed_value})"


@needs_cuda
def test_block_table_form_matches_sdpa(gen, rng):
    device, dtype, blocks, hkv, bs, d, b, hq, L = "cuda", torch.bfloat16, 12, 2, 16, 64, 3, 4, 3
    kc = torch.randn(blocks, hkv, bs, d, generator=gen).to(device, dtype)
    vc = torch.randn(blocks, hkv, bs, d, generator=gen).to(device, dtype)
    q = torch.randn(b, hq, L, d, generator=gen).to(device, dtype)
    tables = torch.randperm(blocks, generator=gen)[: b * 4].reshape(b, 4).to(device, torch.int32)
    lengths = torch.tensor([5, 64, 33], device=device, dtype=torch.int32)
    got = paged.paged_attention(q, kc, vc, tables, lengths, d**-0.5)
    for s in range(b):
        n = int(lengths[s])
        ids = torch.tensor([int(tables[s, j // bs]) for j in range(n)], device=device)
        rows = torch.arange(n, device=device) % bs
        k = kc[ids, :, rows].double().repeat_interleave(hq // hkv, 1).transpose(0, 1)
        v = vc[ids, :, rows].double().repeat_interleave(hq // hkv, 1).transpose(0, 1)
        mask = torch.arange(n, device=device)[None, :] <= (n - L + torch.arange(L, device=device))[:, None]
        ref = F.scaled_dot_product_attention(q[s].double(), k, v, attn_mask=mask, scale=d**-0.5)
        err = (got[s].double() - ref).abs().max().item()
        assert err <= TOL[dtype], f"sequence {s}: max error {err} (seed {rng.seed_value})"


@needs_cuda
def test_decode_loop_example_on_the_gpu(rng):
    """examples/paged_decode_loop.py with torch float16 tensors on the GPU."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[3] / "examples" / "paged_decode_loop.py"
    spec = importlib.util.spec_from_file_location(path.stem, path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    worst = example.main(["--device", "cuda", "--page-size", "16", "--group", "4", "--head-dim", "128",
                          "--steps", "20", "--seed", str(int(rng.integers(0, 2**31)))])
    assert worst < 1e-2, f"worst error {worst}"
