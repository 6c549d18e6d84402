# Type stubs of the native module rudnn._rudnn (python/src/*.cpp), so that editors and type
# checkers see the Tensor class and the exceptions. The op functions are typed in
# rudnn/normalization.py and rudnn/transformer.py, which wrap these.
from typing import Any, Dict, List, Optional, Tuple, Union

class Error(Exception):
    """Base class of every error ruDNN raises."""

    code: Optional[str]

class InvalidArgument(Error, ValueError): ...
class ShapeMismatch(Error, ValueError): ...
class DTypeMismatch(Error, TypeError): ...
class DeviceMismatch(Error, ValueError): ...
class Unsupported(Error, NotImplementedError): ...
class OutOfMemory(Error, MemoryError): ...
class CudaError(Error, RuntimeError): ...

class Tensor:
    """A ruDNN tensor: a strided view of CPU or CUDA memory, returned by ruDNN's ops."""

    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def strides(self) -> Tuple[int, ...]:
        """In elements, not bytes."""
    @property
    def dtype(self) -> str:
        """'float32', 'float16', 'bfloat16', 'float64', 'int32', 'int64', 'uint32', 'uint8' or 'bool'."""
    @property
    def device(self) -> str:
        """'cpu' or 'cuda:<index>'."""
    @property
    def ndim(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def itemsize(self) -> int: ...
    @property
    def data_ptr(self) -> int: ...
    def is_contiguous(self) -> bool: ...
    def __len__(self) -> int: ...
    def __dlpack__(
        self,
        stream: Optional[int] = None,
        *,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...

def version() -> str: ...
def cuda_device_count() -> int: ...
def built_with_cuda() -> bool: ...
def autotune_built() -> bool: ...
def autotune_entries() -> List[Dict[str, Any]]: ...
def autotune_clear() -> None: ...
def autotune_set_file(path: str) -> None: ...
def autotune_file() -> str: ...
def from_dlpack(obj: Any, *, stream: Any = None) -> Tensor: ...

# ---- transformer family (python/src/bind_transformer.cpp; documented in rudnn/transformer.py).
# Arrays are any DLPack-capable object or host buffer; results are Tensors (or the `out` /
# `cache` given). `up=None` selects the one-tensor form of the gated activations.
def rope(
    x: Any,
    dims: Optional[int] = None,
    *,
    traditional: bool = False,
    base: Optional[float] = None,
    freqs: Any = None,
    scale: float = 1.0,
    offset: int = 0,
    offsets: Any = None,
    positions: Any = None,
    stream: Any = None,
    out: Any = None,
) -> Any: ...
def rope_backward(
    dy: Any,
    dims: Optional[int] = None,
    *,
    traditional: bool = False,
    base: Optional[float] = None,
    freqs: Any = None,
    scale: float = 1.0,
    offset: int = 0,
    offsets: Any = None,
    positions: Any = None,
    stream: Any = None,
    out: Any = None,
) -> Any: ...
def norm_rope(
    x: Any,
    weight: Any = None,
    eps: float = 1e-6,
    *,
    normalize: bool = True,
    dims: Optional[int] = None,
    traditional: bool = False,
    base: Optional[float] = None,
    freqs: Any = None,
    scale: float = 1.0,
    offset: int = 0,
    cache: Any = None,
    stream: Any = None,
    out: Any = None,
) -> Any: ...
def rope_llama3_freqs(
    dims: int,
    base: float,
    factor: float = 8.0,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
    original_max_position: int = 8192,
    *,
    like: Any = None,
    stream: Any = None,
) -> Tensor: ...
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
    like: Any = None,
    stream: Any = None,
) -> Tuple[Tensor, float]: ...
def swiglu(gate: Any, up: Any = None, *, stream: Any = None, out: Any = None) -> Any: ...
def geglu(
    gate: Any, up: Any = None, approximate: str = "none", *, stream: Any = None, out: Any = None
) -> Any: ...
def swiglu_backward(
    dy: Any, gate: Any, up: Any = None, *, stream: Any = None, out: Any = None
) -> Union[Any, Tuple[Tensor, Tensor]]: ...
def geglu_backward(
    dy: Any,
    gate: Any,
    up: Any = None,
    approximate: str = "none",
    *,
    stream: Any = None,
    out: Any = None,
) -> Union[Any, Tuple[Tensor, Tensor]]: ...

# ---- pooling, grid_sample, gated_delta, ctc, attention (python/src/bind_<family>.cpp;
# documented in rudnn/<family>.py). Spatial options: an int or a sequence of ints.
def max_pool(
    input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
    ceil_mode: bool = False, *, stream: Any = None, out: Any = None,
) -> Tuple[Tensor, Tensor]: ...
def max_pool_backward(
    dout: Any, indices: Any, input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
    dilation: Any = 1, ceil_mode: bool = False, *, stream: Any = None, out: Any = None,
) -> Any: ...
def avg_pool(
    input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
    count_include_pad: bool = True, divisor_override: Optional[int] = None, *, stream: Any = None,
    out: Any = None,
) -> Any: ...
def avg_pool_backward(
    dout: Any, input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
    ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: Optional[int] = None,
    *, stream: Any = None, out: Any = None,
) -> Any: ...
def adaptive_max_pool(input: Any, output_size: Any, *, stream: Any = None, out: Any = None) -> Tuple[Any, Any]: ...
def adaptive_max_pool_backward(
    dout: Any, indices: Any, input: Any, output_size: Any, *, stream: Any = None, out: Any = None
) -> Any: ...
def adaptive_avg_pool(input: Any, output_size: Any, *, stream: Any = None, out: Any = None) -> Any: ...
def adaptive_avg_pool_backward(
    dout: Any, input: Any, output_size: Any, *, stream: Any = None, out: Any = None
) -> Any: ...
def lp_pool(
    input: Any, norm_type: float, kernel_size: Any, stride: Any = None, ceil_mode: bool = False, *,
    stream: Any = None, out: Any = None,
) -> Any: ...
def lp_pool_backward(
    dout: Any, input: Any, forward_out: Any, norm_type: float, kernel_size: Any, stride: Any = None,
    ceil_mode: bool = False, *, stream: Any = None, out: Any = None,
) -> Any: ...
def grid_sample(
    input: Any, grid: Any, mode: str = "bilinear", padding_mode: str = "zeros",
    align_corners: bool = False, *, stream: Any = None, out: Any = None,
) -> Any: ...
def grid_sample_backward(
    dout: Any, input: Any, grid: Any, mode: str = "bilinear", padding_mode: str = "zeros",
    align_corners: bool = False, *, deterministic: bool = False, stream: Any = None, out: Any = None,
) -> Tuple[Any, Any]: ...
def affine_grid(
    theta: Any, size: Any, align_corners: bool = False, *, stream: Any = None, out: Any = None
) -> Any: ...
def affine_grid_backward(
    dgrid: Any, size: Any, align_corners: bool = False, *, stream: Any = None, out: Any = None
) -> Any: ...
def gated_delta(
    q: Any, k: Any, v: Any, g: Any, beta: Any, state: Any, *, cu_seqlens: Any = None,
    stream: Any = None, out: Any = None,
) -> Tuple[Any, Any]: ...
def gated_delta_steps(
    q: Any, k: Any, v: Any, g: Any, beta: Any, state: Any, *, cu_seqlens: Any = None,
    stream: Any = None, out: Any = None,
) -> Tuple[Any, Any]: ...
def gated_delta_slots(
    q: Any, k: Any, v: Any, g: Any, beta: Any, pool: Any, slots: Any, *, cu_seqlens: Any = None,
    stream: Any = None, out: Any = None,
) -> Any: ...
def chunk_gated_delta(
    q: Any, k: Any, v: Any, g: Any, beta: Any, state: Any, chunk_size: int = 64, *,
    cu_seqlens: Any = None, stream: Any = None, out: Any = None,
) -> Any: ...
def chunk_gated_delta_slots(
    q: Any, k: Any, v: Any, g: Any, beta: Any, pool: Any, slots: Any, chunk_size: int = 64, *,
    cu_seqlens: Any = None, stream: Any = None, out: Any = None,
) -> Any: ...
def gated_delta_rule(
    query: Any, key: Any, value: Any, beta: Any, log_decay: Any, initial_state: Any,
    query_scale: float = 1.0, *, cu_seqlens: Any = None, chunk_size: Optional[int] = None,
    stream: Any = None, out: Any = None,
) -> Tuple[Any, Any]: ...
def gated_delta_backward(
    dy: Any, dstate: Any, q: Any, k: Any, v: Any, g: Any, beta: Any, state: Any, *,
    cu_seqlens: Any = None, stream: Any = None, out: Any = None,
) -> Tuple[Any, ...]: ...
def gated_delta_rule_backward(
    doutput: Any, dfinal_state: Any, query: Any, key: Any, value: Any, beta: Any, log_decay: Any,
    initial_state: Any, query_scale: float = 1.0, *, cu_seqlens: Any = None,
    chunk_size: Optional[int] = None, stream: Any = None, out: Any = None,
) -> Tuple[Any, ...]: ...
def ctc_loss(
    log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any, blank: int = 0,
    reduction: str = "mean", zero_infinity: bool = False, *, stream: Any = None, out: Any = None,
) -> Any: ...
def ctc_loss_backward(
    log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any, grad_loss: Any,
    blank: int = 0, reduction: str = "mean", zero_infinity: bool = False, *, stream: Any = None,
    out: Any = None,
) -> Any: ...
def ctc_loss_check(
    log_probs_shape: Any, targets: Any, input_lengths: Any, target_lengths: Any, blank: int = 0,
) -> None: ...
# attention's options (scale, is_causal, mask, bias, sinks, window, softcap, alibi_slopes,
# layout, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, max_score_bytes, return_lse;
# the backward: bias_requires_grad, deterministic) are keyword arguments.
def attention(
    q: Any, k: Any, v: Any, *, strategy: str = "auto", stream: Any = None, out: Any = None,
    **options: Any,
) -> Union[Any, Tuple[Any, Any]]: ...
def attention_backward(
    dout: Any, q: Any, k: Any, v: Any, out: Any, lse: Any, *, strategy: str = "auto",
    stream: Any = None, grads_out: Any = None, **options: Any,
) -> Tuple[Any, ...]: ...
def plan_attention(
    q_shape: Any, k_shape: Any, v_shape: Any, dtype: Any, *, strategy: str = "auto",
    device: Any = None, **options: Any,
) -> dict: ...
def plan_attention_backward(
    q_shape: Any, k_shape: Any, v_shape: Any, dtype: Any, *, strategy: str = "auto",
    device: Any = None, **options: Any,
) -> dict: ...

# ---- interpolation, conv, moe (python/src/bind_{interpolation,conv,moe}.cpp; documented in
# rudnn/interpolation.py, rudnn/conv.py, rudnn/moe.py, which wrap these).
def interpolate(
    input: Any, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
    align_corners: Optional[bool] = None, recompute_scale_factor: Optional[bool] = None,
    antialias: bool = False, *, stream: Any = None, out: Any = None,
) -> Any: ...
def interpolate_backward(
    dout: Any, input_size: Any, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
    align_corners: Optional[bool] = None, recompute_scale_factor: Optional[bool] = None,
    antialias: bool = False, *, deterministic: bool = True, stream: Any = None, out: Any = None,
) -> Any: ...
def interpolate_output_shape(
    input_size: Any, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
    align_corners: Optional[bool] = None, recompute_scale_factor: Optional[bool] = None,
    antialias: bool = False,
) -> Tuple[int, ...]: ...
def conv_forward(
    input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
    groups: int = 1, *, padding_end: Any = None, activation: str = "none", residual: Any = None,
    layout: str = "nchw", strategy: str = "auto", allow_tf32: bool = False, stream: Any = None,
    out: Any = None,
) -> Any: ...
def conv_data_backward(
    dout: Any, weight: Any, input_size: Any, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
    groups: int = 1, *, padding_end: Any = None, layout: str = "nchw", strategy: str = "auto",
    stream: Any = None, out: Any = None,
) -> Any: ...
def conv_weight_backward(
    dout: Any, input: Any, weight_size: Any, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
    groups: int = 1, *, padding_end: Any = None, with_bias: bool = True, layout: str = "nchw",
    strategy: str = "auto", stream: Any = None, out: Any = None,
) -> Tuple[Any, Any]: ...
def plan_conv(
    direction: str, input_size: Any, weight_size: Any, dtype: Any, *, stride: Any = 1,
    padding: Any = 0, dilation: Any = 1, groups: int = 1, padding_end: Any = None,
    layout: str = "nchw", strategy: str = "auto", allow_tf32: bool = False, device: Any = None,
) -> dict: ...
def causal_conv1d(
    x: Any, weight: Any, bias: Any = None, conv_state: Any = None, cu_seqlens: Any = None,
    silu: bool = False, *, stream: Any = None, out: Any = None,
) -> Any: ...
def causal_conv1d_backward(
    dout: Any, x: Any, weight: Any, bias: Any = None, initial_state: Any = None,
    cu_seqlens: Any = None, silu: bool = False, *, stream: Any = None, out: Any = None,
) -> Tuple[Any, Any, Any, Any]: ...

class RoutingPlan:
    @property
    def expert_indices(self) -> Tensor: ...
    @property
    def weights(self) -> Tensor: ...
    @property
    def experts(self) -> int: ...
    @property
    def tokens(self) -> int: ...
    @property
    def top_k(self) -> int: ...
    def dispatch(self, input: Any, *, stream: Any = None) -> DispatchedTokens: ...
    def into_training(
        self, logits: Any, scoring: str = "softmax", renormalize: bool = False, scale: float = 1.0, *,
        stream: Any = None,
    ) -> RouterTrainingPlan: ...

class DispatchedTokens:
    rows: Tensor
    offsets: Tensor
    token_of_row: Tensor
    row_of_slot: Tensor
    weights: Tensor
    expert_indices: Tensor
    tokens: int
    top_k: int
    experts: int
    hidden: int
    def combine(self, expert_out: Any, *, stream: Any = None) -> Tensor: ...
    def combine_backward(
        self, expert_out: Any, grad_output: Any, *, strategy: str = "serial", stream: Any = None
    ) -> Tuple[Tensor, Tensor]: ...
    def dispatch_backward(self, drows: Any, *, stream: Any = None) -> Tensor: ...

class RouterTrainingPlan:
    routing: RoutingPlan
    def backward(self, grad_weights: Any, *, stream: Any = None) -> Tensor: ...

class ExpertTrainingCache:
    def backward(
        self, dexpert: Any, *, strategy: str = "scalar", input: bool = True, gate: bool = True,
        up: bool = True, down: bool = True, stream: Any = None,
    ) -> Tuple[Any, Any, Any, Any]: ...

class SwiGluExperts:
    def __init__(self, gate: Any, up: Any, down: Any) -> None: ...
    experts: int
    inter: int
    hidden: int
    gate: Tensor
    up: Tensor
    down: Tensor
    def forward_dispatched(
        self, tokens: DispatchedTokens, *, strategy: str = "auto", stream: Any = None
    ) -> Tensor: ...
    def forward_dispatched_training(
        self, tokens: DispatchedTokens, *, strategy: str = "scalar", stream: Any = None
    ) -> Tuple[Tensor, ExpertTrainingCache]: ...

class ExpertProjectionState: ...

class MoeState:
    has_expert_caches: bool
    def route_indices(self) -> Tensor: ...

def moe_route(
    logits: Any, top_k: int = 1, renormalize: bool = False, *, stream: Any = None, out: Any = None
) -> Any: ...
def moe_route_sigmoid_grouped(
    logits: Any, bias: Any = None, top_k: int = 1, groups: int = 1, selected_groups: int = 1,
    group_top_two: bool = False, renormalize: bool = False, scale: float = 1.0, *,
    stream: Any = None, out: Any = None,
) -> Any: ...
def moe_selected_router_weights(
    logits: Any, indices: Any, scoring: str = "softmax", renormalize: bool = False,
    scale: float = 1.0, *, stream: Any = None, out: Any = None,
) -> Any: ...
def moe_selected_router_backward(
    logits: Any, indices: Any, grad_weights: Any, scoring: str = "softmax",
    renormalize: bool = False, scale: float = 1.0, *, stream: Any = None, out: Any = None,
) -> Any: ...
def moe_native_swiglu(gate: Any, up: Any, *, stream: Any = None, out: Any = None) -> Any: ...
def moe_native_swiglu_backward(
    gate: Any, up: Any, grad: Any, *, gate_grad: bool = True, up_grad: bool = True,
    stream: Any = None, out: Any = None,
) -> Tuple[Any, Any]: ...
def moe_expert_projection_forward(
    input: Any, global_ids: Any, weights: Any, *, expert_start: int = 0, forward: str = "scalar",
    backward: str = "scalar", stream: Any = None,
) -> Tuple[Tensor, ExpertProjectionState]: ...
def moe_expert_projection_backward(
    state: ExpertProjectionState, grad: Any, *, input_grad: bool = True, weights_grad: bool = True,
    stream: Any = None,
) -> Tuple[Any, Any]: ...
# moe_forward / moe_inference options (routing, top_k, renormalize, groups, selected_groups,
# group_top_two, route_scale, scoring, weight_renormalize, weight_scale, forward, backward,
# combine_backward) are required keyword arguments here; rudnn/moe.py resolves their defaults.
def moe_forward(
    input: Any, logits: Any, gate: Any, up: Any, down: Any, *, bias: Any = None, grads: Any = None,
    stream: Any = None, **options: Any,
) -> Tuple[Tensor, MoeState]: ...
def moe_inference(
    input: Any, logits: Any, gate: Any, up: Any, down: Any, *, bias: Any = None, stream: Any = None,
    **options: Any,
) -> Tensor: ...
def moe_backward(
    state: MoeState, grad_output: Any, *, grads: Any = None, stream: Any = None
) -> Tuple[Any, ...]: ...

# ---- paged (rudnn/paged.py documents these)
class PagedHostPlan:
    def __init__(
        self, page_size: int, pages: int, tables: Any, lengths: Any, sequence_ids: Any, positions: Any
    ) -> None: ...
    page_size: int
    pages: int
    sequences: int
    queries: int
    duplicate_slots: bool
    def max_keys(self, causal: bool) -> int: ...

class PagedSplitWorkspace:
    def __init__(
        self, q: Any, queries: int, heads: int, value_dim: int, splits: int, *, stream: Any = None
    ) -> None: ...
    queries: int
    heads: int
    value_dim: int
    splits: int
    bytes: int

class PagedOrderedBackwardWorkspace:
    def __init__(self, plan: PagedDevicePlan, q: Any) -> None: ...
    query_pruning: bool
    history_row_cache: bool
    history_compaction: bool
    history_compaction_pages: Optional[Tuple[int, int]]
    queries: int
    heads: int
    bytes: int

class PagedDevicePlan:
    @staticmethod
    def upload(host: PagedHostPlan, q: Any, *, stream: Any = None) -> PagedDevicePlan: ...
    bytes: int
    def attention(
        self, q: Any, k_cache: Any, v_cache: Any, scale: float, causal: bool = True, *, out: Any = None
    ) -> Any: ...
    def mla(
        self, q: Any, qp: Any, latent: Any, kp: Any, scale: float, causal: bool = True, *, out: Any = None
    ) -> Any: ...
    def attention_with_workspace(
        self, workspace: PagedSplitWorkspace, q: Any, k_cache: Any, v_cache: Any, scale: float,
        causal: bool = True,
    ) -> Tensor: ...
    def mla_with_workspace(
        self, workspace: PagedSplitWorkspace, q: Any, qp: Any, latent: Any, kp: Any, scale: float,
        causal: bool = True,
    ) -> Tensor: ...
    def attention_backward(
        self, q: Any, k_cache: Any, v_cache: Any, grad_out: Any, scale: float, causal: bool = True, *,
        out: Any = None, workspace: Optional[PagedOrderedBackwardWorkspace] = None,
    ) -> Any: ...
    def mla_backward(
        self, q: Any, qp: Any, latent: Any, kp: Any, grad_out: Any, scale: float, causal: bool = True, *,
        out: Any = None, workspace: Optional[PagedOrderedBackwardWorkspace] = None,
    ) -> Any: ...
    def append(self, k: Any, v: Any, key_cache: Any, value_cache: Any) -> Tuple[Tensor, Tensor]: ...

def paged_attention(
    q: Any, k_cache: Any, v_cache: Any, block_tables: Any, lengths: Any, scale: float, *, stream: Any = None,
    out: Any = None,
) -> Any: ...
def paged_write(cache: Any, new: Any, slots: Any, in_place: bool = False, *, stream: Any = None) -> Any: ...

# The other op bindings (see rudnn/normalization.py for the documented, typed functions).
def __getattr__(name: str) -> Any: ...

class _TorchCurrentStream:
    """torch's current stream on a CUDA device, as the package's functions pass it to the
    native ops (not public API)."""

    def __init__(self, handle: int, device: int, tensor_type: type, to_dlpack: Any = None) -> None: ...
    @property
    def cuda_stream(self) -> int: ...
    @property
    def device(self) -> int: ...
