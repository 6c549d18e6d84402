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

# The other op bindings (see rudnn/normalization.py for the documented, typed functions).
def __getattr__(name: str) -> Any: ...
