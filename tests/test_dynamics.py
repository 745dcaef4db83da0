"""The dynamics ensemble (rlcore.dynamics): the soft clamp and the training loss by hand,
a fit that learns a known linear system and picks its elites by holdout error, and an
imagined step that answers with an elite and MOPO's penalty."""

from __future__ import annotations

import math

import pytest
import torch

from rlcore.dynamics import ProbabilisticEnsemble, fit_dynamics, soft_clamp


def softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def test_soft_clamp_by_hand() -> None:
    low, high = torch.tensor(-10.0), torch.tensor(0.5)
    inner = 0.5 - softplus(0.5 - 3.0)  # 3 -> just under the top
    assert soft_clamp(torch.tensor(3.0), low, high).item() == pytest.approx(
        -10 + softplus(inner + 10), rel=1e-6
    )
    assert soft_clamp(torch.tensor(-50.0), low, high).item() == pytest.approx(-10.0, abs=1e-6)


def test_the_loss_of_a_zeroed_ensemble_by_hand() -> None:
    """Zero weights and biases: every mean 0 and every log-variance the clamp of 0,
    c = -10 + softplus(0.5 - softplus(0.5) + 10); per member mean(y^2) e^-c + c, summed over
    2 members, plus 0.01 (0.5 + 10) per output (3 outputs: obs 2 + reward); no decay."""
    model = ProbabilisticEnsemble(2, 1, members=2, elites=1, hidden=(4,), decays=(0.1, 0.2))
    with torch.no_grad():
        for layer in model.layers():
            layer.weight.zero_()
            layer.bias.zero_()
    targets = torch.tensor([[[1.0, -2.0, 0.5]], [[0.0, 3.0, 1.0]]])  # (E=2, B=1, 3)
    c = -10 + softplus(0.5 - softplus(0.5) + 10)
    nll = sum((row.pow(2).mean().item()) * math.exp(-c) + c for row in targets)
    expected = nll + 0.01 * (0.5 + 10) * 3
    assert model.loss(torch.zeros(2, 1, 3), targets).item() == pytest.approx(expected, rel=1e-5)


def test_fit_learns_a_linear_system_and_elites_are_the_best_members() -> None:
    """s' = s + 0.1 a, r = s_0 - a_0 (no noise): the elites' holdout errors end small, the
    elites are the members of the lowest best errors, and each member's best weights are
    the ones restored (its holdout error now equals its best)."""
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    obs, action = torch.randn(1200, 2, generator=gen), torch.rand(1200, 2, generator=gen) * 2 - 1
    next_obs, reward = obs + 0.1 * action, obs[:, 0] - action[:, 0]
    model = ProbabilisticEnsemble(2, 2, members=4, elites=2, hidden=(32, 32),
                                  decays=(0.0, 0.0, 0.0))  # fmt: skip
    result = fit_dynamics(model, obs, action, reward, next_obs, gen, batch_size=128, max_epochs=60)
    assert 1 <= result.epochs <= 60
    assert result.elites == sorted(range(4), key=lambda i: result.holdout_errors[i])[:2]
    assert max(result.holdout_errors[i] for i in result.elites) < 0.01
    inputs = model.standardize(obs[:200], action[:200])
    targets = torch.cat([next_obs[:200] - obs[:200], reward[:200, None]], -1)
    assert model.holdout_errors(inputs, targets).max() < 0.05  # the restored weights fit


def test_a_step_answers_with_an_elite_and_mopos_penalty() -> None:
    torch.manual_seed(0)
    model = ProbabilisticEnsemble(2, 1, members=3, elites=1, hidden=(8,), decays=(0.0, 0.0))
    model.elites.copy_(torch.tensor([2]))
    obs, action = torch.randn(5, 2), torch.randn(5, 1)
    gen = torch.Generator().manual_seed(1)
    next_obs, reward, penalty = model.step(obs, action, gen)
    mean, logvar = model(model.standardize(obs, action))
    std = torch.exp(0.5 * logvar)
    noise = torch.randn(mean.shape, generator=torch.Generator().manual_seed(1))
    sample = mean[2] + noise[2] * std[2]  # member 2 answers every row
    torch.testing.assert_close(next_obs, obs + sample[:, :2])
    torch.testing.assert_close(reward, sample[:, 2])
    torch.testing.assert_close(penalty, std.norm(dim=-1).amax(0))


def test_training_steps_match_offlinerl_kit() -> None:
    """OfflineRL-Kit's own ``EnsembleDynamics.learn`` (benchmarks/parity/
    dynamics_reference.py, tests/golden/dynamics.json): 6 Adam steps of the NLL, weight
    decay and log-variance bound terms on the same weights and rows, then the holdout
    errors: losses 1e-5 relative, weights 1e-6."""
    import json
    from pathlib import Path

    from rlcore.benchmarks.parity import dynamics_reference as ref

    golden = json.loads((Path(__file__).parent / "golden" / "dynamics.json").read_text())
    params = ref.initial()
    model = ProbabilisticEnsemble(ref.OBS, ref.ACT, ref.MEMBERS, ref.ELITES, ref.HIDDEN,
                                  ref.DECAYS)  # fmt: skip
    with torch.no_grad():
        for i, layer in enumerate(model.layers()):
            layer.weight.copy_(torch.from_numpy(params[f"{i}.w"]))
            layer.bias.copy_(torch.from_numpy(params[f"{i}.b"]))
        model.max_logvar.copy_(torch.from_numpy(params["max_logvar"]))
        model.min_logvar.copy_(torch.from_numpy(params["min_logvar"]))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    xs, ys, hold_x, hold_y = ref.data()
    losses = []
    for x, y in zip(xs, ys):
        loss = model.loss(torch.from_numpy(x), torch.from_numpy(y))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(golden["losses"]),
                               rtol=1e-5, atol=1e-6)  # fmt: skip
    errors = model.holdout_errors(torch.from_numpy(hold_x), torch.from_numpy(hold_y))
    torch.testing.assert_close(errors, torch.tensor(golden["holdout_errors"]), rtol=1e-5, atol=1e-6)
    ours = {f"{i}.w": layer.weight for i, layer in enumerate(model.layers())}
    ours.update({f"{i}.b": layer.bias for i, layer in enumerate(model.layers())})
    ours.update(max_logvar=model.max_logvar, min_logvar=model.min_logvar)
    for name, value in golden["params"].items():
        torch.testing.assert_close(ours[name].detach(), torch.tensor(value), rtol=0, atol=1e-6)
