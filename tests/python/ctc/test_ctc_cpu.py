"""CPU tests of the CTC family through the rudnn package: ctc_loss (padded and concatenated
targets, int32 / int64 lengths and sequences of ints, blank anywhere, repeated labels, every
reduction, zero_infinity) against a NumPy float64 alpha recursion written here; the gradient
against finite differences through log_softmax (torch's convention); float32 / float16 log-probabilities (computed in float64, rounded
once) against the float64 call; out=; errors reaching
Python as the rudnn.Error subclass naming the op and the argument. Inputs are random with a
fresh seed per run (printed in every failure message); RUDNN_TEST_SEED=<int> replays one.
"""

import numpy as np
import pytest
from support import F32, Ctx, assert_unchanged, check, f64, randn, snapshot

import rudnn

F64 = np.float64


def log_softmax(z):
    m = z.max(-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))


def lse(*xs):
    m = max(xs)
    return m if m == -np.inf else m + np.log(sum(np.exp(x - m) for x in xs))


def ref_nll(lp, labels, T, blank):
    """One sample's -log p(labels | lp[:T]) by the alpha recursion over blank-extended labels."""
    ext = [blank]
    for c in labels:
        ext += [int(c), blank]
    L = len(ext)
    if T == 0:
        return 0.0 if not labels.size else np.inf
    alpha = np.full(L, -np.inf)
    alpha[0] = lp[0, ext[0]]
    if L > 1:
        alpha[1] = lp[0, ext[1]]
    for t in range(1, T):
        prev = alpha.copy()
        for s in range(L):
            terms = [prev[s]]
            if s >= 1:
                terms.append(prev[s - 1])
            if s >= 2 and ext[s] != blank and ext[s] != ext[s - 2]:
                terms.append(prev[s - 2])
            alpha[s] = lse(*terms) + lp[t, ext[s]]
    return -lse(alpha[L - 1], alpha[L - 2]) if L > 1 else -alpha[0]


def ref_ctc(lp, targets, il, tl, blank, reduction, zero_infinity):
    lp = f64(lp)
    N = lp.shape[1]
    il, tl = np.asarray(il, np.int64), np.asarray(tl, np.int64)
    targets = np.asarray(targets)
    losses, offset = np.zeros(N), 0
    for n in range(N):
        if targets.ndim == 2:
            labels = targets[n, : tl[n]]
        else:
            labels = targets[offset : offset + tl[n]]
            offset += tl[n]
        losses[n] = ref_nll(lp[:, n], labels, il[n], blank)
    if zero_infinity:
        losses[np.isinf(losses)] = 0.0
    if reduction == "none":
        return losses
    if reduction == "sum":
        return np.array(losses.sum())
    return np.array((losses / np.maximum(tl, 1)).mean() if N else np.nan)


def problem(rng, T=12, N=4, C=6, S=4, blank=0, layout="padded", ldtype=np.int64, repeats=True):
    lp = log_softmax(randn(rng, (T, N, C), F64, scale=2.0))
    il = rng.integers(max(1, T - 4), T + 1, size=N)
    tl = rng.integers(0, S + 1, size=N)
    labels = [c for c in range(C) if c != blank]
    padded = rng.choice(labels, size=(N, S)).astype(ldtype)
    if repeats and S >= 2:
        padded[0, 1] = padded[0, 0]  # a repeated label needs a blank between its copies
    if layout == "padded":
        targets = padded
    else:
        targets = np.concatenate([padded[n, : tl[n]] for n in range(N)] + [padded[0, :2]]).astype(ldtype)
    return lp, targets, il.astype(ldtype), tl.astype(ldtype)


@pytest.mark.parametrize("layout", ["padded", "concatenated"])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("ldtype", [np.int32, np.int64])
@pytest.mark.parametrize("blank", [0, 3])
def test_ctc_loss_against_numpy(rng, layout, reduction, ldtype, blank):
    ctx = Ctx(rng, layout=layout, reduction=reduction, ldtype=np.dtype(ldtype).name, blank=blank)
    lp, targets, il, tl = problem(rng, blank=blank, layout=layout, ldtype=ldtype)
    before = snapshot(lp, targets, il, tl)
    loss = rudnn.ctc_loss(lp, targets, il, tl, blank, reduction)
    ref = ref_ctc(lp, targets, il, tl, blank, reduction, False)
    assert loss.dtype == F64 and loss.shape == ref.shape, ctx.msg(f"loss {loss.dtype} {loss.shape}")
    np.testing.assert_allclose(loss, ref, rtol=1e-10, atol=1e-12, err_msg=ctx.msg("ctc_loss"))
    assert_unchanged(ctx, before, [lp, targets, il, tl])
    # Lengths as sequences of ints, as torch takes them.
    again = rudnn.ctc_loss(lp, targets, [int(i) for i in il], tuple(int(t) for t in tl), blank, reduction)
    np.testing.assert_array_equal(again, loss, err_msg=ctx.msg("lengths as sequences"))


def test_zero_infinity_and_impossible_alignments(rng):
    ctx = Ctx(rng)
    lp, targets, il, tl = problem(rng, T=6, N=3, S=5, repeats=False)
    il[1], tl[1] = 2, 4  # 4 labels cannot fit in 2 steps: an infinite loss
    loss = rudnn.ctc_loss(lp, targets, il, tl, reduction="none")
    assert np.isinf(loss[1]), ctx.msg(f"loss {loss}")
    z = rudnn.ctc_loss(lp, targets, il, tl, reduction="none", zero_infinity=True)
    np.testing.assert_allclose(z, ref_ctc(lp, targets, il, tl, 0, "none", True), rtol=1e-10, err_msg=ctx.msg("zi"))
    g = rudnn.ctc_loss_backward(lp, targets, il, tl, np.ones(3), reduction="none", zero_infinity=True)
    assert not np.any(g[:, 1]), ctx.msg("zero_infinity: the impossible sample's gradient must be 0")
    g = rudnn.ctc_loss_backward(lp, targets, il, tl, np.ones(3), reduction="none")
    assert np.all(np.isnan(g[: il[1], 1])), ctx.msg("an infinite loss gives NaN gradients")


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("layout", ["padded", "concatenated"])
def test_gradient_matches_finite_differences_through_log_softmax(rng, reduction, layout):
    ctx = Ctx(rng, reduction=reduction, layout=layout)
    lp, targets, il, tl = problem(rng, T=8, N=3, C=5, S=3, layout=layout)
    il[:] = 7  # room for 3 labels with repeats (2 S + 1 steps): every loss finite
    z = randn(rng, lp.shape, F64)
    loss = rudnn.ctc_loss(log_softmax(z), targets, il, tl, reduction=reduction)
    up = randn(rng, loss.shape, F64)
    grad = rudnn.ctc_loss_backward(log_softmax(z), targets, il, tl, up, reduction=reduction)
    assert grad.shape == lp.shape and grad.dtype == F64
    for n in range(3):
        assert not np.any(grad[il[n] :, n]), ctx.msg("steps past the input length get 0")
    u = np.random.default_rng(ctx.seed).standard_normal(z.shape)
    h = 1e-6

    def f(zz):
        return np.sum(up * rudnn.ctc_loss(log_softmax(zz), targets, il, tl, reduction=reduction))

    numeric = (f(z + h * u) - f(z - h * u)) / (2 * h)
    analytic = float(np.sum(grad * u))
    assert abs(numeric - analytic) <= 1e-5 * max(1.0, abs(analytic)), ctx.msg(f"{analytic} vs {numeric}")


@pytest.mark.parametrize("dtype", [F32, np.float16], ids=lambda d: np.dtype(d).name)
def test_low_precision_log_probs_match_the_float64_call(rng, dtype):
    ctx = Ctx(rng, dtype=np.dtype(dtype).name)
    lp, targets, il, tl = problem(rng)
    lp_low = lp.astype(dtype)
    for reduction in ("none", "mean"):
        loss = rudnn.ctc_loss(lp_low, targets, il, tl, reduction=reduction)
        ref = rudnn.ctc_loss(f64(lp_low), targets, il, tl, reduction=reduction)
        check(ctx, f"ctc_loss {reduction}", loss, f64(ref), dtype)
        up = np.ones(loss.shape, dtype)
        grad = rudnn.ctc_loss_backward(lp_low, targets, il, tl, up, reduction=reduction)
        ref = rudnn.ctc_loss_backward(f64(lp_low), targets, il, tl, f64(up), reduction=reduction)
        check(ctx, f"ctc_loss_backward {reduction}", grad, f64(ref), dtype)


def test_out_and_empty_batch(rng):
    lp, targets, il, tl = problem(rng)
    o = np.full((4,), np.nan)
    assert rudnn.ctc_loss(lp, targets, il, tl, reduction="none", out=o) is o
    np.testing.assert_array_equal(o, rudnn.ctc_loss(lp, targets, il, tl, reduction="none"))
    s = np.full((), np.nan)
    assert rudnn.ctc_loss(lp, targets, il, tl, out=s) is s
    g = np.full(lp.shape, np.nan)
    up = np.array(1.0)
    assert rudnn.ctc_loss_backward(lp, targets, il, tl, up, out=g) is g
    np.testing.assert_array_equal(g, rudnn.ctc_loss_backward(lp, targets, il, tl, up))
    empty = rudnn.ctc_loss(lp[:, :0], targets[:0], il[:0], tl[:0])
    assert empty.shape == () and np.isnan(empty)
    with pytest.raises(rudnn.ShapeMismatch, match="^ctc_loss: "):
        rudnn.ctc_loss(lp, targets, il, tl, out=np.zeros((4,)))


def test_errors_name_the_op_and_argument(rng):
    lp, targets, il, tl = problem(rng)
    cases = [
        (rudnn.DTypeMismatch, r"^ctc_loss: log_probs", lambda: rudnn.ctc_loss(lp.astype(np.int32), targets, il, tl)),
        (rudnn.InvalidArgument, r"^ctc_loss: reduction must be one of 'none', 'mean', 'sum', got 'avg'",
         lambda: rudnn.ctc_loss(lp, targets, il, tl, reduction="avg")),
        (rudnn.InvalidArgument, r"^ctc_loss: zero_infinity must be a bool",
         lambda: rudnn.ctc_loss(lp, targets, il, tl, zero_infinity=0)),
        (rudnn.InvalidArgument, r"^ctc_loss: blank must be an int", lambda: rudnn.ctc_loss(lp, targets, il, tl, 1.0)),
        (rudnn.InvalidArgument, r"^ctc_loss: blank", lambda: rudnn.ctc_loss(lp, targets, il, tl, 6)),
        (rudnn.InvalidArgument, r"^ctc_loss: targets is None", lambda: rudnn.ctc_loss(lp, None, il, tl)),
        (rudnn.Error, r"^ctc_loss: ", lambda: rudnn.ctc_loss(lp, targets, il + 20, tl)),
        (rudnn.Error, r"^ctc_loss: ", lambda: rudnn.ctc_loss(lp, np.zeros_like(targets), il, tl)),
        (rudnn.Error, r"^ctc_loss: ", lambda: rudnn.ctc_loss(lp, targets, il[:3], tl)),
        (rudnn.Error, r"^ctc_loss: ", lambda: rudnn.ctc_loss(lp, targets.astype(F64), il, tl)),
        (rudnn.Error, r"^ctc_loss: input_lengths", lambda: rudnn.ctc_loss(lp, targets, [1.5] * 4, tl)),
        (rudnn.Error, r"^ctc_loss_backward: ",
         lambda: rudnn.ctc_loss_backward(lp, targets, il, tl, np.ones(4), reduction="mean")),
        (rudnn.InvalidArgument, r"^ctc_loss_backward: grad_loss is None",
         lambda: rudnn.ctc_loss_backward(lp, targets, il, tl, None)),
    ]
    for exc, pattern, call in cases:
        with pytest.raises(exc, match=pattern):
            call()


@pytest.mark.parametrize("layout", ["padded", "concatenated"])
def test_ctc_loss_check_is_the_cpu_rules_on_host_values(rng, layout):
    """rudnn.ctc_loss_check raises what ctc_loss raises on the CPU for the same host values,
    named ctc_loss_check, and passes what it accepts; lengths as sequences of ints too."""
    lp, targets, il, tl = problem(rng, layout=layout)
    assert rudnn.ctc_loss_check(lp.shape, targets, il, tl) is None
    assert rudnn.ctc_loss_check(lp.shape, targets, il.tolist(), tuple(tl.tolist()), blank=0) is None
    bad_label = targets.copy()
    first = 0 if layout == "concatenated" else (int(np.argmax(tl > 0)), 0)
    cases = [
        (rudnn.InvalidArgument, "input_lengths", (targets, il + 20, tl, 0)),
        (rudnn.InvalidArgument, "target_lengths", (targets, il, tl - 10, 0)),
        (rudnn.InvalidArgument, "blank", (targets, il, tl, 6)),
        (rudnn.ShapeMismatch, "input_lengths", (targets, il[:3], tl, 0)),
        (rudnn.DTypeMismatch, "targets", (targets.astype(F64), il, tl, 0)),
    ]
    if tl.sum() > 0:
        bad_label[first] = 0  # the blank
        cases.append((rudnn.InvalidArgument, "label != blank", (bad_label, il, tl, 0)))
    for exc, fragment, (tg, i, t, blank) in cases:
        with pytest.raises(exc, match="^ctc_loss: .*" + fragment):
            rudnn.ctc_loss(lp, tg, i, t, blank=blank)
        with pytest.raises(exc, match="^ctc_loss_check: .*" + fragment):
            rudnn.ctc_loss_check(lp.shape, tg, i, t, blank=blank)
    with pytest.raises(rudnn.ShapeMismatch, match="^ctc_loss_check: log_probs has shape"):
        rudnn.ctc_loss_check(lp.shape[:2], targets, il, tl)
    with pytest.raises(rudnn.InvalidArgument, match="^ctc_loss_check: log_probs_shape must be a sequence"):
        rudnn.ctc_loss_check(7, targets, il, tl)
