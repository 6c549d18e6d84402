"""The transformer family (C++: ``rudnn/transformer.h``): rotary position embeddings (RoPE) with
their backward pass, the long-context frequency helpers (Llama 3, YaRN), norm + RoPE + KV-cache
write in one call, and the gated activations of a transformer MLP (SwiGLU, GeGLU) with their
backward passes.

Under ``torch.compile`` the forward functions called without ``out=``/``stream=`` (and, for
:func:`norm_rope`, without ``cache=``) call their custom op (``torch.ops.rudnn.*``), which the
compiler traces (differentiable there).

Every function follows the package's common contract (see ``help(rudnn)``): results of the
first argument's array type, ``out=`` written in place, ``stream=``, and errors that are
:class:`rudnn.Error` subclasses naming the op and the argument. Dtypes: float32, float16,
bfloat16 on every device; float64 too on the CPU (the reference, computed in float64). GPU
arithmetic is float32; each result is rounded once to the input's dtype. Inputs of any
non-negative strides are taken (layouts the kernels cannot read in place are copied once on
the device); results are new contiguous arrays.
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

from . import _interop as io
from . import _rudnn
from ._interop import Array, StreamLike

__all__ = [
    "rope",
    "rope_backward",
    "norm_rope",
    "rope_llama3_freqs",
    "rope_yarn_freqs",
    "swiglu",
    "geglu",
    "swiglu_backward",
    "geglu_backward",
]

_ROPE_ARGS = """
    Args:
        {x}: ``[B, ..., T, D]`` (at least 3-d), float32 / float16 / bfloat16 (float64 on the
            CPU): a batch axis first, positions along the second-last axis ``T``, ``D``
            features per position; the axes between (heads) share their ``(b, t)``'s position.
        dims: the rotated features, an even int in ``[2, D]``; ``None``: all ``D``. Features
            past ``dims`` are copied unchanged.
        traditional: ``False``: pairs ``(j, j + dims/2)`` (the halves: Hugging Face Llama,
            GPT-NeoX, ``rotate_half``); ``True``: pairs ``(2j, 2j+1)`` (interleaved: Meta's
            original Llama, GPT-J, RoFormer).
        base: ``θ_j = base ** (-2j / dims)`` (10000, 500000, ...); or
        freqs: float32 ``[dims / 2]`` on ``x``'s device, ``θ_j = 1 / freqs[j]`` (see
            :func:`rope_llama3_freqs`, :func:`rope_yarn_freqs`). Exactly one of the two.
        scale: multiplies the positions (linear position interpolation: ``1 / factor``).
        offset: an int >= 0: positions ``offset + t`` (default 0); or
        offsets: int32 / int64 ``[B]``: positions ``offsets[b] + t``; or
        positions: int32 / int64 ``[T]`` (shared by the batch) or ``[B, T]``: the position ids
            of the tokens. At most one of a non-zero ``offset``, ``offsets`` and ``positions``.
            Values on the device are not checked (a negative position rotates the other way).
        out: optional array of ``x``'s shape and dtype with a dense last axis whose axes between
            ``B`` and ``T`` collapse to one stride (a contiguous array, the transposed view of a
            ``[B, T, H, D]`` buffer, a slice of a longer last axis), written in place.
        stream: CUDA stream (see ``help(rudnn)``); ignored on the CPU.
"""

_ROPE_RAISES = """
    Raises:
        ShapeMismatch (ValueError): ``x`` under 3-d; freqs not ``[dims / 2]``; offsets not
            ``[B]``; positions not ``[T]`` or ``[B, T]``; ``out`` of another shape.
        InvalidArgument (ValueError): dims odd, < 2 or > D; both or neither of base and freqs;
            base not finite and > 0; scale not finite; offset < 0; more than one position
            source; traditional not a bool; ``out`` overlapping an input or of another layout.
        DTypeMismatch (TypeError): ``x`` not a float dtype (float64 on a GPU); freqs not
            float32; offsets / positions not int32 / int64; ``out`` of another dtype.
        DeviceMismatch (ValueError): operands on different devices.
"""


def _dims(x, dims):
    """dims as the custom ops take it: an int (None: every feature)."""
    return x.shape[-1] if dims is None else dims


def rope(
    x: Array,
    dims: Optional[int] = None,
    *,
    traditional: bool = False,
    base: Optional[float] = None,
    freqs: Optional[Array] = None,
    scale: float = 1.0,
    offset: int = 0,
    offsets: Optional[Array] = None,
    positions: Optional[Array] = None,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    if out is None and stream is None and io.compiling():
        return io.torch_ops().rope(x, _dims(x, dims), traditional, base, freqs, scale, offset, offsets, positions)
    kind, stream = io.context(x, stream)
    r = _rudnn.rope(
        io.as_input(x),
        dims,
        traditional=traditional,
        base=base,
        freqs=io.as_input(freqs),
        scale=scale,
        offset=offset,
        offsets=io.as_input(offsets),
        positions=io.as_input(positions),
        stream=stream,
        out=io.as_output(out),
    )
    return out if out is not None else io.result(kind, r)


rope.__doc__ = (
    """Rotary position embeddings of ``x``: each pair ``(a, b)`` of the first ``dims``
    features becomes ``(a cos φ - b sin φ, a sin φ + b cos φ)`` with ``φ = p · scale · θ_j``
    and ``p`` the token's position.

    Packed variable-length batches (``[total, H, D]`` tokens with position ids ``[total]``):
    pass their ``[H, total, D]`` view (torch's ``x.transpose(0, 1)``, read in place) with
    ``positions=ids``, and ``out=`` the same view of a ``[total, H, D]`` buffer.
"""
    + _ROPE_ARGS.format(x="x")
    + """
    Returns:
        ``x``'s shape and dtype. The angle is formed in float64 and reduced to ``[-π, π]``
        before a float32 sine and cosine (absolute error < 4e-7 on the GPU), so large
        positions lose no accuracy; the rotation is float32, rounded once.
"""
    + _ROPE_RAISES
)


def rope_backward(
    dy: Array,
    dims: Optional[int] = None,
    *,
    traditional: bool = False,
    base: Optional[float] = None,
    freqs: Optional[Array] = None,
    scale: float = 1.0,
    offset: int = 0,
    offsets: Optional[Array] = None,
    positions: Optional[Array] = None,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    kind, stream = io.context(dy, stream)
    r = _rudnn.rope_backward(
        io.as_input(dy),
        dims,
        traditional=traditional,
        base=base,
        freqs=io.as_input(freqs),
        scale=scale,
        offset=offset,
        offsets=io.as_input(offsets),
        positions=io.as_input(positions),
        stream=stream,
        out=io.as_output(out),
    )
    return out if out is not None else io.result(kind, r)


rope_backward.__doc__ = (
    """Gradient of :func:`rope`: ``dx`` is ``dy`` rotated by ``-φ`` (the rotation is orthogonal;
    features past ``dims`` pass ``dy`` through). Also rope's inverse:
    ``rope_backward(rope(x, ...), ...) == x`` up to rounding. Takes rope's options and rules,
    with ``dy`` in the place of ``x`` (errors name it ``dy``; the output ``dx_out``).
"""
    + _ROPE_ARGS.format(x="dy")
    + """
    Returns:
        ``dx``: ``dy``'s shape and dtype.
"""
    + _ROPE_RAISES
)


def norm_rope(
    x: Array,
    weight: Optional[Array] = None,
    eps: float = 1e-6,
    *,
    normalize: bool = True,
    dims: Optional[int] = None,
    traditional: bool = False,
    base: Optional[float] = None,
    freqs: Optional[Array] = None,
    scale: float = 1.0,
    offset: int = 0,
    cache: Optional[Array] = None,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    """An attention layer's query or key preparation: :func:`rudnn.rms_norm` of each head's
    features (optional), then :func:`rope` at positions ``offset .. offset + L``, written to a
    new array, ``out``, or positions ``offset .. offset + L`` of a KV cache.

    Args:
        x: ``[B, H, L, D]`` (any strides: the transposed view of a ``[B, L, H, D]`` projection
            is read in place); without a cache any rank >= 3 as for :func:`rope`.
            float32 / float16 / bfloat16 (float64 on the CPU).
        weight: the norm's ``[D]`` weight in float32 or ``x``'s dtype (per-head norms such as
            Qwen 3's ``q_norm`` / ``k_norm``), or ``None`` (no scale).
        eps: the norm's epsilon, finite and > 0 in float32.
        normalize: ``False``: no norm, only the rotation (``weight`` must then be ``None``).
        dims, traditional, base, freqs, scale, offset: the rotation, as for :func:`rope`
            (positions come from ``offset`` only: no per-batch offsets or position ids).
        cache: optional ``[B, H, C, D]`` array of ``x``'s dtype, ``C >= offset + L``, with a
            dense last axis: positions ``offset .. offset + L`` are overwritten in place (the
            others are untouched) and the cache is returned.
        out: optional array of ``x``'s shape and dtype (layout as rope's ``out``); not with
            ``cache``.
        stream: CUDA stream (see ``help(rudnn)``); ignored on the CPU.

    Returns:
        The rotated (normalised) ``x``: a new array, ``out``, or ``cache``. Equal, bit for bit on
        every device, to ``rms_norm`` then ``rope`` then the cache update. Memory: with a norm
        and a cache of several heads (or an ``out`` that is not a contiguous, 16-byte aligned
        array) the norm goes through a temporary of ``x``'s size; such a call is not for
        CUDA-graph capture.

    Raises:
        as for :func:`rope` and :func:`rudnn.rms_norm` (named ``norm_rope``); InvalidArgument
        (ValueError): a weight with ``normalize=False``, ``out`` together with ``cache``, a
        cache overlapping ``x`` or the weight; ShapeMismatch (ValueError): with a cache, ``x``
        not 4-d, a cache not ``[B, H, C, D]`` or too short for ``offset + L``; DTypeMismatch
        (TypeError): a cache of another dtype.
    """
    if out is None and cache is None and stream is None and io.compiling():
        return io.torch_ops().norm_rope(
            x, weight, eps, normalize, _dims(x, dims), traditional, base, freqs, scale, offset
        )
    kind, stream = io.context(x, stream)
    r = _rudnn.norm_rope(
        io.as_input(x),
        io.as_input(weight),
        eps,
        normalize=normalize,
        dims=dims,
        traditional=traditional,
        base=base,
        freqs=io.as_input(freqs),
        scale=scale,
        offset=offset,
        cache=io.as_output(cache),
        stream=stream,
        out=io.as_output(out),
    )
    if cache is not None:
        return cache
    return out if out is not None else io.result(kind, r)


# ---- Frequency helpers ------------------------------------------------------------------------


def rope_llama3_freqs(
    dims: int,
    base: float,
    factor: float = 8.0,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
    original_max_position: int = 8192,
    *,
    like: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    """The ``freqs`` of :func:`rope` for Llama 3's long-context scaling (Hugging Face
    ``rope_type: "llama3"``; Llama 3.1: base 500000, factor 8, low 1, high 4, 8192).

    With ``ω_j = base ** (-2j / dims)`` and its wavelength ``λ_j = 2π / ω_j``: wavelengths below
    ``original_max_position / high_freq_factor`` keep ``ω_j``, those above
    ``original_max_position / low_freq_factor`` become ``ω_j / factor``, and the ones between
    are blended smoothly. Returns ``freqs[j] = 1 / ω'_j``.

    Args:
        dims: the rotated features (even, >= 2).
        base: finite and > 1.
        factor, low_freq_factor, high_freq_factor: finite and > 0, high > low.
        original_max_position: the pre-training context length, >= 1.
        like: an array whose device (and array type) the result takes; ``None``: a CPU
            :class:`rudnn.Tensor`.

    Returns:
        float32 ``[dims / 2]``, computed on the host in float64, rounded once.

    Raises:
        InvalidArgument (ValueError): a value outside the ranges above.
    """
    kind, stream = _like_context(like, stream)
    r = _rudnn.rope_llama3_freqs(
        dims, base, factor, low_freq_factor, high_freq_factor, original_max_position, like=io.as_input(like),
        stream=stream,
    )
    return io.result(kind, r)


def rope_yarn_freqs(
    dims: int,
    base: float,
    factor: float = 1.0,
    original_max_position: int = 4096,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    mscale: float = 0.0,
    mscale_all_dim: float = 0.0,
    attention_factor: float = 0.0,
    truncate: bool = True,
    *,
    like: Optional[Array] = None,
    stream: StreamLike = None,
) -> Tuple[Array, float]:
    """The ``freqs`` of :func:`rope` for YaRN (Hugging Face ``rope_type: "yarn"``), and YaRN's
    attention factor.

    Frequencies whose dimension falls below the correction range (from ``beta_fast``) keep
    ``ω_j``; those above it (from ``beta_slow``) become ``ω_j / factor``; a linear ramp blends
    between (bounds floored / ceiled when ``truncate``).

    Args:
        dims, base: as for :func:`rope_llama3_freqs`.
        factor: the context extension, finite and > 0.
        original_max_position: >= 1.
        beta_fast, beta_slow: > 0, beta_fast > beta_slow.
        mscale, mscale_all_dim: DeepSeek's magnitude scales (0: not set).
        attention_factor: > 0 to use this value as the attention factor.
        truncate: a bool.
        like: an array whose device (and array type) the result takes; ``None``: the CPU.

    Returns:
        ``(freqs, attention_factor)``: float32 ``[dims / 2]``, and the float by which YaRN
        scales cos and sin. :func:`rope` does not apply it: multiply the attention logits'
        scale by its square (q and k both carry it), or scale q and k.

    Raises:
        InvalidArgument (ValueError): a value outside the ranges above; truncate not a bool.
    """
    kind, stream = _like_context(like, stream)
    r, attention = _rudnn.rope_yarn_freqs(
        dims, base, factor, original_max_position, beta_fast, beta_slow, mscale, mscale_all_dim, attention_factor,
        truncate, like=io.as_input(like), stream=stream,
    )
    return io.result(kind, r), attention


def _like_context(like, stream):
    if like is None:
        return io.RUDNN, stream
    return io.context(like, stream)


# ---- Gated activations ----------------------------------------------------------------------

_GLU_FORMS = """
    Two forms:
        - ``gate`` and ``up``: the same shape ``[..., I]`` and dtype; the result is ``[..., I]``.
        - ``up=None``: ``gate`` is one array ``[..., 2I]`` (a fused gate/up projection) holding
          the gate in the first half of its last axis and up in the second (errors name it
          ``x``); the result is ``[..., I]``. The last axis must be even.
"""


def swiglu(
    gate: Array, up: Optional[Array] = None, *, out: Optional[Array] = None, stream: StreamLike = None
) -> Array:
    if out is None and stream is None and io.compiling():
        return io.torch_ops().swiglu(gate, up)
    kind, stream = io.context(gate, stream)
    r = _rudnn.swiglu(io.as_input(gate), io.as_input(up), stream=stream, out=io.as_output(out))
    return out if out is not None else io.result(kind, r)


swiglu.__doc__ = (
    """SwiGLU: ``silu(gate) * up`` elementwise, ``silu(g) = g / (1 + exp(-g))``, in float32
    (``silu(gate)`` is not rounded before the product), the result rounded once.
"""
    + _GLU_FORMS
    + """
    Args:
        gate, up: float32 / float16 / bfloat16 (float64 on the CPU), at least 1-d.
        out: optional array of the result's shape and dtype (a dense last axis, one row
            stride), written in place.
        stream: CUDA stream (see ``help(rudnn)``); ignored on the CPU.

    Returns:
        ``y``: ``[..., I]`` in the inputs' dtype. One pass: reads gate and up, writes y.

    Raises:
        ShapeMismatch (ValueError): gate and up of different shapes; a 0-d input; ``out`` of
            another shape.
        InvalidArgument (ValueError): an odd last axis in the one-tensor form; ``out``
            overlapping an input, or without a dense last axis.
        DTypeMismatch (TypeError): gate and up of different dtypes; a dtype the op does not take.
        DeviceMismatch (ValueError): operands on different devices.
"""
)


def geglu(
    gate: Array,
    up: Optional[Array] = None,
    approximate: str = "none",
    *,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    if out is None and stream is None and io.compiling():
        return io.torch_ops().geglu(gate, up, approximate)
    kind, stream = io.context(gate, stream)
    r = _rudnn.geglu(io.as_input(gate), io.as_input(up), approximate, stream=stream, out=io.as_output(out))
    return out if out is not None else io.result(kind, r)


geglu.__doc__ = (
    """GeGLU: ``gelu(gate) * up`` elementwise in float32, as ``torch.nn.functional.gelu``:
    ``approximate="none"``: ``g/2 (1 + erf(g / sqrt 2))`` (through erfc, accurate in the lower
    tail); ``"tanh"``: ``g/2 (1 + tanh(sqrt(2/π) (g + 0.044715 g³)))`` (evaluated as a
    logistic, no cancellation for negative g).
"""
    + _GLU_FORMS
    + """
    Args:
        gate, up, out, stream: as for :func:`swiglu`.
        approximate: ``"none"`` (default) or ``"tanh"``.

    Returns:
        ``y``: ``[..., I]`` in the inputs' dtype.

    Raises:
        as for :func:`swiglu`; InvalidArgument (ValueError): approximate not "none" / "tanh".
"""
)


def swiglu_backward(
    dy: Array,
    gate: Array,
    up: Optional[Array] = None,
    *,
    out: Union[Array, Tuple[Array, Array], None] = None,
    stream: StreamLike = None,
) -> Union[Array, Tuple[Array, Array]]:
    """Gradients of :func:`swiglu`: ``dgate = dy · up · silu'(gate)``, ``dup = dy · silu(gate)``,
    in float32, rounded once to the inputs' dtype. One pass: reads dy, gate, up; writes both.

    Args:
        dy: the upstream gradient, ``[..., I]`` in the inputs' dtype.
        gate, up: as in the forward call (``up=None``: the one-tensor form, ``gate`` being
            ``x [..., 2I]``).
        out: optional ``(dgate_out, dup_out)`` (two tensors) or ``dx_out`` of ``x``'s shape (the
            one-tensor form), written in place.
        stream: CUDA stream; ignored on the CPU.

    Returns:
        ``(dgate, dup)`` of gate's shape and dtype; in the one-tensor form ``dx [..., 2I]``
        laid out as ``x`` (dgate in the first half of the last axis, dup in the second).

    Raises:
        as for :func:`swiglu`; ShapeMismatch / DTypeMismatch when ``dy`` is not the result's
        shape and dtype.
    """
    kind, stream = io.context(dy, stream)
    r = _rudnn.swiglu_backward(
        io.as_input(dy), io.as_input(gate), io.as_input(up), stream=stream, out=io.as_output(out)
    )
    if out is not None:
        return out
    return io.result(kind, r) if up is None else io.results(kind, r)


def geglu_backward(
    dy: Array,
    gate: Array,
    up: Optional[Array] = None,
    approximate: str = "none",
    *,
    out: Union[Array, Tuple[Array, Array], None] = None,
    stream: StreamLike = None,
) -> Union[Array, Tuple[Array, Array]]:
    """Gradients of :func:`geglu`: ``dgate = dy · up · gelu'(gate)``, ``dup = dy · gelu(gate)``
    (the derivative of the chosen ``approximate`` form), in float32, rounded once.

    Args, Returns, Raises: as for :func:`swiglu_backward`, plus ``approximate`` as for
    :func:`geglu`.
    """
    kind, stream = io.context(dy, stream)
    r = _rudnn.geglu_backward(
        io.as_input(dy), io.as_input(gate), io.as_input(up), approximate, stream=stream, out=io.as_output(out)
    )
    if out is not None:
        return out
    return io.result(kind, r) if up is None else io.results(kind, r)
