"""torch.autograd wrappers of ruDNN's normalization ops (imports torch).

Import explicitly (``import rudnn.torch_autograd``) or use ``rudnn.torch_autograd`` (loaded on
first access). Each forward runs the ruDNN op, each backward the matching ruDNN backward op,
both on ``torch.cuda.current_stream(device)`` for CUDA tensors (autograd runs a backward on
the stream of its forward). The backward ops recompute their statistics from the saved
inputs, so only the inputs (and softmax's output) are saved.

Functional API:
    rms_norm(x, weight=None, eps=1e-6)
    layer_norm(x, weight=None, bias=None, eps=1e-5)
    softmax(x)                              # over the last axis
    cross_entropy(logits, targets, ignore_index=None, reduction="mean")

Modules: :class:`RMSNorm`, :class:`LayerNorm` (normalized over the last axis only).

Differences from torch.nn.functional:
    - cross_entropy's class axis is the last one, its loss is float32 whatever the logits'
      dtype, a negative target ``t`` means class ``t + C``, out-of-range targets give NaN
      (no device assert), and ``ignore_index`` defaults to ``None`` (no row ignored; torch's
      default is -100). ``'mean'`` divides by the number of rows not ignored (NaN when every
      row is), as torch does.
    - Parameter gradients come back in the parameter's dtype (float32 master weights with
      float16/bfloat16 activations are fine).
"""

import torch

import rudnn

__all__ = [
    "RMSNormFunction",
    "LayerNormFunction",
    "SoftmaxFunction",
    "CrossEntropyFunction",
    "rms_norm",
    "layer_norm",
    "softmax",
    "cross_entropy",
    "RMSNorm",
    "LayerNorm",
]


class RMSNormFunction(torch.autograd.Function):
    """y = rms_norm(x, weight, eps); gradients for x and weight."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        y = rudnn.rms_norm(x, weight, eps)
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        dx, dweight = rudnn.rms_norm_backward(dy, x, weight, ctx.eps)
        return (
            dx if ctx.needs_input_grad[0] else None,
            dweight if ctx.needs_input_grad[1] else None,
            None,
        )


class LayerNormFunction(torch.autograd.Function):
    """y = layer_norm(x, weight, bias, eps); gradients for x, weight and bias."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        y = rudnn.layer_norm(x, weight, bias, eps)
        ctx.save_for_backward(x, weight, bias)
        ctx.eps = eps
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, bias = ctx.saved_tensors
        dx, dweight, dbias = rudnn.layer_norm_backward(dy, x, weight, bias, ctx.eps)
        return (
            dx if ctx.needs_input_grad[0] else None,
            dweight if ctx.needs_input_grad[1] else None,
            dbias if ctx.needs_input_grad[2] else None,
            None,
        )


class SoftmaxFunction(torch.autograd.Function):
    """y = softmax(x) over the last axis; backward from the saved output."""

    @staticmethod
    def forward(ctx, x):
        y = rudnn.softmax(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return rudnn.softmax_backward(dy, y)


_REDUCTIONS = ("mean", "sum", "none")


class CrossEntropyFunction(torch.autograd.Function):
    """Cross entropy of ``logits`` [..., C] against ``targets`` [...], reduced or not."""

    @staticmethod
    def forward(ctx, logits, targets, ignore_index, reduction):
        if reduction not in _REDUCTIONS:
            raise ValueError(f"cross_entropy: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
        # The rows a mean divides by: known on the host, or (with ignored targets) counted on
        # the device, so that nothing waits for it.
        count = 1.0
        if reduction == "mean":
            if ignore_index is None:
                count = float(targets.numel())
            else:
                count = (targets != ignore_index).sum().to(torch.float32)
        # A reduced loss whose logits need a gradient: the gradient comes from the same pass
        # over the logits as the loss, under an upstream gradient of 1 (per row: 1 / count);
        # backward scales it by the true upstream gradient on the device, which costs nothing
        # when that is 1, as it is for loss.backward(). It holds a logits-sized gradient from
        # forward to backward.
        ctx.fused = ctx.needs_input_grad[0] and reduction != "none"
        if ctx.fused:
            if isinstance(count, torch.Tensor):
                per_row = count.reciprocal().expand(targets.shape)
            else:
                per_row = 1.0 / max(count, 1.0)
            loss, dlogits = rudnn.cross_entropy_with_grad(logits, targets, per_row, ignore_index)
            ctx.save_for_backward(dlogits)
        else:
            loss = rudnn.cross_entropy(logits, targets, ignore_index)
            ctx.save_for_backward(logits, targets)
        ctx.ignore_index = ignore_index
        ctx.reduction = reduction
        if reduction == "none":
            return loss
        total = loss.sum()
        if reduction == "sum":
            return total
        ctx.count = count
        return total / count

    @staticmethod
    def backward(ctx, grad):
        grad = grad.to(torch.float32)
        if ctx.fused:
            (dlogits,) = ctx.saved_tensors
            rudnn.scale_unless_one(dlogits, grad.reshape(1))
            return dlogits, None, None, None
        logits, targets = ctx.saved_tensors
        if ctx.reduction == "none":
            dloss = grad
        elif ctx.reduction == "sum":
            dloss = grad.expand(targets.shape)
        else:
            dloss = (grad / ctx.count).expand(targets.shape)
        dlogits = rudnn.cross_entropy_backward(logits, targets, dloss, ctx.ignore_index)
        return dlogits, None, None, None


def rms_norm(x, weight=None, eps=1e-6):
    """Differentiable :func:`rudnn.rms_norm` over the last axis."""
    return RMSNormFunction.apply(x, weight, eps)


def layer_norm(x, weight=None, bias=None, eps=1e-5):
    """Differentiable :func:`rudnn.layer_norm` over the last axis."""
    return LayerNormFunction.apply(x, weight, bias, eps)


def softmax(x):
    """Differentiable :func:`rudnn.softmax` over the last axis."""
    return SoftmaxFunction.apply(x)


def cross_entropy(logits, targets, ignore_index=None, reduction="mean"):
    """Differentiable cross entropy over the last axis; reduction 'mean', 'sum' or 'none'."""
    return CrossEntropyFunction.apply(logits, targets, ignore_index, reduction)


class RMSNorm(torch.nn.Module):
    """RMSNorm over the last axis of size ``hidden_size`` with a learnable weight (init 1)."""

    def __init__(self, hidden_size, eps=1e-6, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        self.hidden_size = int(hidden_size)
        self.eps = eps
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.ones(self.hidden_size, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.hidden_size}, eps={self.eps}, elementwise_affine={self.weight is not None}"


class LayerNorm(torch.nn.Module):
    """LayerNorm over the last axis of size ``hidden_size`` with learnable weight / bias."""

    def __init__(self, hidden_size, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None):
        super().__init__()
        self.hidden_size = int(hidden_size)
        self.eps = eps
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.ones(self.hidden_size, device=device, dtype=dtype))
            if bias:
                self.bias = torch.nn.Parameter(torch.zeros(self.hidden_size, device=device, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x):
        return layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.hidden_size}, eps={self.eps}, elementwise_affine={self.weight is not None}"
