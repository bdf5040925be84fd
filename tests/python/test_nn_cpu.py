"""epifuse.nn without a GPU (skipped without torch): parameters and init as PyTorch's
modules have them, state_dict round trips, and swap() replacing modules while keeping
the very parameter tensors. The numbers run in test_gpu_nn.py."""
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import epifuse.nn as enn  # noqa: E402
from epifuse import UserError  # noqa: E402


def shapes(module):
    return {n: tuple(p.shape) for n, p in module.named_parameters()}


def test_linear_has_nn_linears_parameters_and_init():
    torch.manual_seed(1)
    ref = nn.Linear(48, 24)
    torch.manual_seed(1)
    ours = enn.Linear(48, 24, activation="gelu_tanh", dropout=0.1)
    assert shapes(ours) == shapes(ref)
    assert torch.equal(ours.weight, ref.weight) and torch.equal(ours.bias, ref.bias)
    assert enn.Linear(8, 4, bias=False).bias is None


@pytest.mark.parametrize("ours, ref", [
    (lambda: enn.MLP(16, 64), lambda: nn.ModuleDict({"fc1": nn.Linear(16, 64), "fc2": nn.Linear(64, 16)})),
    (lambda: enn.GatedMLP(16, 40), lambda: nn.ModuleDict({"gate_proj": nn.Linear(16, 40, bias=False),
                                                          "up_proj": nn.Linear(16, 40, bias=False),
                                                          "down_proj": nn.Linear(40, 16, bias=False)})),
    (lambda: enn.LayerNorm(32), lambda: nn.LayerNorm(32)),
    (lambda: enn.LayerNorm(32, elementwise_affine=False), lambda: nn.LayerNorm(32, elementwise_affine=False)),
    (lambda: enn.RMSNorm(32), lambda: nn.ParameterDict({"weight": nn.Parameter(torch.ones(32))})),
])
def test_state_dicts_load_from_the_torch_modules(ours, ref):
    ours, ref = ours(), ref()
    assert shapes(ours) == shapes(ref)
    ours.load_state_dict(ref.state_dict())
    for (n, p), (_, q) in zip(sorted(ours.state_dict().items()), sorted(ref.state_dict().items())):
        assert torch.equal(p, q), n


def test_norms_initialise_as_torch():
    ln = enn.LayerNorm(32)
    assert torch.equal(ln.weight, torch.ones(32)) and torch.equal(ln.bias, torch.zeros(32))
    assert torch.equal(enn.RMSNorm(32).weight, torch.ones(32))
    assert enn.LayerNorm(32, bias=False).bias is None


def test_bad_arguments_name_themselves():
    with pytest.raises(UserError, match="activation"):
        enn.Linear(4, 4, activation="tanh")
    with pytest.raises(UserError, match="dropout"):
        enn.MLP(4, 8, dropout=1.5)
    with pytest.raises(UserError, match="last dimension"):
        enn.RMSNorm((4, 4))


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps


class GemmaRMSNorm(LlamaRMSNorm):
    """Scales by (1 + weight): not the RMSNorm epifuse runs."""


def test_swap_replaces_modules_and_keeps_their_tensors():
    model = nn.ModuleDict({
        "norm": LlamaRMSNorm(16, eps=1e-5),
        "gemma": GemmaRMSNorm(16),
        "ln": nn.LayerNorm(16, eps=1e-4),
        "mlp": nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Dropout(0.2), nn.Linear(64, 16), nn.ReLU(),
                             nn.Linear(16, 16), nn.Tanh()),
        "proj": nn.Linear(16, 8, bias=False),
    })
    before = dict(model.named_parameters())
    keys = list(model.state_dict())
    assert enn.swap(model) is model
    assert all(p is before[n] for n, p in model.named_parameters())
    assert list(model.state_dict()) == keys
    assert isinstance(model["norm"], enn.RMSNorm) and model["norm"].eps == 1e-5
    assert isinstance(model["gemma"], GemmaRMSNorm)
    assert isinstance(model["ln"], enn.LayerNorm) and model["ln"].eps == 1e-4
    mlp = model["mlp"]
    assert (mlp[0].activation, mlp[0].p) == ("gelu", 0.2)
    assert isinstance(mlp[1], nn.Identity) and isinstance(mlp[2], nn.Identity)
    assert (mlp[3].activation, mlp[3].p) == ("relu", 0.0) and isinstance(mlp[4], nn.Identity)
    assert mlp[5].activation is None and isinstance(mlp[6], nn.Tanh)  # tanh is not fused
    assert isinstance(model["proj"], enn.Linear) and model["proj"].bias is None


def test_swap_of_a_single_module_returns_its_replacement():
    old = nn.Linear(8, 8).eval()
    new = enn.swap(old)
    assert isinstance(new, enn.Linear) and new.weight is old.weight and not new.training


@pytest.mark.skipif(hasattr(torch.library, "register_autograd"), reason="this torch has register_autograd")
def test_an_old_torch_is_told_what_it_lacks():
    with pytest.raises(RuntimeError, match="register_autograd"):
        enn.Linear(8, 8)(torch.randn(2, 8))
