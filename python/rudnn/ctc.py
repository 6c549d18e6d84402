"""The CTC family (C++: ``rudnn/ctc.h``): the connectionist temporal classification loss and its
gradient with respect to the log-probabilities, as ``torch.nn.functional.ctc_loss``.

Operands:
    - ``log_probs [T, N, C]``: log-probabilities over C classes for N samples of T steps,
      float32 / float16 / bfloat16 (float64 too on the CPU), any strides (rows are not checked
      to be normalised, as torch).
    - ``targets``: padded ``[N, S]`` (sample n's labels are ``targets[n, :target_lengths[n]]``)
      or concatenated ``[L]`` with ``sum(target_lengths) <= L``; int32 or int64; labels in
      ``[0, C)`` and not ``blank``.
    - ``input_lengths [N]``, ``target_lengths [N]``: int32 / int64 arrays, or sequences of ints
      (as torch takes tuples: made an int64 tensor on log_probs' device for torch tensors,
      else an int64 host array); ``0 <= input_lengths[n] <= T``, ``0 <= target_lengths[n]``
      (``<= S`` for padded targets).

Where lengths and labels are checked: on the CPU before anything is written (a bad one is a
:class:`rudnn.Error`); on a GPU on the device, without synchronising the host: a sample with a
bad length or label gets a NaN loss and NaN gradients. Except when they are host data: for
torch log-probabilities on a GPU, lengths given as sequences of ints or CPU tensors (and
targets given as a CPU tensor) are checked on the host first by :func:`ctc_loss_check`, as
torch checks them (a :class:`rudnn.Error`), then copied to log_probs' device (a CPU tensor's
copy from pageable memory may wait for the stream, as torch's does); a CPU targets tensor is
copied too. :func:`ctc_loss_check` can also be called directly.

Options: ``blank`` in ``[0, C)``; ``reduction`` ``"none"`` (loss ``[N]``), ``"sum"`` or
``"mean"`` (each loss divided by ``max(target_length, 1)``, then averaged over N; N = 0 gives
NaN as torch); ``zero_infinity`` replaces infinite losses (a target that cannot be aligned
in its input length) and their gradients by 0.

Precision: on the CPU the alpha / beta recursions run in float64 in log space whatever the
dtype (results rounded once); on a GPU in float32 in log space with float64 row shifts (about
T float32 roundings per loss, as torch's float32 kernels). Repeated labels take the skip
transition only between different labels. The loss has log_probs' dtype. Memory: see
``rudnn/ctc.h`` (the GPU backward keeps the alpha and beta rows, ``N T (2 S + 1) 8`` bytes).

Errors are :class:`rudnn.Error` subclasses naming the op and the argument: InvalidArgument (an
operand None, blank out of range, a length negative or too long or a label out of range or
equal to blank (CPU), an unknown reduction, a non-bool zero_infinity), ShapeMismatch (ranks, N
or S disagreeing, concatenated targets shorter than ``sum(target_lengths)``), DTypeMismatch
(log probabilities not a float dtype, float64 on a GPU, lengths or targets not int32 / int64),
DeviceMismatch, Unsupported (GPU: targets beyond the kernel's shared-memory cap). Under
``torch.compile`` :func:`ctc_loss` called without ``out=``/``stream=`` calls its custom op
(``torch.ops.rudnn.ctc_loss``, differentiable there).
"""

from __future__ import annotations

import array
from typing import Optional, Sequence, Union

from . import _interop as io
from . import _rudnn
from ._interop import Array, StreamLike

__all__ = ["ctc_loss", "ctc_loss_backward", "ctc_loss_check"]

Lengths = Union[Array, Sequence[int]]


def _lengths(value, log_probs):
    """A tuple or list of ints as int64: a torch tensor on log_probs' device when log_probs is
    a torch tensor, else a host buffer (array.array: no numpy needed)."""
    if not isinstance(value, (tuple, list)):
        return io.as_input(value)
    torch = io.loaded_torch()
    if torch is not None and isinstance(log_probs, torch.Tensor):
        try:
            return torch.tensor(value, dtype=torch.int64, device=log_probs.device)
        except (TypeError, ValueError, RuntimeError):
            return value  # the op names the argument and refuses it
    try:
        return array.array("q", value)
    except TypeError:
        return value


def ctc_loss_check(
    log_probs_shape: Sequence[int],
    targets: Array,
    input_lengths: Lengths,
    target_lengths: Lengths,
    blank: int = 0,
) -> None:
    """The argument rules of :func:`ctc_loss` for log-probabilities of shape
    ``log_probs_shape`` ``[T, N, C]`` (wherever they are) and host data: raises the
    :class:`rudnn.Error` that the CPU path raises for a bad shape, dtype, length or label,
    else returns None. ``input_lengths``, ``target_lengths``: host arrays (int32 / int64
    ``[N]``) or sequences of ints. ``targets``: a host array (every label checked) or a device
    array (its shape and dtype only: nothing is read from the device). Reads, writes nothing.
    """
    _rudnn.ctc_loss_check(log_probs_shape, io.as_input(targets), _lengths(input_lengths, None),
                          _lengths(target_lengths, None), blank)


def host_checked(log_probs, targets, input_lengths, target_lengths, blank):
    """(targets, input_lengths, target_lengths) for torch log-probabilities on a GPU: host
    lengths (sequences of ints, CPU tensors) checked on the host with the host targets' labels
    (ctc_loss_check), then CPU tensors moved to log_probs' device; anything else unchanged.
    Under torch.compile nothing is checked here (the op's own rules apply)."""
    torch = io.loaded_torch()
    on_gpu = torch is not None and isinstance(log_probs, torch.Tensor) and log_probs.device.type != "cpu"
    if not on_gpu or io.compiling():
        return targets, input_lengths, target_lengths
    host = lambda v: isinstance(v, (tuple, list)) or (  # noqa: E731
        isinstance(v, torch.Tensor) and v.device.type == "cpu")
    if host(input_lengths) and host(target_lengths):
        ctc_loss_check(log_probs.shape, targets, input_lengths, target_lengths, blank)
    move = lambda v: v.to(log_probs.device) if isinstance(v, torch.Tensor) and v.device.type == "cpu" else v  # noqa: E731
    return move(targets), move(input_lengths), move(target_lengths)


def _operands(log_probs, targets, input_lengths, target_lengths, blank):
    """(targets, input_lengths, target_lengths) ready for the native op (host_checked, then
    sequences of ints made arrays)."""
    targets, il, tl = host_checked(log_probs, targets, input_lengths, target_lengths, blank)
    return targets, _lengths(il, log_probs), _lengths(tl, log_probs)


def ctc_loss(
    log_probs: Array,
    targets: Array,
    input_lengths: Lengths,
    target_lengths: Lengths,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
    *,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    """The negative log-likelihood of each target under CTC's alignment model, reduced.

    Args:
        log_probs, targets, input_lengths, target_lengths: see the module's documentation.
        blank: the blank class, an int in ``[0, C)`` (default 0).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
        zero_infinity: a bool (default False).
        out: optional array of the loss's shape (``[N]`` or 0-d) and dtype, contiguous.
        stream: CUDA stream (see ``help(rudnn)``); ignored on the CPU.

    Returns:
        The loss in log_probs' dtype: ``[N]`` for ``"none"``, 0-d otherwise.

    Raises: see the module's documentation.
    """
    if out is None and stream is None and io.compiling():
        torch = io.loaded_torch()
        il, tl = (torch.as_tensor(n) if isinstance(n, (tuple, list)) else n for n in (input_lengths, target_lengths))
        return io.torch_ops().ctc_loss(log_probs, targets, il, tl, blank, reduction, zero_infinity)
    kind, stream = io.context(log_probs, stream)
    targets, il, tl = _operands(log_probs, targets, input_lengths, target_lengths, blank)
    r = _rudnn.ctc_loss(
        io.as_input(log_probs), io.as_input(targets), il, tl, blank, reduction, zero_infinity, stream=stream,
        out=io.as_output(out),
    )
    return out if out is not None else io.result(kind, r)


def ctc_loss_backward(
    log_probs: Array,
    targets: Array,
    input_lengths: Lengths,
    target_lengths: Lengths,
    grad_loss: Array,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
    *,
    out: Optional[Array] = None,
    stream: StreamLike = None,
) -> Array:
    """The gradient of the reduced loss with respect to ``log_probs`` given the upstream
    gradient ``grad_loss`` (the loss's shape and dtype); the loss is recomputed.

    As torch (and so a divergence from the textbook derivative), it is the gradient with
    respect to the unnormalised z of ``log_probs = log_softmax(z)``:
    ``grad[t, n, c] = g_n (exp(lp[t, n, c]) - exp(log_alpha + log_beta - lp[t, n, c] + nll_n))``
    with ``g_n`` the upstream gradient times the reduction's factor (``1 / (N max(S_n, 1))``
    for mean). Steps ``t >= input_lengths[n]`` get 0; an infinite loss gives NaN gradients for
    its sample unless ``zero_infinity``.

    Args: as :func:`ctc_loss`, plus ``grad_loss`` (``[N]`` for ``"none"``, 0-d otherwise);
        ``out``: optional ``[T, N, C]`` array of log_probs' dtype, contiguous.

    Returns:
        ``[T, N, C]`` in log_probs' dtype.

    Raises: see the module's documentation; ShapeMismatch / DTypeMismatch for a grad_loss
    that is not the loss's shape and dtype.
    """
    kind, stream = io.context(log_probs, stream)
    targets, il, tl = _operands(log_probs, targets, input_lengths, target_lengths, blank)
    r = _rudnn.ctc_loss_backward(
        io.as_input(log_probs), io.as_input(targets), il, tl, io.as_input(grad_loss), blank, reduction, zero_infinity,
        stream=stream, out=io.as_output(out),
    )
    return out if out is not None else io.result(kind, r)
