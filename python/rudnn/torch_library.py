"""ruDNN's torch-facing ops as ``torch.library`` custom ops (imports torch; torch >= 2.4).

``torch.ops.rudnn.<op>``: each has a fake (meta) implementation, so that ``torch.compile`` and
``torch.export`` trace it without running it, and an autograd formula (``register_autograd``)
built from ruDNN's backward ops, so that ``torch.compile(fullgraph=True)`` over a training
step traces with no graph break. The ops run on CPU and CUDA tensors (the CPU reference takes
float64 too, for ``torch.autograd.gradcheck``). Use them through :mod:`rudnn.torch_autograd`,
which gives them torch's defaults.

The transformer family's ops (rope, rope_backward, norm_rope, swiglu, geglu and the gated
activations' backward ops) are differentiable the same way; ``norm_rope_cache_`` writes a KV
cache in place and has no gradient.

Pooling (max_pool and adaptive_max_pool with their int64 indices, avg_pool, adaptive_avg_pool,
lp_pool), grid_sample (input and grid gradients),
affine_grid, gated_delta and gated_delta_rule (every input and the initial state), ctc_loss
and attention (q, k, v, sinks and bias gradients; the forward also returns the logsumexp,
which is not differentiable) have autograd formulas from their ruDNN backward ops.

interpolate (every mode; input gradient), conv (1-D/2-D/3-D, both layouts, bias, residual and
the fused activation; input, weight, bias and residual gradients), causal_conv1d (x, weight,
bias and initial-state gradients; the op clones the state it reads, so it mutates nothing)
and moe (the one-call mixture-of-experts branch; input, logits and the three expert weights'
gradients, the backward op recomputing the forward's state) have autograd formulas from their
ruDNN backward ops too.

Loaded by ``import rudnn`` when a torch >= 2.4 is already imported, else by ``rudnn.torch_autograd``.
"""

# No `from __future__ import annotations`: custom_op reads the annotations as types.
import importlib
import math
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from . import _rudnn

if not hasattr(torch.library, "custom_op"):
    raise ImportError(
        f"rudnn's torch ops (rudnn.torch_autograd, torch.ops.rudnn) need torch >= 2.4 "
        f"(torch.library.custom_op); this is torch {torch.__version__}. The rudnn functions "
        f"take its tensors through DLPack without them."
    )

# The family modules by their sys.modules entries: `from . import attention` would return the
# package attribute, which rudnn/__init__.py rebinds to the function of the same name
# (rudnn.attention, rudnn.grid_sample, rudnn.gated_delta are functions).
_attn = importlib.import_module(".attention", __package__)
_conv = importlib.import_module(".conv", __package__)
_ctc = importlib.import_module(".ctc", __package__)
_gd = importlib.import_module(".gated_delta", __package__)
_gs = importlib.import_module(".grid_sample", __package__)
_interp = importlib.import_module(".interpolation", __package__)
_moe = importlib.import_module(".moe", __package__)
_ops = importlib.import_module(".normalization", __package__)
_pool = importlib.import_module(".pooling", __package__)
_tf = importlib.import_module(".transformer", __package__)

REDUCTIONS = ("mean", "sum", "none")


def _nothing(like: Tensor) -> Tensor:
    """The stand-in for an absent tensor result (a custom op returns no None)."""
    return like.new_empty((0,))


def _loss_dtype(logits: Tensor) -> torch.dtype:
    return torch.float64 if logits.dtype == torch.float64 else torch.float32


def _compute_dtype(t: Tensor) -> torch.dtype:
    return torch.promote_types(t.dtype, torch.float32)


# ---- rms_norm -------------------------------------------------------------------------------


@torch.library.custom_op("rudnn::rms_norm", mutates_args=())
def rms_norm(x: Tensor, weight: Optional[Tensor], eps: float) -> Tensor:
    """rudnn.rms_norm over the last axis (a new contiguous tensor of x's dtype)."""
    return _ops.rms_norm(x, weight, eps)


@rms_norm.register_fake
def _(x, weight, eps):
    return x.new_empty(x.shape)


@torch.library.custom_op("rudnn::rms_norm_backward", mutates_args=())
def rms_norm_backward(dy: Tensor, x: Tensor, weight: Optional[Tensor], eps: float) -> Tuple[Tensor, Tensor]:
    """(dx, dweight); dweight is empty without weight."""
    dx, dweight = _ops.rms_norm_backward(dy, x, weight, eps)
    return dx, _nothing(x) if dweight is None else dweight


@rms_norm_backward.register_fake
def _(dy, x, weight, eps):
    return x.new_empty(x.shape), _nothing(x) if weight is None else weight.new_empty(weight.shape)


def _rms_norm_setup(ctx, inputs, output):
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def _rms_norm_grad(ctx, dy):
    x, weight = ctx.saved_tensors
    dx, dweight = rms_norm_backward(dy, x, weight, ctx.eps)
    return dx, None if weight is None else dweight, None


rms_norm.register_autograd(_rms_norm_grad, setup_context=_rms_norm_setup)


# ---- layer_norm -----------------------------------------------------------------------------


@torch.library.custom_op("rudnn::layer_norm", mutates_args=())
def layer_norm(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], eps: float) -> Tensor:
    """rudnn.layer_norm over the last axis."""
    return _ops.layer_norm(x, weight, bias, eps)


@layer_norm.register_fake
def _(x, weight, bias, eps):
    return x.new_empty(x.shape)


@torch.library.custom_op("rudnn::layer_norm_backward", mutates_args=())
def layer_norm_backward(
    dy: Tensor, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], eps: float
) -> Tuple[Tensor, Tensor, Tensor]:
    """(dx, dweight, dbias); the parameter gradients are empty without the parameter."""
    dx, dweight, dbias = _ops.layer_norm_backward(dy, x, weight, bias, eps)
    return dx, _nothing(x) if dweight is None else dweight, _nothing(x) if dbias is None else dbias


@layer_norm_backward.register_fake
def _(dy, x, weight, bias, eps):
    def like(p):
        return _nothing(x) if p is None else p.new_empty(p.shape)

    return x.new_empty(x.shape), like(weight), like(bias)


def _layer_norm_setup(ctx, inputs, output):
    x, weight, bias, eps = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.eps = eps


def _layer_norm_grad(ctx, dy):
    x, weight, bias = ctx.saved_tensors
    dx, dweight, dbias = layer_norm_backward(dy, x, weight, bias, ctx.eps)
    return dx, None if weight is None else dweight, None if bias is None else dbias, None


layer_norm.register_autograd(_layer_norm_grad, setup_context=_layer_norm_setup)


# ---- add_rms_norm ---------------------------------------------------------------------------


@torch.library.custom_op("rudnn::add_rms_norm", mutates_args=())
def add_rms_norm(x: Tensor, residual: Tensor, weight: Optional[Tensor], eps: float) -> Tuple[Tensor, Tensor]:
    """(x + residual, rms_norm(x + residual)) in one pass."""
    return _ops.add_rms_norm(x, residual, weight, eps)


@add_rms_norm.register_fake
def _(x, residual, weight, eps):
    return x.new_empty(x.shape), x.new_empty(x.shape)


def _add_rms_norm_setup(ctx, inputs, output):
    _, _, weight, eps = inputs
    ctx.save_for_backward(output[0], weight)  # the rounded sum, which normed read
    ctx.eps = eps


def _add_rms_norm_grad(ctx, dsum, dnormed):
    total, weight = ctx.saved_tensors
    dh, dweight = rms_norm_backward(dnormed, total, weight, ctx.eps)
    dtotal = dh + dsum  # sum feeds both outputs
    return dtotal, dtotal, None if weight is None else dweight, None


add_rms_norm.register_autograd(_add_rms_norm_grad, setup_context=_add_rms_norm_setup)


# ---- softmax, logsumexp ---------------------------------------------------------------------


@torch.library.custom_op("rudnn::softmax", mutates_args=())
def softmax(x: Tensor) -> Tensor:
    """rudnn.softmax over the last axis."""
    return _ops.softmax(x)


@softmax.register_fake
def _(x):
    return x.new_empty(x.shape)


@torch.library.custom_op("rudnn::softmax_backward", mutates_args=())
def softmax_backward(dy: Tensor, y: Tensor) -> Tensor:
    """dx from the softmax output y."""
    return _ops.softmax_backward(dy, y)


@softmax_backward.register_fake
def _(dy, y):
    return y.new_empty(y.shape)


def _softmax_setup(ctx, inputs, output):
    ctx.save_for_backward(output)


def _softmax_grad(ctx, dy):
    (y,) = ctx.saved_tensors
    return softmax_backward(dy, y)


softmax.register_autograd(_softmax_grad, setup_context=_softmax_setup)


@torch.library.custom_op("rudnn::logsumexp", mutates_args=())
def logsumexp(x: Tensor) -> Tensor:
    """rudnn.logsumexp over the last axis: shape x.shape[:-1], x's dtype."""
    return _ops.logsumexp(x)


@logsumexp.register_fake
def _(x):
    return x.new_empty(x.shape[:-1])


def _logsumexp_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], output)


def _logsumexp_grad(ctx, grad):
    # d lse / dx = softmax(x) = exp(x - lse), in float32 (float64 for float64 x).
    x, lse = ctx.saved_tensors
    dt = _compute_dtype(x)
    dx = torch.exp(x.to(dt) - lse.to(dt).unsqueeze(-1)) * grad.to(dt).unsqueeze(-1)
    return dx.to(x.dtype)


logsumexp.register_autograd(_logsumexp_grad, setup_context=_logsumexp_setup)


# ---- cross_entropy --------------------------------------------------------------------------


def _kept_rows(targets: Tensor, ignore_index: Optional[int], dtype: torch.dtype):
    """The rows a mean divides by: a number when known on the host, else counted on the
    device (nothing waits for it)."""
    if ignore_index is None:
        return float(targets.numel())
    return (targets != ignore_index).sum().to(dtype)


@torch.library.custom_op("rudnn::cross_entropy", mutates_args=())
def cross_entropy(
    logits: Tensor, targets: Tensor, ignore_index: Optional[int], reduction: str, fused_grad: bool
) -> Tuple[Tensor, Tensor]:
    """(loss reduced by `reduction`, dlogits). With fused_grad and a reduction, dlogits is the
    gradient under an upstream gradient of 1, from the same pass over the logits as the loss
    (backward then scales it by the true one); otherwise it is empty."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"cross_entropy: reduction must be one of {REDUCTIONS}, got {reduction!r}")
    kept = _kept_rows(targets, ignore_index, _loss_dtype(logits)) if reduction == "mean" else 1.0
    if fused_grad and reduction != "none":
        if isinstance(kept, float):
            scale = 1.0 / max(kept, 1.0)
        else:
            scale = kept.reciprocal().expand(targets.shape)
        loss, dlogits = _ops.cross_entropy_with_grad(logits, targets, scale, ignore_index)
    else:
        loss, dlogits = _ops.cross_entropy(logits, targets, ignore_index), _nothing(logits)
    if reduction == "none":
        return loss, dlogits
    total = loss.sum()
    return (total / kept if reduction == "mean" else total), dlogits


@cross_entropy.register_fake
def _(logits, targets, ignore_index, reduction, fused_grad):
    shape = targets.shape if reduction == "none" else ()
    loss = logits.new_empty(shape, dtype=_loss_dtype(logits))
    fused = fused_grad and reduction != "none"
    return loss, logits.new_empty(logits.shape) if fused else _nothing(logits)


@torch.library.custom_op("rudnn::cross_entropy_backward", mutates_args=())
def cross_entropy_backward(logits: Tensor, targets: Tensor, dloss: Tensor, ignore_index: Optional[int]) -> Tensor:
    """dlogits for a per-row upstream gradient dloss (targets' shape, the loss dtype)."""
    return _ops.cross_entropy_backward(logits, targets, dloss, ignore_index)


@cross_entropy_backward.register_fake
def _(logits, targets, dloss, ignore_index):
    return logits.new_empty(logits.shape)


@torch.library.custom_op("rudnn::scale_unless_one_", mutates_args=("x",))
def scale_unless_one_(x: Tensor, scale: Tensor) -> None:
    """x *= scale in place, no pass when scale (one float32 element) is 1."""
    _ops.scale_unless_one(x, scale)


@scale_unless_one_.register_fake
def _(x, scale):
    return None


def _cross_entropy_setup(ctx, inputs, output):
    logits, targets, ignore_index, reduction, fused_grad = inputs
    ctx.fused = fused_grad and reduction != "none"
    ctx.ignore_index, ctx.reduction = ignore_index, reduction
    if ctx.fused:
        ctx.save_for_backward(output[1])
    else:
        ctx.save_for_backward(logits, targets)


def _cross_entropy_grad(ctx, grad, _grad_dlogits):
    if ctx.fused:
        (dlogits,) = ctx.saved_tensors
        if torch.compiler.is_compiling():
            # Traced graphs take no in-place update of a saved tensor; the compiler fuses this.
            return dlogits * grad.to(dlogits.dtype), None, None, None, None
        scale_unless_one_(dlogits, grad.to(torch.float32).reshape(1))  # free when grad is 1
        return dlogits, None, None, None, None
    logits, targets = ctx.saved_tensors
    dtype = _loss_dtype(logits)
    grad = grad.to(dtype)
    if ctx.reduction == "sum":
        grad = grad.expand(targets.shape)
    elif ctx.reduction == "mean":
        grad = (grad / _kept_rows(targets, ctx.ignore_index, dtype)).expand(targets.shape)
    return cross_entropy_backward(logits, targets, grad, ctx.ignore_index), None, None, None, None


cross_entropy.register_autograd(_cross_entropy_grad, setup_context=_cross_entropy_setup)


# ---- transformer: rope, norm_rope, swiglu, geglu ---------------------------------------------
#
# rope's options travel as the schema's scalars (dims resolved to an int by the callers);
# offsets / positions / freqs are tensors that get no gradient. The gated activations take
# up=None for the one-tensor form (gate holding both halves); their backward op then returns
# (dx, empty).

def _rope_kwargs(traditional, base, freqs, scale, offset, offsets, positions):
    return dict(
        traditional=traditional, base=base, freqs=freqs, scale=scale, offset=offset, offsets=offsets,
        positions=positions,
    )


@torch.library.custom_op("rudnn::rope", mutates_args=())
def rope(
    x: Tensor,
    dims: int,
    traditional: bool,
    base: Optional[float],
    freqs: Optional[Tensor],
    scale: float,
    offset: int,
    offsets: Optional[Tensor],
    positions: Optional[Tensor],
) -> Tensor:
    """rudnn.rope: a new contiguous tensor of x's shape and dtype."""
    return _tf.rope(x, dims, **_rope_kwargs(traditional, base, freqs, scale, offset, offsets, positions))


@rope.register_fake
def _(x, dims, traditional, base, freqs, scale, offset, offsets, positions):
    return x.new_empty(x.shape)


@torch.library.custom_op("rudnn::rope_backward", mutates_args=())
def rope_backward(
    dy: Tensor,
    dims: int,
    traditional: bool,
    base: Optional[float],
    freqs: Optional[Tensor],
    scale: float,
    offset: int,
    offsets: Optional[Tensor],
    positions: Optional[Tensor],
) -> Tensor:
    """rudnn.rope_backward: dy rotated by the opposite angles (rope's inverse)."""
    return _tf.rope_backward(dy, dims, **_rope_kwargs(traditional, base, freqs, scale, offset, offsets, positions))


@rope_backward.register_fake
def _(dy, dims, traditional, base, freqs, scale, offset, offsets, positions):
    return dy.new_empty(dy.shape)


def _rope_setup(ctx, inputs, output):
    _, dims, traditional, base, freqs, scale, offset, offsets, positions = inputs
    ctx.save_for_backward(freqs, offsets, positions)
    ctx.options = (dims, traditional, base, scale, offset)


def _rope_options(ctx):
    freqs, offsets, positions = ctx.saved_tensors
    dims, traditional, base, scale, offset = ctx.options
    return dims, traditional, base, freqs, scale, offset, offsets, positions


def _rope_grad(ctx, dy):
    # The rotation is orthogonal: its gradient is the rotation by the opposite angles.
    return (rope_backward(dy, *_rope_options(ctx)),) + (None,) * 8


def _rope_backward_grad(ctx, ddx):
    return (rope(ddx, *_rope_options(ctx)),) + (None,) * 8


rope.register_autograd(_rope_grad, setup_context=_rope_setup)
rope_backward.register_autograd(_rope_backward_grad, setup_context=_rope_setup)


@torch.library.custom_op("rudnn::norm_rope", mutates_args=())
def norm_rope(
    x: Tensor,
    weight: Optional[Tensor],
    eps: float,
    normalize: bool,
    dims: int,
    traditional: bool,
    base: Optional[float],
    freqs: Optional[Tensor],
    scale: float,
    offset: int,
) -> Tensor:
    """rudnn.norm_rope without a cache: rms_norm (when normalize) then rope at offset + t."""
    return _tf.norm_rope(
        x, weight, eps, normalize=normalize, dims=dims, traditional=traditional, base=base, freqs=freqs, scale=scale,
        offset=offset,
    )


@norm_rope.register_fake
def _(x, weight, eps, normalize, dims, traditional, base, freqs, scale, offset):
    return x.new_empty(x.shape)


def _norm_rope_setup(ctx, inputs, output):
    x, weight, eps, normalize, dims, traditional, base, freqs, scale, offset = inputs
    ctx.save_for_backward(x, weight, freqs)
    ctx.eps, ctx.normalize = eps, normalize
    ctx.rotation = (dims, traditional, base, scale, offset)


def _norm_rope_grad(ctx, dy):
    x, weight, freqs = ctx.saved_tensors
    dims, traditional, base, scale, offset = ctx.rotation
    dnormed = rope_backward(dy, dims, traditional, base, freqs, scale, offset, None, None)
    if not ctx.normalize:
        return (dnormed,) + (None,) * 9
    dx, dweight = rms_norm_backward(dnormed, x, weight, ctx.eps)
    return (dx, None if weight is None else dweight) + (None,) * 8


norm_rope.register_autograd(_norm_rope_grad, setup_context=_norm_rope_setup)


@torch.library.custom_op("rudnn::norm_rope_cache_", mutates_args=("cache",))
def norm_rope_cache_(
    x: Tensor,
    weight: Optional[Tensor],
    eps: float,
    normalize: bool,
    dims: int,
    traditional: bool,
    base: Optional[float],
    freqs: Optional[Tensor],
    scale: float,
    offset: int,
    cache: Tensor,
) -> None:
    """rudnn.norm_rope writing positions offset .. offset + L of cache [B, H, C, D] in place (a
    KV-cache write: no gradient)."""
    _tf.norm_rope(
        x, weight, eps, normalize=normalize, dims=dims, traditional=traditional, base=base, freqs=freqs, scale=scale,
        offset=offset, cache=cache,
    )


@norm_rope_cache_.register_fake
def _(x, weight, eps, normalize, dims, traditional, base, freqs, scale, offset, cache):
    return None


@torch.library.custom_op("rudnn::swiglu", mutates_args=())
def swiglu(gate: Tensor, up: Optional[Tensor]) -> Tensor:
    """rudnn.swiglu: silu(gate) * up, or of the halves of gate's last axis when up is None."""
    return _tf.swiglu(gate, up)


@torch.library.custom_op("rudnn::geglu", mutates_args=())
def geglu(gate: Tensor, up: Optional[Tensor], approximate: str) -> Tensor:
    """rudnn.geglu: gelu(gate) * up, or of the halves of gate's last axis when up is None."""
    return _tf.geglu(gate, up, approximate)


def _glu_fake(gate, up):
    if up is None:
        return gate.new_empty(gate.shape[:-1] + (gate.shape[-1] // 2,))
    return gate.new_empty(gate.shape)


@swiglu.register_fake
def _(gate, up):
    return _glu_fake(gate, up)


@geglu.register_fake
def _(gate, up, approximate):
    return _glu_fake(gate, up)


@torch.library.custom_op("rudnn::swiglu_backward", mutates_args=())
def swiglu_backward(dy: Tensor, gate: Tensor, up: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """(dgate, dup); for the one-tensor form (up None) (dx, empty)."""
    if up is None:
        return _tf.swiglu_backward(dy, gate), _nothing(gate)
    return _tf.swiglu_backward(dy, gate, up)


@torch.library.custom_op("rudnn::geglu_backward", mutates_args=())
def geglu_backward(dy: Tensor, gate: Tensor, up: Optional[Tensor], approximate: str) -> Tuple[Tensor, Tensor]:
    """(dgate, dup); for the one-tensor form (up None) (dx, empty)."""
    if up is None:
        return _tf.geglu_backward(dy, gate, None, approximate), _nothing(gate)
    return _tf.geglu_backward(dy, gate, up, approximate)


def _glu_backward_fake(gate, up):
    if up is None:
        return gate.new_empty(gate.shape), _nothing(gate)
    return gate.new_empty(gate.shape), up.new_empty(up.shape)


@swiglu_backward.register_fake
def _(dy, gate, up):
    return _glu_backward_fake(gate, up)


@geglu_backward.register_fake
def _(dy, gate, up, approximate):
    return _glu_backward_fake(gate, up)


def _glu_setup(ctx, inputs, output):
    gate, up = inputs[0], inputs[1]
    ctx.save_for_backward(gate, up)
    ctx.approximate = inputs[2] if len(inputs) > 2 else None


def _glu_grads(up, dgate, dup):
    return (dgate, None) if up is None else (dgate, dup)


def _swiglu_grad(ctx, dy):
    gate, up = ctx.saved_tensors
    return _glu_grads(up, *swiglu_backward(dy, gate, up))


def _geglu_grad(ctx, dy):
    gate, up = ctx.saved_tensors
    return _glu_grads(up, *geglu_backward(dy, gate, up, ctx.approximate)) + (None,)


swiglu.register_autograd(_swiglu_grad, setup_context=_glu_setup)
geglu.register_autograd(_geglu_grad, setup_context=_glu_setup)


# ---- pooling: max_pool (with indices), avg_pool ------------------------------------------------
#
# The spatial options travel as int lists, one entry per spatial axis (an empty stride means
# the kernel size, an empty padding 0, an empty dilation 1); the callers expand single ints.
# The backward ops take the forward's input for its shape, dtype and device.

def _pool_sizes(x, kernel_size, stride, padding, dilation, ceil_mode):
    """torch's pooling output sizes (the fake implementations' shapes)."""
    rank = len(kernel_size)
    stride = list(stride) or list(kernel_size)
    padding = list(padding) or [0] * rank
    dilation = list(dilation) or [1] * rank
    sizes = []
    for i in range(rank):
        extent = x.shape[2 + i] + 2 * padding[i] - dilation[i] * (kernel_size[i] - 1) - 1
        if ceil_mode:
            n = -(-extent // stride[i]) + 1
            if (n - 1) * stride[i] >= x.shape[2 + i] + padding[i]:
                n -= 1
        else:
            n = extent // stride[i] + 1
        sizes.append(n)
    return tuple(x.shape[:2]) + tuple(sizes)


def _pool_empty(x, shape, dtype=None):
    """A fake result in the layout ruDNN gives: channels-last when x is channels-last dense
    and not contiguous (torch's channels_last / channels_last_3d, or [N, L, C] seen as
    [N, C, L]), else contiguous."""
    dtype = x.dtype if dtype is None else dtype
    perm = [0] + list(range(2, x.dim())) + [1]
    if not x.is_contiguous() and x.permute(perm).is_contiguous():
        return torch.empty_permuted(shape, perm, dtype=dtype, device=x.device)
    return x.new_empty(shape, dtype=dtype)


@torch.library.custom_op("rudnn::max_pool", mutates_args=())
def max_pool(
    x: Tensor, kernel_size: List[int], stride: List[int], padding: List[int], dilation: List[int], ceil_mode: bool
) -> Tuple[Tensor, Tensor]:
    """rudnn.max_pool: (out, int64 indices)."""
    return _pool.max_pool(x, kernel_size, stride, padding, dilation, ceil_mode)


@max_pool.register_fake
def _(x, kernel_size, stride, padding, dilation, ceil_mode):
    shape = _pool_sizes(x, kernel_size, stride, padding, dilation, ceil_mode)
    return _pool_empty(x, shape), _pool_empty(x, shape, torch.int64)


@torch.library.custom_op("rudnn::max_pool_backward", mutates_args=())
def max_pool_backward(
    dout: Tensor,
    indices: Tensor,
    x: Tensor,
    kernel_size: List[int],
    stride: List[int],
    padding: List[int],
    dilation: List[int],
    ceil_mode: bool,
) -> Tensor:
    """rudnn.max_pool_backward: dinput of x's shape and dtype."""
    return _pool.max_pool_backward(dout, indices, x, kernel_size, stride, padding, dilation, ceil_mode)


@max_pool_backward.register_fake
def _(dout, indices, x, kernel_size, stride, padding, dilation, ceil_mode):
    return _pool_empty(x, x.shape)


def _max_pool_setup(ctx, inputs, output):
    x, *options = inputs
    ctx.save_for_backward(x, output[1])
    ctx.options = options


def _max_pool_grad(ctx, dout, _dindices):
    x, indices = ctx.saved_tensors
    return (max_pool_backward(dout, indices, x, *ctx.options),) + (None,) * 5


max_pool.register_autograd(_max_pool_grad, setup_context=_max_pool_setup)


@torch.library.custom_op("rudnn::avg_pool", mutates_args=())
def avg_pool(
    x: Tensor,
    kernel_size: List[int],
    stride: List[int],
    padding: List[int],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: Optional[int],
) -> Tensor:
    """rudnn.avg_pool."""
    return _pool.avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


@avg_pool.register_fake
def _(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    return _pool_empty(x, _pool_sizes(x, kernel_size, stride, padding, [], ceil_mode))


@torch.library.custom_op("rudnn::avg_pool_backward", mutates_args=())
def avg_pool_backward(
    dout: Tensor,
    x: Tensor,
    kernel_size: List[int],
    stride: List[int],
    padding: List[int],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: Optional[int],
) -> Tensor:
    """rudnn.avg_pool_backward: dinput of x's shape and dtype."""
    return _pool.avg_pool_backward(dout, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


@avg_pool_backward.register_fake
def _(dout, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    return _pool_empty(x, x.shape)


def _avg_pool_setup(ctx, inputs, output):
    x, *options = inputs
    ctx.save_for_backward(x)
    ctx.options = options


def _avg_pool_grad(ctx, dout):
    (x,) = ctx.saved_tensors
    return (avg_pool_backward(dout, x, *ctx.options),) + (None,) * 6


avg_pool.register_autograd(_avg_pool_grad, setup_context=_avg_pool_setup)


@torch.library.custom_op("rudnn::adaptive_max_pool", mutates_args=())
def adaptive_max_pool(x: Tensor, output_size: List[int]) -> Tuple[Tensor, Tensor]:
    """rudnn.adaptive_max_pool: (out, int64 indices)."""
    return _pool.adaptive_max_pool(x, output_size)


@adaptive_max_pool.register_fake
def _(x, output_size):
    shape = tuple(x.shape[:2]) + tuple(output_size)
    return _pool_empty(x, shape), _pool_empty(x, shape, torch.int64)


@torch.library.custom_op("rudnn::adaptive_max_pool_backward", mutates_args=())
def adaptive_max_pool_backward(dout: Tensor, indices: Tensor, x: Tensor, output_size: List[int]) -> Tensor:
    """dinput of x's shape and dtype."""
    return _pool.adaptive_max_pool_backward(dout, indices, x, output_size)


@adaptive_max_pool_backward.register_fake
def _(dout, indices, x, output_size):
    return _pool_empty(x, x.shape)


def _adaptive_max_pool_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], output[1])
    ctx.output_size = inputs[1]


def _adaptive_max_pool_grad(ctx, dout, _dindices):
    x, indices = ctx.saved_tensors
    return adaptive_max_pool_backward(dout, indices, x, ctx.output_size), None


adaptive_max_pool.register_autograd(_adaptive_max_pool_grad, setup_context=_adaptive_max_pool_setup)


@torch.library.custom_op("rudnn::adaptive_avg_pool", mutates_args=())
def adaptive_avg_pool(x: Tensor, output_size: List[int]) -> Tensor:
    """rudnn.adaptive_avg_pool."""
    return _pool.adaptive_avg_pool(x, output_size)


@adaptive_avg_pool.register_fake
def _(x, output_size):
    return _pool_empty(x, tuple(x.shape[:2]) + tuple(output_size))


@torch.library.custom_op("rudnn::adaptive_avg_pool_backward", mutates_args=())
def adaptive_avg_pool_backward(dout: Tensor, x: Tensor, output_size: List[int]) -> Tensor:
    """dinput of x's shape and dtype."""
    return _pool.adaptive_avg_pool_backward(dout, x, output_size)


@adaptive_avg_pool_backward.register_fake
def _(dout, x, output_size):
    return _pool_empty(x, x.shape)


def _adaptive_avg_pool_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.output_size = inputs[1]


def _adaptive_avg_pool_grad(ctx, dout):
    (x,) = ctx.saved_tensors
    return adaptive_avg_pool_backward(dout, x, ctx.output_size), None


adaptive_avg_pool.register_autograd(_adaptive_avg_pool_grad, setup_context=_adaptive_avg_pool_setup)


@torch.library.custom_op("rudnn::lp_pool", mutates_args=())
def lp_pool(x: Tensor, norm_type: float, kernel_size: List[int], stride: List[int], ceil_mode: bool) -> Tensor:
    """rudnn.lp_pool."""
    return _pool.lp_pool(x, norm_type, kernel_size, stride, ceil_mode)


@lp_pool.register_fake
def _(x, norm_type, kernel_size, stride, ceil_mode):
    return _pool_empty(x, _pool_sizes(x, kernel_size, stride, [], [], ceil_mode))


@torch.library.custom_op("rudnn::lp_pool_backward", mutates_args=())
def lp_pool_backward(
    dout: Tensor, x: Tensor, y: Tensor, norm_type: float, kernel_size: List[int], stride: List[int], ceil_mode: bool
) -> Tensor:
    """dinput from the forward's input x and result y."""
    return _pool.lp_pool_backward(dout, x, y, norm_type, kernel_size, stride, ceil_mode)


@lp_pool_backward.register_fake
def _(dout, x, y, norm_type, kernel_size, stride, ceil_mode):
    return _pool_empty(x, x.shape)


def _lp_pool_setup(ctx, inputs, output):
    x, *options = inputs
    ctx.save_for_backward(x, output)
    ctx.options = options


def _lp_pool_grad(ctx, dout):
    x, y = ctx.saved_tensors
    return (lp_pool_backward(dout, x, y, *ctx.options),) + (None,) * 4


lp_pool.register_autograd(_lp_pool_grad, setup_context=_lp_pool_setup)


# ---- grid_sample, affine_grid ------------------------------------------------------------------


@torch.library.custom_op("rudnn::grid_sample", mutates_args=())
def grid_sample(x: Tensor, grid: Tensor, mode: str, padding_mode: str, align_corners: bool) -> Tensor:
    """rudnn.grid_sample: [N, C, (Do,) Ho, Wo] in x's dtype."""
    return _gs.grid_sample(x, grid, mode, padding_mode, align_corners)


@grid_sample.register_fake
def _(x, grid, mode, padding_mode, align_corners):
    return x.new_empty(tuple(x.shape[:2]) + tuple(grid.shape[1:-1]))


@torch.library.custom_op("rudnn::grid_sample_backward", mutates_args=())
def grid_sample_backward(
    dout: Tensor, x: Tensor, grid: Tensor, mode: str, padding_mode: str, align_corners: bool, deterministic: bool
) -> Tuple[Tensor, Tensor]:
    """(dinput, dgrid); deterministic: the GPU input gradient without atomics."""
    return _gs.grid_sample_backward(dout, x, grid, mode, padding_mode, align_corners, deterministic=deterministic)


@grid_sample_backward.register_fake
def _(dout, x, grid, mode, padding_mode, align_corners, deterministic):
    return x.new_empty(x.shape), grid.new_empty(grid.shape)


def _grid_sample_setup(ctx, inputs, output):
    x, grid, mode, padding_mode, align_corners = inputs
    ctx.save_for_backward(x, grid)
    ctx.options = (mode, padding_mode, align_corners)


def _grid_sample_grad(ctx, dout):
    x, grid = ctx.saved_tensors
    # torch.use_deterministic_algorithms(True) selects the gather (torch's own kernel refuses).
    dx, dgrid = grid_sample_backward(dout, x, grid, *ctx.options, torch.are_deterministic_algorithms_enabled())
    return (
        dx if ctx.needs_input_grad[0] else None,
        dgrid if ctx.needs_input_grad[1] else None,
        None,
        None,
        None,
    )


grid_sample.register_autograd(_grid_sample_grad, setup_context=_grid_sample_setup)


@torch.library.custom_op("rudnn::affine_grid", mutates_args=())
def affine_grid(theta: Tensor, size: List[int], align_corners: bool) -> Tensor:
    """rudnn.affine_grid: [N, H, W, 2] or [N, D, H, W, 3]."""
    return _gs.affine_grid(theta, size, align_corners)


@affine_grid.register_fake
def _(theta, size, align_corners):
    return theta.new_empty((size[0],) + tuple(size[2:]) + (len(size) - 2,))


@torch.library.custom_op("rudnn::affine_grid_backward", mutates_args=())
def affine_grid_backward(dgrid: Tensor, size: List[int], align_corners: bool) -> Tensor:
    """dtheta [N, 2, 3] or [N, 3, 4]."""
    return _gs.affine_grid_backward(dgrid, size, align_corners)


@affine_grid_backward.register_fake
def _(dgrid, size, align_corners):
    r = len(size) - 2
    return dgrid.new_empty((size[0], r, r + 1))


def _affine_grid_setup(ctx, inputs, output):
    _, size, align_corners = inputs
    ctx.options = (list(size), align_corners)


def _affine_grid_grad(ctx, dgrid):
    return affine_grid_backward(dgrid, *ctx.options), None, None


affine_grid.register_autograd(_affine_grid_grad, setup_context=_affine_grid_setup)


# ---- gated delta ------------------------------------------------------------------------------
#
# cu_seqlens (optional, int32 [N + 1]) selects the packed varlen form. The backward ops take the
# final state's gradient (zeros when the state is unused) and give every input's gradient.


@torch.library.custom_op("rudnn::gated_delta", mutates_args=())
def gated_delta(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor, cu_seqlens: Optional[Tensor]
) -> Tuple[Tensor, Tensor]:
    """rudnn.gated_delta: (y [B, T, Hv, Dv] in q's dtype, final state in state's dtype)."""
    return _gd.gated_delta(q, k, v, g, beta, state, cu_seqlens=cu_seqlens)


@gated_delta.register_fake
def _(q, k, v, g, beta, state, cu_seqlens):
    return v.new_empty(v.shape, dtype=q.dtype), state.new_empty(state.shape)


@torch.library.custom_op("rudnn::gated_delta_backward", mutates_args=())
def gated_delta_backward(
    dy: Tensor,
    dstate: Optional[Tensor],
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    state: Tensor,
    cu_seqlens: Optional[Tensor],
) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(dq, dk, dv, dg, dbeta, dstate), each like its input."""
    return _gd.gated_delta_backward(dy, dstate, q, k, v, g, beta, state, cu_seqlens=cu_seqlens)


@gated_delta_backward.register_fake
def _(dy, dstate, q, k, v, g, beta, state, cu_seqlens):
    return tuple(t.new_empty(t.shape) for t in (q, k, v, g, beta, state))


def _gated_delta_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _gated_delta_grad(ctx, dy, dstate):
    q, k, v, g, beta, state, cu_seqlens = ctx.saved_tensors
    return gated_delta_backward(dy.contiguous(), dstate.contiguous(), q, k, v, g, beta, state, cu_seqlens) + (None,)


gated_delta.register_autograd(_gated_delta_grad, setup_context=_gated_delta_setup)


@torch.library.custom_op("rudnn::gated_delta_rule", mutates_args=())
def gated_delta_rule(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    beta: Tensor,
    log_decay: Tensor,
    initial_state: Tensor,
    query_scale: float,
    cu_seqlens: Optional[Tensor],
    chunk_size: Optional[int] = None,
) -> Tuple[Tensor, Tensor]:
    """rudnn.gated_delta_rule: (output [B, H, T, V] in query's dtype, final_state float32); with
    chunk_size the chunked prefill, differentiated through the chunked backward."""
    return _gd.gated_delta_rule(
        query, key, value, beta, log_decay, initial_state, query_scale, cu_seqlens=cu_seqlens, chunk_size=chunk_size
    )


@gated_delta_rule.register_fake
def _(query, key, value, beta, log_decay, initial_state, query_scale, cu_seqlens, chunk_size=None):
    return value.new_empty(value.shape, dtype=query.dtype), initial_state.new_empty(
        initial_state.shape, dtype=torch.float32
    )


@torch.library.custom_op("rudnn::gated_delta_rule_backward", mutates_args=())
def gated_delta_rule_backward(
    doutput: Tensor,
    dfinal_state: Optional[Tensor],
    query: Tensor,
    key: Tensor,
    value: Tensor,
    beta: Tensor,
    log_decay: Tensor,
    initial_state: Tensor,
    query_scale: float,
    cu_seqlens: Optional[Tensor],
    chunk_size: Optional[int] = None,
) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(dquery, dkey, dvalue, dbeta, dlog_decay, dinitial_state); with chunk_size the chunked
    form's backward."""
    return _gd.gated_delta_rule_backward(
        doutput,
        dfinal_state,
        query,
        key,
        value,
        beta,
        log_decay,
        initial_state,
        query_scale,
        cu_seqlens=cu_seqlens,
        chunk_size=chunk_size,
    )


@gated_delta_rule_backward.register_fake
def _(
    doutput, dfinal_state, query, key, value, beta, log_decay, initial_state, query_scale, cu_seqlens, chunk_size=None
):
    return tuple(t.new_empty(t.shape) for t in (query, key, value, beta)) + (
        log_decay.new_empty(log_decay.shape, dtype=torch.float32),
        initial_state.new_empty(initial_state.shape, dtype=torch.float32),
    )


def _gated_delta_rule_setup(ctx, inputs, output):
    *tensors, query_scale, cu_seqlens, chunk_size = inputs
    ctx.save_for_backward(*tensors, cu_seqlens)
    ctx.query_scale = query_scale
    ctx.chunk_size = chunk_size


def _gated_delta_rule_grad(ctx, doutput, dfinal_state):
    *tensors, cu_seqlens = ctx.saved_tensors
    grads = gated_delta_rule_backward(
        doutput.contiguous(), dfinal_state.contiguous(), *tensors, ctx.query_scale, cu_seqlens, ctx.chunk_size
    )
    return grads + (None, None, None)


gated_delta_rule.register_autograd(_gated_delta_rule_grad, setup_context=_gated_delta_rule_setup)


# ---- ctc_loss -------------------------------------------------------------------------------------


@torch.library.custom_op("rudnn::ctc_loss", mutates_args=())
def ctc_loss(
    log_probs: Tensor,
    targets: Tensor,
    input_lengths: Tensor,
    target_lengths: Tensor,
    blank: int,
    reduction: str,
    zero_infinity: bool,
) -> Tensor:
    """rudnn.ctc_loss: [N] for reduction 'none', else 0-d; log_probs' dtype."""
    return _ctc.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity)


@ctc_loss.register_fake
def _(log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity):
    shape = (log_probs.shape[1],) if reduction == "none" else ()
    return log_probs.new_empty(shape)


@torch.library.custom_op("rudnn::ctc_loss_backward", mutates_args=())
def ctc_loss_backward(
    log_probs: Tensor,
    targets: Tensor,
    input_lengths: Tensor,
    target_lengths: Tensor,
    grad_loss: Tensor,
    blank: int,
    reduction: str,
    zero_infinity: bool,
) -> Tensor:
    """rudnn.ctc_loss_backward: [T, N, C] in log_probs' dtype."""
    return _ctc.ctc_loss_backward(
        log_probs, targets, input_lengths, target_lengths, grad_loss, blank, reduction, zero_infinity
    )


@ctc_loss_backward.register_fake
def _(log_probs, targets, input_lengths, target_lengths, grad_loss, blank, reduction, zero_infinity):
    return log_probs.new_empty(log_probs.shape)


def _ctc_setup(ctx, inputs, output):
    log_probs, targets, input_lengths, target_lengths, *options = inputs
    ctx.save_for_backward(log_probs, targets, input_lengths, target_lengths)
    ctx.options = options


def _ctc_grad(ctx, grad):
    log_probs, targets, input_lengths, target_lengths = ctx.saved_tensors
    blank, reduction, zero_infinity = ctx.options
    dlp = ctc_loss_backward(
        log_probs, targets, input_lengths, target_lengths, grad.contiguous(), blank, reduction, zero_infinity
    )
    return (dlp,) + (None,) * 6


ctc_loss.register_autograd(_ctc_grad, setup_context=_ctc_setup)


# ---- attention ---------------------------------------------------------------------------------
#
# The forward always returns the logsumexp (the backward needs it); the lse output is not
# differentiable (its incoming gradient is ignored). The backward runs strategy "auto"
# (the forward's strategy may have no backward, e.g. "composed" or "split_kv").


def _attention_options(mask, bias, sinks, alibi_slopes, cu_seqlens_q, cu_seqlens_k, scale, is_causal, window,
                       softcap, layout, max_seqlen_q, max_seqlen_k, max_score_bytes):
    return dict(
        mask=mask, bias=bias, sinks=sinks, alibi_slopes=alibi_slopes, cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_k=cu_seqlens_k, scale=scale, is_causal=is_causal, window=window, softcap=softcap, layout=layout,
        max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, max_score_bytes=max_score_bytes,
    )


@torch.library.custom_op("rudnn::attention", mutates_args=())
def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Optional[Tensor],
    bias: Optional[Tensor],
    sinks: Optional[Tensor],
    alibi_slopes: Optional[Tensor],
    cu_seqlens_q: Optional[Tensor],
    cu_seqlens_k: Optional[Tensor],
    scale: Optional[float],
    is_causal: bool,
    window: Optional[int],
    softcap: Optional[float],
    layout: str,
    max_seqlen_q: int,
    max_seqlen_k: int,
    max_score_bytes: Optional[int],
    strategy: str,
) -> Tuple[Tensor, Tensor]:
    """rudnn.attention with return_lse: (out, lse)."""
    return _attn.attention(
        q, k, v, return_lse=True, strategy=strategy,
        **_attention_options(mask, bias, sinks, alibi_slopes, cu_seqlens_q, cu_seqlens_k, scale, is_causal, window,
                             softcap, layout, max_seqlen_q, max_seqlen_k, max_score_bytes),
    )


def _attention_fake_shapes(q, v, cu_seqlens_q, layout):
    out = tuple(q.shape[:-1]) + (v.shape[-1],)
    if cu_seqlens_q is not None:
        return out, (q.shape[1], q.shape[0])
    if layout == "bshd":
        return out, (q.shape[0], q.shape[2], q.shape[1])
    return out, tuple(q.shape[:3])


@attention.register_fake
def _(q, k, v, mask, bias, sinks, alibi_slopes, cu_seqlens_q, cu_seqlens_k, scale, is_causal, window, softcap,
      layout, max_seqlen_q, max_seqlen_k, max_score_bytes, strategy):
    out, lse = _attention_fake_shapes(q, v, cu_seqlens_q, layout)
    return q.new_empty(out), q.new_empty(lse, dtype=_loss_dtype(q))


@torch.library.custom_op("rudnn::attention_backward", mutates_args=())
def attention_backward(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    lse: Tensor,
    mask: Optional[Tensor],
    bias: Optional[Tensor],
    sinks: Optional[Tensor],
    alibi_slopes: Optional[Tensor],
    cu_seqlens_q: Optional[Tensor],
    cu_seqlens_k: Optional[Tensor],
    scale: Optional[float],
    is_causal: bool,
    window: Optional[int],
    softcap: Optional[float],
    layout: str,
    max_seqlen_q: int,
    max_seqlen_k: int,
    max_score_bytes: Optional[int],
    bias_requires_grad: bool,
) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(dq, dk, dv, dsinks, dbias); dsinks is empty without sinks, dbias without
    bias_requires_grad. o: the forward's output ("out" is a reserved name in op schemas)."""
    dq, dk, dv, dsinks, dbias = _attn.attention_backward(
        dout, q, k, v, o, lse, bias_requires_grad=bias_requires_grad,
        **_attention_options(mask, bias, sinks, alibi_slopes, cu_seqlens_q, cu_seqlens_k, scale, is_causal, window,
                             softcap, layout, max_seqlen_q, max_seqlen_k, max_score_bytes),
    )
    return dq, dk, dv, _nothing(q) if dsinks is None else dsinks, _nothing(q) if dbias is None else dbias


@attention_backward.register_fake
def _(dout, q, k, v, o, lse, mask, bias, sinks, alibi_slopes, cu_seqlens_q, cu_seqlens_k, scale, is_causal, window,
      softcap, layout, max_seqlen_q, max_seqlen_k, max_score_bytes, bias_requires_grad):
    dsinks = _nothing(q) if sinks is None else sinks.new_empty(sinks.shape)
    dbias = bias.new_empty(bias.shape) if bias is not None and bias_requires_grad else _nothing(q)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), dsinks, dbias


def _attention_setup(ctx, inputs, output):
    q, k, v, mask, bias, sinks, alibi_slopes, cu_q, cu_k, *scalars = inputs
    ctx.save_for_backward(q, k, v, output[0], output[1], mask, bias, sinks, alibi_slopes, cu_q, cu_k)
    ctx.scalars = scalars[:-1]  # the strategy is the forward's only


def _attention_grad(ctx, dout, _dlse):
    q, k, v, out, lse, mask, bias, sinks, alibi_slopes, cu_q, cu_k = ctx.saved_tensors
    bias_grad = bias is not None and ctx.needs_input_grad[4]
    dq, dk, dv, dsinks, dbias = attention_backward(
        dout.contiguous(), q, k, v, out, lse, mask, bias, sinks, alibi_slopes, cu_q, cu_k, *ctx.scalars, bias_grad
    )
    return (
        dq,
        dk,
        dv,
        None,
        dbias if bias_grad else None,
        dsinks if sinks is not None and ctx.needs_input_grad[5] else None,
    ) + (None,) * 12


attention.register_autograd(_attention_grad, setup_context=_attention_setup)


# ---- interpolate ---------------------------------------------------------------------------------
#
# size and scale_factor travel as lists, one entry per spatial axis (or one for all), the
# unused one empty; recompute_scale_factor as a bool (torch's None is False); antialias a bool
# (bilinear and bicubic only).


def _interpolate_shape(x, size, scale_factor):
    """torch's output shape (the fake implementation's): size, else floor(in * scale)."""
    rank = x.dim() - 2
    if size:
        out = [size[i if len(size) > 1 else 0] for i in range(rank)]
    else:
        out = [math.floor(x.shape[2 + i] * scale_factor[i if len(scale_factor) > 1 else 0]) for i in range(rank)]
    return tuple(x.shape[:2]) + tuple(out)


@torch.library.custom_op("rudnn::interpolate", mutates_args=())
def interpolate(
    x: Tensor,
    size: List[int],
    scale_factor: List[float],
    mode: str,
    align_corners: Optional[bool],
    recompute_scale_factor: bool,
    antialias: bool = False,
) -> Tensor:
    """rudnn.interpolate: [N, C, *out] in x's dtype, contiguous."""
    return _interp.interpolate(
        x, size or None, scale_factor or None, mode, align_corners, recompute_scale_factor, antialias
    )


@interpolate.register_fake
def _(x, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias=False):
    return x.new_empty(_interpolate_shape(x, size, scale_factor))


@torch.library.custom_op("rudnn::interpolate_backward", mutates_args=())
def interpolate_backward(
    dout: Tensor,
    input_size: List[int],
    size: List[int],
    scale_factor: List[float],
    mode: str,
    align_corners: Optional[bool],
    recompute_scale_factor: bool,
    antialias: bool = False,
) -> Tensor:
    """dinput of input_size in dout's dtype (the deterministic gather)."""
    return _interp.interpolate_backward(
        dout, input_size, size or None, scale_factor or None, mode, align_corners, recompute_scale_factor,
        antialias,
    )


@interpolate_backward.register_fake
def _(dout, input_size, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias=False):
    return dout.new_empty(input_size)


def _interpolate_setup(ctx, inputs, output):
    x, *options = inputs
    ctx.input_size = list(x.shape)
    ctx.options = options


def _interpolate_grad(ctx, dout):
    return (interpolate_backward(dout, ctx.input_size, *ctx.options),) + (None,) * len(ctx.options)


interpolate.register_autograd(_interpolate_grad, setup_context=_interpolate_setup)


# ---- conv, causal_conv1d ---------------------------------------------------------------------------
#
# The spatial options travel as int lists, one entry per spatial axis (empty: the default);
# padding_mode "same" / "valid" replaces the padding lists, "" keeps them. The activation's
# gradient is taken here from the pre-activation, recomputed by the op without it (the ruDNN
# backward ops take the gradient after the epilogue). The backward ops run strategy "auto"
# (the forward's strategy may not take a gradient: ImplicitGemm has no weight gradient).


def _conv_padding(padding_mode: str, padding: List[int]):
    return padding_mode if padding_mode else (padding or 0)


def _conv_shape(x, weight, stride, padding_mode, padding, padding_end, dilation, layout):
    """The output shape of a convolution (the fake implementation's)."""
    rank = x.dim() - 2
    nhwc = layout == "nhwc"
    sizes = x.shape[1 : 1 + rank] if nhwc else x.shape[2:]
    kernel = weight.shape[1 : 1 + rank] if nhwc else weight.shape[2:]
    out = []
    for i in range(rank):
        span = (dilation[i] if dilation else 1) * (kernel[i] - 1)
        if padding_mode == "same":
            total = span
        elif padding_mode == "valid":
            total = 0
        else:
            begin = padding[i] if padding else 0
            end = padding_end[i] if padding_end and padding_end[i] >= 0 else begin
            total = begin + end
        out.append((sizes[i] + total - span - 1) // (stride[i] if stride else 1) + 1)
    if nhwc:
        return (x.shape[0],) + tuple(out) + (weight.shape[0],)
    return (x.shape[0], weight.shape[0]) + tuple(out)


def _conv_empty(like, shape, layout):
    return like.new_empty(shape) if layout == "nhwc" else _pool_empty(like, shape)


@torch.library.custom_op("rudnn::conv", mutates_args=())
def conv(
    x: Tensor,
    weight: Tensor,
    bias: Optional[Tensor],
    residual: Optional[Tensor],
    stride: List[int],
    padding_mode: str,
    padding: List[int],
    padding_end: List[int],
    dilation: List[int],
    groups: int,
    activation: str,
    layout: str,
    strategy: str,
) -> Tensor:
    """rudnn.conv_forward: [N, K, *out] (layout "nhwc": [N, *out, K]) in x's dtype."""
    return _conv.conv_forward(
        x, weight, bias, stride or 1, _conv_padding(padding_mode, padding), dilation or 1, groups,
        padding_end=padding_end or None, activation=activation, residual=residual, layout=layout, strategy=strategy,
    )


@conv.register_fake
def _(x, weight, bias, residual, stride, padding_mode, padding, padding_end, dilation, groups, activation, layout,
      strategy):
    return _conv_empty(x, _conv_shape(x, weight, stride, padding_mode, padding, padding_end, dilation, layout), layout)


@torch.library.custom_op("rudnn::conv_data_backward", mutates_args=())
def conv_data_backward(
    dout: Tensor,
    weight: Tensor,
    input_size: List[int],
    stride: List[int],
    padding_mode: str,
    padding: List[int],
    padding_end: List[int],
    dilation: List[int],
    groups: int,
    layout: str,
) -> Tensor:
    """rudnn.conv_data_backward: dinput of input_size in dout's dtype."""
    return _conv.conv_data_backward(
        dout, weight, input_size, stride or 1, _conv_padding(padding_mode, padding), dilation or 1, groups,
        padding_end=padding_end or None, layout=layout,
    )


@conv_data_backward.register_fake
def _(dout, weight, input_size, stride, padding_mode, padding, padding_end, dilation, groups, layout):
    return _conv_empty(dout, tuple(input_size), layout)


@torch.library.custom_op("rudnn::conv_weight_backward", mutates_args=())
def conv_weight_backward(
    dout: Tensor,
    x: Tensor,
    weight_size: List[int],
    stride: List[int],
    padding_mode: str,
    padding: List[int],
    padding_end: List[int],
    dilation: List[int],
    groups: int,
    layout: str,
    with_bias: bool,
) -> Tuple[Tensor, Tensor]:
    """rudnn.conv_weight_backward: (dweight, dbias) in dout's dtype; dbias empty without with_bias."""
    dweight, dbias = _conv.conv_weight_backward(
        dout, x, weight_size, stride or 1, _conv_padding(padding_mode, padding), dilation or 1, groups,
        padding_end=padding_end or None, with_bias=with_bias, layout=layout,
    )
    return dweight, _nothing(dout) if dbias is None else dbias


@conv_weight_backward.register_fake
def _(dout, x, weight_size, stride, padding_mode, padding, padding_end, dilation, groups, layout, with_bias):
    channels = weight_size[0]
    return dout.new_empty(tuple(weight_size)), dout.new_empty((channels,)) if with_bias else _nothing(dout)


def _activation_grad(dout: Tensor, pre: Tensor, activation: str) -> Tensor:
    """dout times the activation's derivative at the pre-activation, in float32 (float64 for
    float64), rounded to dout's dtype."""
    p = pre.to(_compute_dtype(pre))
    if activation == "relu":
        d = (p > 0).to(p.dtype)
    elif activation == "silu":
        s = torch.sigmoid(p)
        d = s * (1 + p * (1 - s))
    else:  # gelu, the erf form
        d = 0.5 * (1 + torch.erf(p * 0.7071067811865476)) + p * torch.exp(-0.5 * p * p) * 0.3989422804014327
    return (dout.to(p.dtype) * d).to(dout.dtype)


def _conv_setup(ctx, inputs, output):
    x, weight, bias, residual, *options = inputs
    ctx.save_for_backward(x, weight, bias, residual)
    ctx.options = options


def _conv_grad(ctx, dout):
    x, weight, bias, residual = ctx.saved_tensors
    stride, padding_mode, padding, padding_end, dilation, groups, activation, layout, _strategy = ctx.options
    geometry = (stride, padding_mode, padding, padding_end, dilation, groups, layout)
    g = dout
    if activation != "none":
        pre = conv(x, weight, bias, residual, stride, padding_mode, padding, padding_end, dilation, groups, "none",
                   layout, "auto")
        g = _activation_grad(dout, pre, activation)
    dx = conv_data_backward(g, weight, list(x.shape), *geometry) if ctx.needs_input_grad[0] else None
    dweight = dbias = None
    if ctx.needs_input_grad[1] or (bias is not None and ctx.needs_input_grad[2]):
        dweight, dbias = conv_weight_backward(g, x, list(weight.shape), *geometry, bias is not None)
    return (
        dx,
        dweight if ctx.needs_input_grad[1] else None,
        dbias if bias is not None and ctx.needs_input_grad[2] else None,
        g if residual is not None and ctx.needs_input_grad[3] else None,
    ) + (None,) * 9


conv.register_autograd(_conv_grad, setup_context=_conv_setup)


@torch.library.custom_op("rudnn::causal_conv1d", mutates_args=())
def causal_conv1d(
    x: Tensor,
    weight: Tensor,
    bias: Optional[Tensor],
    initial_state: Optional[Tensor],
    cu_seqlens: Optional[Tensor],
    silu: bool,
) -> Tensor:
    """rudnn.causal_conv1d reading initial_state (a clone takes the in-place update): [B, L, C]."""
    state = None if initial_state is None else initial_state.clone(memory_format=torch.contiguous_format)
    return _conv.causal_conv1d(x, weight, bias, state, cu_seqlens, silu)


@causal_conv1d.register_fake
def _(x, weight, bias, initial_state, cu_seqlens, silu):
    return x.new_empty(x.shape)


@torch.library.custom_op("rudnn::causal_conv1d_backward", mutates_args=())
def causal_conv1d_backward(
    dout: Tensor,
    x: Tensor,
    weight: Tensor,
    bias: Optional[Tensor],
    initial_state: Optional[Tensor],
    cu_seqlens: Optional[Tensor],
    silu: bool,
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """(dx, dweight, dbias, dinitial_state); dbias / dinitial_state empty without bias / state."""
    dx, dweight, dbias, dstate = _conv.causal_conv1d_backward(dout, x, weight, bias, initial_state, cu_seqlens, silu)
    return dx, dweight, _nothing(x) if dbias is None else dbias, _nothing(x) if dstate is None else dstate


@causal_conv1d_backward.register_fake
def _(dout, x, weight, bias, initial_state, cu_seqlens, silu):
    dbias = _nothing(x) if bias is None else x.new_empty(bias.shape)
    dstate = _nothing(x) if initial_state is None else x.new_empty(initial_state.shape)
    return x.new_empty(x.shape), x.new_empty(weight.shape), dbias, dstate


def _causal_conv1d_setup(ctx, inputs, output):
    x, weight, bias, initial_state, cu_seqlens, silu = inputs
    ctx.save_for_backward(x, weight, bias, initial_state, cu_seqlens)
    ctx.silu = silu


def _causal_conv1d_grad(ctx, dout):
    x, weight, bias, initial_state, cu_seqlens = ctx.saved_tensors
    dx, dweight, dbias, dstate = causal_conv1d_backward(dout, x, weight, bias, initial_state, cu_seqlens, ctx.silu)
    return (
        dx,
        dweight,
        dbias if bias is not None else None,
        dstate if initial_state is not None else None,
        None,
        None,
    )


causal_conv1d.register_autograd(_causal_conv1d_grad, setup_context=_causal_conv1d_setup)


# ---- moe -------------------------------------------------------------------------------------------
#
# The one-call branch. The forward is moe_inference (the same bits as moe_forward, no state
# kept); the backward op runs moe_forward again for its state, then moe_backward: the state
# (dispatched rows, expert caches) cannot travel through a custom op's outputs, and recomputing
# it costs one forward. The expert weights' gradients come back in float32 and are cast to the
# weights' dtype.


def _moe_kwargs(routing, top_k, renormalize, groups, selected_groups, group_top_two, route_scale, scoring,
                weight_renormalize, weight_scale, forward):
    return dict(
        routing=routing, top_k=top_k, renormalize=renormalize, groups=groups, selected_groups=selected_groups,
        group_top_two=group_top_two, route_scale=route_scale, scoring=scoring, weight_renormalize=weight_renormalize,
        weight_scale=weight_scale, forward=forward,
    )


@torch.library.custom_op("rudnn::moe", mutates_args=())
def moe(
    input: Tensor,
    logits: Tensor,
    bias: Optional[Tensor],
    gate: Tensor,
    up: Tensor,
    down: Tensor,
    routing: str,
    top_k: int,
    renormalize: bool,
    groups: int,
    selected_groups: int,
    group_top_two: bool,
    route_scale: float,
    scoring: str,
    weight_renormalize: bool,
    weight_scale: float,
    forward: str,
    backward: str,
) -> Tensor:
    """rudnn.moe_inference: [T, H] in input's dtype (backward: the expert backward strategy)."""
    return _moe.moe_inference(
        input, logits, gate, up, down, bias=bias,
        **_moe_kwargs(routing, top_k, renormalize, groups, selected_groups, group_top_two, route_scale, scoring,
                      weight_renormalize, weight_scale, forward),
    )


@moe.register_fake
def _(input, logits, bias, gate, up, down, *options):
    return input.new_empty(input.shape)


@torch.library.custom_op("rudnn::moe_backward", mutates_args=())
def moe_backward(
    grad_output: Tensor,
    input: Tensor,
    logits: Tensor,
    bias: Optional[Tensor],
    gate: Tensor,
    up: Tensor,
    down: Tensor,
    routing: str,
    top_k: int,
    renormalize: bool,
    groups: int,
    selected_groups: int,
    group_top_two: bool,
    route_scale: float,
    scoring: str,
    weight_renormalize: bool,
    weight_scale: float,
    forward: str,
    backward: str,
) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(dinput, dlogits, dgate, dup, ddown); the expert weights' in float32."""
    _, state = _moe.moe_forward(
        input, logits, gate, up, down, bias=bias, backward=backward,
        **_moe_kwargs(routing, top_k, renormalize, groups, selected_groups, group_top_two, route_scale, scoring,
                      weight_renormalize, weight_scale, forward),
    )
    return _moe.moe_backward(state, grad_output.contiguous())


@moe_backward.register_fake
def _(grad_output, input, logits, bias, gate, up, down, *options):
    def f32(t):
        return t.new_empty(t.shape, dtype=torch.float32)

    return input.new_empty(input.shape), logits.new_empty(logits.shape), f32(gate), f32(up), f32(down)


def _moe_setup(ctx, inputs, output):
    input, logits, bias, gate, up, down, *options = inputs
    ctx.save_for_backward(input, logits, bias, gate, up, down)
    ctx.options = options


def _moe_grad(ctx, grad_output):
    input, logits, bias, gate, up, down = ctx.saved_tensors
    dinput, dlogits, dgate, dup, ddown = moe_backward(grad_output, input, logits, bias, gate, up, down, *ctx.options)
    return (dinput, dlogits, None, dgate.to(gate.dtype), dup.to(up.dtype), ddown.to(down.dtype)) + (None,) * 12


moe.register_autograd(_moe_grad, setup_context=_moe_setup)


def _moe_second_derivative(ctx, *grads):
    raise _rudnn.Unsupported(
        "moe: only first-order derivatives exist; the gradients of moe_backward cannot be differentiated again "
        "(a backward through gradients made with create_graph=True)")


moe_backward.register_autograd(_moe_second_derivative)
