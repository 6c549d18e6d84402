"""CPU tests of the paged attention family through rudnn.paged: random schedules (mixed
prefill and decode, shared-prefix pages, empty sequences, page sizes 1..256, GQA) against a
NumPy float64 reference over the gathered pages written here; MLA; split workspaces equal to
the unsplit call; append writing each query's slot; the block-table form with its clamping;
paged_write and paged_write_; the decode-loop example (examples/paged_decode_loop.py); the backward (attention and MLA) against central finite
differences of the forward in float64, with its out= / ordered-workspace forms; errors
reaching Python as the rudnn.Error subclass naming the op and the argument. Inputs are random with a fresh seed per run (printed in every failure
message); RUDNN_TEST_SEED=<int> replays one.
"""

import numpy as np
import pytest
from support import Ctx, randn

import rudnn
from rudnn import paged

F64 = np.float64


def random_schedule(rng, page_size, sequences, max_len, pages_extra=3, decode_only=False):
    """(pages, tables, lengths, sequence_ids, positions): each sequence's keys in its own
    pages (the first page of sequence 1 shared with sequence 0 when both fill it), queries a
    random run at the end of each sequence (one per sequence when decode_only)."""
    lengths = [int(rng.integers(0, max_len + 1)) for _ in range(sequences)]
    tables, next_page = [], 0
    for s, n in enumerate(lengths):
        count = -(-n // page_size) if n else 0
        table = list(range(next_page, next_page + count))
        next_page += count
        tables.append(table)
    pages = next_page + pages_extra
    perm = rng.permutation(pages)
    tables = [[int(perm[p]) for p in t] for t in tables]
    if sequences > 1 and lengths[0] >= page_size and lengths[1] >= page_size:
        tables[1][0] = tables[0][0]  # a shared prefix page
    sequence_ids, positions = [], []
    for s, n in enumerate(lengths):
        if n == 0:
            continue
        run = 1 if decode_only else int(rng.integers(1, min(n, 5) + 1))
        for p in range(n - run, n):
            sequence_ids.append(s)
            positions.append(p)
    return pages, tables, lengths, sequence_ids, positions


def gather(cache, table, n, page_size):
    return np.stack([cache[table[j // page_size], j % page_size] for j in range(n)]) if n else cache[:0, 0]


def ref_attention(q, kc, vc, page_size, tables, lengths, seq_ids, positions, scale, causal):
    q, kc, vc = (np.asarray(a, F64) for a in (q, kc, vc))
    queries, hq, _ = q.shape
    hkv, dv = kc.shape[2], vc.shape[3]
    out = np.zeros((queries, hq, dv))
    for i, (s, pos) in enumerate(zip(seq_ids, positions)):
        n = pos + 1 if causal else lengths[s]
        k = gather(kc, tables[s], n, page_size)
        v = gather(vc, tables[s], n, page_size)
        for h in range(hq):
            hk = h // (hq // hkv)
            x = scale * (k[:, hk] @ q[i, h])
            p = np.exp(x - x.max())
            out[i, h] = (p / p.sum()) @ v[:, hk]
    return out


def close(ctx, what, got, ref, tol):
    got = np.asarray(got, F64)
    assert got.shape == ref.shape, ctx.msg(f"{what}: shape {got.shape} vs {ref.shape}")
    err = np.abs(got - ref).max() if ref.size else 0.0
    assert err <= tol * max(1.0, np.abs(ref).max() if ref.size else 0.0), ctx.msg(f"{what}: max error {err}")


TOLS = {np.float32: 2e-5, np.float64: 1e-12}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("page_size", [1, 16, 64, 256])
@pytest.mark.parametrize("causal", [True, False])
def test_attention_against_numpy(rng, dtype, page_size, causal):
    hkv, group, d, dv = 2, int(rng.choice([1, 2, 4])), int(rng.choice([8, 24])), int(rng.choice([8, 16]))
    pages, tables, lengths, sids, pos = random_schedule(rng, page_size, 4, 3 * page_size // 2 + 5)
    ctx = Ctx(rng, dtype=dtype.__name__, page_size=page_size, causal=causal, lengths=lengths, group=group, d=d, dv=dv)
    q = randn(rng, (len(sids), hkv * group, d), dtype)
    kc = randn(rng, (pages, page_size, hkv, d), dtype)
    vc = randn(rng, (pages, page_size, hkv, dv), dtype)
    q0, k0, v0 = q.copy(), kc.copy(), vc.copy()
    plan = paged.DevicePlan.upload(paged.HostPlan(page_size, pages, tables, lengths, sids, pos), q)
    scale = float(np.float32(d**-0.5))  # the op takes a float32 scale
    got = plan.attention(q, kc, vc, scale, causal)
    ref = ref_attention(q, kc, vc, page_size, tables, lengths, sids, pos, scale, causal)
    close(ctx, "attention", got, ref, TOLS[dtype])
    assert got.dtype == dtype
    for a, b in ((q, q0), (kc, k0), (vc, v0)):
        assert np.array_equal(a, b), ctx.msg("an input was modified")
    # out= writes the caller's array, and a split workspace gives the same result.
    out = np.full(ref.shape, np.nan, dtype)
    assert plan.attention(q, kc, vc, scale, causal, out=out) is out
    close(ctx, "attention out=", out, ref, TOLS[dtype])
    if len(sids):
        ws = paged.SplitWorkspace(q, len(sids), hkv * group, dv, 3)
        assert ws.splits == 3 and ws.bytes > 0
        close(ctx, "attention_with_workspace", plan.attention_with_workspace(ws, q, kc, vc, scale, causal), ref, TOLS[dtype])


def test_mla_against_numpy(rng):
    page_size, heads, r, p = 16, 4, 32, 8
    pages, tables, lengths, sids, pos = random_schedule(rng, page_size, 3, 40)
    ctx = Ctx(rng, lengths=lengths)
    q = randn(rng, (len(sids), heads, r), np.float64)
    qp = randn(rng, (len(sids), heads, p), np.float64)
    latent = randn(rng, (pages, page_size, 1, r), np.float64)
    kp = randn(rng, (pages, page_size, 1, p), np.float64)
    plan = paged.DevicePlan.upload(paged.HostPlan(page_size, pages, tables, lengths, sids, pos), q)
    got = plan.mla(q, qp, latent, kp, 0.125, True)
    # MLA is attention with k = [latent, kp], q = [q, qp] and v = latent.
    ref = ref_attention(
        np.concatenate([q, qp], -1), np.concatenate([latent, kp], -1), latent, page_size, tables, lengths, sids, pos,
        0.125, True,
    )
    close(ctx, "mla", got, ref, 1e-12)


def test_append_writes_each_querys_slot(rng):
    page_size, hkv, d = 4, 2, 8
    pages, tables, lengths, sids, pos = random_schedule(rng, page_size, 3, 11, decode_only=True)
    ctx = Ctx(rng, lengths=lengths)
    plan = paged.DevicePlan.upload(paged.HostPlan(page_size, pages, tables, lengths, sids, pos), np.zeros((1, 1, d)))
    kc = np.zeros((pages, page_size, hkv, d))
    vc = np.zeros((pages, page_size, hkv, d))
    k = randn(rng, (len(sids), hkv, d), np.float64)
    v = randn(rng, (len(sids), hkv, d), np.float64)
    kc2, vc2 = plan.append(k, v, kc, vc)
    for i, (s, p) in enumerate(zip(sids, pos)):
        page, row = tables[s][p // page_size], p % page_size
        assert np.array_equal(np.asarray(kc2)[page, row], k[i]), ctx.msg(f"key of query {i}")
        assert np.array_equal(np.asarray(vc2)[page, row], v[i]), ctx.msg(f"value of query {i}")


def test_block_table_form_and_paged_write(rng):
    blocks, hkv, bs, d, b, hq, L = 6, 2, 4, 8, 2, 4, 2
    ctx = Ctx(rng)
    kc = randn(rng, (blocks, hkv, bs, d), np.float64)
    vc = randn(rng, (blocks, hkv, bs, d), np.float64)
    q = randn(rng, (b, hq, L, d), np.float64)
    tables = np.array([[3, 1, 99], [0, -5, 2]], np.int32)  # 99 and -5 are clamped into the cache
    lengths = np.array([7, 50], np.int64)  # 50 is clamped to the table's capacity, 12
    scale = float(np.float32(0.3))  # the op takes a float32 scale
    got = np.asarray(paged.paged_attention(q, kc, vc, tables, lengths, scale))
    assert got.shape == (b, hq, L, d)
    for s in range(b):
        n = min(int(lengths[s]), tables.shape[1] * bs)
        ids = np.clip(tables[s], 0, blocks - 1)
        k = np.stack([kc[ids[j // bs], :, j % bs] for j in range(n)])
        v = np.stack([vc[ids[j // bs], :, j % bs] for j in range(n)])
        for h in range(hq):
            for l in range(L):
                m = n - L + l + 1
                x = scale * (k[:m, h // (hq // hkv)] @ q[s, h, l])
                p = np.exp(x - x.max())
                ref = (p / p.sum()) @ v[:m, h // (hq // hkv)]
                close(ctx, f"block-table row {s},{h},{l}", got[s, h, l], ref, 1e-12)
    buf = np.full(got.shape, np.nan)
    assert paged.paged_attention(q, kc, vc, tables, lengths, scale, out=buf) is buf
    assert np.array_equal(buf, got), ctx.msg("paged_attention out=")
    with pytest.raises(rudnn.ShapeMismatch, match="^paged_attention: out has shape"):
        paged.paged_attention(q, kc, vc, tables, lengths, scale, out=buf[:1])
    with pytest.raises(rudnn.InvalidArgument, match="^paged_attention: out overlaps q"):
        paged.paged_attention(q, kc, vc, tables, lengths, scale, out=q)
    new = randn(rng, (3, hkv, d), np.float64)
    slots = np.array([5, 200, 0], np.int64)  # 200 is out of range: skipped
    written = np.asarray(paged.paged_write(kc, new, slots))
    expect = kc.copy()
    expect[1, :, 1] = new[0]
    expect[0, :, 0] = new[2]
    assert np.array_equal(written, expect), ctx.msg("paged_write")
    assert not np.array_equal(kc, expect), ctx.msg("paged_write modified its input")
    assert paged.paged_write_(kc, new, slots) is kc
    assert np.array_equal(kc, expect), ctx.msg("paged_write_")


def test_errors_name_the_op_and_argument():
    with pytest.raises(rudnn.InvalidArgument, match="page_size"):
        paged.HostPlan(0, 4, [[0]], [1], [0], [0])
    with pytest.raises(rudnn.InvalidArgument, match="tables"):
        paged.HostPlan(4, 2, [[5]], [1], [0], [0])
    with pytest.raises(rudnn.InvalidArgument, match="positions"):
        paged.HostPlan(4, 2, [[1]], [2], [0], [2])
    with pytest.raises(rudnn.InvalidArgument, match="page_size"):
        paged.HostPlan(True, 2, [[1]], [2], [0], [1])
    with pytest.raises(rudnn.InvalidArgument, match="tables"):
        paged.HostPlan(4, 2, "ab", [2], [0], [1])
    q = np.zeros((1, 2, 8), np.float32)
    plan = paged.DevicePlan.upload(paged.HostPlan(4, 2, [[1]], [2], [0], [1]), q)
    kc = np.zeros((2, 4, 1, 8), np.float32)
    with pytest.raises(rudnn.InvalidArgument, match="scale"):
        plan.attention(q, kc, kc, float("nan"))
    with pytest.raises(rudnn.Error, match="attention"):
        plan.attention(q, kc.astype(np.float64), kc, 0.5)
    with pytest.raises(rudnn.InvalidArgument, match="causal"):
        plan.attention(q, kc, kc, 0.5, 1)
    dup = paged.DevicePlan.upload(paged.HostPlan(4, 2, [[1], [1]], [2, 2], [0, 1], [1, 1]), q)
    with pytest.raises(rudnn.InvalidArgument, match="duplicate"):
        dup.append(np.zeros((2, 1, 8), np.float32), np.zeros((2, 1, 8), np.float32), kc, kc.copy())


def fd_grad(f, x, h=1e-6):
    """Central finite differences of the scalar f() with respect to every element of x
    (modified in place and restored)."""
    g = np.zeros_like(x, dtype=F64)
    flat, gf = x.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + h
        up = f()
        flat[i] = old - h
        down = f()
        flat[i] = old
        gf[i] = (up - down) / (2 * h)
    return g


def backward_schedule():
    """A small schedule: page size 2, a shared prefix page (page 3 read by both sequences),
    GQA, prefill and decode queries, and an unread page (0)."""
    tables, lengths = [[3, 1, 4], [3, 2]], [5, 3]
    sids, pos = [0, 0, 1], [3, 4, 2]
    return 2, 5, tables, lengths, sids, pos


@pytest.mark.parametrize("causal", [True, False])
def test_attention_backward_against_finite_differences(rng, causal):
    page_size, pages, tables, lengths, sids, pos = backward_schedule()
    hkv, hq, d, dv = 1, 2, 3, 2
    ctx = Ctx(rng, causal=causal)
    q = randn(rng, (len(sids), hq, d), np.float64)
    kc = randn(rng, (pages, page_size, hkv, d), np.float64)
    vc = randn(rng, (pages, page_size, hkv, dv), np.float64)
    go = randn(rng, (len(sids), hq, dv), np.float64)
    q0, k0, v0, go0 = q.copy(), kc.copy(), vc.copy(), go.copy()
    plan = paged.DevicePlan.upload(paged.HostPlan(page_size, pages, tables, lengths, sids, pos), q)
    scale = 0.5
    dq, dk, dv_ = plan.attention_backward(q, kc, vc, go, scale, causal)
    for a, b in ((q, q0), (kc, k0), (vc, v0), (go, go0)):
        assert np.array_equal(a, b), ctx.msg("an input was modified")
    assert dq.shape == q.shape and dk.shape == kc.shape and dv_.shape == vc.shape
    assert dq.dtype == dk.dtype == dv_.dtype == np.float64

    def loss():
        return float(np.sum(go * np.asarray(plan.attention(q, kc, vc, scale, causal))))

    for what, got, x in (("dq", dq, q), ("dk", dk, kc), ("dv", dv_, vc)):
        close(ctx, what, got, fd_grad(loss, x), 1e-7)
    assert np.all(np.asarray(dk)[0] == 0) and np.all(np.asarray(dv_)[0] == 0), ctx.msg("unread page not zero")
    # out= with a gradient skipped (None): the selected form; the ordered form with a workspace.
    bufs = (np.full(q.shape, np.nan), None, np.full(vc.shape, np.nan))
    assert plan.attention_backward(q, kc, vc, go, scale, causal, out=bufs) is bufs
    assert np.array_equal(bufs[0], dq) and np.array_equal(bufs[2], dv_), ctx.msg("out= differs")
    ws = paged.OrderedBackwardWorkspace(plan, q)
    assert ws.queries == len(sids) and ws.heads == hq and ws.query_pruning
    ws.history_compaction = True
    assert ws.history_compaction and ws.history_compaction_pages is not None
    assert sum(ws.history_compaction_pages) == pages
    full = tuple(np.full(a.shape, np.nan) for a in (q, kc, vc))
    plan.attention_backward(q, kc, vc, go, scale, causal, out=full, workspace=ws)
    for a, b in zip(full, (dq, dk, dv_)):
        assert np.array_equal(a, b), ctx.msg("ordered form differs from the selected form")
    # float32 operands give float32 gradients of the same shapes.
    r32 = plan.attention_backward(*(a.astype(np.float32) for a in (q, kc, vc, go)), scale, causal)
    assert [a.dtype for a in r32] == [np.float32] * 3
    close(ctx, "dq float32", r32[0], np.asarray(dq), 1e-5)


def test_mla_backward_against_finite_differences(rng):
    page_size, pages, tables, lengths, sids, pos = backward_schedule()
    heads, r, p = 2, 3, 2
    ctx = Ctx(rng)
    q = randn(rng, (len(sids), heads, r), np.float64)
    qp = randn(rng, (len(sids), heads, p), np.float64)
    latent = randn(rng, (pages, page_size, 1, r), np.float64)
    kp = randn(rng, (pages, page_size, 1, p), np.float64)
    go = randn(rng, (len(sids), heads, r), np.float64)
    plan = paged.DevicePlan.upload(paged.HostPlan(page_size, pages, tables, lengths, sids, pos), q)
    grads = plan.mla_backward(q, qp, latent, kp, go, 0.7, True)
    assert len(grads) == 4

    def loss():
        return float(np.sum(go * np.asarray(plan.mla(q, qp, latent, kp, 0.7, True))))

    for what, got, x in zip(("dq", "dqp", "dlatent", "dkp"), grads, (q, qp, latent, kp)):
        assert got.shape == x.shape and got.dtype == np.float64, ctx.msg(what)
        close(ctx, what, got, fd_grad(loss, x), 1e-7)
    bufs = tuple(np.full(a.shape, np.nan) for a in (q, qp, latent, kp))
    ws = paged.OrderedBackwardWorkspace(plan, q)
    assert plan.mla_backward(q, qp, latent, kp, go, 0.7, True, out=bufs, workspace=ws) is bufs
    for a, b in zip(bufs, grads):
        assert np.array_equal(a, b), ctx.msg("ordered mla_backward differs")


def test_backward_errors():
    page_size, pages, tables, lengths, sids, pos = backward_schedule()
    q = np.zeros((len(sids), 2, 3))
    kc = np.zeros((pages, page_size, 1, 3))
    plan = paged.DevicePlan.upload(paged.HostPlan(page_size, pages, tables, lengths, sids, pos), q)
    with pytest.raises(rudnn.ShapeMismatch, match="attention_backward: grad_out"):
        plan.attention_backward(q, kc, kc, np.zeros((len(sids), 2, 4)), 0.5)
    with pytest.raises(rudnn.InvalidArgument, match="attention_backward.*scale"):
        plan.attention_backward(q, kc, kc, np.zeros((len(sids), 2, 3)), -1.0)
    with pytest.raises(rudnn.InvalidArgument, match="workspace"):
        ws = paged.OrderedBackwardWorkspace(plan, q)
        plan.attention_backward(q, kc, kc, np.zeros((len(sids), 2, 3)), 0.5, workspace=ws)
    with pytest.raises(rudnn.ShapeMismatch, match="mla_backward.*grad_out"):
        qp, kp = np.zeros((len(sids), 2, 2)), np.zeros((pages, page_size, 1, 2))
        plan.mla_backward(q, qp, kc, kp, np.zeros((len(sids), 2, 2)), 0.5)
    with pytest.raises(rudnn.Error, match="OrderedBackwardWorkspace"):
        paged.OrderedBackwardWorkspace(plan, np.zeros((len(sids) + 1, 2, 3)))


def load_example(name):
    """A script of examples/ as a module (the folder is not a package)."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[3] / "examples" / name
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("page_size,group", [(4, 2), (1, 4), (16, 1)])
def test_decode_loop_example(rng, page_size, group):
    """The example's loop (prefill through one append, then append + attention per step) stays
    within float32 rounding of float64 attention over the contiguous keys."""
    example = load_example("paged_decode_loop.py")
    seed = int(rng.integers(0, 2**31))
    worst = example.main(["--page-size", str(page_size), "--group", str(group), "--steps", "9",
                          "--seed", str(seed)])
    assert worst < 1e-5, f"worst error {worst} (example seed {seed})"
