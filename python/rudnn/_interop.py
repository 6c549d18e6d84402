"""How the package's functions take and return arrays (shared by every op family).

The native module (``rudnn._rudnn``) takes DLPack-capable objects and returns
:class:`rudnn.Tensor`; these helpers pick the caller's array type for results and the stream
a CUDA op runs on. torch and numpy are looked up in ``sys.modules`` only: ruDNN never imports
them itself.
"""

from __future__ import annotations

import sys
from typing import Any, Optional, Sequence, Tuple, Union

from ._rudnn import Tensor, _TorchCurrentStream

#: Any array ruDNN takes: a torch tensor, a numpy array, a CuPy or JAX array, a
#: :class:`rudnn.Tensor`, or another DLPack producer / host buffer.
Array = Any
#: A CUDA stream: a cudaStream_t address as an int, a stream object (``__cuda_stream__()``,
#: ``cuda_stream`` as on ``torch.cuda.Stream``, ``ptr`` as on ``cupy.cuda.Stream``), or None.
StreamLike = Union[int, Any, None]

# Result kinds. TORCH_CURRENT: torch tensors, the op run on torch's current stream of their
# device (no stream named), so results are handed to torch without stream work.
RUDNN, NUMPY, TORCH, TORCH_CURRENT = 0, 1, 2, 3


def loaded_torch():
    return sys.modules.get("torch")


def loaded_numpy():
    return sys.modules.get("numpy")


def compiling() -> bool:
    """Whether torch.compile / torch.export is tracing this call: the functions then call
    their torch.library custom op (torch.ops.rudnn.*), which the tracer records, instead of
    the native module, which it cannot trace."""
    torch = loaded_torch()
    compiler = getattr(torch, "compiler", None)
    return compiler is not None and compiler.is_compiling()


def torch_ops():
    """torch.ops.rudnn, registered on first use."""
    from . import torch_library  # noqa: F401

    return loaded_torch().ops.rudnn


_torch_tools: Optional[Tuple[Any, Any, Any]] = None


def _torch_fast_paths(torch) -> Tuple[Any, Any, Any]:
    """(current raw stream of a device, to_dlpack, from_dlpack) of the loaded torch, looked up
    once. The raw stream getter is the one torch's compiled code calls
    (``torch._C._cuda_getCurrentRawStream``; where a torch lacks it,
    ``torch.cuda.current_stream(d).cuda_stream``, the same handle); to_dlpack and
    from_dlpack are the public C converters, without ``__dlpack__``'s checks and stream
    handling in Python: a call on small tensors spends its host time there (about 2 us per
    tensor for ``__dlpack__``, 8 us for ``from_dlpack`` of an object, on the H100 machine)."""
    global _torch_tools
    if _torch_tools is None:
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is None:
            raw = lambda d: torch.cuda.current_stream(d).cuda_stream  # noqa: E731
        _torch_tools = (raw, torch.utils.dlpack.to_dlpack, torch.utils.dlpack.from_dlpack)
    return _torch_tools


def context(primary: Array, stream: StreamLike) -> Tuple[int, StreamLike]:
    """(result kind, stream) for a call whose first array argument is ``primary``."""
    torch = loaded_torch()
    if torch is not None and isinstance(primary, torch.Tensor):
        if stream is None:
            dev = primary.device
            if dev.type == "cuda":
                # The op runs on torch's current stream, where the work on torch's tensors of
                # this device is queued: the native module exports them without stream work
                # (interop.h), and the results go back to torch the same way (result()).
                raw, to_dlpack, _ = _torch_fast_paths(torch)
                stream = _TorchCurrentStream(raw(dev.index), dev.index, torch.Tensor, to_dlpack)
                return TORCH_CURRENT, stream
        return TORCH, stream
    np = loaded_numpy()
    if np is not None and isinstance(primary, np.ndarray):
        return NUMPY, stream
    return RUDNN, stream


def _shared(a: Array) -> Array:
    """``a`` as DLPack can export it, sharing its memory."""
    torch = loaded_torch()
    if torch is not None and isinstance(a, torch.Tensor) and a.requires_grad:
        return a.detach()  # torch refuses to export tensors that require grad
    return a


def as_input(a: Array) -> Array:
    """An input as the native module takes it (zero-copy where DLPack allows it)."""
    if a is None or isinstance(a, Tensor):
        return a
    a = _shared(a)
    np = loaded_numpy()
    if np is not None and isinstance(a, np.ndarray) and any(s < 0 for s in a.strides):
        return np.ascontiguousarray(a)  # ruDNN takes no negative strides; an input may be copied
    return a


def as_output(out: Union[Array, Sequence[Optional[Array]], None]):
    """An ``out=`` argument as the native module takes it: never copied (the op writes the
    caller's memory, or refuses it with an error naming the op and the argument)."""
    if out is None:
        return None
    if isinstance(out, (tuple, list)):
        return tuple(o if o is None else _shared(o) for o in out)
    return _shared(out)


def result(kind: int, t: Optional[Tensor]):
    """A native result as the caller's kind of array (zero-copy)."""
    if t is None or kind == RUDNN:
        return t
    if kind == TORCH_CURRENT:
        # Made on torch's current stream, the stream its consumer uses: no stream work.
        return _torch_fast_paths(loaded_torch())[2](t.__dlpack__(stream=-1))
    if kind == TORCH:
        return loaded_torch().from_dlpack(t)
    np = loaded_numpy()
    try:
        # The buffer protocol gives a writable array (numpy marks arrays imported through
        # unversioned DLPack read-only); both share the Tensor's memory.
        return np.asarray(t)
    except (BufferError, TypeError, ValueError):
        return np.from_dlpack(t)


def results(kind: int, ts) -> tuple:
    return tuple(result(kind, t) for t in ts)
