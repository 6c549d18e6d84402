"""The attention family (C++: ``rudnn/attention.h``): dense scaled dot-product attention,
forward and backward, with grouped query heads, variable-length packed sequences, both
layouts, and the options of a modern model (mask, additive bias, sinks, sliding window, logit
soft-capping, ALiBi); and the pure plan functions that say which kernel runs and how much
memory it holds.

Definition (every strategy, every device). For batch b, query head h, query i, key j, with the
key/value head ``hk = h // (Hq // Hkv)`` and ``o = Lk - Lq`` (the queries are the last Lq
positions; per sequence for varlen)::

    x_ij = scale * (q_bhi . k_bhkj)                  scale default 1 / sqrt(D)
    x_ij = cap * tanh(x_ij / cap)                    with softcap = cap
    s_ij = x_ij - slope_h * |i + o - j|              with alibi_slopes
           + bias[b,h,i,j] + mask[b,h,i,j]           additive bias, additive float mask
    s_ij = -inf where a boolean mask is False, where j > i + o (is_causal), and where
           j <= i + o - window (sliding window)
    out_bhi = sum_j p_ij v_bhkj,  p_ij = exp(s_ij) / (sum_j exp(s_ij) + exp(sink_h))
    lse_bhi = log(sum_j exp(s_ij) + exp(sink_h))     (no sink term without sinks)

A row whose keys are all masked gives zeros and lse -inf (the sink with sinks), never NaN.

Shapes:
    - ``layout="bhsd"`` (default, torch's ``scaled_dot_product_attention``): q ``[B, Hq, Lq, D]``,
      k ``[B, Hkv, Lk, D]``, v ``[B, Hkv, Lk, Dv]``; out ``[B, Hq, Lq, Dv]``.
    - ``layout="bshd"`` (engines, FlashAttention): ``[B, L, H, D]`` each; out ``[B, Lq, Hq, Dv]``.
      (A ``[B, L, H, D]`` buffer can equally be passed as its ``transpose(1, 2)`` view in the
      default layout: no copy either way.)
    - varlen (``cu_seqlens_q`` and ``cu_seqlens_k`` given): q ``[total_q, Hq, D]``, k
      ``[total_k, Hkv, D]``, v ``[total_k, Hkv, Dv]`` packed sequence after sequence;
      ``cu_seqlens_*`` int32 ``[B + 1]`` on the operands' device (never read on the host for a
      GPU call), ``max_seqlen_q`` / ``max_seqlen_k`` ints bounding the lengths; out
      ``[total_q, Hq, Dv]``. The causal offset, window, masks and biases apply per sequence.
    - Hq a multiple of Hkv (GQA / MQA: K and V are never replicated); Dv may differ from D.
    - lse (``return_lse``): float32 (float64 for float64 inputs on the CPU) ``[B, Hq, Lq]``,
      or ``[Hq, total_q]`` for varlen, natural log.

Dtypes: q, k, v share one of float32, float16, bfloat16 (float64 on the CPU, where the float64
reference runs for every strategy). Products and the softmax accumulate in float32 on the
GPU; outputs are rounded once. Masks: bool (True attends) or additive in float32 or q's
dtype, broadcastable to ``[B, Hq, Lq, Lk]``; bias and sinks (``[Hq]``): float32 or q's dtype;
alibi_slopes ``[Hq]``: float32.

Strategies (``strategy=``, a name of the C++ ``AttentionStrategy``, case and underscores
ignored; see ``rudnn/attention.h`` for the full rules): ``"auto"`` (plan_attention's pick:
split_kv for decode, else flash where it runs, else composed, else flash_scalar),
``"flash"`` (fused tensor-core kernel, sm_80+: float16 / bfloat16, D = Dv in {64, 96, 128,
192, 256} or (192, 128), every option, varlen; backward for the same head sizes without a
bias gradient), ``"flash_scalar"`` (fused CUDA-core kernel, no score memory, every dtype and
option, D, Dv <= 1024, varlen, forward and backward), ``"composed"`` (GEMMs + masked softmax,
scores in memory under ``max_score_bytes``; padded batches, forward only), ``"split_kv"``
(flash-decoding for Lq <= 8, forward only), ``"autotune"`` (the fastest of flash, composed
and flash_scalar that can take the call, measured on the first call of its shape class and
recorded, see :func:`rudnn.autotune_entries`; decode shapes run auto's choice). A strategy
that cannot take a call is :class:`rudnn.Unsupported`, naming why.

Under ``torch.compile`` :func:`attention` called without ``out=``/``stream=`` calls its custom
op (``torch.ops.rudnn.attention``), which the compiler traces; its autograd runs
:func:`attention_backward`.

Errors are :class:`rudnn.Error` subclasses naming the op and the argument: shape, dtype,
device mismatches; Hq not a multiple of Hkv; a window without is_causal or < 1; a mask,
bias, sinks or slopes array that does not broadcast or has the wrong dtype; cu_seqlens of
the wrong dtype or length (or, on the CPU, not non-decreasing from 0 or beyond the rows or
max lengths); a non-finite scale; a softcap not finite and > 0; ``max_score_bytes`` 0 or below
one query row's scores with no kernel to honour it; an unknown option or strategy name
(InvalidArgument); a shape the requested strategy cannot take (Unsupported).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple, Union

from . import _interop as io
from . import _rudnn
from ._interop import Array, StreamLike

__all__ = ["attention", "attention_backward", "plan_attention", "plan_attention_backward"]

_TENSOR_OPTIONS = ("mask", "bias", "sinks", "alibi_slopes", "cu_seqlens_q", "cu_seqlens_k")


def _options(**kw):
    """The keyword options as the native module takes them (arrays zero-copy)."""
    return {k: (io.as_input(v) if k in _TENSOR_OPTIONS else v) for k, v in kw.items()}


_OPTIONS_DOC = """
        scale: the logits' scale, a finite number; ``None``: ``1 / sqrt(D)``.
        is_causal: query i sees keys ``0 ..= i + Lk - Lq`` (bottom-right aligned).
        mask: bool (True attends) or additive float mask broadcastable to ``[B, Hq, Lq, Lk]``
            (at most 4-d); combines with is_causal and window.
        bias: additive float bias broadcastable to ``[B, Hq, Lq, Lk]``.
        sinks: ``[Hq]`` attention-sink logits (gpt-oss).
        window: sliding window of keys (an int >= 1; needs is_causal), or None.
        softcap: logit soft-capping ``cap * tanh(x / cap)`` (Gemma 2), finite > 0, or None.
        alibi_slopes: ``[Hq]`` float32 ALiBi slopes.
        layout: ``"bhsd"`` (default) or ``"bshd"``.
        cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k: the varlen form (above).
        max_score_bytes: a cap (> 0) on every score-sized intermediate, or None.
        strategy: see above (default ``"auto"``).
"""


def attention(
    q: Array,
    k: Array,
    v: Array,
    *,
    scale: Optional[float] = None,
    is_causal: bool = False,
    mask: Optional[Array] = None,
    bias: Optional[Array] = None,
    sinks: Optional[Array] = None,
    window: Optional[int] = None,
    softcap: Optional[float] = None,
    alibi_slopes: Optional[Array] = None,
    layout: str = "bhsd",
    cu_seqlens_q: Optional[Array] = None,
    cu_seqlens_k: Optional[Array] = None,
    max_seqlen_q: int = 0,
    max_seqlen_k: int = 0,
    max_score_bytes: Optional[int] = None,
    return_lse: bool = False,
    strategy: str = "auto",
    out: Union[Array, Tuple[Array, Array], None] = None,
    stream: StreamLike = None,
) -> Union[Array, Tuple[Array, Array]]:
    if out is None and stream is None and io.compiling():
        o, lse = io.torch_ops().attention(
            q, k, v, mask, bias, sinks, alibi_slopes, cu_seqlens_q, cu_seqlens_k, scale, is_causal, window,
            softcap, layout, max_seqlen_q, max_seqlen_k, max_score_bytes, strategy,
        )
        return (o, lse) if return_lse else o
    kind, stream = io.context(q, stream)
    r = _rudnn.attention(
        io.as_input(q), io.as_input(k), io.as_input(v), strategy=strategy, stream=stream, out=io.as_output(out),
        **_options(
            scale=scale, is_causal=is_causal, mask=mask, bias=bias, sinks=sinks, window=window, softcap=softcap,
            alibi_slopes=alibi_slopes, layout=layout, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
            max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, max_score_bytes=max_score_bytes,
            return_lse=return_lse,
        ),
    )
    if out is not None:
        return out
    return io.results(kind, r) if return_lse else io.result(kind, r)


attention.__doc__ = (
    """Scaled dot-product attention (the definition above): ``out``, or ``(out, lse)`` with
    ``return_lse=True`` (what :func:`attention_backward` needs).

    Args:
        q, k, v: see the module's documentation for shapes and dtypes.
"""
    + _OPTIONS_DOC
    + """        return_lse: also return the per-row logsumexp.
        out: optional ``out`` array (the result's shape and q's dtype, a dense last axis), or
            ``(out, lse)`` with ``return_lse`` (lse float32 of its shape, contiguous); written
            in place and returned.
        stream: CUDA stream (see ``help(rudnn)``); ignored on the CPU.

    Returns:
        ``out`` in q's dtype (and lse). Memory: see :func:`plan_attention`; nothing is read
        back to the host and nothing synchronises it (a call can be captured in a CUDA graph).

    Raises: see the module's documentation.
"""
)


def attention_backward(
    dout: Array,
    q: Array,
    k: Array,
    v: Array,
    out: Array,
    lse: Array,
    *,
    scale: Optional[float] = None,
    is_causal: bool = False,
    mask: Optional[Array] = None,
    bias: Optional[Array] = None,
    bias_requires_grad: bool = False,
    sinks: Optional[Array] = None,
    window: Optional[int] = None,
    softcap: Optional[float] = None,
    alibi_slopes: Optional[Array] = None,
    layout: str = "bhsd",
    cu_seqlens_q: Optional[Array] = None,
    cu_seqlens_k: Optional[Array] = None,
    max_seqlen_q: int = 0,
    max_seqlen_k: int = 0,
    max_score_bytes: Optional[int] = None,
    deterministic: bool = False,
    strategy: str = "auto",
    grads_out: Optional[Sequence[Optional[Array]]] = None,
    stream: StreamLike = None,
) -> Tuple[Array, Array, Array, Optional[Array], Optional[Array]]:
    kind, stream = io.context(dout, stream)
    r = _rudnn.attention_backward(
        io.as_input(dout), io.as_input(q), io.as_input(k), io.as_input(v), io.as_input(out), io.as_input(lse),
        strategy=strategy, stream=stream, grads_out=io.as_output(grads_out),
        **_options(
            scale=scale, is_causal=is_causal, mask=mask, bias=bias, bias_requires_grad=bias_requires_grad,
            sinks=sinks, window=window, softcap=softcap, alibi_slopes=alibi_slopes, layout=layout,
            cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
            max_seqlen_k=max_seqlen_k, max_score_bytes=max_score_bytes, deterministic=deterministic,
        ),
    )
    return grads_out if grads_out is not None else io.results(kind, r)


attention_backward.__doc__ = (
    """Gradients through ``out = attention(q, k, v, ...)`` given ``dout`` (out's shape and dtype)
    and the forward's ``out`` and ``lse`` (as :func:`attention` returned them with
    ``return_lse=True``), recomputing the probabilities. With ``D_i = dout_i . out_i``:
    ``dv_j = sum_i p_ij dout_i``, ``ds_ij = p_ij (dout_i . v_j - D_i)`` (times
    ``1 - (x_ij / cap)^2`` with softcap), ``dq_i = scale sum_j ds_ij k_j``,
    ``dk_j = scale sum_i ds_ij q_i``, ``dsinks_h = -sum_{b,i} exp(sink_h - lse_i) D_i``,
    ``dbias`` = ds summed over the bias's broadcast axes. dk and dv sum over the query heads
    sharing a KV head. Float32 accumulation; each gradient in the dtype of its tensor.

    Args:
        dout, q, k, v, out, lse: see above (the forward's options must be passed again).
"""
    + _OPTIONS_DOC
    + """        bias_requires_grad: also compute dbias (memory: float32 dS of every score, under
            max_score_bytes).
        deterministic: ask for no atomics and a fixed reduction order (every backward built
            today gives that in both modes).
        grads_out: optional ``(dq, dk, dv)`` or ``(dq, dk, dv, dsinks, dbias)`` arrays (None
            where a gradient is absent: dsinks exactly when sinks are given, dbias exactly
            with bias_requires_grad), written in place and returned.
        stream: CUDA stream; ignored on the CPU.

    Strategies: ``"auto"`` (flash where it can run the backward, else flash_scalar),
    ``"flash"``, ``"flash_scalar"`` (D, Dv <= 1024); composed and split_kv have no backward
    (Unsupported).

    Returns:
        ``(dq, dk, dv, dsinks, dbias)``, None for a gradient not computed.

    Raises: see the module's documentation.
"""
)


def _plan(native, q_shape, k_shape, v_shape, dtype, strategy, device, kw):
    return native(tuple(q_shape), tuple(k_shape), tuple(v_shape), dtype, strategy=strategy, device=device,
                  **_options(**kw))


def plan_attention(
    q_shape: Sequence[int],
    k_shape: Sequence[int],
    v_shape: Sequence[int],
    dtype: Any,
    *,
    strategy: str = "auto",
    device: Any = None,
    **options: Any,
) -> Dict[str, Any]:
    """How :func:`attention` will run on ``device`` for tensors of these shapes and ``dtype``,
    with these options and strategy, without allocating or launching anything: a pure
    function of its arguments and the device's compute capability and SM count (the op runs
    exactly this plan).

    Args:
        q_shape, k_shape, v_shape: the shapes q, k, v would have (in ``options["layout"]``, or
            the varlen packed shapes).
        dtype: ``"float32"``, ``"float16"``, ``"bfloat16"``, ``"float64"`` (or a torch / numpy
            dtype of those).
        strategy: as for :func:`attention`.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:<i>"``, an int (a CUDA index) or a
            ``torch.device``; default ``cuda:0``.
        **options: :func:`attention`'s keyword options (arrays are read for their shape,
            dtype and device only).

    Returns:
        A dict: ``kernel`` (``"Reference"``, ``"FlashScalar"``, ``"Composed"``, ``"SplitKv"``,
        ...), ``block_rows``, ``block_heads`` (Composed), ``splits``, ``split_keys``,
        ``passes``, ``dispatches`` (SplitKv), ``scratch_bytes`` (device bytes held beyond the
        inputs and outputs), ``max_intermediate_bytes``, ``capped`` (whether
        max_score_bytes changed the choice), ``flash_wgmma`` (whether ``"Flash"`` runs the
        Hopper kernel, wgmma fed by TMA: sm_90 in an sm_90a build, f16 / bf16, head sizes 64,
        128, 256 with Dv = D, plain options; False on the CPU and on other GPUs),
        ``split_tensor_cores`` (whether ``"SplitKv"`` runs its tensor-core kernel: sm_80 and
        later, f16 / bf16, head sizes 64, 128, 256 with Dv = D, any options; False on the CPU).

    Raises: the errors the call would report.
    """
    return _plan(_rudnn.plan_attention, q_shape, k_shape, v_shape, dtype, strategy, device, options)


def plan_attention_backward(
    q_shape: Sequence[int],
    k_shape: Sequence[int],
    v_shape: Sequence[int],
    dtype: Any,
    *,
    strategy: str = "auto",
    device: Any = None,
    **options: Any,
) -> Dict[str, Any]:
    """:func:`plan_attention` for :func:`attention_backward` (options include
    ``bias_requires_grad``, whose float32 dS is counted in ``scratch_bytes``)."""
    return _plan(_rudnn.plan_attention_backward, q_shape, k_shape, v_shape, dtype, strategy, device, options)
