"""Differentiable ruDNN ops for torch tensors, with torch's defaults (imports torch >= 2.4).

Import explicitly (``import rudnn.torch_autograd``) or use ``rudnn.torch_autograd`` (loaded on
first access). Each function calls a ``torch.library`` custom op (``torch.ops.rudnn.*``, see
:mod:`rudnn.torch_library`) whose backward is ruDNN's backward op, so the functions work in
eager mode, under ``torch.autograd.gradcheck`` (float64 on the CPU) and under
``torch.compile(fullgraph=True)`` without graph breaks. CUDA ops run on
``torch.cuda.current_stream(device)``. The backward ops recompute their statistics from the
saved inputs, so only the inputs (and softmax's output) are saved.

Functional API (over the last axis; shapes and dtypes as the ``rudnn`` functions of the same
names, plus float64 on the CPU):
    rms_norm(x, weight=None, eps=1e-6)                      -> y
    layer_norm(x, weight=None, bias=None, eps=1e-5)         -> y
    add_rms_norm(x, residual, weight=None, eps=1e-6)        -> (x + residual, normed)
    softmax(x)                                              -> y
    logsumexp(x)                                            -> x.shape[:-1]
    cross_entropy(logits, targets, ignore_index=-100, reduction="mean")

Transformer family (shapes and dtypes as the ``rudnn`` functions of the same names):
    rope(x, dims=None, traditional=False, base=None, freqs=None, scale=1.0, offset=0,
         offsets=None, positions=None)                      -> x's shape
    norm_rope(x, weight=None, eps=1e-6, normalize=True, dims=None, ..., offset=0, cache=None)
    swiglu(gate, up=None)                                   -> silu(gate) * up
    geglu(gate, up=None, approximate="none")                -> gelu(gate) * up
  rope's defaults are Hugging Face Llama's: the halves (``rotate_half``) and, when neither
  ``base`` nor ``freqs`` is given, ``base=10000`` (``rope_theta``). The gradient of rope is
  rope_backward (x only: positions and freqs get none); norm_rope's is rope_backward then
  rms_norm_backward (x and weight); with ``cache`` it writes the cache in place and is not
  differentiable (a KV-cache write). ``up=None`` is the one-tensor form: ``gate`` holds
  ``[..., 2I]`` (gate then up along the last axis), as a fused gate/up projection gives.

Pooling, grid sampling, gated delta, CTC, attention (shapes and dtypes as the ``rudnn``
functions of the same names):
    max_pool(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
             return_indices=False)                          -> out (, int64 indices)
    avg_pool(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
             divisor_override=None)                         -> out
    adaptive_max_pool(x, output_size, return_indices=False) -> out (, int64 indices)
    adaptive_avg_pool(x, output_size)                       -> out
    lp_pool(x, norm_type, kernel_size, stride=None, ceil_mode=False)
    grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    affine_grid(theta, size, align_corners=False)
    gated_delta(q, k, v, g, beta, state, cu_seqlens=None)  -> (y, state)
    gated_delta_rule(query, key, value, beta, log_decay, initial_state, query_scale=1.0,
                     cu_seqlens=None, chunk_size=None)      -> (output, final_state)
    chunk_gated_delta_rule(q, k, v, g, beta=None, scale=None, initial_state=None,
                           output_final_state=False, cu_seqlens=None,
                           use_qk_l2norm_in_kernel=False)   -> (o, final_state or None)
    fused_recurrent_gated_delta_rule(...)                   the same arguments
  chunk_gated_delta_rule and fused_recurrent_gated_delta_rule take fla's signature and
  [B, T, H, D] layout (log-space g), so that a Qwen3-Next gated-delta layer runs on them
  unchanged.
    ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
             zero_infinity=False)
    attention(q, k, v, *, scale=None, is_causal=False, mask=None, bias=None, sinks=None,
              window=None, softcap=None, alibi_slopes=None, layout="bhsd", cu_seqlens_q=None,
              cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0, strategy="auto")  -> out
    scaled_dot_product_attention(query, key, value, attn_mask=None, is_causal=False,
              scale=None)                                   torch's names
  The pooling options are an int or one int per spatial axis, as torch's; the rank of x
  (3, 4, 5) picks 1-D, 2-D or 3-D. max_pool's gradient comes from its indices; grid_sample
  gives gradients for the input and the grid; gated_delta for every input and the initial
  state; attention for q, k, v, sinks and bias.
  Differences from torch: ``is_causal`` is bottom-right aligned (query i sees keys up to
  ``i + Lk - Lq``; torch's sdpa aligns top-left, the same when Lq == Lk); pooling needs the
  batch axis; ctc_loss on a GPU with lengths on the device gives a NaN loss for a bad length
  or label (torch raises: it reads them on the host; host lengths are checked here too).

Interpolation, convolution, mixture of experts (shapes and dtypes as the ``rudnn`` functions):
    interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False)   torch's names
    conv1d / conv2d / conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1,
                groups=1)                                   torch's names ("same", "valid")
    conv(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *,
         padding_end=None, activation="none", residual=None, layout="nchw", strategy="auto")
    causal_conv1d(x, weight, bias=None, initial_state=None, cu_seqlens=None, silu=False)
    moe(input, logits, gate, up, down, *, bias=None, routing="softmax", top_k=1, ...)
  Gradients: interpolate's input; conv's input, weight, bias and residual (through the fused
  activation); causal_conv1d's x, weight, bias and initial state; moe's input, logits and
  expert weights (its backward recomputes the forward's state; a second derivative is
  :class:`rudnn.Unsupported`).

Modules: :class:`RMSNorm`, :class:`LayerNorm` (normalized over the last axis only),
:class:`SparseMoE` (router + routed SwiGLU experts: Mixtral, Qwen-MoE, DeepSeek-V3).

Differences from torch.nn.functional:
    - cross_entropy's class axis is the last one, its loss is float32 whatever the logits'
      dtype (float64 for float64 logits), a negative target other than ``ignore_index`` means
      class ``t + C``, out-of-range targets give NaN (no device assert); ``ignore_index=None``
      ignores no row. ``'mean'`` divides by the number of rows not ignored (NaN when every row
      is), as torch does. With logits that need a gradient and a reduction, the gradient is
      computed in the forward pass from the same read of the logits and held until backward
      (a logits-sized tensor), which scales it by the upstream gradient in place (no pass when
      that is 1, as for ``loss.backward()``). That backward runs once: a second one
      (``retain_graph=True``) is torch's "modified by an inplace operation" error.
    - Parameter gradients come back in the parameter's dtype (float32 master weights with
      float16/bfloat16 activations are fine).

Errors are :class:`rudnn.Error` subclasses, as for the ``rudnn`` functions.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _rudnn
from . import torch_library as _lib

__all__ = [
    "rms_norm",
    "layer_norm",
    "add_rms_norm",
    "softmax",
    "logsumexp",
    "cross_entropy",
    "rope",
    "norm_rope",
    "swiglu",
    "geglu",
    "max_pool",
    "avg_pool",
    "adaptive_max_pool",
    "adaptive_avg_pool",
    "lp_pool",
    "grid_sample",
    "affine_grid",
    "gated_delta",
    "gated_delta_rule",
    "chunk_gated_delta_rule",
    "fused_recurrent_gated_delta_rule",
    "ctc_loss",
    "attention",
    "scaled_dot_product_attention",
    "interpolate",
    "conv",
    "conv1d",
    "conv2d",
    "conv3d",
    "causal_conv1d",
    "moe",
    "RMSNorm",
    "LayerNorm",
    "SparseMoE",
    # Earlier names, kept: each .apply is the function of the same op.
    "RMSNormFunction",
    "LayerNormFunction",
    "SoftmaxFunction",
    "CrossEntropyFunction",
]


def _eps(op: str, eps) -> float:
    # The custom op's schema takes a float; refuse what the rudnn functions refuse.
    if isinstance(eps, bool):
        raise _rudnn.InvalidArgument(f"{op}: eps must be a number, got bool")
    return float(eps)


def rms_norm(x: Tensor, weight: Optional[Tensor] = None, eps: float = 1e-6) -> Tensor:
    """Differentiable :func:`rudnn.rms_norm`: ``x / sqrt(mean(x**2) + eps) * weight``."""
    return _lib.rms_norm(x, weight, _eps("rms_norm", eps))


def layer_norm(x: Tensor, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    """Differentiable :func:`rudnn.layer_norm` over the last axis."""
    return _lib.layer_norm(x, weight, bias, _eps("layer_norm", eps))


def add_rms_norm(
    x: Tensor, residual: Tensor, weight: Optional[Tensor] = None, eps: float = 1e-6
) -> Tuple[Tensor, Tensor]:
    """Differentiable :func:`rudnn.add_rms_norm`: ``(x + residual, rms_norm(x + residual))``."""
    return _lib.add_rms_norm(x, residual, weight, _eps("add_rms_norm", eps))


def softmax(x: Tensor) -> Tensor:
    """Differentiable :func:`rudnn.softmax` over the last axis."""
    return _lib.softmax(x)


def logsumexp(x: Tensor) -> Tensor:
    """Differentiable :func:`rudnn.logsumexp` over the last axis."""
    return _lib.logsumexp(x)


def cross_entropy(
    logits: Tensor, targets: Tensor, ignore_index: Optional[int] = -100, reduction: str = "mean"
) -> Tensor:
    """Differentiable cross entropy over the last axis, with torch's defaults.

    Args:
        logits: ``[..., C]``, float32 / float16 / bfloat16 (float64 on the CPU).
        targets: integer class indices of shape ``logits.shape[:-1]``.
        ignore_index: rows whose target equals it contribute 0 (and are not counted by
            ``'mean'``); default -100 as in torch; ``None`` ignores no row.
        reduction: ``'mean'`` (default), ``'sum'`` or ``'none'``.

    Returns:
        float32 loss (float64 for float64 logits): 0-d, or ``targets``' shape for ``'none'``.

    Raises:
        ValueError: an unknown reduction; rudnn.Error subclasses as :func:`rudnn.cross_entropy`.
    """
    if reduction not in _lib.REDUCTIONS:
        raise ValueError(f"cross_entropy: reduction must be one of {_lib.REDUCTIONS}, got {reduction!r}")
    if isinstance(ignore_index, bool):
        raise _rudnn.InvalidArgument("cross_entropy: ignore_index must be an int or None, got bool")
    fused = torch.is_grad_enabled() and logits.requires_grad and reduction != "none"
    loss, _ = _lib.cross_entropy(logits, targets, ignore_index, reduction, fused)
    return loss


# ---- transformer family --------------------------------------------------------------------

#: Hugging Face's default ``rope_theta``: the base when neither base nor freqs is given.
DEFAULT_ROPE_BASE = 10000.0


def _flag(op: str, name: str, value) -> bool:
    if not isinstance(value, bool):
        raise _rudnn.InvalidArgument(f"{op}: {name} must be a bool, got {type(value).__name__}")
    return value


def _number(op: str, name: str, value) -> float:
    if isinstance(value, bool):
        raise _rudnn.InvalidArgument(f"{op}: {name} must be a number, got bool")
    return float(value)


def _index(op: str, name: str, value) -> int:
    if isinstance(value, bool):
        raise _rudnn.InvalidArgument(f"{op}: {name} must be an int, got bool")
    return value if isinstance(value, torch.SymInt) else int(value)


def _rotation(op, x, dims, traditional, base, freqs, scale, offset):
    """rope's schema arguments (dims, traditional, base, freqs, scale, offset)."""
    if base is None and freqs is None:
        base = DEFAULT_ROPE_BASE
    dims = x.shape[-1] if dims is None else _index(op, "dims", dims)
    base = None if base is None else _number(op, "base", base)
    return dims, _flag(op, "traditional", traditional), base, freqs, _number(op, "scale", scale), _index(
        op, "offset", offset
    )


def rope(
    x: Tensor,
    dims: Optional[int] = None,
    *,
    traditional: bool = False,
    base: Optional[float] = None,
    freqs: Optional[Tensor] = None,
    scale: float = 1.0,
    offset: int = 0,
    offsets: Optional[Tensor] = None,
    positions: Optional[Tensor] = None,
) -> Tensor:
    """Differentiable :func:`rudnn.rope` of ``x [B, ..., T, D]`` (gradient for ``x`` only).

    Defaults as Hugging Face Llama: the halves (``traditional=False``, ``rotate_half``), all
    ``D`` features, and ``base=10000`` when neither ``base`` nor ``freqs`` is given. Positions:
    ``offset + t``, ``offsets[b] + t`` (``[B]``) or ``positions`` (``[T]`` / ``[B, T]``, the
    position ids), int32 or int64 on ``x``'s device.
    """
    dims, traditional, base, freqs, scale, offset = _rotation("rope", x, dims, traditional, base, freqs, scale, offset)
    return _lib.rope(x, dims, traditional, base, freqs, scale, offset, offsets, positions)


def norm_rope(
    x: Tensor,
    weight: Optional[Tensor] = None,
    eps: float = 1e-6,
    *,
    normalize: bool = True,
    dims: Optional[int] = None,
    traditional: bool = False,
    base: Optional[float] = None,
    freqs: Optional[Tensor] = None,
    scale: float = 1.0,
    offset: int = 0,
    cache: Optional[Tensor] = None,
) -> Tensor:
    """:func:`rudnn.norm_rope`: rms_norm of each head's features (``normalize``, with an optional
    ``[D]`` weight) then :func:`rope` at positions ``offset .. offset + L``.

    Without ``cache``: a new tensor, differentiable in ``x`` and ``weight``. With ``cache``
    (``[B, H, C, D]``): positions ``offset .. offset + L`` of the cache are written in place and
    the cache is returned (a KV-cache write, not differentiable). rope's defaults as for
    :func:`rope`.
    """
    dims, traditional, base, freqs, scale, offset = _rotation(
        "norm_rope", x, dims, traditional, base, freqs, scale, offset
    )
    eps = _number("norm_rope", "eps", eps)
    normalize = _flag("norm_rope", "normalize", normalize)
    if cache is not None:
        _lib.norm_rope_cache_(x, weight, eps, normalize, dims, traditional, base, freqs, scale, offset, cache)
        return cache
    return _lib.norm_rope(x, weight, eps, normalize, dims, traditional, base, freqs, scale, offset)


def swiglu(gate: Tensor, up: Optional[Tensor] = None) -> Tensor:
    """Differentiable :func:`rudnn.swiglu`: ``F.silu(gate) * up``; ``up=None``: ``gate`` is
    ``[..., 2I]`` holding gate and up as the halves of its last axis."""
    return _lib.swiglu(gate, up)


def geglu(gate: Tensor, up: Optional[Tensor] = None, approximate: str = "none") -> Tensor:
    """Differentiable :func:`rudnn.geglu`: ``F.gelu(gate, approximate=approximate) * up``
    (``"none"``: erf, torch's default; ``"tanh"``); ``up=None`` as for :func:`swiglu`."""
    if approximate not in ("none", "tanh"):
        raise _rudnn.InvalidArgument(f"geglu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _lib.geglu(gate, up, approximate)


# ---- pooling, grid_sample, gated delta, ctc, attention -------------------------------------

from .ctc import host_checked as _ctc_host_checked  # noqa: E402
from .pooling import spatial as _spatial  # noqa: E402


def max_pool(
    x: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False, return_indices: bool = False
):
    """Differentiable :func:`rudnn.max_pool` (1-D, 2-D or 3-D by x's rank): ``out``, or
    ``(out, indices)`` with ``return_indices`` (int64, flat within each (n, c) plane, as
    torch's)."""
    out, indices = _lib.max_pool(
        x, _spatial(x, kernel_size), _spatial(x, stride), _spatial(x, padding), _spatial(x, dilation),
        _flag("max_pool", "ceil_mode", ceil_mode),
    )
    return (out, indices) if return_indices else out


def avg_pool(
    x: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: Optional[int] = None,
) -> Tensor:
    """Differentiable :func:`rudnn.avg_pool` (1-D, 2-D or 3-D by x's rank)."""
    if divisor_override is not None:
        divisor_override = _index("avg_pool", "divisor_override", divisor_override)
    return _lib.avg_pool(
        x, _spatial(x, kernel_size), _spatial(x, stride), _spatial(x, padding),
        _flag("avg_pool", "ceil_mode", ceil_mode), _flag("avg_pool", "count_include_pad", count_include_pad),
        divisor_override,
    )


def adaptive_max_pool(x: Tensor, output_size, return_indices: bool = False):
    """Differentiable :func:`rudnn.adaptive_max_pool` (torch's adaptive_max_pool{1,2,3}d;
    output_size an int or one per spatial axis, no None entries)."""
    out, indices = _lib.adaptive_max_pool(x, _spatial(x, output_size))
    return (out, indices) if return_indices else out


def adaptive_avg_pool(x: Tensor, output_size) -> Tensor:
    """Differentiable :func:`rudnn.adaptive_avg_pool` (torch's adaptive_avg_pool{1,2,3}d)."""
    return _lib.adaptive_avg_pool(x, _spatial(x, output_size))


def lp_pool(x: Tensor, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False) -> Tensor:
    """Differentiable :func:`rudnn.lp_pool` (torch's lp_pool{1,2,3}d; norm_type finite > 0)."""
    return _lib.lp_pool(
        x, _number("lp_pool", "norm_type", norm_type), _spatial(x, kernel_size), _spatial(x, stride),
        _flag("lp_pool", "ceil_mode", ceil_mode),
    )


def grid_sample(
    input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros", align_corners: bool = False
) -> Tensor:
    """Differentiable :func:`rudnn.grid_sample` (gradients for input and grid). ``align_corners``
    defaults to False, as torch's does (without its warning). Under
    ``torch.use_deterministic_algorithms(True)`` the GPU input gradient is the deterministic
    gather (where torch's CUDA grid_sampler backward raises)."""
    return _lib.grid_sample(input, grid, mode, padding_mode, _flag("grid_sample", "align_corners", align_corners))


def affine_grid(theta: Tensor, size, align_corners: bool = False) -> Tensor:
    """Differentiable :func:`rudnn.affine_grid` (gradient for theta)."""
    return _lib.affine_grid(theta, [int(s) for s in size], _flag("affine_grid", "align_corners", align_corners))


def gated_delta(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor, cu_seqlens: Optional[Tensor] = None
) -> Tuple[Tensor, Tensor]:
    """Differentiable :func:`rudnn.gated_delta` (gradients of q, k, v, g, beta and the initial
    state through :func:`rudnn.gated_delta_backward`); ``cu_seqlens``: the packed varlen form."""
    return _lib.gated_delta(q, k, v, g, beta, state, cu_seqlens)


def gated_delta_rule(
    query: Tensor, key: Tensor, value: Tensor, beta: Tensor, log_decay: Tensor, initial_state: Tensor,
    query_scale: float = 1.0, cu_seqlens: Optional[Tensor] = None, chunk_size: Optional[int] = None,
) -> Tuple[Tensor, Tensor]:
    """Differentiable :func:`rudnn.gated_delta_rule` (every tensor input gets a gradient); with
    ``chunk_size`` the forward is the chunked prefill and the gradient the chunked form's
    backward (:func:`rudnn.gated_delta_rule_backward` with ``chunk_size``)."""
    return _lib.gated_delta_rule(
        query, key, value, beta, log_decay, initial_state, _number("gated_delta_rule", "query_scale", query_scale),
        cu_seqlens, chunk_size,
    )


def _fla_form(op: str, q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
              use_qk_l2norm_in_kernel, chunk_size):
    # fla's [B, T, H, D] operands and log-space gate through gated_delta_rule's [B, H, T, D]
    # form: transposed views (read without a copy when dense in D), key heads repeated for
    # grouped value heads, the state created or made float32, the output made contiguous.
    for name, t, rank in (("q", q, 4), ("k", k, 4), ("v", v, 4), ("g", g, 3)):
        if t.dim() != rank:
            raise _rudnn.ShapeMismatch(f"{op}: {name} has rank {t.dim()}; expected {rank} ([B, T, H, D] / [B, T, H])")
    B, T, Hk, K = q.shape
    Hv, V = v.shape[2], v.shape[3]
    if Hk == 0 or Hv % Hk != 0:
        raise _rudnn.ShapeMismatch(f"{op}: v has {Hv} heads and q {Hk}; expected a multiple of q's")
    want_final = _flag(op, "output_final_state", output_final_state)
    if _flag(op, "use_qk_l2norm_in_kernel", use_qk_l2norm_in_kernel):
        q, k = _l2norm(q), _l2norm(k)
    if Hv != Hk:
        q, k = q.repeat_interleave(Hv // Hk, 2), k.repeat_interleave(Hv // Hk, 2)
    if beta is None:
        beta = torch.ones(B, T, Hv, dtype=q.dtype, device=q.device)
    scale = K**-0.5 if scale is None else _number(op, "scale", scale)
    sequences = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    if initial_state is None:
        initial_state = torch.zeros(sequences, Hv, K, V, dtype=torch.float32, device=q.device)
    if cu_seqlens is not None:
        cu_seqlens = cu_seqlens.to(torch.int32)
    out, final = _lib.gated_delta_rule(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), beta.to(q.dtype).transpose(1, 2),
        g.float().transpose(1, 2), initial_state.float(), scale, cu_seqlens, chunk_size,
    )
    return out.transpose(1, 2).contiguous(), (final if want_final else None)


def _l2norm(x: Tensor) -> Tensor:
    # fla's and Hugging Face's in-kernel normalisation: x / sqrt(sum(x^2) + 1e-6), in float32.
    f = x.float()
    return (f * torch.rsqrt((f * f).sum(-1, keepdim=True) + 1e-6)).to(x.dtype)


def chunk_gated_delta_rule(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Optional[Tensor] = None, scale: Optional[float] = None,
    initial_state: Optional[Tensor] = None, output_final_state: bool = False, cu_seqlens: Optional[Tensor] = None,
    use_qk_l2norm_in_kernel: bool = False, chunk_size: int = 64,
) -> Tuple[Tensor, Optional[Tensor]]:
    """fla's ``chunk_gated_delta_rule`` (what Qwen3-Next's gated-delta layer calls), differentiable:
    ruDNN's chunked prefill (:func:`gated_delta_rule` with ``chunk_size``) in fla's layout.

    Args:
        q, k: ``[B, T, Hk, K]``; v: ``[B, T, Hv, V]``, Hv a multiple of Hk (key heads are
            repeated for the value heads that share them); one dtype (float32, float16,
            bfloat16; float64 on the CPU). K and V up to 256 on a GPU.
        g: ``[B, T, Hv]``, the decay in log space (any floating dtype; used as float32).
        beta: ``[B, T, Hv]`` (cast to q's dtype); None: ones.
        scale: the query scale; None: ``K ** -0.5``.
        initial_state: ``[N, Hv, K, V]`` (N = B, or the sequence count with cu_seqlens), used as
            float32; None: zeros.
        output_final_state: return the final state (float32 ``[N, Hv, K, V]``) instead of None.
        cu_seqlens: ``[N + 1]`` offsets of packed sequences along T (B = 1), any integer dtype
            (made int32 on the device).
        use_qk_l2norm_in_kernel: normalise q and k over their last axis first
            (``x / sqrt(sum(x**2) + 1e-6)`` in float32), as Qwen3-Next asks.
        chunk_size: steps per chunk of the prefill (64, as fla).

    Returns:
        ``(o, final_state)``: o ``[B, T, Hv, V]`` in q's dtype (contiguous), final_state or None.
        Gradients reach q, k, v, g, beta and initial_state (the chunked backward).
    """
    return _fla_form("chunk_gated_delta_rule", q, k, v, g, beta, scale, initial_state, output_final_state,
                     cu_seqlens, use_qk_l2norm_in_kernel, _index("chunk_gated_delta_rule", "chunk_size", chunk_size))


def fused_recurrent_gated_delta_rule(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Optional[Tensor] = None, scale: Optional[float] = None,
    initial_state: Optional[Tensor] = None, output_final_state: bool = False, cu_seqlens: Optional[Tensor] = None,
    use_qk_l2norm_in_kernel: bool = False,
) -> Tuple[Tensor, Optional[Tensor]]:
    """fla's ``fused_recurrent_gated_delta_rule`` (Qwen3-Next's decode step), differentiable:
    the token-by-token recurrence, arguments and results as :func:`chunk_gated_delta_rule`."""
    return _fla_form("fused_recurrent_gated_delta_rule", q, k, v, g, beta, scale, initial_state, output_final_state,
                     cu_seqlens, use_qk_l2norm_in_kernel, None)


def _lengths(value, like: Tensor) -> Tensor:
    if isinstance(value, Tensor):
        return value
    return torch.as_tensor(value, dtype=torch.int64, device=like.device)


def ctc_loss(
    log_probs: Tensor,
    targets: Tensor,
    input_lengths,
    target_lengths,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
) -> Tensor:
    """Differentiable :func:`rudnn.ctc_loss` with torch's defaults and argument order; lengths
    may be tensors or sequences of ints (made int64 tensors on log_probs' device). With
    log_probs on a GPU, host lengths (and CPU targets) are checked on the host first, as torch
    does (:func:`rudnn.ctc.ctc_loss_check`), then moved to the device."""
    blank = _index("ctc_loss", "blank", blank)
    targets, input_lengths, target_lengths = _ctc_host_checked(log_probs, targets, input_lengths, target_lengths,
                                                               blank)
    return _lib.ctc_loss(
        log_probs, targets, _lengths(input_lengths, log_probs), _lengths(target_lengths, log_probs),
        blank, reduction, _flag("ctc_loss", "zero_infinity", zero_infinity),
    )


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    scale: Optional[float] = None,
    is_causal: bool = False,
    mask: Optional[Tensor] = None,
    bias: Optional[Tensor] = None,
    sinks: Optional[Tensor] = None,
    window: Optional[int] = None,
    softcap: Optional[float] = None,
    alibi_slopes: Optional[Tensor] = None,
    layout: str = "bhsd",
    cu_seqlens_q: Optional[Tensor] = None,
    cu_seqlens_k: Optional[Tensor] = None,
    max_seqlen_q: int = 0,
    max_seqlen_k: int = 0,
    max_score_bytes: Optional[int] = None,
    strategy: str = "auto",
) -> Tensor:
    """Differentiable :func:`rudnn.attention` (gradients for q, k, v, sinks and bias; the
    backward runs strategy "auto")."""
    return _lib.attention(
        q, k, v, mask, bias, sinks, alibi_slopes, cu_seqlens_q, cu_seqlens_k,
        None if scale is None else _number("attention", "scale", scale), _flag("attention", "is_causal", is_causal),
        None if window is None else _index("attention", "window", window),
        None if softcap is None else _number("attention", "softcap", softcap), layout,
        _index("attention", "max_seqlen_q", max_seqlen_q), _index("attention", "max_seqlen_k", max_seqlen_k),
        None if max_score_bytes is None else _index("attention", "max_score_bytes", max_score_bytes), strategy,
    )[0]


def scaled_dot_product_attention(
    query: Tensor, key: Tensor, value: Tensor, attn_mask: Optional[Tensor] = None, is_causal: bool = False,
    scale: Optional[float] = None,
) -> Tensor:
    """``torch.nn.functional.scaled_dot_product_attention``'s names over :func:`attention`
    (``[B, H, L, D]``; bool masks attend where True, float masks are added). Grouped-query
    heads are taken as they are (torch's ``enable_gqa=True``). No dropout. ``is_causal`` is
    bottom-right aligned (torch: top-left; the same when Lq == Lk)."""
    return attention(query, key, value, mask=attn_mask, is_causal=is_causal, scale=scale)


# ---- interpolation, convolution, mixture of experts ---------------------------------------

from .conv import spatial as _conv_spatial  # noqa: E402
from .interpolation import antialias_flag as _antialias_flag  # noqa: E402
from .interpolation import scales as _scales  # noqa: E402
from .interpolation import sizes as _sizes  # noqa: E402


def interpolate(
    input: Tensor,
    size=None,
    scale_factor=None,
    mode: str = "nearest",
    align_corners: Optional[bool] = None,
    recompute_scale_factor: Optional[bool] = None,
    antialias: bool = False,
) -> Tensor:
    """Differentiable :func:`rudnn.interpolate` (torch.nn.functional.interpolate's arguments;
    the input gradient is the deterministic gather; antialias for bilinear and bicubic)."""
    antialias = _antialias_flag(antialias)
    if align_corners is not None:
        align_corners = _flag("interpolate", "align_corners", align_corners)
    recompute = False if recompute_scale_factor is None else _flag(
        "interpolate", "recompute_scale_factor", recompute_scale_factor)
    dims = input.dim()
    if size is not None:
        size = [_index("interpolate", "size", s) for s in _sizes(dims, size)]
    if scale_factor is not None:
        scale_factor = [_number("interpolate", "scale_factor", s) for s in
                        ([scale_factor] * (dims - 2) if isinstance(scale_factor, (int, float)) else scale_factor)]
    return _lib.interpolate(input, size or [], scale_factor or [], mode, align_corners, recompute, antialias)


def _conv(op: str, rank: Optional[int], input: Tensor, weight: Tensor, bias, stride, padding, dilation, groups,
          padding_end=None, activation: str = "none", residual=None, layout: str = "nchw", strategy: str = "auto"):
    if rank is not None and input.dim() != rank + 2:
        shapes = {1: "[N, C, L]", 2: "[N, C, H, W]", 3: "[N, C, D, H, W]"}
        raise _rudnn.ShapeMismatch(
            f"{op}: input is {input.dim()}-d; expected {rank + 2}-d {shapes[rank]} (the batch axis is required)")
    r = input.dim() - 2
    mode = padding if isinstance(padding, str) else ""
    return _lib.conv(
        input, weight, bias, residual, _conv_spatial(r, stride), mode, [] if mode else _conv_spatial(r, padding),
        _conv_spatial(r, padding_end), _conv_spatial(r, dilation), _index(op, "groups", groups), activation, layout,
        strategy,
    )


def conv1d(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """Differentiable ``torch.nn.functional.conv1d`` (input ``[N, C, L]``; padding an int, a
    one-int list, "valid" or "same"): gradients for input, weight and bias."""
    return _conv("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """Differentiable ``torch.nn.functional.conv2d`` (input ``[N, C, H, W]``, channels-last
    tensors run channels-last): gradients for input, weight and bias."""
    return _conv("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """Differentiable ``torch.nn.functional.conv3d`` (input ``[N, C, D, H, W]``)."""
    return _conv("conv3d", 3, input, weight, bias, stride, padding, dilation, groups)


def conv(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride=1, padding=0, dilation=1,
         groups: int = 1, *, padding_end=None, activation: str = "none", residual: Optional[Tensor] = None,
         layout: str = "nchw", strategy: str = "auto") -> Tensor:
    """Differentiable :func:`rudnn.conv_forward` with its options (1-D/2-D/3-D by the input's
    rank; asymmetric padding, the fused epilogue ``activation(conv + bias + residual)``, the
    "nhwc" layout): gradients for input, weight, bias and residual (the activation's from the
    recomputed pre-activation)."""
    return _conv("conv", None, input, weight, bias, stride, padding, dilation, groups, padding_end, activation,
                 residual, layout, strategy)


def causal_conv1d(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, initial_state: Optional[Tensor] = None,
                  cu_seqlens: Optional[Tensor] = None, silu: bool = False) -> Tensor:
    """Differentiable :func:`rudnn.causal_conv1d` (x ``[B, L, C]``, weight ``[C, W]``):
    gradients for x, weight, bias and initial_state. The state is read, never written (the
    in-place update of the decode form is :func:`rudnn.causal_conv1d` with ``conv_state``)."""
    return _lib.causal_conv1d(x, weight, bias, initial_state, cu_seqlens, _flag("causal_conv1d", "silu", silu))


def moe(
    input: Tensor,
    logits: Tensor,
    gate: Tensor,
    up: Tensor,
    down: Tensor,
    *,
    bias: Optional[Tensor] = None,
    routing: str = "softmax",
    top_k: int = 1,
    renormalize: bool = False,
    groups: int = 1,
    selected_groups: int = 1,
    group_top_two: bool = False,
    route_scale: float = 1.0,
    scoring: Optional[str] = None,
    weight_renormalize: Optional[bool] = None,
    weight_scale: Optional[float] = None,
    forward: str = "scalar",
    backward: str = "scalar",
) -> Tensor:
    """Differentiable :func:`rudnn.moe_forward` (options as there): gradients for input,
    logits (through the router weights of the fixed selection) and gate, up, down (computed in
    float32, returned in their dtype); the bias gets none. The backward recomputes the
    forward's state (one extra forward). Only first-order derivatives exist: differentiating
    the gradients again (``create_graph=True``, then a second backward through them) raises
    :class:`rudnn.Unsupported`."""
    op = "moe"
    if scoring is None:
        scoring = "sigmoid" if routing == "sigmoid_grouped" else "softmax"
    renormalize = _flag(op, "renormalize", renormalize)
    route_scale = _number(op, "route_scale", route_scale)
    return _lib.moe(
        input, logits, bias, gate, up, down, routing, _index(op, "top_k", top_k), renormalize,
        _index(op, "groups", groups), _index(op, "selected_groups", selected_groups),
        _flag(op, "group_top_two", group_top_two), route_scale, scoring,
        renormalize if weight_renormalize is None else _flag(op, "weight_renormalize", weight_renormalize),
        route_scale if weight_scale is None else _number(op, "weight_scale", weight_scale), forward, backward,
    )


class _Apply:
    """An earlier autograd.Function name whose ``apply`` is now the custom-op function."""

    def __init__(self, function):
        self.apply = function


RMSNormFunction = _Apply(rms_norm)
LayerNormFunction = _Apply(layer_norm)
SoftmaxFunction = _Apply(softmax)
CrossEntropyFunction = _Apply(cross_entropy)


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


class SparseMoE(torch.nn.Module):
    """A mixture-of-experts layer's routed branch: a router ``Linear(H, E, bias=False)`` and E
    SwiGLU experts ``down(silu(gate(x)) * up(x))``, run by :func:`moe` (no token dropped;
    nothing synchronises with the host).

    It takes the place of the routed experts of
    - Mixtral (``MixtralSparseMoeBlock``): ``routing="softmax", top_k=2, renormalize=True``;
    - Qwen2-MoE / Qwen3-MoE: ``routing="softmax", renormalize=norm_topk_prob``;
    - DeepSeek-V3 (``DeepseekV3MoE``): ``routing="sigmoid_grouped", groups=n_group,
      selected_groups=topk_group, group_top_two=True, renormalize=norm_topk_prob,
      route_scale=routed_scaling_factor, router_dtype=torch.float32``.
    Shared experts (Qwen-MoE's gated one, DeepSeek's) are ordinary MLPs beside it: add their
    output in the model. :meth:`from_weights` loads a block's trained weights.

    Args:
        hidden_size (H), intermediate_size (I), num_experts (E), top_k: the shapes.
        routing, renormalize, groups, selected_groups, group_top_two, route_scale: the
            selection and weights, as :func:`rudnn.moe_forward` takes them.
        router_dtype: the dtype the router's logits are computed in (None: the input's, as
            Mixtral and Qwen compute them; DeepSeek-V3 uses float32). Softmax and sigmoid
            run in float32 whatever it is.
        forward, backward: the expert strategies (``"scalar"``, ``"tensor_core"``,
            ``"auto"``; the default ``"auto"`` takes tensor cores where the GPU has them).
        device, dtype: of the parameters.

    Parameters: ``router.weight [E, H]``, ``gate_proj [E, I, H]``, ``up_proj [E, I, H]``,
    ``down_proj [E, H, I]``; with ``"sigmoid_grouped"`` the float32 buffer
    ``e_score_correction_bias [E]`` (DeepSeek-V3's: it moves the selection, never a weight,
    and gets no gradient). Initialised as ``torch.nn.Linear`` initialises its weights.

    ``forward(hidden_states [..., H], return_router_logits=False)`` returns ``[..., H]`` in
    the input's dtype (and the router logits ``[N, E]`` over the flattened tokens when asked,
    as Mixtral's block returns them for its auxiliary loss). Errors are those of
    :func:`moe` (:class:`rudnn.Error` subclasses) and, from the constructor,
    :class:`rudnn.InvalidArgument` for a routing other than the two.
    """

    def __init__(self, hidden_size, intermediate_size, num_experts, top_k, *, routing="softmax", renormalize=False,
                 groups=1, selected_groups=1, group_top_two=False, route_scale=1.0, router_dtype=None,
                 forward="auto", backward="auto", device=None, dtype=None):
        super().__init__()
        if routing not in ("softmax", "sigmoid_grouped"):
            raise _rudnn.InvalidArgument(
                f"SparseMoE: routing must be 'softmax' or 'sigmoid_grouped', got {routing!r}")
        H, I, E = (_index("SparseMoE", n, v) for n, v in (
            ("hidden_size", hidden_size), ("intermediate_size", intermediate_size), ("num_experts", num_experts)))
        self.hidden_size, self.intermediate_size, self.num_experts = H, I, E
        self.top_k = _index("SparseMoE", "top_k", top_k)
        self.routing = routing
        self.renormalize = _flag("SparseMoE", "renormalize", renormalize)
        self.groups = _index("SparseMoE", "groups", groups)
        self.selected_groups = _index("SparseMoE", "selected_groups", selected_groups)
        self.group_top_two = _flag("SparseMoE", "group_top_two", group_top_two)
        self.route_scale = _number("SparseMoE", "route_scale", route_scale)
        self.router_dtype = router_dtype
        self.expert_forward, self.expert_backward = forward, backward
        factory = dict(device=device, dtype=dtype)
        self.router = torch.nn.Linear(H, E, bias=False, **factory)
        self.gate_proj = torch.nn.Parameter(torch.empty(E, I, H, **factory))
        self.up_proj = torch.nn.Parameter(torch.empty(E, I, H, **factory))
        self.down_proj = torch.nn.Parameter(torch.empty(E, H, I, **factory))
        if routing == "sigmoid_grouped":
            self.register_buffer("e_score_correction_bias", torch.zeros(E, device=device, dtype=torch.float32))
        else:
            self.e_score_correction_bias = None
        self.reset_parameters()

    def reset_parameters(self):
        """Each expert's projections as ``torch.nn.Linear`` initialises its weight:
        uniform in ``±1 / sqrt(fan_in)``; the correction bias to zero."""
        self.router.reset_parameters()
        with torch.no_grad():
            for w in (self.gate_proj, self.up_proj, self.down_proj):
                bound = 1.0 / (w.shape[-1] ** 0.5)
                w.uniform_(-bound, bound)
            if self.e_score_correction_bias is not None:
                self.e_score_correction_bias.zero_()

    @classmethod
    def from_weights(cls, router_weight, gate, up, down, top_k, *, e_score_correction_bias=None, **options):
        """A layer holding copies of trained weights: ``router_weight [E, H]``; ``gate``,
        ``up`` ``[E, I, H]`` and ``down`` ``[E, H, I]``, each a tensor or a sequence of the E
        experts' ``Linear`` weights (Mixtral's ``w1``, ``w3``, ``w2``; Qwen's and
        DeepSeek's ``gate_proj``, ``up_proj``, ``down_proj``). Device and dtype are the
        experts'; other options as the constructor's. Example (Mixtral)::

            moe = SparseMoE.from_weights(block.gate.weight, [e.w1.weight for e in block.experts],
                                         [e.w3.weight for e in block.experts],
                                         [e.w2.weight for e in block.experts], top_k=2, renormalize=True)
        """
        def stacked(w):
            return w.detach() if isinstance(w, torch.Tensor) else torch.stack([t.detach() for t in w])

        gate, up, down = stacked(gate), stacked(up), stacked(down)
        if gate.dim() != 3 or up.shape != gate.shape or down.shape != (gate.shape[0], gate.shape[2], gate.shape[1]):
            raise _rudnn.ShapeMismatch(
                f"SparseMoE.from_weights: gate {tuple(gate.shape)}, up {tuple(up.shape)}, down {tuple(down.shape)};"
                " expected [E, I, H], [E, I, H], [E, H, I]")
        E, I, H = gate.shape
        if tuple(router_weight.shape) != (E, H):
            raise _rudnn.ShapeMismatch(
                f"SparseMoE.from_weights: router_weight has shape {tuple(router_weight.shape)}, expected [E, H] = [{E}, {H}]")
        layer = cls(H, I, E, top_k, device=gate.device, dtype=gate.dtype, **options)
        with torch.no_grad():
            layer.router.weight.copy_(router_weight)
            layer.gate_proj.copy_(gate)
            layer.up_proj.copy_(up)
            layer.down_proj.copy_(down)
            if e_score_correction_bias is not None:
                if layer.e_score_correction_bias is None:
                    raise _rudnn.InvalidArgument(
                        "SparseMoE.from_weights: e_score_correction_bias is given to a softmax routing")
                layer.e_score_correction_bias.copy_(e_score_correction_bias)
        return layer

    def forward(self, hidden_states, return_router_logits=False):
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, self.hidden_size)
        weight = self.router.weight
        if self.router_dtype is None:
            logits = torch.nn.functional.linear(x, weight.to(x.dtype))
        else:
            logits = torch.nn.functional.linear(x.to(self.router_dtype), weight.to(self.router_dtype))
        y = moe(x, logits, self.gate_proj, self.up_proj, self.down_proj, bias=self.e_score_correction_bias,
                routing=self.routing, top_k=self.top_k, renormalize=self.renormalize, groups=self.groups,
                selected_groups=self.selected_groups, group_top_two=self.group_top_two,
                route_scale=self.route_scale, forward=self.expert_forward, backward=self.expert_backward)
        y = y.reshape(shape)
        return (y, logits) if return_router_logits else y

    def extra_repr(self):
        return (f"hidden_size={self.hidden_size}, intermediate_size={self.intermediate_size}, "
                f"num_experts={self.num_experts}, top_k={self.top_k}, routing={self.routing!r}, "
                f"renormalize={self.renormalize}")
