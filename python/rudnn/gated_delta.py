"""The gated delta family (C++: ``rudnn/gated_delta.h``): the gated delta rule, Gated DeltaNet's
linear-attention recurrence (Qwen3-Next / Qwen3.5), token by token, in two input forms.

For every step t and value head, with S the float32 state of that head (``[Dv, Dk]``)::

    S <- decay_t * S;   S <- S + beta_t * (v_t - S k_t) k_t^T;   y_t = S (scale * q_t)

- :func:`gated_delta`, :func:`gated_delta_steps`, :func:`gated_delta_slots` (spec 003's form,
  the fla / mlx-lm layout): q, k ``[B, T, Hk, Dk]``, v ``[B, T, Hv, Dv]``, gate g and beta
  ``[B, T, Hv]``, state ``[B, Hv, Dv, Dk]``; decay_t = g_t (the gate itself), scale = 1; value
  head h reads key head ``h // (Hv // Hk)`` (Hv a multiple of Hk).
- :func:`gated_delta_rule` (spec 000's form): query, key ``[B, H, T, K]``, value
  ``[B, H, T, V]``, beta ``[B, H, T]`` in the query's dtype, log_decay ``[B, H, T]`` float32,
  initial_state ``[B, H, K, V]`` float32 (``state[k][v] = S[v][k]``); decay_t =
  exp(log_decay_t), scale = query_scale.

Packed variable-length sequences (``cu_seqlens=``, as engines batch prefill): the inputs have
batch 1 and their T axis packs N sequences, sequence n being steps ``cu_seqlens[n] ..
cu_seqlens[n+1]`` with its own state n (the state / pool slots / initial_state have N
entries); ``cu_seqlens`` is int32 ``[N + 1]`` on the inputs' device. Each sequence's results
equal the dense form's on it alone. On the host the offsets are checked (0 first,
non-decreasing, T last); on a GPU they are never read by the host, and bad offsets are the
caller's error (clamped into ``[0, T]``: wrong results, never an access out of bounds).

Precision: on the CPU the float64 reference (operands float32, float16, bfloat16 or float64),
each output rounded once to its dtype. On a GPU one kernel holds the state in float32
registers for the whole time loop; inputs are widened to float32 and y is rounded once to
q's dtype. GPU operands: Dk up to 256 (larger is Unsupported).

Backward: :func:`gated_delta_backward` and :func:`gated_delta_rule_backward` give the
gradients of every input and of the initial state (float64 reference on the CPU, a
deterministic kernel over float32 checkpoints on the GPU). The torch custom ops
(``torch.ops.rudnn.gated_delta`` / ``gated_delta_rule``) are differentiable through them.
:func:`gated_delta_rule` with ``chunk_size=`` runs the chunked prefill (C++
``chunk_gated_delta_rule``: the WY / UT-transform form on tensor cores, equal to the recurrence
up to rounding); its gradient is the recurrence's backward (the same function's gradient: a
chunked backward kernel is not implemented). :func:`chunk_gated_delta` /
:func:`chunk_gated_delta_slots` are spec 003's chunked prefill over :func:`gated_delta`'s
operands (the float64 WY / UT-transform algorithm on the CPU, the chunked kernels on a GPU).
Slot ids on the GPU cannot raise without a host
synchronisation: a sequence whose id is outside the pool or shared with another sequence leaves
the pool untouched and gets NaN outputs; device cu_seqlens are clamped into [0, T]. ``out=`` reaches the C++ ``_into`` forms. Under ``torch.compile``
:func:`gated_delta` and :func:`gated_delta_rule` called without ``out=``/``stream=`` call their
custom ops, which the compiler traces.

Errors are :class:`rudnn.Error` subclasses naming the op and the argument: an operand None, a
non-floating dtype (float64 on a GPU), operands on different devices (DeviceMismatch), a
shape outside the rules above (ShapeMismatch), q/k/v of different dtypes, Hv not a multiple
of Hk, a non-finite query_scale, log_decay or initial_state not float32 (DTypeMismatch), slot
ids not integers, out of range or repeated (checked on the host when the slots live there),
cu_seqlens not int32 ``[N + 1]``, with inputs of batch != 1, or (host) not 0-based,
decreasing or not ending at T; upstream gradients not floating or not of their result's shape.
"""

from __future__ import annotations

from typing import Optional, Tuple

from . import _interop as io
from . import _rudnn
from ._interop import Array, StreamLike

__all__ = [
    "gated_delta",
    "gated_delta_steps",
    "gated_delta_slots",
    "chunk_gated_delta",
    "chunk_gated_delta_slots",
    "gated_delta_rule",
    "gated_delta_backward",
    "gated_delta_rule_backward",
]


def _inputs(*arrays):
    return [io.as_input(a) for a in arrays]


def gated_delta(
    q: Array,
    k: Array,
    v: Array,
    g: Array,
    beta: Array,
    state: Array,
    *,
    cu_seqlens: Optional[Array] = None,
    out: Optional[Tuple[Array, Array]] = None,
    stream: StreamLike = None,
) -> Tuple[Array, Array]:
    """Spec 003's gated delta rule over T steps from ``state`` (read, never written).

    Args:
        q, k: ``[B, T, Hk, Dk]``; v: ``[B, T, Hv, Dv]``, one float dtype.
        g: the per-step decay ``[B, T, Hv]`` (the gate itself, not its log); beta
            ``[B, T, Hv]``. Float dtypes.
        state: the initial state ``[B, Hv, Dv, Dk]`` (``[N, ...]`` with cu_seqlens), a float
            dtype (float32 keeps every bit of a chained call on the GPU: T steps equal T
            one-step calls through the returned state).
        cu_seqlens: optional int32 ``[N + 1]``: packed sequences (B = 1; see the module).
        out: optional ``(y_out, state_out)``, written in place and returned.
        stream: CUDA stream (see ``help(rudnn)``); ignored on the CPU.

    Returns:
        ``(y, state)``: y ``[B, T, Hv, Dv]`` in q's dtype, the final state in the input state's
        dtype. Memory: the two results only.

    Raises: see the module's documentation (``help(rudnn.gated_delta)``).
    """
    if out is None and stream is None and io.compiling():
        return io.torch_ops().gated_delta(q, k, v, g, beta, state, cu_seqlens)
    kind, stream = io.context(q, stream)
    r = _rudnn.gated_delta(
        *_inputs(q, k, v, g, beta, state), cu_seqlens=io.as_input(cu_seqlens), stream=stream, out=io.as_output(out)
    )
    return out if out is not None else io.results(kind, r)


def gated_delta_steps(
    q: Array,
    k: Array,
    v: Array,
    g: Array,
    beta: Array,
    state: Array,
    *,
    cu_seqlens: Optional[Array] = None,
    out: Optional[Tuple[Array, Array]] = None,
    stream: StreamLike = None,
) -> Tuple[Array, Array]:
    """:func:`gated_delta` returning every step's state: ``(y, states)`` with states
    ``[B, T, Hv, Dv, Dk]`` (step t at index t; the last equals gated_delta's final state) in the
    input state's dtype. Memory: T times the state's bytes. ``out``: optional
    ``(y_out, states_out)``. Args and errors as :func:`gated_delta`; with ``cu_seqlens`` (packed
    sequences, B = 1, state ``[N, Hv, Dv, Dk]``) states is ``[1, T, Hv, Dv, Dk]``, each
    sequence's steps at its rows."""
    kind, stream = io.context(q, stream)
    r = _rudnn.gated_delta_steps(
        *_inputs(q, k, v, g, beta, state), cu_seqlens=io.as_input(cu_seqlens), stream=stream, out=io.as_output(out)
    )
    return out if out is not None else io.results(kind, r)


def gated_delta_slots(
    q: Array,
    k: Array,
    v: Array,
    g: Array,
    beta: Array,
    pool: Array,
    slots: Array,
    *,
    cu_seqlens: Optional[Array] = None,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    """:func:`gated_delta` over states kept in a pool (a serving engine's state cache):
    sequence b starts from ``pool[slots[b]]`` and its final state is written back there, in
    place. Entries not named by ``slots`` are untouched.

    Args:
        q, k, v, g, beta: as for :func:`gated_delta`.
        pool: ``[S, Hv, Dv, Dk]``, a float dtype, writable in place (a read-only array is
            refused, never copied).
        slots: ``[B]`` (``[N]`` with cu_seqlens) int32 / int64, distinct, in ``[0, S)``. On a
            GPU they are not checked (ids out of range or repeated are the caller's error).
        cu_seqlens: optional int32 ``[N + 1]``: packed sequences (see the module).
        out: optional ``y`` array, written in place and returned.
        stream: CUDA stream; ignored on the CPU.

    Returns:
        y ``[B, T, Hv, Dv]`` in q's dtype; each sequence's y and state equal gated_delta's on
        its state alone.

    Raises: as :func:`gated_delta`; InvalidArgument for slots out of range or repeated (host
    slots), or a pool that cannot be written.
    """
    kind, stream = io.context(q, stream)
    r = _rudnn.gated_delta_slots(
        *_inputs(q, k, v, g, beta), io.as_output(pool), io.as_input(slots), cu_seqlens=io.as_input(cu_seqlens),
        stream=stream, out=io.as_output(out),
    )
    return out if out is not None else io.result(kind, r)


def chunk_gated_delta(
    q: Array,
    k: Array,
    v: Array,
    g: Array,
    beta: Array,
    state: Array,
    chunk_size: int = 64,
    *,
    cu_seqlens: Optional[Array] = None,
    out: Optional[Tuple[Array, Array]] = None,
    stream: StreamLike = None,
) -> Tuple[Array, Array]:
    """Spec 003's chunked prefill: :func:`gated_delta` computed chunk by chunk (the WY /
    UT-transform form), equal to it up to rounding; ``state`` is read, never written.

    Args:
        q, k, v, g, beta, state, cu_seqlens: as for :func:`gated_delta` (with cu_seqlens each
            packed sequence is chunked on its own).
        chunk_size: steps per chunk, positive, with ``4 * (chunk_size**2 + chunk_size)`` bytes
            within the per-block shared-memory limit (227 KiB on the CPU; checked after the
            shapes); on a GPU also the limits of :func:`gated_delta_rule`'s chunked form
            (chunk_size <= 128, Dk and Dv <= 256).
        out: optional ``(y_out, state_out)``, written in place and returned.
        stream: CUDA stream; ignored on the CPU.

    Returns:
        ``(y, state)`` as :func:`gated_delta`: y ``[B, T, Hv, Dv]`` in q's dtype, the final
        state in the input state's shape and dtype. Precision: float64 on the CPU (results
        differ from gated_delta's at the 1e-15 level), each output rounded once; on a GPU the
        chunked kernels of :func:`gated_delta_rule` (about 1e-2 relative in bfloat16, 3e-3 in
        float16, 1e-5 in float32; zero and negative gates exact). Memory: the results plus,
        on the CPU, float64 host copies of the operands and per-chunk work arrays; on a GPU a
        workspace allocated on the stream (about 1.1 KB per token and value head at chunk 64,
        Dk = Dv = 128, bfloat16).

    Raises: :func:`gated_delta`'s errors; InvalidArgument for a bad chunk_size; Unsupported past
    the GPU limits, before anything is written.
    """
    kind, stream = io.context(q, stream)
    r = _rudnn.chunk_gated_delta(
        *_inputs(q, k, v, g, beta, state), chunk_size, cu_seqlens=io.as_input(cu_seqlens), stream=stream,
        out=io.as_output(out),
    )
    return out if out is not None else io.results(kind, r)


def chunk_gated_delta_slots(
    q: Array,
    k: Array,
    v: Array,
    g: Array,
    beta: Array,
    pool: Array,
    slots: Array,
    chunk_size: int = 64,
    *,
    cu_seqlens: Optional[Array] = None,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    """:func:`chunk_gated_delta` over states kept in a pool, as :func:`gated_delta_slots`:
    sequence b starts from ``pool[slots[b]]`` and its final state is written back there, in
    place (entries not named untouched). Args, pool and slots rules as
    :func:`gated_delta_slots`, chunk_size as :func:`chunk_gated_delta`. Returns y ``[B, T, Hv,
    Dv]`` (``[1, T, Hv, Dv]`` with cu_seqlens) in q's dtype. Errors: gated_delta_slots' and
    chunk_size's, all raised before the pool or y is written; on a GPU also
    :func:`chunk_gated_delta`'s Unsupported cases."""
    kind, stream = io.context(q, stream)
    r = _rudnn.chunk_gated_delta_slots(
        *_inputs(q, k, v, g, beta), io.as_output(pool), io.as_input(slots), chunk_size,
        cu_seqlens=io.as_input(cu_seqlens), stream=stream, out=io.as_output(out),
    )
    return out if out is not None else io.result(kind, r)


def gated_delta_rule(
    query: Array,
    key: Array,
    value: Array,
    beta: Array,
    log_decay: Array,
    initial_state: Array,
    query_scale: float = 1.0,
    *,
    cu_seqlens: Optional[Array] = None,
    chunk_size: Optional[int] = None,
    out: Optional[Tuple[Array, Array]] = None,
    stream: StreamLike = None,
) -> Tuple[Array, Array]:
    """Spec 000's gated delta rule: token by token (the decode path), or with ``chunk_size``
    the chunked prefill (C++ ``chunk_gated_delta_rule``).

    Args:
        query, key: ``[B, H, T, K]``; value ``[B, H, T, V]``; one float dtype.
        beta: ``[B, H, T]`` in the query's dtype.
        log_decay: ``[B, H, T]`` float32 (decay = exp(log_decay)).
        initial_state: ``[B, H, K, V]`` (``[N, ...]`` with cu_seqlens) float32, never written.
        query_scale: a finite number (float32).
        cu_seqlens: optional int32 ``[N + 1]``: packed sequences (B = 1; see the module).
        chunk_size: None for the recurrence; a positive integer for the chunked prefill, each
            sequence cut into chunks of that many steps (64 is the usual choice). Its limits:
            the chunk's float32 triangular workspace, 4 * (chunk_size**2 + chunk_size) bytes,
            within the per-block shared-memory limit; on a GPU chunk_size <= 128 and K, V <=
            256. Its GPU form allocates a workspace on the stream (not for CUDA-graph capture);
            expected error against the float64 recurrence about 1e-2 relative in bfloat16,
            3e-3 in float16, 1e-5 in float32.
        out: optional ``(output_out, final_state_out)``, written in place and returned.
        stream: CUDA stream; ignored on the CPU.

    Returns:
        ``(output, final_state)``: output ``[B, H, T, V]`` in the query's dtype, final_state
        float32.

    Raises: see the module's documentation; a chunk_size that is not positive or whose
    workspace passes the limit (InvalidArgument, naming the limit), or past the GPU limits
    (Unsupported).
    """
    if out is None and stream is None and io.compiling():
        return io.torch_ops().gated_delta_rule(
            query, key, value, beta, log_decay, initial_state, float(query_scale), cu_seqlens, chunk_size
        )
    kind, stream = io.context(query, stream)
    r = _rudnn.gated_delta_rule(
        *_inputs(query, key, value, beta, log_decay, initial_state), query_scale, cu_seqlens=io.as_input(cu_seqlens),
        chunk_size=chunk_size, stream=stream, out=io.as_output(out),
    )
    return out if out is not None else io.results(kind, r)


def gated_delta_backward(
    dy: Array,
    dstate: Optional[Array],
    q: Array,
    k: Array,
    v: Array,
    g: Array,
    beta: Array,
    state: Array,
    *,
    cu_seqlens: Optional[Array] = None,
    out: Optional[Tuple[Array, ...]] = None,
    stream: StreamLike = None,
) -> Tuple[Array, Array, Array, Array, Array, Array]:
    """Gradients of :func:`gated_delta` (or its varlen form): ``(dq, dk, dv, dg, dbeta,
    dstate)``, each in its input's shape and dtype (dq and dk summed over the value heads that
    share a key head).

    Args:
        dy: y's gradient ``[B, T, Hv, Dv]``, a float dtype.
        dstate: the final state's gradient (its shape), or None (zero).
        q, k, v, g, beta, state, cu_seqlens: the forward's.
        out: optional six arrays, written in place and returned.
        stream: CUDA stream; ignored on the CPU.

    Precision: float64 on the CPU, rounded once; on a GPU float32 over checkpoints of the
    state, deterministic. Raises: as :func:`gated_delta`, and for a dy / dstate of the wrong
    shape or dtype.
    """
    kind, stream = io.context(dy, stream)
    r = _rudnn.gated_delta_backward(
        io.as_input(dy), io.as_input(dstate), *_inputs(q, k, v, g, beta, state), cu_seqlens=io.as_input(cu_seqlens),
        stream=stream, out=io.as_output(out),
    )
    return out if out is not None else io.results(kind, r)


def gated_delta_rule_backward(
    doutput: Array,
    dfinal_state: Optional[Array],
    query: Array,
    key: Array,
    value: Array,
    beta: Array,
    log_decay: Array,
    initial_state: Array,
    query_scale: float = 1.0,
    *,
    cu_seqlens: Optional[Array] = None,
    chunk_size: Optional[int] = None,
    out: Optional[Tuple[Array, ...]] = None,
    stream: StreamLike = None,
) -> Tuple[Array, Array, Array, Array, Array, Array]:
    """Gradients of :func:`gated_delta_rule`: ``(dquery, dkey, dvalue, dbeta, dlog_decay,
    dinitial_state)``; dlog_decay and dinitial_state float32, the others in their inputs'
    dtypes. ``doutput``: output's gradient; ``dfinal_state``: the final state's, or None.

    ``chunk_size``: None for the recurrence's backward; a positive integer for the chunked
    form's (C++ ``chunk_gated_delta_rule_backward``, the backward of ``gated_delta_rule(...,
    chunk_size=)``): the same gradients up to rounding, on a GPU through the chunked backward
    kernels (chunk_size <= 128, K, V <= 256 and their shared memory within the device's;
    elsewhere the recurrence's backward runs), on the CPU the float64 reference. Its rule and
    errors are ``gated_delta_rule``'s. Other arguments, precision and errors as
    :func:`gated_delta_backward`."""
    kind, stream = io.context(doutput, stream)
    r = _rudnn.gated_delta_rule_backward(
        io.as_input(doutput), io.as_input(dfinal_state), *_inputs(query, key, value, beta, log_decay, initial_state),
        query_scale, cu_seqlens=io.as_input(cu_seqlens), chunk_size=chunk_size, stream=stream,
        out=io.as_output(out),
    )
    return out if out is not None else io.results(kind, r)
