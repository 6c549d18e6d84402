#!/usr/bin/env python3
"""ruDNN against the torch anchors, in one process, on the same inputs.

Each case checks ruDNN's result against torch (computed in float32 or float64 from the same
inputs; relative L2 error below 1e-2 for bf16 results, 1e-4 for f32 ones; otherwise the case
is FAILED), then times ruDNN's call and the anchor's with
triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"), as the anchor scripts
in shared/anchors/ measured. GB/s counts the bytes an op must read and write once, as
ANCHORS.md counts them; the copy row is the device's 1 GiB device-to-device copy (read +
written bytes) measured in the same run, and "ours %copy" is our GB/s over it. The ratio is
anchor time / our time (above 1: ours is faster).

    python3 bench/side_by_side.py [--csv PATH] [--filter TEXT] [--warmup MS] [--rep MS]

Groups: the norms and cross entropy (--rows/--cols, --ce-rows/--ce-classes), rope of q and k
against Hugging Face Llama's eager rotary embedding (--rope-batch/--rope-heads/--rope-kv-heads/
--rope-seq/--rope-dim), SwiGLU / GeGLU against F.silu(g) * u / F.gelu(g) * u at
[--rows, --cols]; then, at ANCHORS.md's shapes: attention (prefill and GQA decode against SDPA's
cuDNN backend, paged decode against the same dense decode), pooling and interpolation, grid_sample
and CTC loss (forward, and forward + backward), convolution against cuDNN, and the MoE forward
and decode against the torch._grouped_mm pipeline. Cases
without a byte count (attention prefill, conv2d, MoE forward) show times and the ratio only.

The `rudnn` package must be importable (PYTHONPATH). Without it the anchors still run, each
case is marked NO-RUDNN, and the exit status is 1. The exit status is 0 only when every
case ran and passed its check.
"""
import argparse
import csv
import math
import os
import sys
import time
import traceback

import torch
import torch.nn.functional as F
from triton.testing import do_bench

try:
    import rudnn  # noqa: F401

    RUDNN_ERROR = None
except Exception as e:  # noqa: BLE001 - report any import failure and carry on with the anchors
    rudnn = None
    RUDNN_ERROR = f"{type(e).__name__}: {e}"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--csv", help="also write the rows to this CSV file")
    p.add_argument("--filter", default="", help="only cases whose name contains this text")
    p.add_argument("--warmup", type=float, default=25.0, help="do_bench warm-up, ms (default 25)")
    p.add_argument("--rep", type=float, default=100.0, help="do_bench repetition time, ms (default 100)")
    p.add_argument("--no-check", action="store_true", help="skip the correctness checks")
    p.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # tests of this script only
    p.add_argument("--rows", type=int, default=16384)
    p.add_argument("--cols", type=int, default=8192)
    p.add_argument("--ce-rows", type=int, default=8192)
    p.add_argument("--ce-classes", type=int, default=128256)
    p.add_argument("--rope-batch", type=int, default=8)
    p.add_argument("--rope-heads", type=int, default=32)
    p.add_argument("--rope-kv-heads", type=int, default=8)
    p.add_argument("--rope-seq", type=int, default=4096)
    p.add_argument("--rope-dim", type=int, default=128)
    p.add_argument("--copy-mib", type=int, default=1024)
    return p.parse_args(argv)


ARGS = None
DEV = "cuda"


def sync():
    if DEV.startswith("cuda"):
        torch.cuda.synchronize()


def bench_ms(fn, grad_to_none=None):
    fn()
    sync()
    return do_bench(fn, warmup=ARGS.warmup, rep=ARGS.rep, grad_to_none=grad_to_none, return_mode="median")


def rel_err(got, ref):
    """‖got − ref‖ / ‖ref‖ in float32 (float64 when ref is); NaN when the non-finite places differ."""
    if tuple(got.shape) != tuple(ref.shape):
        raise ValueError(f"shape {tuple(got.shape)} != reference shape {tuple(ref.shape)}")
    wide = torch.float64 if ref.dtype == torch.float64 else torch.float32
    g = got.detach().to(wide)
    r = ref.detach().to(wide)
    fg, fr = torch.isfinite(g), torch.isfinite(r)
    if not torch.equal(fg, fr):
        return float("nan")
    if not bool(fr.all()):
        g, r = g[fr], r[fr]
    num = torch.linalg.vector_norm(g - r).item()
    den = torch.linalg.vector_norm(r).item()
    return num / den if den > 0 else num


def tol_of(dtype):
    return 1e-4 if dtype == torch.float32 else 1e-2


ROWS = []


class Row:
    def __init__(self, case, shape, dtype, nbytes, anchor):
        self.case, self.shape, self.dtype, self.bytes, self.anchor = case, shape, dtype, nbytes, anchor
        self.ours_ms = self.anchor_ms = None
        self.check = None
        self.status = []

    def gbs(self, ms):
        return self.bytes / ms / 1e6 if ms and self.bytes else None

    @property
    def ok(self):
        return not self.status


def run_case(case, shape, dtype, nbytes, ours, anchor, anchor_name, check=None, grad_to_none=None,
             ours_grad_to_none=None):
    """ours/anchor: zero-argument callables (ours None when rudnn is missing); check() returns
    (error, tolerance), the worst over the results it compares. grad_to_none /
    ours_grad_to_none: tensors whose .grad is reset (outside the timing) before each run of
    the anchor / of ours."""
    if ARGS.filter and ARGS.filter not in case:
        return None
    row = Row(case, shape, str(dtype).replace("torch.", ""), nbytes, anchor_name)
    if rudnn is None:
        row.status.append("NO-RUDNN")
    else:
        if check is not None and not ARGS.no_check:
            try:
                err, tol = check()
                row.check = err
                if not (err <= tol):
                    row.status.append(f"FAILED (rel err {err:.3e} > {tol:.0e})")
            except Exception as e:  # noqa: BLE001
                row.status.append(f"FAILED (check raised {type(e).__name__}: {str(e)[:120]})")
                traceback.print_exc(file=sys.stderr)
            sync()
            if DEV.startswith("cuda"):
                torch.cuda.empty_cache()
        try:
            row.ours_ms = bench_ms(ours, grad_to_none=ours_grad_to_none)
        except Exception as e:  # noqa: BLE001
            row.status.append(f"ERROR (ours: {type(e).__name__}: {str(e)[:120]})")
            traceback.print_exc(file=sys.stderr)
    try:
        row.anchor_ms = bench_ms(anchor, grad_to_none=grad_to_none)
    except Exception as e:  # noqa: BLE001
        row.status.append(f"ERROR (anchor: {type(e).__name__}: {str(e)[:120]})")
        traceback.print_exc(file=sys.stderr)
    ROWS.append(row)
    fmt = lambda v: f"{v:.4f}" if v else "-"  # noqa: E731
    print(f"  {case:44s} ours {fmt(row.ours_ms):>8s} ms  anchor {fmt(row.anchor_ms):>8s} ms  "
          f"{'; '.join(row.status) or 'ok'}", file=sys.stderr, flush=True)
    return row


def worst(*pairs):
    """The (error, tolerance) pair with the largest error/tolerance (NaN first)."""
    best = None
    for err, tol in pairs:
        if math.isnan(err):
            return err, tol
        if best is None or err / tol > best[0] / best[1]:
            best = (err, tol)
    return best


# ---- the cases ------------------------------------------------------------------------------
def norm_cases():
    R, H = ARGS.rows, ARGS.cols
    shape = f"[{R},{H}]"
    bf = torch.bfloat16
    torch.manual_seed(0)
    x = torch.randn(R, H, dtype=bf, device=DEV)
    r = torch.randn_like(x)
    w = torch.randn(H, dtype=bf, device=DEV)
    b = torch.randn(H, dtype=bf, device=DEV)
    X = x.numel() * 2
    rms_eps, ln_eps = 1e-6, 1e-5
    have = rudnn is not None

    # rms_norm
    def check():
        ref = F.rms_norm(x.float(), (H,), w.float(), rms_eps)
        return rel_err(rudnn.rms_norm(x, w, eps=rms_eps), ref), tol_of(bf)
    run_case("rms_norm", shape, bf, 2 * X, have and (lambda: rudnn.rms_norm(x, w, eps=rms_eps)),
             lambda: F.rms_norm(x, (H,), w, rms_eps), "F.rms_norm", check)

    # layer_norm with gamma and beta
    def check():
        ref = F.layer_norm(x.float(), (H,), w.float(), b.float(), ln_eps)
        return rel_err(rudnn.layer_norm(x, w, b, eps=ln_eps), ref), tol_of(bf)
    run_case("layer_norm (gamma+beta)", shape, bf, 2 * X, have and (lambda: rudnn.layer_norm(x, w, b, eps=ln_eps)),
             lambda: F.layer_norm(x, (H,), w, b, ln_eps), "F.layer_norm", check)

    # residual add + rms_norm: x, r read; sum, normed written (torch's unfused pair moves more)
    def check():
        s, n = rudnn.add_rms_norm(x, r, w, eps=rms_eps)
        s_ref = x.float() + r.float()
        # the statistics read the rounded sum (the op's contract)
        n_ref = F.rms_norm(s_ref.to(bf).float(), (H,), w.float(), rms_eps)
        return worst((rel_err(s, s_ref), tol_of(bf)), (rel_err(n, n_ref), tol_of(bf)))
    run_case("add_rms_norm", shape, bf, 4 * X, have and (lambda: rudnn.add_rms_norm(x, r, w, eps=rms_eps)),
             lambda: F.rms_norm(x + r, (H,), w, rms_eps), "x + r, F.rms_norm (unfused)", check)

    # softmax, bf16
    def check():
        return rel_err(rudnn.softmax(x), torch.softmax(x.float(), -1)), tol_of(bf)
    run_case("softmax", shape, bf, 2 * X, have and (lambda: rudnn.softmax(x)),
             lambda: torch.softmax(x, -1), "torch.softmax", check)

    # softmax, f32
    xf = torch.randn(R, H, dtype=torch.float32, device=DEV)

    def check():
        return rel_err(rudnn.softmax(xf), torch.softmax(xf.double(), -1)), tol_of(torch.float32)
    run_case("softmax f32", shape, torch.float32, 2 * xf.numel() * 4, have and (lambda: rudnn.softmax(xf)),
             lambda: torch.softmax(xf, -1), "torch.softmax", check)
    del xf

    # logsumexp: x read, one value per row written
    def check():
        return rel_err(rudnn.logsumexp(x), torch.logsumexp(x.float(), -1)), tol_of(bf)
    run_case("logsumexp", shape, bf, X + 2 * R, have and (lambda: rudnn.logsumexp(x)),
             lambda: torch.logsumexp(x, -1), "torch.logsumexp", check)

    # rms_norm forward + backward: 5 x-sized passes (as anchors2.py counts)
    g = torch.randn_like(x)
    xg = x.clone().requires_grad_(True)
    wg = w.clone().requires_grad_(True)

    def anchor_rms_fb():
        y = F.rms_norm(xg, (H,), wg, rms_eps)
        torch.autograd.grad(y, (xg, wg), g)

    def ours_rms_fb():
        y = rudnn.rms_norm(x, w, eps=rms_eps)
        dx, dw = rudnn.rms_norm_backward(g, x, w, rms_eps)
        return y, dx, dw

    def check():
        y, dx, dw = ours_rms_fb()
        xr = x.float().requires_grad_(True)
        wr = w.float().requires_grad_(True)
        y_ref = F.rms_norm(xr, (H,), wr, rms_eps)
        dx_ref, dw_ref = torch.autograd.grad(y_ref, (xr, wr), g.float())
        return worst((rel_err(y, y_ref), tol_of(bf)), (rel_err(dx, dx_ref), tol_of(bf)),
                     (rel_err(dw, dw_ref), tol_of(bf)))
    run_case("rms_norm fwd+bwd", shape, bf, 5 * X, have and ours_rms_fb, anchor_rms_fb,
             "F.rms_norm + autograd.grad", check)

    # layer_norm forward + backward (gamma and beta): the same 5 passes
    bg = b.clone().requires_grad_(True)

    def anchor_ln_fb():
        y = F.layer_norm(xg, (H,), wg, bg, ln_eps)
        torch.autograd.grad(y, (xg, wg, bg), g)

    def ours_ln_fb():
        y = rudnn.layer_norm(x, w, b, eps=ln_eps)
        return (y,) + tuple(rudnn.layer_norm_backward(g, x, w, b, ln_eps))

    def check():
        y, dx, dw, db = ours_ln_fb()
        xr = x.float().requires_grad_(True)
        wr = w.float().requires_grad_(True)
        br = b.float().requires_grad_(True)
        y_ref = F.layer_norm(xr, (H,), wr, br, ln_eps)
        dx_ref, dw_ref, db_ref = torch.autograd.grad(y_ref, (xr, wr, br), g.float())
        return worst((rel_err(y, y_ref), tol_of(bf)), (rel_err(dx, dx_ref), tol_of(bf)),
                     (rel_err(dw, dw_ref), tol_of(bf)), (rel_err(db, db_ref), tol_of(bf)))
    run_case("layer_norm fwd+bwd", shape, bf, 5 * X, have and ours_ln_fb, anchor_ln_fb,
             "F.layer_norm + autograd.grad", check)


def cross_entropy_cases():
    R, C = ARGS.ce_rows, ARGS.ce_classes
    shape = f"[{R},{C}]"
    bf = torch.bfloat16
    torch.manual_seed(1)
    logits = torch.randn(R, C, dtype=bf, device=DEV)
    tgt = torch.randint(0, C, (R,), device=DEV)
    L = logits.numel() * 2
    dloss = torch.full((R,), 1.0 / R, dtype=torch.float32, device=DEV)  # d(mean loss)/d(row loss)
    have = rudnn is not None

    def loss_ref():
        return F.cross_entropy(logits.float(), tgt, reduction="none")

    def grad_ref():
        lf = logits.float().requires_grad_(True)
        F.cross_entropy(lf, tgt).backward()
        return lf.grad

    def loss_err(loss):
        ref = loss_ref()
        if loss.dim() == 0:  # a package that reduces to the mean
            ref = ref.mean()
        return rel_err(loss, ref), tol_of(torch.float32)

    # forward (mean loss, as F.cross_entropy's default): the logits read once
    def ours_fwd():
        loss = rudnn.cross_entropy(logits, tgt)
        return loss.mean() if loss.dim() else loss
    run_case("cross_entropy fwd", shape, bf, L, have and ours_fwd, lambda: F.cross_entropy(logits, tgt),
             "F.cross_entropy", lambda: loss_err(rudnn.cross_entropy(logits, tgt)))

    # forward + backward, two calls: logits read twice, dlogits written (anchors2.py's count)
    def ours_fb():
        loss = rudnn.cross_entropy(logits, tgt)
        mean = loss.mean() if loss.dim() else loss
        return mean, rudnn.cross_entropy_backward(logits, tgt, dloss)

    def check_fb():
        _, dl = ours_fb()
        e = worst(loss_err(rudnn.cross_entropy(logits, tgt)), (rel_err(dl, grad_ref()), tol_of(bf)))
        return e

    lg = logits.clone().requires_grad_(True)

    def anchor_fb():  # exactly anchors2.py's: the gradient accumulates into lg.grad after the first call
        loss = F.cross_entropy(lg, tgt)
        loss.backward()
    run_case("cross_entropy fwd+bwd", shape, bf, 3 * L, have and ours_fb, anchor_fb,
             "F.cross_entropy + .backward() (as anchors2: grad accumulates)", check_fb)
    del lg

    lg2 = logits.clone().requires_grad_(True)

    def anchor_fb_fresh():  # do_bench sets lg2.grad = None before each run, outside the timing
        loss = F.cross_entropy(lg2, tgt)
        loss.backward()
    run_case("cross_entropy fwd+bwd (fresh grad)", shape, bf, 3 * L, have and ours_fb, anchor_fb_fresh,
             "F.cross_entropy + .backward(), grad_to_none", None, grad_to_none=[lg2])

    # one pass that writes the gradient: logits read once, dlogits written (Liger's count);
    # the anchor is torch's fwd+bwd, which gives the same two results
    def check_wg():
        loss, dl = rudnn.cross_entropy_with_grad(logits, tgt, grad_scale=1.0 / R)
        return worst(loss_err(loss), (rel_err(dl, grad_ref()), tol_of(bf)))
    run_case("cross_entropy_with_grad", shape, bf, 2 * L,
             have and (lambda: rudnn.cross_entropy_with_grad(logits, tgt, grad_scale=1.0 / R)),
             anchor_fb_fresh, "F.cross_entropy + .backward(), grad_to_none", check_wg, grad_to_none=[lg2])

    # what a torch training loop gets: rudnn.torch_autograd.cross_entropy (mean), forward and
    # .backward(), against the same with F.cross_entropy; both gradients fresh each run
    if have:
        from rudnn import torch_autograd as ta
    lg3 = logits.clone().requires_grad_(True)

    def ours_autograd():
        ta.cross_entropy(lg3, tgt).backward()

    def check_autograd():
        lg3.grad = None
        loss = ta.cross_entropy(lg3, tgt)
        loss.backward()
        e = worst(loss_err(loss.detach()), (rel_err(lg3.grad, grad_ref()), tol_of(bf)))
        lg3.grad = None
        return e
    run_case("cross_entropy autograd fwd+bwd", shape, bf, 2 * L, have and ours_autograd, anchor_fb_fresh,
             "F.cross_entropy + .backward(), grad_to_none", check_autograd, grad_to_none=[lg2],
             ours_grad_to_none=[lg3])
    del lg2, lg3


def rotate_half(x):
    """Hugging Face Llama's rotate_half (modeling_llama)."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def rope_cases():
    """rope of q and k at ANCHORS.md's shape, against Hugging Face Llama's eager rotary
    embedding: apply_rotary_pos_emb (q * cos + rotate_half(q) * sin, the same for k) with cos and
    sin [B, T, D] in the activations' dtype computed before the timing (the model computes them
    once per forward for all its layers). Bytes: q and k read and written once."""
    B, H, HK, T, D = ARGS.rope_batch, ARGS.rope_heads, ARGS.rope_kv_heads, ARGS.rope_seq, ARGS.rope_dim
    shape = f"q[{B},{H},{T},{D}] k[{B},{HK},{T},{D}]"
    bf = torch.bfloat16
    torch.manual_seed(2)
    q = torch.randn(B, H, T, D, dtype=bf, device=DEV)
    k = torch.randn(B, HK, T, D, dtype=bf, device=DEV)
    nbytes = 2 * (q.numel() + k.numel()) * 2
    have = rudnn is not None
    base = 10000.0

    def inv_freq(dtype):
        return 1.0 / (base ** (torch.arange(0, D, 2, device=DEV, dtype=dtype) / D))

    def cos_sin(pos):  # LlamaRotaryEmbedding: float32 angles, cast to the activations' dtype
        freqs = pos.float()[..., None] * inv_freq(torch.float32)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(bf), emb.sin().to(bf)

    def hf_apply(cos, sin):  # apply_rotary_pos_emb with unsqueeze_dim=1
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

    def reference(x, pos):  # float64 angles, float32 rotation
        freqs = pos.double()[..., None] * inv_freq(torch.float64)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().float().unsqueeze(1), emb.sin().float().unsqueeze(1)
        xf = x.float()
        return xf * cos + rotate_half(xf) * sin

    for label, pos in [("offset 0", torch.arange(T, device=DEV).expand(B, T)),
                       ("position ids [B, T]", torch.randint(0, 131072, (B, T), device=DEV))]:
        by_ids = label.startswith("position ids")
        ids = pos.to(torch.int32).contiguous()
        cos, sin = cos_sin(pos)

        def ours():
            if by_ids:
                return rudnn.rope(q, positions=ids, base=base), rudnn.rope(k, positions=ids, base=base)
            return rudnn.rope(q, base=base), rudnn.rope(k, base=base)

        def check():
            yq, yk = ours()
            e = worst((rel_err(yq, reference(q, pos)), tol_of(bf)), (rel_err(yk, reference(k, pos)), tol_of(bf)))
            del yq, yk
            return e
        extra = 2 * ids.numel() * 4 if by_ids else 0
        run_case(f"rope q+k ({label})", shape, bf, nbytes + extra, have and ours,
                 lambda: hf_apply(cos, sin), "HF Llama apply_rotary_pos_emb (eager, cos/sin precomputed)", check)
        del cos, sin


def norm_rope_cases():
    """Qwen 3's query / key preparation at ANCHORS.md's rope shape: each head's RMSNorm
    (q_norm / k_norm), then the rotation, k written into positions T .. 2T - 1 of a KV cache
    [B, HK, 2T, D] (a prefill's second chunk). q and k are the transposed views of [B, T, H, D]
    projections, as a model has them. The anchor is the model's eager composition: F.rms_norm,
    Hugging Face's apply_rotary_pos_emb with cos / sin precomputed, and the cache slice
    assignment. Bytes: x read and its rotation written once."""
    B, H, HK, T, D = ARGS.rope_batch, ARGS.rope_heads, ARGS.rope_kv_heads, ARGS.rope_seq, ARGS.rope_dim
    bf = torch.bfloat16
    torch.manual_seed(5)
    q = torch.randn(B, T, H, D, dtype=bf, device=DEV).transpose(1, 2)
    k = torch.randn(B, T, HK, D, dtype=bf, device=DEV).transpose(1, 2)
    wq = 1 + 0.1 * torch.randn(D, dtype=bf, device=DEV)
    wk = 1 + 0.1 * torch.randn(D, dtype=bf, device=DEV)
    cache = torch.randn(B, HK, 2 * T, D, dtype=bf, device=DEV)
    eps, base = 1e-6, 1000000.0
    have = rudnn is not None
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2, device=DEV, dtype=torch.float32) / D))

    def cos_sin(offset, dtype):  # LlamaRotaryEmbedding's float32 angles
        freqs = torch.arange(offset, offset + T, device=DEV, dtype=torch.float32)[:, None] * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def reference(x, w, offset):  # the op's definition in float64 angles
        n = F.rms_norm(x.float(), (D,), w.float(), eps).to(bf).float()
        inv64 = 1.0 / (base ** (torch.arange(0, D, 2, device=DEV, dtype=torch.float64) / D))
        freqs = torch.arange(offset, offset + T, device=DEV, dtype=torch.float64)[:, None] * inv64
        emb = torch.cat((freqs, freqs), dim=-1)
        return n * emb.cos().float() + rotate_half(n) * emb.sin().float()

    cq, sq = cos_sin(0, bf)
    ck, sk = cos_sin(T, bf)

    def anchor_q():
        n = F.rms_norm(q, (D,), wq, eps)
        return n * cq + rotate_half(n) * sq

    def anchor_k():
        n = F.rms_norm(k, (D,), wk, eps)
        cache[:, :, T:] = n * ck + rotate_half(n) * sk
        return cache

    def check_q():
        return rel_err(rudnn.norm_rope(q, wq, eps, base=base), reference(q, wq, 0)), tol_of(bf)

    def check_k():
        rudnn.norm_rope(k, wk, eps, base=base, offset=T, cache=cache)
        return rel_err(cache[:, :, T:], reference(k, wk, T)), tol_of(bf)
    run_case("norm_rope q (new tensor)", f"[{B},{H},{T},{D}]", bf, 2 * q.numel() * 2,
             have and (lambda: rudnn.norm_rope(q, wq, eps, base=base)), anchor_q,
             "F.rms_norm + HF apply_rotary_pos_emb (eager)", check_q)
    run_case("norm_rope k -> cache", f"[{B},{HK},{T},{D}] into [{B},{HK},{2 * T},{D}]", bf, 2 * k.numel() * 2,
             have and (lambda: rudnn.norm_rope(k, wk, eps, base=base, offset=T, cache=cache)), anchor_k,
             "F.rms_norm + HF apply_rotary_pos_emb + cache[:, :, T:] = (eager)", check_k)


def glu_cases():
    """SwiGLU and GeGLU at the silu(a)·b anchor ([rows, cols] bf16 gate and up)."""
    R, I = ARGS.rows, ARGS.cols
    shape = f"[{R},{I}]"
    bf = torch.bfloat16
    torch.manual_seed(3)
    g = torch.randn(R, I, dtype=bf, device=DEV) * 2
    u = torch.randn(R, I, dtype=bf, device=DEV)
    dy = torch.randn(R, I, dtype=bf, device=DEV)
    N = g.numel() * 2
    have = rudnn is not None

    def check():
        return rel_err(rudnn.swiglu(g, u), F.silu(g.float()) * u.float()), tol_of(bf)
    run_case("swiglu", shape, bf, 3 * N, have and (lambda: rudnn.swiglu(g, u)), lambda: F.silu(g) * u,
             "F.silu(g) * u", check)

    fused = torch.cat([g, u], dim=-1)  # one [R, 2I] gate/up projection

    def check():
        return rel_err(rudnn.swiglu(fused), F.silu(g.float()) * u.float()), tol_of(bf)
    run_case("swiglu (halves of [R, 2I])", shape, bf, 3 * N, have and (lambda: rudnn.swiglu(fused)),
             lambda: F.silu(fused[:, :I]) * fused[:, I:], "F.silu(x[:, :I]) * x[:, I:]", check)
    del fused

    # forward + backward: gate, up read, y written; dy, gate, up read, dgate, dup written
    gg = g.clone().requires_grad_(True)
    uu = u.clone().requires_grad_(True)

    def anchor_fb():
        y = F.silu(gg) * uu
        return torch.autograd.grad(y, (gg, uu), dy)

    def ours_fb():
        return rudnn.swiglu(g, u), rudnn.swiglu_backward(dy, g, u)

    def check():
        y, (dg, du) = ours_fb()
        gr, ur = g.float().requires_grad_(True), u.float().requires_grad_(True)
        yr = F.silu(gr) * ur
        dgr, dur = torch.autograd.grad(yr, (gr, ur), dy.float())
        return worst((rel_err(y, yr), tol_of(bf)), (rel_err(dg, dgr), tol_of(bf)), (rel_err(du, dur), tol_of(bf)))
    run_case("swiglu fwd+bwd", shape, bf, 8 * N, have and ours_fb, anchor_fb,
             "F.silu(g) * u + autograd.grad", check)
    del gg, uu

    def check():
        ref = F.gelu(g.float(), approximate="tanh") * u.float()
        return rel_err(rudnn.geglu(g, u, approximate="tanh"), ref), tol_of(bf)
    run_case("geglu (tanh)", shape, bf, 3 * N, have and (lambda: rudnn.geglu(g, u, approximate="tanh")),
             lambda: F.gelu(g, approximate="tanh") * u, "F.gelu(g, approximate='tanh') * u", check)


def attention_cases():
    """Dense attention against torch SDPA's cuDNN backend (the fastest anchor in ANCHORS.md) at
    its prefill shape (B4 H16 L4096 D128, causal; no bytes: compare the times) and its GQA
    decode shape (B64 Hq32 Hkv8 S4096 D128; bytes: K and V read once), and the paged decode
    (block-table form, blocks of 16 keys in shuffled order) against the same dense cuDNN decode."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    bf = torch.bfloat16
    have = rudnn is not None
    torch.manual_seed(4)

    def cudnn_sdpa(q, k, v, **kw):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, **kw)

    B, H, L, D = 4, 16, 4096, 128
    q, k, v = (torch.randn(B, H, L, D, dtype=bf, device=DEV) for _ in range(3))

    def check():
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
        return rel_err(rudnn.attention(q, k, v, is_causal=True), ref), tol_of(bf)
    run_case("attention fwd causal", f"[{B},{H},{L},{D}]", bf, 0, have and (lambda: rudnn.attention(q, k, v, is_causal=True)),
             lambda: cudnn_sdpa(q, k, v, is_causal=True), "torch SDPA cuDNN", check)

    def check():
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
        return rel_err(rudnn.attention(q, k, v), ref), tol_of(bf)
    run_case("attention fwd", f"[{B},{H},{L},{D}]", bf, 0, have and (lambda: rudnn.attention(q, k, v)),
             lambda: cudnn_sdpa(q, k, v), "torch SDPA cuDNN", check)

    # The issue's other head sizes, causal: D64 at L8192 and D256 (bars 0.85x cuDNN).
    for Bx, Hx, Lx, Dx in ((2, 16, 8192, 64), (4, 8, 4096, 256)):
        qx, kx, vx = (torch.randn(Bx, Hx, Lx, Dx, dtype=bf, device=DEV) for _ in range(3))

        def check(qx=qx, kx=kx, vx=vx):
            ref = F.scaled_dot_product_attention(qx.float(), kx.float(), vx.float(), is_causal=True)
            return rel_err(rudnn.attention(qx, kx, vx, is_causal=True), ref), tol_of(bf)
        run_case(f"attention fwd causal D{Dx}", f"[{Bx},{Hx},{Lx},{Dx}]", bf, 0,
                 have and (lambda qx=qx, kx=kx, vx=vx: rudnn.attention(qx, kx, vx, is_causal=True)),
                 lambda qx=qx, kx=kx, vx=vx: cudnn_sdpa(qx, kx, vx, is_causal=True), "torch SDPA cuDNN",
                 check)
        del qx, kx, vx
        if DEV.startswith("cuda"):
            torch.cuda.empty_cache()

    # Training step: forward, then dq, dk, dv through autograd (ours: rudnn.torch_autograd's Function).
    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
    dout = torch.randn_like(q)

    def fwd_bwd(attend):
        return lambda: torch.autograd.grad(attend(qg, kg, vg, is_causal=True), (qg, kg, vg), dout)

    def check():
        ref = torch.autograd.grad(
            F.scaled_dot_product_attention(*(t.float() for t in (qg, kg, vg)), is_causal=True),
            (qg, kg, vg), dout.float())
        got = fwd_bwd(rudnn.torch_autograd.attention)()
        return worst(*((rel_err(g, r), tol_of(bf)) for g, r in zip(got, ref)))
    run_case("attention fwd+bwd causal", f"[{B},{H},{L},{D}]", bf, 0, have and fwd_bwd(rudnn.torch_autograd.attention),
             fwd_bwd(cudnn_sdpa), "torch SDPA cuDNN", check)
    del q, k, v, qg, kg, vg, dout

    B, Hq, Hkv, S, D, bs = 64, 32, 8, 4096, 128, 16
    q = torch.randn(B, Hq, 1, D, dtype=bf, device=DEV)
    k, v = (torch.randn(B, Hkv, S, D, dtype=bf, device=DEV) for _ in range(2))
    kv_bytes = 2 * k.numel() * 2
    shape = f"B{B} Hq{Hq} Hkv{Hkv} S{S} D{D}"

    def check():
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
        return rel_err(rudnn.attention(q, k, v), ref), tol_of(bf)
    run_case("attention decode (GQA)", shape, bf, kv_bytes, have and (lambda: rudnn.attention(q, k, v)),
             lambda: cudnn_sdpa(q, k, v, enable_gqa=True), "torch SDPA cuDNN", check)

    # Block i of sequence b (keys 16 i .. 16 i + 15) lives at cache block perm[b * nb + i].
    nb = S // bs
    perm = torch.randperm(B * nb, device=DEV)

    def to_blocks(x):  # [B, Hkv, S, D] -> [B * nb, Hkv, bs, D] in perm's order
        blocks = x.view(B, Hkv, nb, bs, D).permute(0, 2, 1, 3, 4).reshape(B * nb, Hkv, bs, D)
        cache = torch.empty_like(blocks)
        cache[perm] = blocks
        return cache
    kc, vc = to_blocks(k), to_blocks(v)
    tables = perm.view(B, nb).to(torch.int32)
    lengths = torch.full((B,), S, dtype=torch.int32, device=DEV)
    scale = D**-0.5
    paged = rudnn.paged if have else None

    def ours():
        return paged.paged_attention(q, kc, vc, tables, lengths, scale)

    def check():
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
        return rel_err(ours(), ref), tol_of(bf)
    run_case("paged decode (block tables, 16 keys/block)", shape, bf, kv_bytes, have and ours,
             lambda: cudnn_sdpa(q, k, v, enable_gqa=True), "torch SDPA cuDNN, dense K/V", check)


def mla_cases():
    """Paged MLA decode at ANCHORS.md's shape (absorbed, H128 R512 P64, B64, 4096 keys; one
    query per sequence at its last position) against the torch einsum composition of
    ANCHORS.md over the same keys stored densely. Ours reads pages of 64 keys in shuffled
    order; bytes: the latent + positional cache read once."""
    bf = torch.bfloat16
    have = rudnn is not None
    torch.manual_seed(5)
    B, H, R, P, S, ps = 64, 128, 512, 64, 4096, 64
    q = torch.randn(B, H, R + P, dtype=bf, device=DEV)
    kv = torch.randn(B, S, R + P, dtype=bf, device=DEV)
    scale = 1.0 / 192**0.5
    shape = f"B{B} H{H} R{R} P{P} S{S}"

    def einsum_mla():
        s = torch.einsum("bhd,bsd->bhs", q, kv) * scale
        p = s.float().softmax(-1).to(bf)
        return torch.einsum("bhs,bsr->bhr", p, kv[..., :R])

    npages = B * (S // ps)
    perm = torch.randperm(npages, device=DEV)
    cache = torch.empty(npages, ps, 1, R + P, dtype=bf, device=DEV)
    cache[perm] = kv.reshape(npages, ps, 1, R + P)
    latent, kp = cache[..., :R].contiguous(), cache[..., R:].contiguous()
    del cache
    q_lat, q_pos = q[..., :R].contiguous(), q[..., R:].contiguous()
    ours = None
    if have:
        tables = perm.view(B, S // ps).cpu().tolist()
        host = rudnn.paged.HostPlan(ps, npages, tables, [S] * B, list(range(B)), [S - 1] * B)
        plan = rudnn.paged.DevicePlan.upload(host, q_lat)

        def ours():
            return plan.mla(q_lat, q_pos, latent, kp, scale, True)

    def check():
        s = torch.einsum("bhd,bsd->bhs", q.float(), kv.float()) * scale
        ref = torch.einsum("bhs,bsr->bhr", s.softmax(-1), kv[..., :R].float())
        return rel_err(ours(), ref), tol_of(bf)
    run_case("paged MLA decode (pages of 64)", shape, bf, kv.numel() * 2, have and ours, einsum_mla,
             "torch einsum composition, dense", check)
    del q, kv, latent, kp, q_lat, q_pos


def pool_interp_cases():
    """Pooling and interpolation at ANCHORS.md's f32 [32,64,128,128] (bytes as anchors.py
    counts them: the input read and the output written once; max pooling's int64 indices,
    which ruDNN writes for the backward and torch's forward does not, are not counted)."""
    f32 = torch.float32
    have = rudnn is not None
    torch.manual_seed(5)
    x = torch.randn(32, 64, 128, 128, dtype=f32, device=DEV)
    by = x.numel() * 4
    shape = "[32,64,128,128]"

    def check():
        return rel_err(rudnn.max_pool(x, 3, 2, 1)[0], F.max_pool2d(x, 3, 2, 1)), tol_of(f32)
    run_case("max_pool2d 3x3 s2 p1", shape, f32, int(by * 1.25), have and (lambda: rudnn.max_pool(x, 3, 2, 1)),
             lambda: F.max_pool2d(x, 3, 2, 1), "F.max_pool2d", check)

    def check():
        return rel_err(rudnn.avg_pool(x, 2), F.avg_pool2d(x.double(), 2)), tol_of(f32)
    run_case("avg_pool2d 2x2", shape, f32, int(by * 1.25), have and (lambda: rudnn.avg_pool(x, 2)),
             lambda: F.avg_pool2d(x, 2), "F.avg_pool2d", check)

    def check():
        ref = F.interpolate(x.double(), scale_factor=2, mode="bilinear")
        return rel_err(rudnn.interpolate(x, scale_factor=2, mode="bilinear"), ref), tol_of(f32)
    run_case("interpolate bilinear x2", shape, f32, by * 5,
             have and (lambda: rudnn.interpolate(x, scale_factor=2, mode="bilinear")),
             lambda: F.interpolate(x, scale_factor=2, mode="bilinear"), "F.interpolate", check)

    def check():
        ref = F.interpolate(x.double(), scale_factor=0.5, mode="bilinear", antialias=True)
        return rel_err(rudnn.interpolate(x, scale_factor=0.5, mode="bilinear", antialias=True), ref), tol_of(f32)
    run_case("interpolate bilinear antialias 1/2", shape, f32, int(by * 1.25),
             have and (lambda: rudnn.interpolate(x, scale_factor=0.5, mode="bilinear", antialias=True)),
             lambda: F.interpolate(x, scale_factor=0.5, mode="bilinear", antialias=True), "F.interpolate", check)


def grid_sample_ctc_cases():
    """grid_sample bilinear (zeros, align_corners=False) at ANCHORS.md's f32 [32,64,128,128]:
    on the affine grid of bench/grid_sample.cpp (a mild rotation and zoom per batch entry: the
    access pattern of a spatial transformer) and on anchors.py's uniform random grid; the
    forward (bytes: input + grid read, output written) and forward + backward (both gradients,
    against torch.autograd.grad as anchors2.py times it). CTC loss fwd and fwd+bwd at
    ANCHORS.md's T200 N64 C32 S50 and T1000 N32 C5000 S200 (mean reduction; ours is ctc_loss
    then ctc_loss_backward, each from the lengths and labels alone; bytes: log_probs read, and
    the gradient written)."""
    f32 = torch.float32
    have = rudnn is not None
    torch.manual_seed(11)
    N, Cc, S = 32, 64, 128
    x = torch.randn(N, Cc, S, S, dtype=f32, device=DEV)
    b = torch.arange(N, dtype=torch.float64, device=DEV)
    angle, zoom = 0.3 * torch.sin(0.7 * b), 0.9
    theta = torch.stack([torch.stack([zoom * torch.cos(angle), -zoom * torch.sin(angle), torch.full_like(b, 0.05)], 1),
                         torch.stack([zoom * torch.sin(angle), zoom * torch.cos(angle), torch.full_like(b, -0.05)], 1)],
                        1).to(f32)
    grids = {"affine grid": F.affine_grid(theta, [N, Cc, S, S], align_corners=False),
             "random grid": torch.rand(N, S, S, 2, dtype=f32, device=DEV) * 2 - 1}
    by = x.numel() * 4
    shape = "[32,64,128,128]"
    for gname, grid in grids.items():
        gby = grid.numel() * 4
        dout = torch.randn(N, Cc, S, S, dtype=f32, device=DEV)

        def check(grid=grid):
            ref = F.grid_sample(x.double(), grid.double(), align_corners=False)
            return rel_err(rudnn.grid_sample(x, grid), ref), tol_of(f32)
        run_case(f"grid_sample bilinear ({gname})", shape, f32, 2 * by + gby,
                 have and (lambda grid=grid: rudnn.grid_sample(x, grid)),
                 lambda grid=grid: F.grid_sample(x, grid, align_corners=False), "F.grid_sample", check)

        xr, gr = x.detach().clone().requires_grad_(True), grid.detach().clone().requires_grad_(True)

        def ours_fb(grid=grid, dout=dout):
            rudnn.grid_sample(x, grid)
            return rudnn.grid_sample_backward(dout, x, grid)

        def anchor_fb(xr=xr, gr=gr, dout=dout):
            return torch.autograd.grad(F.grid_sample(xr, gr, align_corners=False), (xr, gr), dout)

        def check_fb(grid=grid, dout=dout):
            xd, gd = x.double().requires_grad_(True), grid.double().requires_grad_(True)
            rx, rg = torch.autograd.grad(F.grid_sample(xd, gd, align_corners=False), (xd, gd), dout.double())
            dx, dg = ours_fb()
            return worst((rel_err(dx, rx), tol_of(f32)), (rel_err(dg, rg), tol_of(f32)))
        run_case(f"grid_sample bilinear fwd+bwd ({gname})", shape, f32, 6 * by + 3 * gby, have and ours_fb,
                 anchor_fb, "torch.autograd.grad(F.grid_sample)", check_fb)
    del x, grids

    for T, Nb, C, L, with_fwd in ((200, 64, 32, 50, True), (1000, 32, 5000, 200, True)):
        lp = torch.randn(T, Nb, C, dtype=f32, device=DEV).log_softmax(2)
        tg = torch.randint(1, C, (Nb, L), device=DEV)
        il = torch.full((Nb,), T, dtype=torch.long, device=DEV)
        tl = torch.full((Nb,), L, dtype=torch.long, device=DEV)
        one = torch.ones((), dtype=f32, device=DEV)
        lpr = lp.detach().clone().requires_grad_(True)
        name = f"ctc_loss T{T} N{Nb} C{C} S{L}"
        lby = lp.numel() * 4
        if with_fwd:
            def check(lp=lp, tg=tg, il=il, tl=tl):
                return rel_err(rudnn.ctc_loss(lp, tg, il, tl), F.ctc_loss(lp.double(), tg, il, tl)), tol_of(f32)
            run_case(f"{name} fwd", f"T{T} N{Nb} C{C} S{L}", f32, lby,
                     have and (lambda lp=lp, tg=tg, il=il, tl=tl, lo=torch.empty((), dtype=f32, device=DEV):
                               rudnn.ctc_loss(lp, tg, il, tl, out=lo)),
                     lambda lp=lp, tg=tg, il=il, tl=tl: F.ctc_loss(lp, tg, il, tl), "F.ctc_loss", check)

        # Ours writes into preallocated outputs (out=), so that the row times the two ops and
        # not also two allocations and their wrapping (host work that shows at the small size).
        loss_out, grad_out = torch.empty((), dtype=f32, device=DEV), torch.empty_like(lp)

        def ours_fb(lp=lp, tg=tg, il=il, tl=tl, one=one, loss_out=loss_out, grad_out=grad_out):
            rudnn.ctc_loss(lp, tg, il, tl, out=loss_out)
            return rudnn.ctc_loss_backward(lp, tg, il, tl, one, out=grad_out)

        def check_fb(lp=lp, tg=tg, il=il, tl=tl, ours_fb=ours_fb):
            ld = lp.double().requires_grad_(True)
            (ref,) = torch.autograd.grad(F.ctc_loss(ld, tg, il, tl), ld)
            return rel_err(ours_fb(), ref), tol_of(f32)
        run_case(f"{name} fwd+bwd", f"T{T} N{Nb} C{C} S{L}", f32, 2 * lby, have and ours_fb,
                 lambda lpr=lpr, tg=tg, il=il, tl=tl: torch.autograd.grad(F.ctc_loss(lpr, tg, il, tl), lpr),
                 "torch.autograd.grad(F.ctc_loss)", check_fb)


def conv_cases():
    """Convolution against cuDNN through torch (channels-last, cudnn.benchmark), bf16: the
    3x3 conv2d of ANCHORS.md (no bytes: compare the times), depthwise 3x3 and the causal
    depthwise conv1d k4 (bytes: input read and output written once). ruDNN takes the same
    channels-last memory as [N, H, W, C] views (layout="nhwc"); its causal conv1d takes
    [B, L, C], torch's [B, C, L] (each its natural layout, the same values)."""
    bf = torch.bfloat16
    have = rudnn is not None
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(6)
    cl = torch.channels_last
    nhwc = lambda t: t.permute(0, 2, 3, 1)  # noqa: E731  channels-last [N,C,H,W] -> [N,H,W,C] view

    x = torch.randn(32, 256, 56, 56, dtype=bf, device=DEV).to(memory_format=cl)
    w = (torch.randn(256, 256, 3, 3, dtype=bf, device=DEV) * 0.02).to(memory_format=cl)

    def ours():
        return rudnn.conv_forward(nhwc(x), nhwc(w), padding=1, layout="nhwc")

    def check():
        ref = F.conv2d(x.float(), w.float(), padding=1)
        return rel_err(ours(), nhwc(ref)), tol_of(bf)
    run_case("conv2d 3x3 N32 C256 56x56 K256", "[32,256,56,56]", bf, 0, have and ours,
             lambda: F.conv2d(x, w, padding=1), "cuDNN (F.conv2d, channels-last)", check)

    # The data gradient: ours on tensor cores (the forward kernel over dout with the
    # flipped weight), cuDNN's through aten.convolution_backward (input gradient only).
    dy = torch.randn(32, 256, 56, 56, dtype=bf, device=DEV).to(memory_format=cl)

    def ours_dgrad():
        return rudnn.conv_data_backward(nhwc(dy), nhwc(w), (32, 56, 56, 256), padding=1, layout="nhwc",
                                        strategy="implicit_gemm")

    def cudnn_dgrad():
        return torch.ops.aten.convolution_backward(dy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                                   [True, False, False])[0]

    def check_dgrad():
        ref = torch.ops.aten.convolution_backward(dy.float(), x.float(), w.float(), None, [1, 1], [1, 1], [1, 1],
                                                  False, [0, 0], 1, [True, False, False])[0]
        return rel_err(ours_dgrad(), nhwc(ref)), tol_of(bf)
    run_case("conv2d 3x3 dgrad N32 C256 56x56 K256", "[32,256,56,56]", bf, 0, have and ours_dgrad,
             cudnn_dgrad, "cuDNN (aten.convolution_backward, input grad)", check_dgrad)
    del x, w, dy

    xd = torch.randn(32, 256, 56, 56, dtype=bf, device=DEV).to(memory_format=cl)
    wd = torch.randn(256, 1, 3, 3, dtype=bf, device=DEV).to(memory_format=cl)

    def ours():
        return rudnn.conv_forward(nhwc(xd), nhwc(wd), padding=1, groups=256, layout="nhwc")

    def check():
        ref = F.conv2d(xd.float(), wd.float(), padding=1, groups=256)
        return rel_err(ours(), nhwc(ref)), tol_of(bf)
    run_case("depthwise conv2d 3x3", "[32,256,56,56]", bf, 2 * xd.numel() * 2, have and ours,
             lambda: F.conv2d(xd, wd, padding=1, groups=256), "cuDNN (F.conv2d, groups=C)", check)
    del xd, wd

    x1 = torch.randn(8, 1024, 4096, dtype=bf, device=DEV)
    w1 = torch.randn(1024, 1, 4, dtype=bf, device=DEV)
    xl = x1.transpose(1, 2).contiguous()
    wl = w1[:, 0, :].contiguous()

    def check():
        ref = F.conv1d(F.pad(x1.float(), (3, 0)), w1.float(), groups=1024)
        return rel_err(rudnn.causal_conv1d(xl, wl), ref.transpose(1, 2)), tol_of(bf)
    run_case("causal depthwise conv1d k4", "[8,1024,4096]", bf, 2 * x1.numel() * 2,
             have and (lambda: rudnn.causal_conv1d(xl, wl)),
             lambda: F.conv1d(F.pad(x1, (3, 0)), w1, groups=1024), "F.conv1d(F.pad(x), groups=C)", check)


def eager_chunk_gated_delta(q, k, v, beta, log_decay, state, scale, chunk):
    """A torch eager implementation of the chunked gated delta rule (spec 000's form: q, k
    [B, H, T, K], v [B, H, T, V], beta and log_decay [B, H, T], state [B, H, K, V]) in float32,
    the WY / UT form: per chunk, the triangular system (I - A)^-1 by forward substitution, then
    the chunks in sequence through the state. Differentiable (no in-place updates)."""
    f = torch.float32
    B, H, T, K = q.shape
    V = v.shape[-1]
    pad = (-T) % chunk
    q, k, v = (F.pad(x.to(f) * m, (0, 0, 0, pad)) for x, m in ((q, scale), (k, 1.0), (v, 1.0)))
    beta, g = (F.pad(x.to(f), (0, pad)) for x in (beta, log_decay))
    n = (T + pad) // chunk
    q, k, v = (x.reshape(B, H, n, chunk, -1) for x in (q, k, v))
    beta, g = beta.reshape(B, H, n, chunk), g.reshape(B, H, n, chunk).cumsum(-1)
    kb, vb = k * beta[..., None], v * beta[..., None]
    lower = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    decay = (g[..., :, None] - g[..., None, :]).masked_fill(~lower, float("-inf")).exp()
    strict = lower.tril(-1)  # i > j: the triangular system's entries
    a = -(kb @ k.transpose(-1, -2)) * decay * strict
    rows = [a[..., 0, :]]
    for i in range(1, chunk):
        done = torch.stack(rows, -2)  # the rows 0 .. i-1 already solved
        rows.append(a[..., i, :] + (a[..., i, :i, None] * done).sum(-2))
    t = torch.stack(rows, -2) + torch.eye(chunk, dtype=f, device=q.device)
    w, u = t @ (kb * g.exp()[..., None]), t @ vb
    s = state.to(f)
    out = []
    for c in range(n):
        qc, kc, gc = q[:, :, c], k[:, :, c], g[:, :, c]
        v_new = u[:, :, c] - w[:, :, c] @ s
        att = (qc @ kc.transpose(-1, -2)) * decay[:, :, c]
        out.append((qc * gc.exp()[..., None]) @ s + att @ v_new)
        last = gc[..., -1]
        s = s * last.exp()[..., None, None] + (kc * (last[..., None] - gc).exp()[..., None]).transpose(-1, -2) @ v_new
    o = torch.stack(out, 2).reshape(B, H, n * chunk, V)[:, :, :T]
    return o, s


def gated_delta_cases():
    """The chunked gated delta prefill (issue 14's shapes: B4 T4096 H16 and B1 T32768 H32,
    K = V = 128, bf16 q / k / v / beta, float32 log-decay and state, chunk 64) against the torch
    eager chunked algorithm above (float32), forward, and forward + backward (every input's
    gradient; ours differentiates through the recurrence's backward). No bytes: compare the
    times. q and k are L2-normalised per head, beta = sigmoid, log-decay = logsigmoid, as
    Qwen3-Next feeds them."""
    bf, f32 = torch.bfloat16, torch.float32
    have = rudnn is not None
    chunk = 64
    for B, H, T, with_bwd in ((4, 16, 4096, True), (1, 32, 32768, False)):
        torch.manual_seed(11)
        K = V = 128
        q = F.normalize(torch.randn(B, H, T, K, device=DEV), dim=-1).to(bf)
        k = F.normalize(torch.randn(B, H, T, K, device=DEV), dim=-1).to(bf)
        v = torch.randn(B, H, T, V, device=DEV).to(bf)
        beta = torch.randn(B, H, T, device=DEV).sigmoid().to(bf)
        g = F.logsigmoid(torch.randn(B, H, T, device=DEV) + 2.0)
        s0 = torch.randn(B, H, K, V, device=DEV) * 0.1
        scale = K ** -0.5
        name, shape = f"chunk_gated_delta B{B} T{T} H{H}", f"[{B},{H},{T},{K}]"

        def ours_fwd(q=q, k=k, v=v, beta=beta, g=g, s0=s0):
            return rudnn.gated_delta_rule(q, k, v, beta, g, s0, scale, chunk_size=chunk)

        def anchor_fwd(q=q, k=k, v=v, beta=beta, g=g, s0=s0):
            return eager_chunk_gated_delta(q, k, v, beta, g, s0, scale, chunk)

        def check_fwd(ours_fwd=ours_fwd, anchor_fwd=anchor_fwd):
            (o, s), (ro, rs) = ours_fwd(), anchor_fwd()
            return worst((rel_err(o, ro), tol_of(bf)), (rel_err(s, rs), tol_of(bf)))
        run_case(f"{name} fwd", shape, bf, 0, have and ours_fwd, anchor_fwd, "torch eager chunked (float32)",
                 check_fwd)
        if not with_bwd:
            continue
        leaves = [x.detach().clone().requires_grad_(True) for x in (q, k, v, beta, g, s0)]
        do = torch.randn(B, H, T, V, device=DEV).to(bf)
        ds = torch.randn(B, H, K, V, device=DEV) * 0.1

        def ours_fb(leaves=leaves, do=do, ds=ds):
            o, s = rudnn.torch_autograd.gated_delta_rule(*leaves, scale, chunk_size=chunk)
            return torch.autograd.grad((o, s), leaves, (do, ds))

        def anchor_fb(leaves=leaves, do=do, ds=ds):
            o, s = eager_chunk_gated_delta(*leaves, scale, chunk)
            return torch.autograd.grad((o, s), leaves, (do.float(), ds))

        def check_fb(ours_fb=ours_fb, anchor_fb=anchor_fb):
            # bf16 gradients after a 4096-step recurrence: 2e-2 relative L2
            return worst(*((rel_err(a, b), 2e-2) for a, b in zip(ours_fb(), anchor_fb())))
        run_case(f"{name} fwd+bwd", shape, bf, 0, have and ours_fb, anchor_fb,
                 "torch eager chunked (float32) + autograd.grad", check_fb)


def moe_cases():
    """The routed MoE forward (softmax top-8 of 64 experts, renormalised; SwiGLU experts; no
    token dropped) against the torch._grouped_mm pipeline of ANCHORS.md (route, sort, three
    grouped GEMMs, combine), T 8192, H 2048, I 1408, bf16 (no bytes: compare the times); and
    decode T = 1, 16, 64 (bytes: the selected experts' weights read once). ruDNN runs its Auto
    expert strategy; the check is against a float32 per-expert loop."""
    gm = getattr(torch, "_grouped_mm", None)
    if gm is None:
        raise RuntimeError("torch._grouped_mm is missing")
    bf = torch.bfloat16
    have = rudnn is not None
    torch.manual_seed(7)
    T, E, K, H, I = 8192, 64, 8, 2048, 1408
    gate = torch.randn(E, I, H, dtype=bf, device=DEV) * 0.02  # ruDNN's layouts: [E, I, H], [E, H, I]
    up = torch.randn(E, I, H, dtype=bf, device=DEV) * 0.02
    down = torch.randn(E, H, I, dtype=bf, device=DEV) * 0.02
    wg, wu, wd = (w.transpose(1, 2).contiguous() for w in (gate, up, down))  # grouped_mm's [E, K, N]

    def pipeline(x, logits):
        w, idx = logits.softmax(-1).topk(K, -1)
        w = w / w.sum(-1, keepdim=True)
        flat = idx.flatten()
        order = flat.argsort(stable=True)
        offs = torch.bincount(flat, minlength=E).cumsum(0).to(torch.int32)
        xs = x[order // K]
        out = gm(F.silu(gm(xs, wg, offs=offs)) * gm(xs, wu, offs=offs), wd, offs=offs)
        y = torch.empty_like(out)
        y[order] = out
        return (y.view(x.shape[0], K, H) * w.unsqueeze(-1).to(y.dtype)).sum(1)

    def reference(x, logits):  # float32, expert by expert
        w, idx = logits.float().softmax(-1).topk(K, -1)
        w = w / w.sum(-1, keepdim=True)
        y = torch.zeros(x.shape[0], H, dtype=torch.float32, device=DEV)
        xf = x.float()
        for e in idx.unique().tolist():
            rows, slot = (idx == e).nonzero(as_tuple=True)
            h = F.silu(xf[rows] @ gate[e].float().T) * (xf[rows] @ up[e].float().T)
            y.index_add_(0, rows, (h @ down[e].float().T) * w[rows, slot, None])
        return y

    def ours_for(x, logits):
        # Auto: the tensor-core GEMMs for the full batch, decode.cu's streaming kernels for
        # the decode batches (T * K <= 512).
        return lambda: rudnn.moe_inference(x, logits, gate, up, down, top_k=K, renormalize=True,
                                           forward="auto")

    for t in (T, 1, 16, 64):
        x = torch.randn(t, H, dtype=bf, device=DEV)
        logits = torch.randn(t, E, dtype=torch.float32, device=DEV)
        ours = ours_for(x, logits)

        def check():
            return rel_err(ours(), reference(x, logits)), tol_of(bf)
        nexp = min(E, t * K)
        name = "moe forward" if t == T else f"moe decode T={t}"
        nbytes = 0 if t == T else nexp * 3 * H * I * 2
        run_case(name, f"T{t} E{E} k{K} H{H} I{I}", bf, nbytes, have and ours,
                 lambda: pipeline(x, logits), "torch._grouped_mm pipeline", check)


def copy_case():
    n = ARGS.copy_mib << 20
    a = torch.empty(n, dtype=torch.uint8, device=DEV)
    a.random_(0, 256)
    bb = torch.empty_like(a)
    ms = bench_ms(lambda: bb.copy_(a))
    return ms, 2 * n / ms / 1e6


def fmt(v, spec):
    """v formatted by spec ("9.4f"), or a dash padded to the same width."""
    return format(v, spec) if v is not None else format("-", ">" + spec.split(".")[0])


def print_table(copy_ms, copy_gbs, out=sys.stdout):
    head = (f"{'case':38s} {'dtype':8s} {'ours ms':>9s} {'ours GB/s':>10s} {'anchor ms':>10s} {'anchor GB/s':>12s} "
            f"{'ratio':>7s} {'ours %copy':>10s}  status")
    print(head, file=out)
    print("-" * len(head), file=out)
    label = f"copy {ARGS.copy_mib} MiB d2d (torch copy_)"
    print(f"{label:38s} {'uint8':8s} {'':>9s} {'':>10s} {copy_ms:10.4f} {copy_gbs:12.1f} "
          f"{'':>7s} {'':>10s}  ceiling", file=out)
    for r in ROWS:
        og, ag = r.gbs(r.ours_ms), r.gbs(r.anchor_ms)
        ratio = r.anchor_ms / r.ours_ms if r.ours_ms and r.anchor_ms else None
        pct = 100.0 * og / copy_gbs if og and copy_gbs else None
        print(f"{r.case:38s} {r.dtype:8s} {fmt(r.ours_ms, '9.4f')} {fmt(og, '10.1f')} {fmt(r.anchor_ms, '10.4f')} "
              f"{fmt(ag, '12.1f')} {fmt(ratio, '7.2f')} {fmt(pct, '10.1f')}  {'; '.join(r.status) or 'ok'}",
              file=out)
    print(file=out)
    print("anchors: " + "; ".join(f"{r.case}: {r.anchor} {r.shape}" for r in ROWS), file=out)
    print("ratio = anchor ms / ours ms (>1: ours faster); GB/s = bytes read + written once (ANCHORS.md); "
          "fwd+bwd CE counts 3 logits passes, with_grad 2; rope counts q and k read and written once, "
          "swiglu 3 tensors forward, 8 forward + backward", file=out)


def write_csv(path, copy_ms, copy_gbs):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["case", "shape", "dtype", "bytes", "ours_ms", "ours_gbs", "anchor", "anchor_ms", "anchor_gbs",
                    "ratio_anchor_over_ours", "ours_pct_copy", "anchor_pct_copy", "copy_gbs", "check_rel_err",
                    "status"])
        w.writerow([f"copy {ARGS.copy_mib} MiB d2d", f"{ARGS.copy_mib}MiB", "uint8", 2 * (ARGS.copy_mib << 20), "", "",
                    "torch copy_", f"{copy_ms:.6f}", f"{copy_gbs:.2f}", "", "", "100.0", f"{copy_gbs:.2f}", "",
                    "ceiling"])
        for r in ROWS:
            og, ag = r.gbs(r.ours_ms), r.gbs(r.anchor_ms)
            ratio = r.anchor_ms / r.ours_ms if r.ours_ms and r.anchor_ms else None
            f6 = lambda v: "" if v is None else f"{v:.6f}"  # noqa: E731
            f2 = lambda v: "" if v is None else f"{v:.2f}"  # noqa: E731
            w.writerow([r.case, r.shape, r.dtype, r.bytes, f6(r.ours_ms), f2(og), r.anchor, f6(r.anchor_ms), f2(ag),
                        f2(ratio) if ratio else "", f2(100 * og / copy_gbs) if og else "",
                        f2(100 * ag / copy_gbs) if ag else "", f"{copy_gbs:.2f}",
                        "" if r.check is None else f"{r.check:.3e}", "; ".join(r.status) or "ok"])


def main(argv=None):
    global ARGS, DEV
    ARGS = parse_args(argv)
    DEV = ARGS.device
    t0 = time.time()
    import triton

    print(f"side_by_side: torch {torch.__version__}, triton {triton.__version__}, "
          f"device {torch.cuda.get_device_name() if DEV.startswith('cuda') else DEV}")
    if rudnn is None:
        print(f"rudnn: NOT IMPORTABLE ({RUDNN_ERROR}); anchors only", flush=True)
    else:
        print(f"rudnn: {getattr(rudnn, '__version__', '?')} from {getattr(rudnn, '__file__', '?')}", flush=True)
    print(f"do_bench(warmup={ARGS.warmup:g}, rep={ARGS.rep:g}, return_mode='median')", flush=True)

    copy_ms, copy_gbs = copy_case()
    print(f"  copy {ARGS.copy_mib} MiB d2d: {copy_ms:.4f} ms, {copy_gbs:.1f} GB/s", file=sys.stderr, flush=True)
    for group in (norm_cases, cross_entropy_cases, rope_cases, norm_rope_cases, glu_cases, attention_cases, mla_cases, pool_interp_cases,
                  grid_sample_ctc_cases, conv_cases, gated_delta_cases, moe_cases):
        try:
            group()
        except Exception as e:  # noqa: BLE001 - a broken setup fails its group, not the script
            traceback.print_exc(file=sys.stderr)
            r = Row(f"{group.__name__} setup", "", "", 0, "")
            r.status.append(f"ERROR ({type(e).__name__}: {str(e)[:160]})")
            ROWS.append(r)
        sync()
        if DEV.startswith("cuda"):
            torch.cuda.empty_cache()

    print()
    print_table(copy_ms, copy_gbs)
    if ARGS.csv:
        write_csv(ARGS.csv, copy_ms, copy_gbs)
        print(f"wrote {ARGS.csv}")
    bad = [r for r in ROWS if not r.ok]
    print(f"{len(ROWS) - len(bad)} passed, {len(bad)} failed ({time.time() - t0:.0f} s)")
    return 0 if not bad and ROWS else 1


if __name__ == "__main__":
    sys.exit(main())
