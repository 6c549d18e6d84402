"""The paged attention family (C++: ``rudnn/paged_attention.h``, namespace ``rudnn::paged``):
attention over a KV cache kept in fixed-size physical pages, for a packed batch of queries
from sequences of different lengths (prefill chunks and decode steps in one call), with
grouped-query heads, MLA over an absorbed latent cache, split-history workspaces, cache
appends, and spec 003's block-table form.

The schedule is host metadata, validated once (:class:`HostPlan`), then uploaded to the
queries' device and stream (:meth:`DevicePlan.upload`: no host synchronisation). Reuse the
device plan while the schedule holds; every call on it runs on the stream it was uploaded to.

Schedule: sequence ``s`` keeps key ``j`` in page ``tables[s][j // page_size]``, row
``j % page_size``, and has ``lengths[s]`` keys; query ``i`` belongs to sequence
``sequence_ids[i]`` at the absolute zero-based position ``positions[i]`` (its own key already
in the cache) and sees keys ``0 .. positions[i]`` (causal) or all ``lengths[s]`` keys.

Operands: ``q [queries, Hq, D]``, ``k_cache [pages, page_size, Hkv, D]``, ``v_cache [pages,
page_size, Hkv, Dv]`` (Hq a multiple of Hkv; D, Dv in 1..1024; page_size 1..256), contiguous,
one dtype: float32, float16 or bfloat16 (float64 too on the CPU, where the float64 reference
runs). FP32 accumulation and softmax on the GPU; results ``[queries, Hq, Dv]`` in q's dtype.

A decode loop (one new token per sequence per step)::

    host = rudnn.paged.HostPlan(page_size, pages, tables, lengths, sequence_ids, positions)
    plan = rudnn.paged.DevicePlan.upload(host, q)
    k_cache, v_cache = plan.append(k_new, v_new, k_cache, v_cache)
    out = plan.attention(q, k_cache, v_cache, scale=D ** -0.5, causal=True)

(the next step's lengths and positions grow by one: a new HostPlan and upload per step; the
plan is small, ``plan.bytes``.)

Errors are :class:`rudnn.Error` subclasses naming the op and the argument: InvalidArgument
(metadata that does not validate, a non-finite or non-positive scale, duplicate physical
writes in :meth:`DevicePlan.append`, a workspace of other shapes or stream, budgets),
ShapeMismatch, DTypeMismatch, DeviceMismatch, Unsupported.

Backward (spec 000 §11): :meth:`DevicePlan.attention_backward` and
:meth:`DevicePlan.mla_backward` run on the CPU only, as the float64 reference (probabilities
recomputed per query row; every gradient rounded once to q's dtype); with ``out=`` they write
the caller's arrays (None for a gradient not wanted), and with an
:class:`OrderedBackwardWorkspace` as well the atomic-free ordered form (on the CPU bit for bit
the same result). GPU tensors raise rudnn.Unsupported (no CUDA kernel yet) after the argument
checks, before anything is written.

Not implemented yet (C++ and Python): the backward's CUDA kernels and tensor-core paths;
the CUDA-core kernels run every forward shape.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

from . import _interop as io
from . import _rudnn
from ._interop import Array, StreamLike

__all__ = [
    "HostPlan",
    "DevicePlan",
    "SplitWorkspace",
    "OrderedBackwardWorkspace",
    "paged_attention",
    "paged_write",
    "paged_write_",
]


class HostPlan:
    """Host scheduling metadata, validated at construction.

    Args:
        page_size: keys per page, 1..256.
        pages: physical pages in the caches (>= 0).
        tables: one sequence of page ids (each in ``0 .. pages - 1``) per sequence.
        lengths: keys of each sequence, ``0 <= lengths[s] <= len(tables[s]) * page_size``.
        sequence_ids: the sequence of each query, in ``0 .. len(tables) - 1``.
        positions: the absolute position of each query, ``0 <= positions[i] < lengths[s]``.

    Raises:
        rudnn.InvalidArgument naming the entry that breaks a rule.
    """

    __slots__ = ("_native",)

    def __init__(
        self,
        page_size: int,
        pages: int,
        tables: Sequence[Sequence[int]],
        lengths: Sequence[int],
        sequence_ids: Sequence[int],
        positions: Sequence[int],
    ):
        self._native = _rudnn.PagedHostPlan(page_size, pages, tables, lengths, sequence_ids, positions)

    page_size = property(lambda self: self._native.page_size)
    pages = property(lambda self: self._native.pages)
    sequences = property(lambda self: self._native.sequences)
    queries = property(lambda self: self._native.queries)
    duplicate_slots = property(
        lambda self: self._native.duplicate_slots, doc="Whether two queries write one physical slot."
    )

    def max_keys(self, causal: bool) -> int:
        """The most keys any query sees."""
        return self._native.max_keys(causal)

    def __repr__(self) -> str:
        return f"<rudnn.paged.HostPlan page_size={self.page_size} sequences={self.sequences} queries={self.queries}>"


class SplitWorkspace:
    """FP32 partial results for split-history calls: ``splits`` (2..32) partitions of the
    longest history, merged in partition order; at most 64 MiB. Made for one
    ``(queries, heads, value_dim)`` on q's device and stream, reusable for any number of calls
    with those sizes there.

    Raises:
        rudnn.InvalidArgument (splits out of range, the budget exceeded, naming the bytes).
    """

    __slots__ = ("_native", "_kind")

    def __init__(self, q: Array, queries: int, heads: int, value_dim: int, splits: int, *, stream: StreamLike = None):
        self._kind, stream = io.context(q, stream)
        self._native = _rudnn.PagedSplitWorkspace(io.as_input(q), queries, heads, value_dim, splits, stream=stream)

    queries = property(lambda self: self._native.queries)
    heads = property(lambda self: self._native.heads)
    value_dim = property(lambda self: self._native.value_dim)
    splits = property(lambda self: self._native.splits)
    bytes = property(lambda self: self._native.bytes)


class DevicePlan:
    """A :class:`HostPlan` on q's device and stream (see :meth:`upload`)."""

    __slots__ = ("_native", "_kind", "host")

    def __init__(self, native, kind: int, host: HostPlan):
        self._native = native
        self._kind = kind
        self.host = host

    @staticmethod
    def upload(host: HostPlan, q: Array, *, stream: StreamLike = None) -> "DevicePlan":
        """Uploads ``host`` to q's device on ``stream`` (default: torch's current stream for a
        torch tensor), which every call on the plan then uses. q is read for its device only.
        No host synchronisation (pinned staging and an asynchronous copy)."""
        kind, stream = io.context(q, stream)
        return DevicePlan(_rudnn.PagedDevicePlan.upload(host._native, io.as_input(q), stream=stream), kind, host)

    @property
    def bytes(self) -> int:
        """Device bytes the plan holds (the packed metadata)."""
        return self._native.bytes

    def attention(
        self, q: Array, k_cache: Array, v_cache: Array, scale: float, causal: bool = True, *, out: Optional[Array] = None
    ) -> Array:
        """Attention of every query over its sequence's paged keys.

        Args:
            q: ``[queries, Hq, D]``; k_cache ``[pages, page_size, Hkv, D]``; v_cache
                ``[pages, page_size, Hkv, Dv]``; contiguous, one dtype.
            scale: finite and > 0 (usually ``D ** -0.5``).
            causal: query i sees keys ``0 .. positions[i]`` (True) or its whole sequence.
            out: optional contiguous ``[queries, Hq, Dv]`` array of q's dtype.

        Returns:
            ``[queries, Hq, Dv]`` in q's dtype. Long histories on few blocks split internally
            (a stream-ordered scratch of FP32 partials).
        """
        r = self._native.attention(
            io.as_input(q), io.as_input(k_cache), io.as_input(v_cache), scale, causal, out=io.as_output(out)
        )
        return out if out is not None else io.result(self._kind, r)

    def mla(
        self,
        q: Array,
        qp: Array,
        latent: Array,
        kp: Array,
        scale: float,
        causal: bool = True,
        *,
        out: Optional[Array] = None,
    ) -> Array:
        """MLA over a shared latent cache: ``q [queries, H, R]``, ``qp [queries, H, P]``,
        ``latent [pages, page_size, 1, R]``, ``kp [pages, page_size, 1, P]`` (R 1..1024, P
        1..256); logits ``scale * (q . latent + qp . kp)``; returns ``[queries, H, R]``."""
        r = self._native.mla(
            io.as_input(q), io.as_input(qp), io.as_input(latent), io.as_input(kp), scale, causal, out=io.as_output(out)
        )
        return out if out is not None else io.result(self._kind, r)

    def attention_with_workspace(
        self, workspace: SplitWorkspace, q: Array, k_cache: Array, v_cache: Array, scale: float, causal: bool = True
    ) -> Array:
        """:meth:`attention` with exactly ``workspace.splits`` partitions and no allocation."""
        r = self._native.attention_with_workspace(
            workspace._native, io.as_input(q), io.as_input(k_cache), io.as_input(v_cache), scale, causal
        )
        return io.result(self._kind, r)

    def mla_with_workspace(
        self, workspace: SplitWorkspace, q: Array, qp: Array, latent: Array, kp: Array, scale: float, causal: bool = True
    ) -> Array:
        """:meth:`mla` with exactly ``workspace.splits`` partitions and no allocation."""
        r = self._native.mla_with_workspace(
            workspace._native, io.as_input(q), io.as_input(qp), io.as_input(latent), io.as_input(kp), scale, causal
        )
        return io.result(self._kind, r)

    def attention_backward(
        self,
        q: Array,
        k_cache: Array,
        v_cache: Array,
        grad_out: Array,
        scale: float,
        causal: bool = True,
        *,
        out: Optional[Tuple[Optional[Array], Optional[Array], Optional[Array]]] = None,
        workspace: Optional["OrderedBackwardWorkspace"] = None,
    ) -> Tuple[Array, Array, Array]:
        """Gradients of :meth:`attention` (same q, caches, scale, causal) for ``grad_out``
        ``[queries, Hq, Dv]`` (q's dtype, contiguous). CPU only: the float64 reference.

        Args:
            q, k_cache, v_cache, scale, causal: as for :meth:`attention`.
            grad_out: the upstream gradient ``[queries, Hq, Dv]``.
            out: optional ``(dq, dk, dv)`` arrays (contiguous, the returned shapes and q's
                dtype, overlapping no input nor each other), each may be None to skip that
                gradient; every element of a given one is written. Returned.
            workspace: optional :class:`OrderedBackwardWorkspace` (needs ``out``): the
                atomic-free ordered form (the same values on the CPU).

        Returns:
            ``(dq, dk, dv)``: dq ``[queries, Hq, D]``, dk ``[pages, page_size, Hkv, D]``, dv
            ``[pages, page_size, Hkv, Dv]`` in q's dtype. Cache gradients cover every physical
            page (zeros where no query reads; shared pages and GQA heads summed). Memory: the
            results plus float64 host scratch of dk's and dv's sizes.

        Raises:
            attention's errors, ShapeMismatch / DTypeMismatch for grad_out or an output,
            InvalidArgument for aliasing outputs or a workspace of another plan / q;
            Unsupported for GPU tensors.
        """
        ws = None if workspace is None else workspace._native
        r = self._native.attention_backward(
            io.as_input(q), io.as_input(k_cache), io.as_input(v_cache), io.as_input(grad_out), scale, causal,
            out=io.as_output(out), workspace=ws,
        )
        return out if out is not None else io.results(self._kind, r)

    def mla_backward(
        self,
        q: Array,
        qp: Array,
        latent: Array,
        kp: Array,
        grad_out: Array,
        scale: float,
        causal: bool = True,
        *,
        out: Optional[Tuple[Optional[Array], ...]] = None,
        workspace: Optional["OrderedBackwardWorkspace"] = None,
    ) -> Tuple[Array, Array, Array, Array]:
        """Gradients of :meth:`mla` for ``grad_out [queries, H, R]``: ``(dq, dqp, dlatent,
        dkp)`` shaped like q ``[queries, H, R]``, qp ``[queries, H, P]``, latent ``[pages,
        page_size, 1, R]`` (its key and value contributions summed) and kp ``[pages,
        page_size, 1, P]``, in q's dtype. ``out`` (four arrays or None each) and
        ``workspace`` as for :meth:`attention_backward`; the same rules, errors and
        precision (CPU only; GPU tensors raise Unsupported)."""
        ws = None if workspace is None else workspace._native
        r = self._native.mla_backward(
            io.as_input(q), io.as_input(qp), io.as_input(latent), io.as_input(kp), io.as_input(grad_out), scale,
            causal, out=io.as_output(out), workspace=ws,
        )
        return out if out is not None else io.results(self._kind, r)

    def append(self, k: Array, v: Array, key_cache: Array, value_cache: Array) -> Tuple[Array, Array]:
        """Writes query i's new key ``k[i]`` and value ``v[i]`` (``k [queries, Hkv, D]``,
        ``v [queries, Hkv, Dv]``) at its position's slot of the caches and returns the caches
        to keep using (see ``rudnn/paged_attention.h`` for when they are written in place).
        A plan where two queries share a slot is refused (InvalidArgument)."""
        kc, vc = self._native.append(io.as_input(k), io.as_input(v), io.as_output(key_cache), io.as_output(value_cache))
        return io.result(self._kind, kc), io.result(self._kind, vc)

    def __repr__(self) -> str:
        return f"<rudnn.paged.DevicePlan of {self.host!r}>"


class OrderedBackwardWorkspace:
    """State of the atomic-free ordered backward, for one :class:`DevicePlan` and the q it will
    be used with (``[queries, heads, D]``, the plan's query count), on the plan's device and
    stream. Pass it as ``workspace=`` to :meth:`DevicePlan.attention_backward` /
    :meth:`DevicePlan.mla_backward` (with ``out=``). Options, recorded for the GPU kernels
    (the CPU reference computes the same either way): ``query_pruning`` (default on),
    ``history_row_cache`` (default off), ``history_compaction`` (default off: enabling builds
    an int32 index of the plan's physical pages, within 64 MiB). The environment variables
    RUDA_PAGED_ORDERED_CACHE_ROWS / RUDA_PAGED_ORDERED_COMPACT_HISTORY are read once here.
    Not thread-safe.

    Raises:
        rudnn.InvalidArgument (q not of the plan's query count, a bad environment value, an
        index over the budget when enabling compaction).
    """

    __slots__ = ("_native",)

    def __init__(self, plan: DevicePlan, q: Array):
        self._native = _rudnn.PagedOrderedBackwardWorkspace(plan._native, io.as_input(q))

    queries = property(lambda self: self._native.queries)
    heads = property(lambda self: self._native.heads)
    bytes = property(lambda self: self._native.bytes, doc="Bytes of storage held (the compaction index).")
    history_compaction_pages = property(
        lambda self: self._native.history_compaction_pages,
        doc="(active, inactive) physical pages while compaction is on, else None.",
    )

    def _get(name):
        return property(
            lambda self: getattr(self._native, name), lambda self, on: setattr(self._native, name, bool(on))
        )

    query_pruning = _get("query_pruning")
    history_row_cache = _get("history_row_cache")
    history_compaction = _get("history_compaction")
    del _get


def paged_attention(
    q: Array,
    k_cache: Array,
    v_cache: Array,
    block_tables: Array,
    lengths: Array,
    scale: float,
    *,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    """Spec 003's block-table form: ``q [B, Hq, L, D]``, ``k_cache [blocks, Hkv, block_size,
    D]``, ``v_cache [blocks, Hkv, block_size, Dv]``, ``block_tables [B, max_blocks]`` and
    ``lengths [B]`` (int32 / int64 on q's device, read on the device only). Query l of
    sequence b sees keys ``0 ..= lengths[b] - L + l``. Block ids are clamped into the cache
    and lengths into the table's capacity (never an out-of-bounds read); a query that sees no
    key gives zeros. Returns ``[B, Hq, L, Dv]``, or writes ``out`` (contiguous, that shape
    and q's dtype, sharing no memory with an input) and returns it."""
    kind, stream = io.context(q, stream)
    r = _rudnn.paged_attention(
        io.as_input(q), io.as_input(k_cache), io.as_input(v_cache), io.as_input(block_tables), io.as_input(lengths),
        scale, stream=stream, out=io.as_output(out),
    )
    return out if out is not None else io.result(kind, r)


def paged_write(cache: Array, new: Array, slots: Array, *, stream: StreamLike = None) -> Array:
    """A copy of ``cache [blocks, Hkv, block_size, D]`` with ``new [T, Hkv, D]`` written at
    ``slots [T]`` (int32 / int64; slot = block * block_size + row). Slots out of range are
    skipped; slots must be distinct (the CPU refuses duplicates; on a GPU which write lands is
    unspecified)."""
    kind, stream = io.context(cache, stream)
    r = _rudnn.paged_write(io.as_input(cache), io.as_input(new), io.as_input(slots), False, stream=stream)
    return io.result(kind, r)


def paged_write_(cache: Array, new: Array, slots: Array, *, stream: StreamLike = None) -> Array:
    """:func:`paged_write` into ``cache`` itself (imported writable, never copied); returns it."""
    _, stream = io.context(cache, stream)
    _rudnn.paged_write(io.as_output(cache), io.as_input(new), io.as_input(slots), True, stream=stream)
    return cache
