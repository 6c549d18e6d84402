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

Loaded by ``import rudnn`` when torch is already imported, else by ``rudnn.torch_autograd``.
"""

# No `from __future__ import annotations`: custom_op reads the annotations as types.
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import normalization as _ops
from . import transformer as _tf

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
