# Type stubs of the native module rudnn._rudnn (python/src/*.cpp), so that editors and type
# checkers see the Tensor class and the exceptions. The op functions are typed in
# rudnn/normalization.py and rudnn/transformer.py, which wrap these.
from typing import Any, Optional, Tuple, Union

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
    q: Any, k: Any, v: Any, g: Any, beta: Any, state: Any, *, stream: Any = None, out: Any = None
) -> Tuple[Any, Any]: ...
def gated_delta_slots(
    q: Any, k: Any, v: Any, g: Any, beta: Any, pool: Any, slots: Any, *, cu_seqlens: Any = None,
    stream: Any = None, out: Any = None,
) -> Any: ...
def gated_delta_rule(
    query: Any, key: Any, value: Any, beta: Any, log_decay: Any, initial_state: Any,
    query_scale: float = 1.0, *, cu_seqlens: Any = None, stream: Any = None, out: Any = None,
) -> Tuple[Any, Any]: ...
def gated_delta_backward(
    dy: Any, dstate: Any, q: Any, k: Any, v: Any, g: Any, beta: Any, state: Any, *,
    cu_seqlens: Any = None, stream: Any = None, out: Any = None,
) -> Tuple[Any, ...]: ...
def gated_delta_rule_backward(
    doutput: Any, dfinal_state: Any, query: Any, key: Any, value: Any, beta: Any, log_decay: Any,
    initial_state: Any, query_scale: float = 1.0, *, cu_seqlens: Any = None, stream: Any = None,
    out: Any = None,
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

# The other op bindings (see rudnn/normalization.py for the documented, typed functions).
def __getattr__(name: str) -> Any: ...
