"""torch helpers of the torch test files (imported after they have checked that torch is
there): a small model using ruDNN's torch ops, and a check that torch.compile(fullgraph=True)
of its training step matches eager mode."""

import torch

from rudnn import torch_autograd as ta


class TinyModel(torch.nn.Module):
    """rms_norm -> linear -> cross_entropy: a language-model head in miniature."""

    def __init__(self, hidden, classes, dtype=torch.float32, device="cpu"):
        super().__init__()
        self.norm = ta.RMSNorm(hidden, dtype=dtype, device=device)
        self.head = torch.nn.Linear(hidden, classes, dtype=dtype, device=device)

    def forward(self, x, targets):
        h, normed = ta.add_rms_norm(x, x, self.norm.weight)
        logits = self.head(self.norm(normed) + h)
        return ta.cross_entropy(torch.log_softmax(logits, -1) + ta.logsumexp(logits)[..., None], targets)


def check_compiled_training_step(device):
    """The model compiled with fullgraph=True (a graph break raises), its backward compiled by
    AOTAutograd; loss and every gradient match eager mode."""
    torch.manual_seed(0)
    eager = TinyModel(32, 17, device=device)
    compiled = TinyModel(32, 17, device=device)
    compiled.load_state_dict(eager.state_dict())
    x = torch.randn(4, 6, 32, device=device, requires_grad=True)
    targets = torch.randint(0, 17, (4, 6), device=device)
    targets[0, :2] = -100
    step = torch.compile(compiled, fullgraph=True)
    losses, grads = [], []
    for model in (step, eager):
        x.grad = None
        loss = model(x, targets)
        loss.backward()
        losses.append(loss.detach())
        grads.append(x.grad.clone())
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-5)
    for pc, pe in zip(compiled.parameters(), eager.parameters()):
        torch.testing.assert_close(pc.grad, pe.grad, rtol=1e-4, atol=1e-5)
