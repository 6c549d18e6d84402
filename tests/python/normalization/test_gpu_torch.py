"""The torch custom ops on the GPU: torch.compile(fullgraph=True) over a training step, and
torch's cross-entropy defaults. Skipped unless torch (>= 2.4) sees a GPU and ruDNN was built
with CUDA."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("torch.cuda is not available (no GPU)", allow_module_level=True)
if not hasattr(torch.library, "custom_op"):
    pytest.skip("torch >= 2.4 (torch.library.custom_op) is needed", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import rudnn  # noqa: E402

if not rudnn.built_with_cuda():
    pytest.skip("ruDNN was built without CUDA", allow_module_level=True)

from rudnn import torch_autograd as ta  # noqa: E402
from support_torch import check_compiled_training_step  # noqa: E402


def test_torch_compile_fullgraph_cuda():
    check_compiled_training_step("cuda")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cross_entropy_torch_defaults_cuda(dtype):
    g = torch.Generator(device="cuda").manual_seed(0)
    logits = torch.randn(64, 1000, generator=g, device="cuda").to(dtype).requires_grad_()
    targets = torch.randint(0, 1000, (64,), generator=g, device="cuda")
    targets[::5] = -100  # torch's padding convention
    loss = ta.cross_entropy(logits, targets)
    loss.backward()
    l64 = logits.detach().double().requires_grad_()
    ref = F.cross_entropy(l64, targets)
    ref.backward()
    torch.testing.assert_close(loss.double(), ref, rtol=1e-4, atol=1e-5)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert ((logits.grad.double() - l64.grad).norm() / l64.grad.norm()).item() < tol
