"""The mixture-of-experts family (C++: ``rudnn/moe.h``): routing, dispatch of tokens grouped by
expert, SwiGLU experts and the weighted combine, with their backward passes, the router's
training weights, native SwiGLU, trainable expert projections, and the one-call
:func:`moe_forward` / :func:`moe_backward`::

    logits [T, E] --route--> RoutingPlan (expert_indices uint32 [T, k], weights [T, k])
    input [T, H]  --plan.dispatch(input)--> DispatchedTokens (rows [T*k, H] grouped by expert)
    rows --experts.forward_dispatched(tokens)--> expert_out [T*k, H]
    expert_out --tokens.combine(expert_out)--> output [T, H]
        = sum_j weights[t, j] * expert_out[row_of_slot[t, j]]

Plans and states are opaque objects of this module (:class:`RoutingPlan`,
:class:`DispatchedTokens`, :class:`RouterTrainingPlan`, :class:`SwiGluExperts`,
:class:`ExpertTrainingCache`, :class:`ExpertProjectionState`, :class:`MoeState`) holding
ruDNN's tensors; their array properties and results take the array type of the call that
made them (torch in, torch out).

Common contract (see also ``help(rudnn)``): logits are float32, float16 or bfloat16 (float64
too on the CPU, where the float64 reference runs); the token input and the three expert
weight tensors share one float dtype (which may differ from the logits'). Nothing
synchronises the host or reads device data back, so a forward can be captured in a CUDA
graph; dispatch is a stable counting sort, combine sums each token's k rows in slot order, no
kernel uses floating-point atomics: every result is bitwise identical from run to run on one
device. Inputs of any strides are taken (odd layouts through one dense copy); results are new
contiguous arrays. Errors are :class:`rudnn.Error` subclasses naming the op (the step, e.g.
``route``, ``dispatch``, ``combine``) and the argument.

Option names are the header's enums in lower case: routing ``"softmax"`` /
``"sigmoid_grouped"``, scoring ``"softmax"`` / ``"sigmoid"``, expert strategies ``"scalar"``
(float32 CUDA-core grouped kernel), ``"tensor_core"`` (float16 / bfloat16 on compute
capability >= 8.0, else Unsupported) and ``"auto"``, combine-gradient strategies
``"serial"`` / ``"plane"``.

torch: :func:`rudnn.torch_autograd.moe` is the differentiable one-call forward (custom op
``torch.ops.rudnn.moe`` with a fake implementation and autograd for input, logits and the
three expert weights), traced by ``torch.compile(fullgraph=True)``.
"""

from __future__ import annotations

from typing import Iterable, Optional, Tuple

from . import _interop as io
from . import _rudnn
from ._interop import Array, StreamLike

__all__ = [
    "RoutingPlan",
    "DispatchedTokens",
    "RouterTrainingPlan",
    "SwiGluExperts",
    "ExpertTrainingCache",
    "ExpertProjectionState",
    "MoeState",
    "route",
    "route_sigmoid_grouped",
    "selected_router_weights",
    "selected_router_backward",
    "native_swiglu",
    "native_swiglu_backward",
    "expert_projection_forward",
    "expert_projection_backward",
    "moe_forward",
    "moe_inference",
    "moe_backward",
]


class _Wrapped:
    """A native plan or state with the array kind of the call that made it."""

    __slots__ = ("_native", "_kind")

    def __init__(self, native, kind: int):
        self._native = native
        self._kind = kind

    def _result(self, t):
        return io.result(self._kind, t)

    def __repr__(self) -> str:
        return f"<rudnn.moe.{type(self).__name__}>"


class RoutingPlan(_Wrapped):
    """The selection of one batch, made by :func:`route` or :func:`route_sigmoid_grouped` (so
    its indices are valid expert ids by construction). Cheap to keep (tensor handles)."""

    @property
    def expert_indices(self) -> Array:
        """uint32 ``[T, k]``: slot j of a token is its j-th best expert."""
        return self._result(self._native.expert_indices)

    @property
    def weights(self) -> Array:
        """``[T, k]`` in the logits' dtype (float32 for a :class:`RouterTrainingPlan`'s)."""
        return self._result(self._native.weights)

    @property
    def experts(self) -> int:
        return self._native.experts

    @property
    def tokens(self) -> int:
        return self._native.tokens

    @property
    def top_k(self) -> int:
        return self._native.top_k

    def dispatch(self, input: Array, *, stream: StreamLike = None) -> "DispatchedTokens":
        """The rows of ``input [T, H]`` (H >= 1, the plan's T and device) grouped by expert.
        Memory: the ``T*k x H`` rows plus ``4 (3 T k + E + 1)`` bytes of mapping.

        Raises:
            Error (op ``dispatch``): input not ``[T, H]`` of a float dtype on the plan's
            device; E > 8192.
        """
        kind, stream = io.context(input, stream)
        return DispatchedTokens(self._native.dispatch(io.as_input(input), stream=stream), kind)

    def into_training(
        self, logits: Array, scoring: str = "softmax", renormalize: bool = False, scale: float = 1.0, *,
        stream: StreamLike = None,
    ) -> "RouterTrainingPlan":
        """This selection with its weights recomputed (float32) by
        :func:`selected_router_weights` for training; see :class:`RouterTrainingPlan`."""
        kind, stream = io.context(logits, stream)
        native = self._native.into_training(io.as_input(logits), scoring, renormalize, scale, stream=stream)
        return RouterTrainingPlan(native, kind)


class DispatchedTokens(_Wrapped):
    """Tokens grouped by expert: the ``T*k`` selected (token, slot) pairs as rows, those of
    expert e at ``[offsets[e], offsets[e + 1])`` in ascending token order. No token is dropped."""

    @property
    def rows(self) -> Array:
        """``[T*k, H]``, the input's dtype: row r is ``input[token_of_row[r]]``."""
        return self._result(self._native.rows)

    @property
    def offsets(self) -> Array:
        """int32 ``[E + 1]`` (0 ... T*k): the grouped GEMM's form."""
        return self._result(self._native.offsets)

    @property
    def token_of_row(self) -> Array:
        """int32 ``[T*k]``."""
        return self._result(self._native.token_of_row)

    @property
    def row_of_slot(self) -> Array:
        """int32 ``[T, k]``: the row that holds slot (t, j)."""
        return self._result(self._native.row_of_slot)

    @property
    def weights(self) -> Array:
        return self._result(self._native.weights)

    @property
    def expert_indices(self) -> Array:
        return self._result(self._native.expert_indices)

    @property
    def tokens(self) -> int:
        return self._native.tokens

    @property
    def top_k(self) -> int:
        return self._native.top_k

    @property
    def experts(self) -> int:
        return self._native.experts

    @property
    def hidden(self) -> int:
        return self._native.hidden

    def combine(self, expert_out: Array, *, stream: StreamLike = None) -> Array:
        """``output[t] = sum_{j < k} weights[t, j] * expert_out[row_of_slot[t, j]]`` summed in
        float32 in slot order, rounded once: ``[T, H']`` in expert_out's dtype.

        Raises:
            Error (op ``combine``): expert_out not ``[T*k, H']`` (H' >= 1) of a float dtype on
            the tokens' device.
        """
        kind, stream = io.context(expert_out, stream)
        return io.result(kind, self._native.combine(io.as_input(expert_out), stream=stream))

    def combine_backward(
        self, expert_out: Array, grad_output: Array, *, strategy: str = "serial", stream: StreamLike = None
    ) -> Tuple[Array, Array]:
        """``(dexpert, dweights)`` of :meth:`combine` for ``grad_output [T, H']``:
        ``dexpert[row_of_slot[t, j]] = weights[t, j] * grad_output[t]`` (expert_out's dtype)
        and ``dweights[t, j] = <grad_output[t], expert_out[row_of_slot[t, j]]>`` (float32).
        ``strategy``: ``"serial"`` (each dot product in order on one thread) or ``"plane"``
        (split over a block, folded in a fixed tree); both deterministic.
        """
        kind, stream = io.context(expert_out, stream)
        r = self._native.combine_backward(
            io.as_input(expert_out), io.as_input(grad_output), strategy=strategy, stream=stream
        )
        return io.results(kind, r)

    def dispatch_backward(self, drows: Array, *, stream: StreamLike = None) -> Array:
        """``dinput[t] = sum_j drows[row_of_slot[t, j]]`` (float32 in slot order, rounded to
        drows' dtype): the gradient of :meth:`RoutingPlan.dispatch`; the routing weights are
        not applied (they belong to combine)."""
        kind, stream = io.context(drows, stream)
        return io.result(kind, self._native.dispatch_backward(io.as_input(drows), stream=stream))


class RouterTrainingPlan(_Wrapped):
    """A routing selection with float32 weights recomputed by :func:`selected_router_weights`,
    and the logits gradient of those weights (made by :meth:`RoutingPlan.into_training`). Keeps
    the logits (do not modify them)."""

    @property
    def routing(self) -> RoutingPlan:
        """The plan to dispatch with: the selection and the float32 weights."""
        return RoutingPlan(self._native.routing, self._kind)

    def backward(self, grad_weights: Array, *, stream: StreamLike = None) -> Array:
        """The logits gradient ``[T, E]`` (logits' dtype) for float32 ``grad_weights [T, k]``."""
        kind, stream = io.context(grad_weights, stream)
        return io.result(kind, self._native.backward(io.as_input(grad_weights), stream=stream))


class ExpertTrainingCache(_Wrapped):
    """What the expert backward needs of :meth:`SwiGluExperts.forward_dispatched_training`."""

    def backward(
        self, dexpert: Array, *, strategy: str = "scalar", input: bool = True, gate: bool = True, up: bool = True,
        down: bool = True, stream: StreamLike = None,
    ) -> Tuple[Optional[Array], Optional[Array], Optional[Array], Optional[Array]]:
        """``(dinput, dgate, dup, ddown)`` for ``dexpert [T*k, H]`` (the weights' dtype):
        dinput ``[T*k, H]`` in the weights' dtype (pass it to
        :meth:`DispatchedTokens.dispatch_backward`), the weight gradients float32 ``[E, I, H]``
        / ``[E, H, I]``, each expert's rows reduced in a fixed order. An unselected gradient
        (input/gate/up/down False) is None, neither computed nor allocated.

        Raises:
            Error (op ``ExpertTrainingCache::backward``): dexpert not ``[T*k, H]`` of the
            weights' dtype and device; Unsupported for ``"tensor_core"`` where it cannot run.
        """
        kind, stream = io.context(dexpert, stream)
        r = self._native.backward(
            io.as_input(dexpert), strategy=strategy, input=input, gate=gate, up=up, down=down, stream=stream
        )
        return io.results(kind, r)


class SwiGluExperts(_Wrapped):
    """Bias-free SwiGLU experts: expert e maps a row ``x [H]`` to
    ``down_e . native_swiglu(round(gate_e . x), round(up_e . x))`` with float32 accumulation
    (the two projections rounded to the weights' dtype, the output rounded once).

    Args:
        gate, up: ``[E, I, H]``; down: ``[E, H, I]``; one float dtype and device (held, not
            copied: do not modify them while the object is in use).

    Raises:
        Error (op ``SwiGluExperts``): shapes, dtypes or devices that disagree.
    """

    def __init__(self, gate: Array, up: Array, down: Array):
        kind, _ = io.context(gate, None)
        super().__init__(_rudnn.SwiGluExperts(io.as_input(gate), io.as_input(up), io.as_input(down)), kind)

    @property
    def experts(self) -> int:
        return self._native.experts

    @property
    def inter(self) -> int:
        return self._native.inter

    @property
    def hidden(self) -> int:
        return self._native.hidden

    @property
    def gate(self) -> Array:
        """``[E, I, H]``, the tensor given (not a copy)."""
        return self._result(self._native.gate)

    @property
    def up(self) -> Array:
        """``[E, I, H]``, the tensor given (not a copy)."""
        return self._result(self._native.up)

    @property
    def down(self) -> Array:
        """``[E, H, I]``, the tensor given (not a copy)."""
        return self._result(self._native.down)

    def forward_dispatched(
        self, tokens: DispatchedTokens, *, strategy: str = "auto", stream: StreamLike = None
    ) -> Array:
        """The experts on the dispatched rows: ``[T*k, H]`` in the weights' dtype. ``"auto"``
        takes a streaming matrix-vector path for at most 512 rows, else ``"tensor_core"`` where
        the dtype and device allow it, else ``"scalar"``; deterministic run to run.

        Raises:
            Error (op ``forward_dispatched``): tokens of another E or H, dtype or device;
            Unsupported: ``"tensor_core"`` on float32 or below compute capability 8.0.
        """
        _, stream = io.context(tokens.rows, stream)
        return tokens._result(self._native.forward_dispatched(tokens._native, strategy=strategy, stream=stream))

    def forward_dispatched_training(
        self, tokens: DispatchedTokens, *, strategy: str = "scalar", stream: StreamLike = None
    ) -> Tuple[Array, ExpertTrainingCache]:
        """:meth:`forward_dispatched`'s output and the :class:`ExpertTrainingCache` for its
        backward (three ``[T*k, I]`` arrays kept)."""
        _, stream = io.context(tokens.rows, stream)
        out, cache = self._native.forward_dispatched_training(tokens._native, strategy=strategy, stream=stream)
        return tokens._result(out), ExpertTrainingCache(cache, tokens._kind)


def route(
    logits: Array, top_k: int = 1, renormalize: bool = False, *, out: Optional[Tuple[Array, Array]] = None,
    stream: StreamLike = None,
):
    """Softmax top-k routing of ``logits [T, E]``: softmax over all E in float32, the k most
    probable experts in descending order (exact ties to the lower id); weights are the
    selected probabilities (divided by their sum with ``renormalize``) in the logits' dtype.
    A row holding NaN or +inf, or only -inf, gets NaN weights (its indices still distinct).

    Args:
        logits: ``[T, E]``, E >= 1, float dtype.
        top_k: 1 <= top_k <= E.
        renormalize: a bool.
        out: optional ``(indices_out uint32 [T, k], weights_out [T, k])``, contiguous: the
            plan's tensors written there (nothing allocated; CUDA-graph friendly), returned.

    Returns:
        a :class:`RoutingPlan` (``out`` itself when given).

    Raises:
        InvalidArgument / ShapeMismatch / DTypeMismatch (op ``route``): logits not 2-d of a
        float dtype, top_k outside [1, E], a bool where an int belongs; ``out`` of the wrong
        shape or dtype.
    """
    kind, stream = io.context(logits, stream)
    r = _rudnn.moe_route(io.as_input(logits), top_k, renormalize, stream=stream, out=io.as_output(out))
    return out if out is not None else RoutingPlan(r, kind)


def route_sigmoid_grouped(
    logits: Array,
    bias: Optional[Array] = None,
    top_k: int = 1,
    groups: int = 1,
    selected_groups: int = 1,
    group_top_two: bool = False,
    renormalize: bool = False,
    scale: float = 1.0,
    *,
    out: Optional[Tuple[Array, Array]] = None,
    stream: StreamLike = None,
):
    """DeepSeek-V3's group-limited sigmoid routing of ``logits [T, E]``: scores
    ``s = sigmoid(logits)``, corrected ``c = s + bias``; the ``selected_groups`` best of
    ``groups`` consecutive groups (by their largest c, or the sum of their two largest with
    ``group_top_two``) are kept and the top_k experts by c among them chosen (ties to the lower
    id). Weights are the uncorrected s (over their sum with ``renormalize``) times ``scale``:
    the bias changes the choice, never a weight. NaN ranks above every number.

    Args:
        logits: ``[T, E]``, 1 <= E <= 1024.
        bias: None or float32 ``[E]``.
        top_k: 1..64 and at most ``selected_groups * E / groups``.
        groups: 1..128 dividing E; selected_groups: 1..groups.
        group_top_two, renormalize: bools; scale: finite > 0.
        out: optional ``(indices_out, weights_out)`` as for :func:`route`.

    Returns:
        a :class:`RoutingPlan` (``out`` itself when given).

    Raises:
        the errors above (op ``route_sigmoid_grouped``), as for :func:`route`.
    """
    kind, stream = io.context(logits, stream)
    r = _rudnn.moe_route_sigmoid_grouped(
        io.as_input(logits), io.as_input(bias), top_k, groups, selected_groups, group_top_two, renormalize, scale,
        stream=stream, out=io.as_output(out),
    )
    return out if out is not None else RoutingPlan(r, kind)


def selected_router_weights(
    logits: Array, indices: Array, scoring: str = "softmax", renormalize: bool = False, scale: float = 1.0, *,
    out: Optional[Array] = None, stream: StreamLike = None,
) -> Array:
    """Float32 weights ``[T, k]`` of the fixed selection ``indices [T, k]`` (uint32, int32 or
    int64) over ``logits [T, E]``: ``q_j = softmax(logits[t])[indices[t, j]]`` (``"softmax"``)
    or ``sigmoid(logits[t, indices[t, j]])`` (``"sigmoid"``); ``w_j = scale * q_j`` (over
    ``sum_m q_m`` with ``renormalize``). A row with an index outside [0, E) is NaN.

    Raises:
        Error (op ``selected_router_weights``): logits as for :func:`route`; indices not
        ``[T, k]`` with 1 <= k <= min(E, 64) of an integer dtype above, on logits' device.
    """
    kind, stream = io.context(logits, stream)
    r = _rudnn.moe_selected_router_weights(
        io.as_input(logits), io.as_input(indices), scoring, renormalize, scale, stream=stream, out=io.as_output(out)
    )
    return out if out is not None else io.result(kind, r)


def selected_router_backward(
    logits: Array, indices: Array, grad_weights: Array, scoring: str = "softmax", renormalize: bool = False,
    scale: float = 1.0, *, out: Optional[Array] = None, stream: StreamLike = None,
) -> Array:
    """The logits gradient ``[T, E]`` (logits' dtype) of
    ``sum(grad_weights * selected_router_weights(logits, indices, ...))`` for float32
    ``grad_weights [T, k]``. Rows with an invalid index are NaN.

    Raises:
        as :func:`selected_router_weights` (op ``selected_router_backward``), plus
        grad_weights not float32 ``[T, k]`` on the device.
    """
    kind, stream = io.context(logits, stream)
    r = _rudnn.moe_selected_router_backward(
        io.as_input(logits), io.as_input(indices), io.as_input(grad_weights), scoring, renormalize, scale,
        stream=stream, out=io.as_output(out),
    )
    return out if out is not None else io.result(kind, r)


def native_swiglu(gate: Array, up: Array, *, out: Optional[Array] = None, stream: StreamLike = None) -> Array:
    """``round(round(silu(gate)) * up)`` elementwise, as the experts store their activation
    (SiLU rounded to the dtype before the product, unlike :func:`rudnn.swiglu`).

    Raises:
        Error (op ``native_swiglu``): gate and up of different shapes, dtypes or devices, or
        not float.
    """
    kind, stream = io.context(gate, stream)
    r = _rudnn.moe_native_swiglu(io.as_input(gate), io.as_input(up), stream=stream, out=io.as_output(out))
    return out if out is not None else io.result(kind, r)


def native_swiglu_backward(
    gate: Array, up: Array, grad: Array, *, gate_grad: bool = True, up_grad: bool = True,
    out: Optional[Tuple[Optional[Array], Optional[Array]]] = None, stream: StreamLike = None,
) -> Tuple[Optional[Array], Optional[Array]]:
    """``(dgate, dup)`` of :func:`native_swiglu` for ``grad`` (gate's shape and dtype):
    ``dup = grad * round(silu(gate))``, ``dgate = grad * up * silu'(gate)``, float32, rounded
    once. ``gate_grad`` / ``up_grad`` False (or a None element of ``out``): that gradient is
    neither computed nor allocated (None)."""
    kind, stream = io.context(gate, stream)
    r = _rudnn.moe_native_swiglu_backward(
        io.as_input(gate), io.as_input(up), io.as_input(grad), gate_grad=gate_grad, up_grad=up_grad, stream=stream,
        out=io.as_output(out),
    )
    return out if out is not None else io.results(kind, r)


class ExpertProjectionState(_Wrapped):
    """What :func:`expert_projection_backward` needs (the forward's operands, held not copied:
    do not modify them in between). Opaque."""


def expert_projection_forward(
    input: Array, global_ids: Array, weights: Array, *, expert_start: int = 0, forward: str = "scalar",
    backward: str = "scalar", stream: StreamLike = None,
) -> Tuple[Array, ExpertProjectionState]:
    """``output[r] = weights[global_ids[r] - expert_start] . input[r]`` for ``input [R, K]``,
    uint32 ``global_ids [R]`` and ``weights [E, N, K]`` (input's dtype), float32 accumulation,
    rows in their incoming order (grouped internally by a stable sort). A row whose id has no
    expert here gives a NaN row (no host check of the ids).

    Returns:
        ``(output [R, N], state)`` for :func:`expert_projection_backward`.

    Raises:
        Error (op ``expert_projection_forward``): the shapes, dtypes and devices above;
        expert_start < 0; Unsupported for ``"tensor_core"`` where it cannot run.
    """
    kind, stream = io.context(input, stream)
    out, state = _rudnn.moe_expert_projection_forward(
        io.as_input(input), io.as_input(global_ids), io.as_input(weights), expert_start=expert_start,
        forward=forward, backward=backward, stream=stream,
    )
    return io.result(kind, out), ExpertProjectionState(state, kind)


def expert_projection_backward(
    state: ExpertProjectionState, grad: Array, *, input: bool = True, weights: bool = True,
    stream: StreamLike = None,
) -> Tuple[Optional[Array], Optional[Array]]:
    """``(dinput [R, K] in input's dtype, dweights float32 [E, N, K])`` for ``grad [R, N]``
    (the output's dtype); an unselected one is None (not computed).

    Raises:
        Error (op ``expert_projection_backward``): grad not ``[R, N]`` of the output's dtype
        and device.
    """
    kind, stream = io.context(grad, stream)
    r = _rudnn.moe_expert_projection_backward(
        state._native, io.as_input(grad), input_grad=input, weights_grad=weights, stream=stream
    )
    return io.results(kind, r)


class MoeState(_Wrapped):
    """What :func:`moe_backward` needs of a :func:`moe_forward`: the selection, the training
    weights' plan (which keeps the logits), the dispatched tokens, the expert output and
    (unless a selected forward omitted them) the experts' activation caches. Opaque."""

    @property
    def has_expert_caches(self) -> bool:
        return self._native.has_expert_caches

    def route_indices(self) -> Array:
        """The selected expert ids, uint32 ``[T, k]`` (a discrete output, not differentiated)."""
        return self._result(self._native.route_indices())


GRADIENTS = ("input", "logits", "gate", "up", "down")


def _moe_options(routing, top_k, renormalize, groups, selected_groups, group_top_two, route_scale, scoring,
                 weight_renormalize, weight_scale, forward, backward, combine_backward) -> dict:
    if scoring is None:
        scoring = "sigmoid" if routing == "sigmoid_grouped" else "softmax"
    return dict(
        routing=routing, top_k=top_k, renormalize=renormalize, groups=groups, selected_groups=selected_groups,
        group_top_two=group_top_two, route_scale=route_scale, scoring=scoring,
        weight_renormalize=renormalize if weight_renormalize is None else weight_renormalize,
        weight_scale=route_scale if weight_scale is None else weight_scale, forward=forward, backward=backward,
        combine_backward=combine_backward,
    )


_MOE_ARGS = """
    Args:
        input: ``[T, H]``; gate, up: ``[E, I, H]``; down: ``[E, H, I]`` (one float dtype).
        logits: ``[T, E]`` (float dtype, may differ from the input's).
        bias: None or float32 ``[E]``: the correction bias of ``"sigmoid_grouped"`` (it
            changes the selection, never a weight); refused with ``"softmax"``.
        routing: ``"softmax"`` (default; top-k of the softmax) or ``"sigmoid_grouped"``
            (:func:`route_sigmoid_grouped`).
        top_k, renormalize: the selection's (both routings); groups, selected_groups,
            group_top_two, route_scale: ``"sigmoid_grouped"``'s (see
            :func:`route_sigmoid_grouped`; ``route_scale`` is its ``scale``).
        scoring, weight_renormalize, weight_scale: the continuous weights the output uses
            and differentiates (:func:`selected_router_weights`); None (default): ``"sigmoid"``
            for ``"sigmoid_grouped"`` else ``"softmax"``, the selection's ``renormalize``, and
            ``route_scale``.
        forward, backward: the expert strategies (``"scalar"`` default, ``"tensor_core"``,
            ``"auto"``); combine_backward: ``"serial"`` (default) or ``"plane"``.
        stream: CUDA stream; ignored on the CPU.
"""


def moe_forward(
    input: Array,
    logits: Array,
    gate: Array,
    up: Array,
    down: Array,
    *,
    bias: Optional[Array] = None,
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
    combine_backward: str = "serial",
    grads: Optional[Iterable[str]] = None,
    stream: StreamLike = None,
) -> Tuple[Array, MoeState]:
    kind, stream = io.context(input, stream)
    out, state = _rudnn.moe_forward(
        io.as_input(input), io.as_input(logits), io.as_input(gate), io.as_input(up), io.as_input(down),
        bias=io.as_input(bias), grads=None if grads is None else tuple(grads), stream=stream,
        **_moe_options(routing, top_k, renormalize, groups, selected_groups, group_top_two, route_scale, scoring,
                       weight_renormalize, weight_scale, forward, backward, combine_backward),
    )
    return io.result(kind, out), MoeState(state, kind)


moe_forward.__doc__ = (
    """The routed expert branch: selection -> ``w = selected_router_weights(logits, selection)``
    -> dispatch -> SwiGLU experts -> combine with w. No token is dropped; nothing
    synchronises with the host.
"""
    + _MOE_ARGS
    + """        grads: None (all five) or the names of the gradients a later :func:`moe_backward`
            will ask for (``"input"``, ``"logits"``, ``"gate"``, ``"up"``, ``"down"``); with
            none of input / gate / up / down the expert caches are not kept.

    Returns:
        ``(output [T, H] in the input's dtype, MoeState)``.

    Raises:
        the errors of each step (route / route_sigmoid_grouped, selected_router_weights,
        dispatch, SwiGluExperts, forward_dispatched: each names its step), a bias with
        ``"softmax"`` (InvalidArgument, op ``moe_forward``), an unknown name in ``grads``.
"""
)


def moe_inference(
    input: Array,
    logits: Array,
    gate: Array,
    up: Array,
    down: Array,
    *,
    bias: Optional[Array] = None,
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
    stream: StreamLike = None,
) -> Array:
    kind, stream = io.context(input, stream)
    out = _rudnn.moe_inference(
        io.as_input(input), io.as_input(logits), io.as_input(gate), io.as_input(up), io.as_input(down),
        bias=io.as_input(bias), stream=stream,
        **_moe_options(routing, top_k, renormalize, groups, selected_groups, group_top_two, route_scale, scoring,
                       weight_renormalize, weight_scale, forward, "scalar", "serial"),
    )
    return io.result(kind, out)


moe_inference.__doc__ = (
    """:func:`moe_forward`'s output alone (the same bits), keeping no state.
"""
    + _MOE_ARGS
    + """
    Returns:
        ``output [T, H]`` in the input's dtype.

    Raises:
        as :func:`moe_forward` (op ``moe_inference`` for its own checks).
"""
)


def moe_backward(
    state: MoeState, grad_output: Array, *, grads: Optional[Iterable[str]] = None, stream: StreamLike = None
) -> Tuple[Optional[Array], ...]:
    """First-order gradients ``(dinput, dlogits, dgate, dup, ddown)`` of :func:`moe_forward` for
    ``grad_output [T, H]`` (the output's dtype): the experts' backward, combine's, dispatch's
    and the router's for the fixed selection (not the top-k or group decisions, not the
    bias). dinput in the input's dtype, dlogits in the logits', the expert weights' float32.

    Args:
        state: the :class:`MoeState` of the forward.
        grad_output: ``[T, H]``.
        grads: None (all five) or the names to compute; the others are None (not computed).
        stream: CUDA stream; ignored on the CPU.

    Raises:
        Error (op ``moe_backward`` / ``combine_backward``): grad_output not ``[T, H]`` of the
        output's dtype; a gradient needing expert caches the forward did not keep.
    """
    kind, stream = io.context(grad_output, stream)
    r = _rudnn.moe_backward(
        state._native, io.as_input(grad_output), grads=None if grads is None else tuple(grads), stream=stream
    )
    return io.results(kind, r)
