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
bad length or label gets a NaN loss and NaN gradients (torch raises there).

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

__all__ = ["ctc_loss", "ctc_loss_backward"]

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
    r = _rudnn.ctc_loss(
        io.as_input(log_probs), io.as_input(targets), _lengths(input_lengths, log_probs),
        _lengths(target_lengths, log_probs), blank, reduction, zero_infinity, stream=stream, out=io.as_output(out),
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
    r = _rudnn.ctc_loss_backward(
        io.as_input(log_probs), io.as_input(targets), _lengths(input_lengths, log_probs),
        _lengths(target_lengths, log_probs), io.as_input(grad_loss), blank, reduction, zero_infinity, stream=stream, out=io.as_output(out),
    )
    return out if out is not None else io.result(kind, r)
