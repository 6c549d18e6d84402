"""ruDNN: neural-network operators for CUDA GPUs, with a CPU reference for every op.

The functions here are two families of the C++ library:

- normalization (``rudnn/normalization.h``, :mod:`rudnn.normalization`): LayerNorm, RMSNorm,
  residual-add + RMSNorm, softmax, log-sum-exp and cross entropy over the last axis, with
  their backward passes;
- transformer (``rudnn/transformer.h``, :mod:`rudnn.transformer`): rotary position embeddings
  (rope, rope_backward, the Llama 3 / YaRN frequency helpers), norm + rope + KV-cache write
  (norm_rope), and the gated activations SwiGLU / GeGLU with their backward passes. Their
  shapes are the op's own (``[B, ..., T, D]`` for rope, ``[..., I]`` / ``[..., 2I]`` for the
  gated activations); the rest of the common contract below holds for them too;
- pooling (:mod:`rudnn.pooling`): max_pool (with indices), avg_pool, adaptive max / average
  and LP pooling, 1-D/2-D/3-D, with their backward passes;
- grid_sample (:mod:`rudnn.grid_sample`): grid_sample and affine_grid with their backward
  passes;
- gated_delta (:mod:`rudnn.gated_delta`): the gated delta rule's recurrence (dense and varlen)
  with its backward passes;
- ctc (:mod:`rudnn.ctc`): ctc_loss and its gradient, ctc_loss_check (host rules);
- attention (:mod:`rudnn.attention`): scaled dot-product attention forward and backward
  (grouped heads, varlen, both layouts, masks, bias, sinks, window, softcap, ALiBi) and its
  plan functions.
- interpolation (:mod:`rudnn.interpolation`): interpolate (torch's every mode) with its
  backward pass;
- conv (:mod:`rudnn.conv`): 1-D/2-D/3-D convolution with its data and weight gradients,
  grouped / depthwise, channels-last, a fused epilogue, plan_conv, and the causal depthwise
  conv1d with its state, varlen form and backward pass;
- moe (:mod:`rudnn.moe`): mixture-of-experts routing, dispatch, SwiGLU experts, combine, the
  router's training weights, expert projections and the one-call moe_forward / moe_backward;
- paged (:mod:`rudnn.paged`, reached as the module: ``rudnn.paged.DevicePlan``): attention
  and MLA over a paged KV cache (host and device plans, split workspaces, cache appends) and
  spec 003's block-table paged_attention / paged_write.
  These take their own shapes (each module's documentation); the common contract's dtypes,
  layouts, ``out=``, ``stream=`` and errors hold for them.

Inputs and outputs
    Inputs are any DLPack-capable arrays: torch tensors, numpy arrays, cupy/jax arrays,
    rudnn Tensors (host buffers such as read-only numpy arrays are taken through the buffer
    protocol). Nothing is copied on the way in or out: ruDNN reads the caller's memory in
    place and returns new arrays that wrap ruDNN's own memory.

    The type of the first array argument decides the result type:

    - torch tensor -> torch tensors on the same device (``torch.from_dlpack``). A CUDA op
      runs on ``torch.cuda.current_stream(device)``, so it is ordered with the caller's
      torch work, as a torch op would be; its torch operands of that device are then taken
      with ``__dlpack__(stream=-1)``: no stream work is needed on their own stream, and
      torch's Python-side stream comparison, most of a small call's host time, is skipped.
      With an explicit ``stream=`` every operand is synchronised with that stream.
    - numpy array -> numpy arrays (writable; they share ruDNN's memory).
    - anything else -> :class:`rudnn.Tensor`, itself DLPack-capable.

    torch is imported only when the caller uses it; numpy is never imported by ruDNN itself.

Common contract (every op)
    - Rows: ``x`` has shape ``[..., H]``; the op runs on each of the ``numel / H`` rows of
      length ``H`` (the last axis). ``H >= 1``; zero rows is valid. Results are new,
      contiguous arrays.
    - Dtypes: row inputs are float32, float16 or bfloat16 (numpy has no bfloat16), and float64
      on the CPU (the reference, e.g. for ``torch.autograd.gradcheck``). ``gamma``
      and ``beta`` are ``[H]`` vectors in float32 or in ``x``'s dtype; either way the result
      has ``x``'s dtype. ``None`` means no parameter (gamma = 1, beta = 0).
    - Precision: statistics, sums and the affine arithmetic run in float32 on every device;
      each result is rounded once to its dtype. Backward ops accumulate in float32.
    - Layout: any non-negative strides (transposes, slices) are taken; layouts that are not
      row-dense are copied once on the device inside the op. numpy input views with negative
      strides are copied to a contiguous array first (ruDNN takes no negative strides).
    - Devices: all arrays of one call on the same device (CPU or one CUDA GPU).
    - Inputs are never modified. ``out=`` (optional) names caller-allocated outputs of the
      result's shape and dtype, contiguous rows, not overlapping any input; the function then
      writes them in place and returns them. An ``out`` that cannot be written in place
      (read-only, negative strides) is refused, never copied.
    - ``stream=`` (optional): a cudaStream_t address as an int, or a stream object
      (``__cuda_stream__()``, a ``cuda_stream`` attribute as on ``torch.cuda.Stream``, or a
      ``ptr`` attribute as on ``cupy.cuda.Stream``); default: torch's current stream for
      torch CUDA tensors, else ruDNN's current (the legacy default) stream. Ignored on the CPU.

Errors
    Every error is a :class:`rudnn.Error` whose message names the op, the argument and the
    rule. Its subclasses also derive from the matching builtin: :class:`InvalidArgument`
    (None for a required array, a bool where a number or index belongs, an ``out`` that
    cannot be written), :class:`ShapeMismatch`, :class:`DeviceMismatch` are ``ValueError``;
    :class:`DTypeMismatch` (any dtype the op does not take, or an argument that is not an
    array at all) is ``TypeError``; :class:`Unsupported` is ``NotImplementedError``;
    :class:`OutOfMemory` is ``MemoryError``; :class:`CudaError` is ``RuntimeError``. A bad
    ``stream=`` raises ``TypeError`` / ``ValueError``.

torch
    :mod:`rudnn.torch_autograd` (imports torch) has differentiable versions with torch's
    defaults (``ignore_index=-100``, ``reduction="mean"``) and ``nn.Module``s; its ops are
    ``torch.library`` custom ops (``torch.ops.rudnn.*``) with fake implementations and
    autograd, so ``torch.compile(fullgraph=True)`` traces them without graph breaks.

Memory and streams
    ruDNN's CUDA results come from ruDNN's own stream-ordered pool (not torch's caching
    allocator), allocated on the stream the op ran on, and are returned to the pool on that
    stream when the last reference goes. A result used on another stream needs the same care
    as with any stream-ordered allocator (an event, or keep the result alive until that
    work is done). A borrowed stream must outlive the results allocated on it (torch's
    streams live as long as the process).
"""

from __future__ import annotations

import sys as _sys

from . import _rudnn
from ._rudnn import (
    CudaError,
    DeviceMismatch,
    DTypeMismatch,
    Error,
    InvalidArgument,
    OutOfMemory,
    ShapeMismatch,
    Tensor,
    Unsupported,
    built_with_cuda,
    cuda_device_count,
)
from .attention import attention, attention_backward, plan_attention, plan_attention_backward
from .conv import (
    causal_conv1d,
    causal_conv1d_backward,
    conv_data_backward,
    conv_forward,
    conv_weight_backward,
    plan_conv,
)
from .ctc import ctc_loss, ctc_loss_backward, ctc_loss_check
from .gated_delta import (
    chunk_gated_delta,
    chunk_gated_delta_slots,
    gated_delta,
    gated_delta_backward,
    gated_delta_rule,
    gated_delta_rule_backward,
    gated_delta_slots,
    gated_delta_steps,
)
from .grid_sample import affine_grid, affine_grid_backward, grid_sample, grid_sample_backward
from . import paged
from .interpolation import interpolate, interpolate_backward, interpolate_output_shape
from .moe import (
    DispatchedTokens,
    ExpertProjectionState,
    ExpertTrainingCache,
    MoeState,
    RouterTrainingPlan,
    RoutingPlan,
    SwiGluExperts,
    expert_projection_backward,
    expert_projection_forward,
    moe_backward,
    moe_forward,
    moe_inference,
    native_swiglu,
    native_swiglu_backward,
    route,
    route_sigmoid_grouped,
    selected_router_backward,
    selected_router_weights,
)
from .normalization import (
    add_rms_norm,
    cross_entropy,
    cross_entropy_backward,
    cross_entropy_with_grad,
    layer_norm,
    layer_norm_backward,
    logsumexp,
    rms_norm,
    rms_norm_backward,
    scale_unless_one,
    softmax,
    softmax_backward,
    softmax_last_axis,
)
from .transformer import (
    geglu,
    geglu_backward,
    norm_rope,
    rope,
    rope_backward,
    rope_llama3_freqs,
    rope_yarn_freqs,
    swiglu,
    swiglu_backward,
)
from .pooling import (
    adaptive_avg_pool,
    adaptive_avg_pool_backward,
    adaptive_max_pool,
    adaptive_max_pool_backward,
    avg_pool,
    avg_pool_backward,
    lp_pool,
    lp_pool_backward,
    max_pool,
    max_pool_backward,
)

__version__ = _rudnn.version()

__all__ = [
    "Tensor",
    "Error",
    "InvalidArgument",
    "ShapeMismatch",
    "DTypeMismatch",
    "DeviceMismatch",
    "Unsupported",
    "OutOfMemory",
    "CudaError",
    "version",
    "cuda_device_count",
    "built_with_cuda",
    "from_dlpack",
    "autotune_built",
    "autotune_entries",
    "autotune_clear",
    "autotune_set_file",
    "autotune_file",
    # normalization
    "layer_norm",
    "rms_norm",
    "add_rms_norm",
    "softmax",
    "softmax_last_axis",
    "logsumexp",
    "cross_entropy",
    "layer_norm_backward",
    "rms_norm_backward",
    "softmax_backward",
    "cross_entropy_backward",
    "cross_entropy_with_grad",
    "scale_unless_one",
    # transformer
    "rope",
    "rope_backward",
    "norm_rope",
    "rope_llama3_freqs",
    "rope_yarn_freqs",
    "swiglu",
    "geglu",
    "swiglu_backward",
    "geglu_backward",
    # pooling
    "max_pool",
    "max_pool_backward",
    "avg_pool",
    "avg_pool_backward",
    "adaptive_max_pool",
    "adaptive_max_pool_backward",
    "adaptive_avg_pool",
    "adaptive_avg_pool_backward",
    "lp_pool",
    "lp_pool_backward",
    # grid_sample
    "grid_sample",
    "grid_sample_backward",
    "affine_grid",
    "affine_grid_backward",
    # gated_delta
    "gated_delta",
    "gated_delta_steps",
    "gated_delta_slots",
    "chunk_gated_delta",
    "chunk_gated_delta_slots",
    "gated_delta_rule",
    "gated_delta_backward",
    "gated_delta_rule_backward",
    # ctc
    "ctc_loss",
    "ctc_loss_backward",
    "ctc_loss_check",
    # attention
    "attention",
    "attention_backward",
    "plan_attention",
    "plan_attention_backward",
    # interpolation
    "interpolate",
    "interpolate_backward",
    "interpolate_output_shape",
    # conv
    "conv_forward",
    "conv_data_backward",
    "conv_weight_backward",
    "plan_conv",
    "causal_conv1d",
    "causal_conv1d_backward",
    # moe
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


def version() -> str:
    """The ruDNN library version, ``'major.minor.patch'``."""
    return _rudnn.version()


def from_dlpack(obj, *, stream=None) -> Tensor:
    """Zero-copy import of a DLPack-capable array (or a host buffer) as a :class:`rudnn.Tensor`.

    The Tensor shares ``obj``'s memory and keeps it alive. For a CUDA producer, ``stream``
    (int address or object with ``cuda_stream``) is the stream the data will be used on;
    default: the legacy default stream.

    Raises:
        DTypeMismatch (TypeError): a dtype ruDNN does not have (float16/32/64, bfloat16,
            int32/64, uint8/32 and bool are its dtypes), or ``obj`` not an array.
        Unsupported (NotImplementedError): negative strides.
        InvalidArgument (ValueError): ``obj`` None, or a producer that breaks the protocol.
    """
    return _rudnn.from_dlpack(obj, stream=stream)


def autotune_built() -> bool:
    """Whether this build has the ``"autotune"`` strategies (CMake option RUDNN_AUTOTUNE)."""
    return _rudnn.autotune_built()


def autotune_entries() -> list:
    """The choices the ``"autotune"`` strategies have recorded, sorted by key.

    ``strategy="autotune"`` (attention, attention_backward, conv_forward, conv_data_backward)
    measures, on the
    first call of a shape class on a device, each strategy that can take the call, records
    the fastest and runs it; later calls of the class run the recorded one. A class is the
    op and direction, the device, the dtype and layout, the options that decide which
    kernels can run, the head sizes or channels exactly, and batch and lengths rounded up to
    a power of two. The first call blocks until its measurements finish; a call made while
    its stream captures a CUDA graph measures nothing (it runs the recorded choice, else
    auto's). See ``rudnn/autotune.h`` for the whole contract.

    Returns:
        A list of dicts: ``key`` (the class, a str), ``choice`` (the strategy that runs, e.g.
        ``"Flash"``), ``timings_ms`` (candidate name -> mean milliseconds measured by this
        process; empty for an entry read from a file), ``measurements`` (how many times this
        process measured the key).
    """
    return _rudnn.autotune_entries()


def autotune_clear() -> None:
    """Forgets every recorded choice in memory (an attached file stays as it is)."""
    _rudnn.autotune_clear()


def autotune_set_file(path: str) -> None:
    """Attaches a cache file: its choices are read now and each later measurement is appended.

    One line per key, ``"<key>\t<choice>\t<candidate>=<ms> ..."``; a later line for a key
    overrides an earlier one; the file is created when missing. ``""`` detaches it. Without a
    call, the environment variable ``RUDNN_AUTOTUNE_FILE`` names the file at the first
    autotuned call.

    Raises:
        InvalidArgument (ValueError): the file cannot be read or created, or a line is not
            ``"<key>\t<choice>[\t...]"``.
    """
    _rudnn.autotune_set_file(path)


def autotune_file() -> str:
    """The attached autotune file's path (``""`` when none)."""
    return _rudnn.autotune_file()


def __getattr__(name):
    # rudnn.torch_autograd is imported on first use only (it imports torch).
    if name == "torch_autograd":
        import importlib

        return importlib.import_module(".torch_autograd", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# torch.ops.rudnn.* exist once torch_library has run: at once when a torch that has
# torch.library.custom_op (>= 2.4) is already loaded (costs no import), else on first use of
# rudnn.torch_autograd (which raises ImportError, naming the version, on an older torch). An
# older torch leaves the rest of rudnn working: its tensors still pass through DLPack.
if getattr(getattr(_sys.modules.get("torch"), "library", None), "custom_op", None) is not None:
    from . import torch_library as _torch_library  # noqa: F401
