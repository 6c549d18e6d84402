"""Shared helpers of the Python CPU tests: seeded random inputs, an elementwise comparison
with per-dtype tolerances, NumPy float64 references of every normalization op, and memory
layout variants. Inputs are random with a fresh seed per test (printed in every failure
message); RUDNN_TEST_SEED=<int> replays one.
"""

import os

import numpy as np
import pytest

F32, F16 = np.float32, np.float16
FLOAT_DTYPES = [F32, F16]

# Elementwise tolerance |got - ref| <= RTOL * |ref| + ATOL * max|ref| + FLOOR per result dtype:
# ruDNN computes in float32 and rounds once to the result dtype (FLOOR: half a subnormal step
# of float16, where tiny gradients land).
TOL = {F32: (2e-5, 2e-5, 0.0), F16: (2e-3, 2e-3, 2.0**-25)}

SHAPES = [(1, 64), (5, 1), (7, 37), (3, 128), (4, 1000), (2, 3, 24), (0, 16)]


# ---- Helpers --------------------------------------------------------------------------------


class SeededGenerator(np.random.Generator):
    """numpy's default generator, remembering its seed for failure messages."""

    def __init__(self, seed):
        super().__init__(np.random.PCG64(seed))  # what numpy.random.default_rng(seed) builds
        self.seed_value = seed


@pytest.fixture
def rng():
    # A fresh seed per test and run, itself drawn from numpy.random.default_rng().
    seed = int(os.environ.get("RUDNN_TEST_SEED", np.random.default_rng().integers(2**63)))
    return SeededGenerator(seed)


@pytest.fixture
def gen(rng):
    """A torch.Generator seeded from rng's seed (the torch tests' inputs; they import torch
    first, so this fixture only runs where torch is there)."""
    import torch

    g = torch.Generator()
    g.manual_seed(int(rng.seed_value))
    return g


class Ctx:
    """Carries the seed and case name into assertion messages."""

    def __init__(self, rng, **case):
        self.seed = rng.seed_value
        self.case = case

    def msg(self, what):
        return f"{what} (seed={self.seed}, RUDNN_TEST_SEED={self.seed} to replay; case={self.case})"


def check(ctx, what, got, ref, dtype):
    got = np.asarray(got)
    assert got.dtype == np.dtype(dtype), ctx.msg(f"{what}: dtype {got.dtype}, expected {np.dtype(dtype)}")
    assert got.shape == ref.shape, ctx.msg(f"{what}: shape {got.shape}, expected {ref.shape}")
    if ref.size == 0:
        return
    g = got.astype(np.float64)
    nan_ref = np.isnan(ref)
    assert np.array_equal(np.isnan(g), nan_ref), ctx.msg(f"{what}: NaN pattern differs")
    g, r = g[~nan_ref], ref[~nan_ref]
    if r.size == 0:
        return
    rtol, atol, floor = TOL[dtype]
    scale = max(float(np.max(np.abs(r))), 1e-30)
    err = np.abs(g - r)
    bound = rtol * np.abs(r) + atol * scale + floor
    worst = int(np.argmax(err - bound))
    assert np.all(err <= bound), ctx.msg(
        f"{what}: max error {err.max():.3g} (worst element got {g.flat[worst]!r}, ref {r.flat[worst]!r}, "
        f"bound {bound.flat[worst]:.3g})"
    )


def randn(rng, shape, dtype, scale=1.0, offset=0.0):
    return (rng.standard_normal(shape) * scale + offset).astype(dtype)


def f64(a):
    return None if a is None else np.asarray(a).astype(np.float64)


# ---- NumPy float64 references ---------------------------------------------------------------


def ref_layer_norm(x, g, b, eps):
    x = f64(x)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    if g is not None:
        y = y * f64(g)
    if b is not None:
        y = y + f64(b)
    return y


def ref_rms_norm(x, g, eps):
    x = f64(x)
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return y if g is None else y * f64(g)


def ref_softmax(x):
    x = f64(x)
    m = x.max(-1, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(-1, keepdims=True)


def ref_logsumexp(x):
    x = f64(x)
    m = x.max(-1, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(-1, keepdims=True)))[..., 0]


def _ce_rows(logits, targets, ignore_index):
    """Flattened rows, wrapped targets, and masks (ignored, invalid)."""
    C = logits.shape[-1]
    x = f64(logits).reshape(-1, C)
    t = np.asarray(targets).reshape(-1).astype(np.int64)
    ignored = np.zeros(t.shape, bool) if ignore_index is None else (t == ignore_index)
    wrapped = np.where(t < 0, t + C, t)
    invalid = ~ignored & ((wrapped < 0) | (wrapped >= C))
    return x, wrapped, ignored, invalid


def ref_cross_entropy(logits, targets, ignore_index):
    x, t, ignored, invalid = _ce_rows(logits, targets, ignore_index)
    lse = ref_logsumexp(x)
    safe = np.clip(t, 0, x.shape[-1] - 1)
    loss = lse - x[np.arange(x.shape[0]), safe]
    loss = np.where(ignored, 0.0, loss)
    loss = np.where(invalid, np.nan, loss)
    return loss.reshape(np.asarray(targets).shape)


def ref_cross_entropy_backward(logits, targets, dloss, ignore_index):
    x, t, ignored, invalid = _ce_rows(logits, targets, ignore_index)
    p = ref_softmax(x)
    onehot = np.zeros_like(p)
    rows = np.arange(x.shape[0])
    ok = ~ignored & ~invalid
    onehot[rows[ok], t[ok]] = 1.0
    d = np.broadcast_to(f64(dloss), np.asarray(targets).shape).reshape(-1, 1)
    g = d * (p - onehot)
    g[ignored] = 0.0
    g[invalid] = np.nan
    return g.reshape(logits.shape)


def ref_layer_norm_backward(dy, x, g, b, eps):
    x, dy = f64(x), f64(dy)
    H = x.shape[-1]
    mean = x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    gg = np.ones(H) if g is None else f64(g)
    dxhat = dy * gg
    dx = rstd * (dxhat - dxhat.mean(-1, keepdims=True) - xhat * (dxhat * xhat).mean(-1, keepdims=True))
    dgamma = None if g is None else (dy * xhat).reshape(-1, H).sum(0)
    dbeta = None if b is None else dy.reshape(-1, H).sum(0)
    return dx, dgamma, dbeta


def ref_rms_norm_backward(dy, x, g, eps):
    x, dy = f64(x), f64(dy)
    H = x.shape[-1]
    r = 1.0 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    gg = np.ones(H) if g is None else f64(g)
    dxhat = dy * gg
    dx = r * dxhat - x * r**3 * (dxhat * x).mean(-1, keepdims=True)
    dgamma = None if g is None else (dy * x * r).reshape(-1, H).sum(0)
    return dx, dgamma


def ref_softmax_backward(dy, y):
    dy, y = f64(dy), f64(y)
    return y * (dy - (dy * y).sum(-1, keepdims=True))


# ---- Layout variants ------------------------------------------------------------------------


def make_layout(rng, shape, dtype, layout, **kw):
    """An array of `shape` in the given memory layout (values random)."""
    if layout == "contiguous":
        return randn(rng, shape, dtype, **kw)
    if layout == "transposed":  # last axis strided: the op copies it
        base = randn(rng, shape[::-1], dtype, **kw)
        return base.transpose(tuple(range(len(shape)))[::-1])
    if layout == "col_slice":  # every other element of a wider last axis
        base = randn(rng, shape[:-1] + (2 * shape[-1],), dtype, **kw)
        return base[..., ::2]
    if layout == "row_slice":  # every other row: dense rows, row stride 2H
        base = randn(rng, (2 * shape[0],) + shape[1:], dtype, **kw)
        return base[::2]
    if layout == "reversed":  # negative strides: the wrapper copies
        return randn(rng, shape, dtype, **kw)[..., ::-1]
    raise AssertionError(layout)


LAYOUTS = ["contiguous", "transposed", "col_slice", "row_slice", "reversed"]


def snapshot(*arrays):
    return [None if a is None else np.array(a, copy=True) for a in arrays]


def assert_unchanged(ctx, before, arrays):
    for i, (b, a) in enumerate(zip(before, arrays)):
        if a is not None:
            assert np.array_equal(b, a, equal_nan=True), ctx.msg(f"input {i} was modified")


def ce_targets(rng, shape, C, tdtype, ignore_index, with_invalid=True):
    """Targets in [-C, C) plus (for signed dtypes) out-of-range values and ignored rows."""
    signed = np.issubdtype(tdtype, np.signedinteger)
    lo = -C if signed else 0
    t = rng.integers(lo, C, size=shape).astype(np.int64)
    flat = t.reshape(-1)
    if flat.size >= 4:
        idx = rng.permutation(flat.size)
        if with_invalid:
            flat[idx[0]] = C + 3  # beyond the last class
            if signed:
                flat[idx[1]] = -C - 2  # still negative after the wrap
        if ignore_index is not None:
            flat[idx[2]] = ignore_index
            flat[idx[3]] = ignore_index
    return t.astype(tdtype)


CE_CASES = [
    # (logits shape, target dtype, ignore_index)
    ((6, 10), np.int64, None),
    ((6, 10), np.int64, -100),
    ((6, 10), np.int32, 3),  # a valid class can be ignored
    ((1, 7), np.int64, None),
    ((5, 1), np.int64, None),
    ((8, 37), np.int32, -1),  # compared before the wrap: -1 is ignored, not class C-1
    ((2, 3, 33), np.int64, -100),
    ((9, 200), np.uint8, 255),
    ((4, 1000), np.uint32, None),
    ((0, 5), np.int64, None),
]

