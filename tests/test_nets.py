import math

import numpy as np
import pytest
import torch
from torch import nn

from rlcore.nets import (
    MLP,
    DeterministicActor,
    EnsembleMLP,
    GaussianActor,
    QEnsemble,
    TanhGaussianActor,
    polyak_update,
)


def test_mlp_shapes_and_layer_norm():
    net = MLP(5, 3, (32, 16), "relu", layer_norm=True)
    assert net(torch.randn(7, 5)).shape == (7, 3)
    assert sum(isinstance(m, nn.LayerNorm) for m in net) == 2
    with pytest.raises(ValueError, match="unknown activation"):
        MLP(5, 3, (8,), "swishy")


@pytest.mark.parametrize("layer_norm", [False, True])
def test_ensemble_equals_separate_mlps(layer_norm):
    torch.manual_seed(0)
    members, in_dim, out_dim, hidden = 4, 6, 2, (16, 8)
    ensemble = EnsembleMLP(members, in_dim, out_dim, hidden, "relu", layer_norm)
    with torch.no_grad():  # random affine LayerNorm params so they matter
        for p in ensemble.parameters():
            p.add_(0.1 * torch.randn_like(p))
    separate = [MLP(in_dim, out_dim, hidden, "relu", layer_norm) for _ in range(members)]
    linear_layers = [*ensemble.hidden_layers, ensemble.output_layer]
    for e, mlp in enumerate(separate):
        linears = [m for m in mlp if isinstance(m, nn.Linear)]
        norms = [m for m in mlp if isinstance(m, nn.LayerNorm)]
        with torch.no_grad():
            for lin, ens in zip(linears, linear_layers):
                lin.weight.copy_(ens.weight[e].T)
                lin.bias.copy_(ens.bias[e, 0])
            for norm, ens_norm in zip(norms, ensemble.norms or []):
                norm.weight.copy_(ens_norm.weight[e, 0])
                norm.bias.copy_(ens_norm.bias[e, 0])
    x = torch.randn(9, in_dim)
    out = ensemble(x)
    assert out.shape == (members, 9, out_dim)
    for e, mlp in enumerate(separate):
        assert torch.allclose(out[e], mlp(x), atol=1e-6)
    # per-member inputs and member slices agree with the full evaluation
    xs = torch.randn(members, 9, in_dim)
    per_member = ensemble(xs)
    for e, mlp in enumerate(separate):
        assert torch.allclose(per_member[e], mlp(xs[e]), atol=1e-6)
    assert torch.allclose(ensemble(x, members=slice(1, 3)), out[1:3], atol=1e-6)


def test_q_ensemble_shape():
    q = QEnsemble(obs_dim=5, action_dim=2, num_critics=10, hidden=(32, 32), layer_norm=True)
    assert q(torch.randn(8, 5), torch.randn(8, 2)).shape == (10, 8)


def test_tanh_gaussian_log_prob_matches_torch_distributions():
    torch.manual_seed(1)
    low, high = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0])
    actor = TanhGaussianActor(3, 2, low.numpy(), high.numpy(), hidden=(16,))
    obs = torch.randn(64, 3)
    torch.manual_seed(2)
    action, log_prob = actor(obs)
    assert action.shape == (64, 2) and log_prob.shape == (64,)
    assert (action >= low).all() and (action <= high).all()
    mean, log_std = actor.net(obs).chunk(2, -1)
    log_std = -5.0 + 0.5 * 7.0 * (torch.tanh(log_std) + 1)
    dist = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, log_std.exp()),
        [
            torch.distributions.TanhTransform(),
            torch.distributions.AffineTransform((high + low) / 2, (high - low) / 2),
        ],
    )
    expected = dist.log_prob(action.clamp(low + 1e-6, high - 1e-6)).sum(-1)
    assert torch.allclose(log_prob, expected, atol=2e-3)
    det, none = actor(obs, deterministic=True)
    assert none is None and torch.allclose(
        det, torch.tanh(mean) * (high - low) / 2 + (high + low) / 2
    )


def test_deterministic_and_gaussian_actor_shapes():
    actor = DeterministicActor(4, 3, -0.4, 0.4, hidden=(8,))
    out = actor(torch.randn(5, 4) * 100)
    assert out.shape == (5, 3) and out.abs().max() <= 0.4
    gaussian = GaussianActor(4, 3, hidden=(8, 8))
    action, log_prob = gaussian(torch.randn(5, 4))
    assert action.shape == (5, 3) and log_prob.shape == (5,)
    expected = torch.distributions.Normal(0, 1).log_prob(torch.tensor(0.0)).item() * 3
    mean_action, lp = gaussian(torch.zeros(1, 4), deterministic=True)
    assert lp.item() == pytest.approx(expected, abs=1e-5)  # log_std 0, at the mean


def test_polyak_update_exact():
    src, tgt = nn.Linear(2, 2), nn.Linear(2, 2)
    expected = [
        0.9 * t.detach() + 0.1 * s.detach() for t, s in zip(tgt.parameters(), src.parameters())
    ]
    polyak_update(tgt, src, 0.1)
    for p, e in zip(tgt.parameters(), expected):
        assert torch.allclose(p, e)


def test_ensemble_init_matches_linear_bounds():
    q = EnsembleMLP(3, 100, 1, (64,))
    bound = 1 / math.sqrt(100)
    w = q.hidden_layers[0].weight
    assert w.abs().max() <= bound and w.abs().max() > 0.9 * bound


def test_tanh_gaussian_affine_log_std_and_log_prob_of_given_actions():
    """CORL's log_std = clamp(m * raw + o) with trainable m, o; log_prob(obs, a) of the
    sampled action equals the log-probability returned with the sample."""
    torch.manual_seed(3)
    low, high = np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32)
    actor = TanhGaussianActor(3, 2, low, high, hidden=(16,), log_std_min=-20.0,
                              log_std_max=2.0, log_std_affine=(1.0, -1.0))  # fmt: skip
    assert actor.log_std_multiplier.item() == 1.0 and actor.log_std_offset.item() == -1.0
    with torch.no_grad():
        actor.log_std_multiplier.fill_(0.0)
        actor.log_std_offset.fill_(-30.0)  # clamped to -20: sample == tanh(mean)
    obs = torch.randn(32, 3)
    action, log_prob = actor(obs)
    det, _ = actor(obs, deterministic=True)
    assert torch.allclose(action, det, atol=1e-6)
    with torch.no_grad():
        actor.log_std_multiplier.fill_(0.5)
        actor.log_std_offset.fill_(-1.0)
    action, log_prob = actor(obs)
    assert torch.allclose(actor.log_prob(obs, action), log_prob, atol=1e-3)
    edge = actor.log_prob(obs, torch.as_tensor(high).expand(32, 2))
    assert torch.isfinite(edge).all()
    default = TanhGaussianActor(3, 2, hidden=(16,))  # SAC's actor keeps its parameters
    assert {k for k, _ in default.named_parameters()} == {
        "net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"
    }  # fmt: skip
    action, log_prob = default(obs)
    assert torch.allclose(default.log_prob(obs, action), log_prob, atol=1e-3)


def test_orthogonal_and_xavier_init_cover_ensemble_members():
    from rlcore.nets import EnsembleLinear, orthogonal_init, xavier_uniform_init

    layer, reference = EnsembleLinear(3, 8, 4), [nn.Linear(8, 4) for _ in range(3)]
    torch.manual_seed(0)
    orthogonal_init(layer, gain=2.0, bias=0.5)
    torch.manual_seed(0)
    for ref in reference:  # one nn.Linear after another, as the ensemble does its members
        nn.init.orthogonal_(ref.weight, 2.0)
    for member, ref in enumerate(reference):
        assert torch.allclose(layer.weight[member], ref.weight.T)
    assert (layer.bias == 0.5).all()
    xavier_uniform_init(layer, gain=1e-2)
    bound = 1e-2 * math.sqrt(6 / (8 + 4))
    assert layer.weight.abs().max() <= bound and layer.weight.abs().max() > 0.5 * bound
    assert not layer.bias.any()
