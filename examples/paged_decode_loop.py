"""A serving engine's decode loop over a paged KV cache with rudnn.paged.

Each sequence owns a list of physical pages (its block table), scattered over one shared
cache. The prompts enter the cache through one plan whose queries are every prompt
position (append writes each query's key and value at its slot); then every decode step
builds the step's plan (one query per sequence, at its last position), appends the new keys
and values, and attends over each sequence's history. The loop checks every step against
float64 attention over the same keys kept contiguously, and returns the worst error.

    python3 examples/paged_decode_loop.py                  # NumPy arrays on the CPU
    python3 examples/paged_decode_loop.py --device cuda    # torch tensors on the GPU

Plans are cheap host objects; DevicePlan.upload copies the schedule to the device without
waiting for it, so a real engine builds the next step's plan while the GPU runs this one.
"""

import argparse
import sys

import numpy as np

import rudnn
from rudnn import paged


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", help="cpu (NumPy) or cuda (torch)")
    p.add_argument("--sequences", type=int, default=3)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--page-size", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--group", type=int, default=2, help="query heads per KV head (GQA)")
    p.add_argument("--head-dim", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def attention_f64(q, keys, values, scale):
    """q [Hq, D]; keys / values [n, Hkv, D] -> [Hq, D], in float64 (GQA by repetition)."""
    group = q.shape[0] // keys.shape[1]
    k = np.repeat(keys, group, axis=1).transpose(1, 0, 2)  # [Hq, n, D]
    v = np.repeat(values, group, axis=1).transpose(1, 0, 2)
    s = np.einsum("hd,hnd->hn", q, k) * scale
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return np.einsum("hn,hnd->hd", p, v)


def main(argv=None):
    a = parse_args(argv)
    rng = np.random.default_rng(a.seed)
    if a.device == "cpu":
        to_device = np.ascontiguousarray
        to_numpy = np.asarray
    else:
        import torch

        to_device = lambda x: torch.from_numpy(np.ascontiguousarray(x)).to(a.device, torch.float16)  # noqa: E731
        to_numpy = lambda t: t.float().cpu().numpy()  # noqa: E731
    hkv, hq, d, ps = a.kv_heads, a.kv_heads * a.group, a.head_dim, a.page_size
    scale = d**-0.5

    # Page tables sized for prompt + decode steps, the pages shuffled over one cache.
    prompt = [int(rng.integers(1, 3 * ps)) for _ in range(a.sequences)]
    capacity = [-(-(n + a.steps) // ps) for n in prompt]
    pages = sum(capacity)
    perm = rng.permutation(pages).tolist()
    tables, at = [], 0
    for c in capacity:
        tables.append(perm[at : at + c])
        at += c
    k_cache = to_device(np.zeros((pages, ps, hkv, d), np.float32))
    v_cache = to_device(np.zeros((pages, ps, hkv, d), np.float32))
    # The keys and values as the cache holds them (rounded to its dtype), kept contiguously
    # per sequence for the check.
    prompt_k = to_device(rng.standard_normal((sum(prompt), hkv, d)).astype(np.float32))
    prompt_v = to_device(rng.standard_normal((sum(prompt), hkv, d)).astype(np.float32))
    starts = np.cumsum([0] + prompt)
    dense_k = [to_numpy(prompt_k)[starts[s] : starts[s + 1]] for s in range(a.sequences)]
    dense_v = [to_numpy(prompt_v)[starts[s] : starts[s + 1]] for s in range(a.sequences)]

    # Prefill: one plan whose queries are every prompt position writes the prompts' keys.
    seq_ids = [s for s, n in enumerate(prompt) for _ in range(n)]
    positions = [p for n in prompt for p in range(n)]
    q0 = to_device(np.zeros((len(seq_ids), hq, d), np.float32))
    plan = paged.DevicePlan.upload(paged.HostPlan(ps, pages, tables, prompt, seq_ids, positions), q0)
    k_cache, v_cache = plan.append(prompt_k, prompt_v, k_cache, v_cache)

    lengths, worst = list(prompt), 0.0
    for step in range(a.steps):
        lengths = [n + 1 for n in lengths]
        k_new = to_device(rng.standard_normal((a.sequences, hkv, d)).astype(np.float32))
        v_new = to_device(rng.standard_normal((a.sequences, hkv, d)).astype(np.float32))
        q = to_device(rng.standard_normal((a.sequences, hq, d)).astype(np.float32))
        host = paged.HostPlan(ps, pages, tables, lengths, list(range(a.sequences)), [n - 1 for n in lengths])
        plan = paged.DevicePlan.upload(host, q)
        k_cache, v_cache = plan.append(k_new, v_new, k_cache, v_cache)
        out = to_numpy(plan.attention(q, k_cache, v_cache, scale, True))
        for s in range(a.sequences):
            dense_k[s] = np.concatenate([dense_k[s], to_numpy(k_new)[s : s + 1]])
            dense_v[s] = np.concatenate([dense_v[s], to_numpy(v_new)[s : s + 1]])
            want = attention_f64(to_numpy(q)[s].astype(np.float64), dense_k[s].astype(np.float64),
                                 dense_v[s].astype(np.float64), scale)
            worst = max(worst, float(np.abs(out[s] - want).max()))
    print(f"{a.steps} decode steps over {a.sequences} sequences on {a.device} (rudnn "
          f"{getattr(rudnn, '__version__', '?')}): worst |error| against float64 attention {worst:.2e}")
    return worst


if __name__ == "__main__":
    sys.exit(0 if main() < 1e-2 else 1)
