"""Golden parity of WSRL with its authors' code (issue 32, section 3).

tests/golden/wsrl.json holds what zhouzypaul/wsrl computed (benchmarks/parity/wsrl_reference.py,
run in a side environment with JAX): 5 CQL pre-training updates (``CQLAgent.update``, 10
LayerNorm critics, TD target min over a random 2 of 10, max backup, penalty 5), the train
state restored into the online ``SACAgent`` (as ``finetune.py --resume_path``), then 5
``update_high_utd`` calls (4 critic steps + 1 actor/temperature step each), from the initial
weights, batches and draws of ``benchmarks/parity/jax_refs_data.wsrl_inputs``. Here our WSRL
runs the same 10 updates (offline phase, switch with ``carry_state``, online phase), fed
the same draws, and must reproduce the reference's losses and parameters.

The golden ``aligned`` run is the reference with our documented departures put into its
modules (LayerNorm eps, one output layer per critic, exp temperature, our temperature
losses and samples, no zero-gradient "ghost" Adam steps, penalty over all 10 critics; the
size of each is in the golden file's ``departures`` and docs/PARITY.md);
ours gets the reference's log-std map (std = exp(raw) clipped to [1e-5, 10]) instead of
CORL's trained affine map (m raw + o clamped to [-20, 2]). No JAX needed.

Tolerance (tests/test_parity_jax_refs.py's): parameters 1e-4, losses relative 1e-4 (absolute
1e-6), log alpha 1e-6; measured float32 XLA-vs-torch maxima are 4.9e-6 (critics) and 5.4e-6
(losses), while each mutation below moves parameters by 2e-3 or more.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from rlcore.benchmarks.parity import jax_refs_data as data
from rlcore.types import Batch
from tests.test_parity_jax_refs import (
    PARAM_TOL,
    Feed,
    batch_of,
    box,
    close,
    critic_diff_beyond_eps_gradients,
    golden,
    load,
)

S = data.WSRL_SIZES
NETWORKS = ("actor", "critic", "target_critic")


def antmaze_recipe() -> dict:
    """The algo settings of configs/experiment/wsrl_antmaze.yaml (the shipped recipe)."""
    from omegaconf import OmegaConf

    path = Path(__file__).resolve().parents[1] / "configs" / "experiment" / "wsrl_antmaze.yaml"
    return dict(OmegaConf.to_container(OmegaConf.load(path))["algo"])


# the update settings of the antmaze recipe (the rest of it shapes the data or the run)
ANTMAZE_UPDATE = ("cql_lagrange", "cql_target_action_gap", "cql_lagrange_form", "calibrate",
                  "max_target_backup")  # fmt: skip


def wsrl_batch(rows: dict) -> Batch:
    """``batch_of`` plus the rows' Monte-Carlo return-to-go where recorded (Cal-QL)."""
    batch = batch_of(rows)
    if "mc_return" in rows:
        batch = dataclasses.replace(batch, mc_return=torch.as_tensor(rows["mc_return"]))
    return batch


def run_wsrl(
    monkeypatch: pytest.MonkeyPatch, mutate: Callable | None = None, variant: str = "locomotion"
) -> dict:
    """Our WSRL through the golden run's 5 offline and 5 online updates with the recorded
    draws; returns the metrics of every update and the state after each phase.
    ``antmaze``: the shipped antmaze recipe's update settings at the test's widths."""
    from rlcore.algos.wsrl import WSRL, WSRLConfig

    antmaze = variant == "antmaze"
    inputs = data.wsrl_antmaze_inputs() if antmaze else data.wsrl_inputs()
    settings = {}
    if antmaze:
        shipped = antmaze_recipe()
        settings = {k: shipped[k] for k in ANTMAZE_UPDATE}
        settings["critic_hidden"] = (S["hidden"],) * len(shipped["critic_hidden"])
        settings["hidden"] = (S["hidden"],) * len(shipped["hidden"])
    cfg = WSRLConfig(**{
        "hidden": (S["hidden"],) * 2, "batch_size": S["batch"], "utd_ratio": S["utd"], **settings
    })  # fmt: skip
    agent = WSRL(box(S["obs_dim"]), box(S["act_dim"]), cfg)
    load(agent.actor, inputs["actor"])
    load(agent.critic, inputs["critic"])
    load(agent.offline.target_critic, inputs["critic"])
    # the reference's policy std: exp(raw) clipped to [1e-5, 10] (ours: CORL's m raw + o)
    agent.actor._log_std = lambda raw: raw.clamp(math.log(1e-5), math.log(10.0))
    feed = Feed(monkeypatch)
    rand = feed.queues.setdefault("rand", [])
    monkeypatch.setattr(torch, "rand", lambda *size, **kw: torch.as_tensor(rand.pop(0)))
    if mutate is not None:
        mutate(monkeypatch, agent, inputs)
    out: dict = {"offline": [], "online": []}
    b, n, a = S["batch"], S["n_actions"], S["act_dim"]
    for step in inputs["offline"]:
        pairs = np.concatenate([step["next"], step["backup"]], axis=1)  # per state: s' draws
        sampled = np.concatenate([step["current"].reshape(b * n, a), pairs.reshape(2 * b * n, a)])
        feed.add("randn", [step["actor"], sampled])
        feed.add("rand", [step["uniform"]])
        feed.add("subset", [step["subset"]])
        out["offline"].append(agent.update(wsrl_batch(step["batch"])))
        feed.check_used()
    out["after_offline"] = snapshot(agent)
    agent.set_phase("warmup")  # carries the CQL train state into the online SAC
    agent.set_phase("online")
    for step in inputs["online"]:
        # antmaze: each critic step's N next actions per row, sample-major (as ours draws)
        critic = [noise.reshape(-1, a) for noise in step["critic"]]
        feed.add("randn", [*critic, step["actor"]])
        feed.add("subset", list(step["subsets"]))
        out["online"].append(agent.update(batch_of(step["batch"])))
        feed.check_used()
    out["final"] = snapshot(agent)
    out["agent"] = agent
    return out


def snapshot(agent: object) -> dict:
    """Copies of the networks' state_dicts (numpy) and log alpha of the current phase."""
    nets = {
        "actor": agent.actor,
        "critic": agent.critic,
        "target_critic": agent.offline.target_critic,
    }
    state = {k: {n: v.numpy().copy() for n, v in m.state_dict().items()} for k, m in nets.items()}
    agent_now = agent.offline if agent.phase == "offline" else agent.online
    return {
        **state,
        "log_alpha": agent_now.log_alpha.item(),
        "cql_alpha_raw": agent.offline.log_alpha_prime.item(),  # the softplus parameter
    }


def param_diff(ours: dict, ref: dict) -> float:
    """Max |ours - reference| over the networks' parameters (the reference's networks and
    keys: the antmaze file keeps the critics of the final state only)."""
    return max(
        max(
            float(np.abs(ours[net][k] - np.asarray(v, np.float32)).max())
            for k, v in ref[net].items()
        )
        for net in NETWORKS
        if net in ref
    )


def check(out: dict, ref: dict) -> None:
    """Our losses and parameters against the reference's. Ours sums the members' MSEs and
    penalties (the reference averages them: x10 here); the CQL gap is a mean on both.
    With the tuned weight (antmaze) the reference's ``cql_loss`` is the gap minus the
    target; its Cal-QL bound rate counts the random actions' values too (never bounded),
    a third of the values: 2/3 of ours. There the final critics are compared where their
    gradients are larger than Adam's eps scale (rms > 1e-4: 96.6% of the 10,570 weights):
    the 4-layer critics' smaller gradients turn float rounding into O(lr) steps below it
    (measured: rms <= 1e-6, 20 weights, up to 5.8e-4 apart; 1e-6..1e-4, 341, 1.6e-4;
    1e-4..1e-3 5.8e-5; above 2.2e-5), while every loss agrees to 6e-6 relative, the actor
    to 1.2e-7, the target critics to 5.2e-5 and both multipliers to 6e-8."""
    members = S["members"]
    for ours, theirs in zip(out["offline"], ref["offline_losses"], strict=True):
        close(ours["critic_loss"], members * theirs["critic_loss"], "CQL critic")
        close(ours["td_loss"], members * theirs["td_loss"], "CQL TD")
        if "cql_diff" in theirs:  # the tuned CQL weight and Cal-QL's bound (antmaze)
            close(ours["cql_diff"], theirs["cql_diff"], "CQL gap")
            close(ours["alpha_prime"], theirs["cql_alpha"], "CQL weight")
            close(ours["alpha_prime_loss"], theirs["cql_alpha_loss"], "CQL weight loss")
            close(2.0 / 3.0 * ours["bound_rate"], theirs["calql_bound_rate"], "bound rate")
        else:
            close(ours["cql_diff"], theirs["cql_loss"], "CQL gap")
        close(ours["actor_loss"], theirs["actor_loss"], "CQL actor")
        close(ours["entropy"], theirs["entropy"], "CQL entropy")
        close(ours["alpha_loss"], theirs["temperature_loss"], "CQL temperature")
    assert param_diff(out["after_offline"], ref["after_offline"]) < PARAM_TOL
    assert out["after_offline"]["log_alpha"] == pytest.approx(
        ref["after_offline"]["log_alpha"], abs=1e-6
    )
    if "cql_alpha_raw" in ref["after_offline"]:
        assert out["after_offline"]["cql_alpha_raw"] == pytest.approx(
            ref["after_offline"]["cql_alpha_raw"], abs=1e-6
        )
    for ours, theirs in zip(out["online"], ref["online_losses"], strict=True):
        close(ours["critic_loss"], members * float(np.mean(theirs["critic_losses"])), "critic")
        close(ours["actor_loss"], theirs["actor_loss"], "actor")
        close(ours["entropy"], theirs["entropy"], "entropy")
        close(ours["alpha_loss"], theirs["temperature_loss"], "temperature")
    if "cql_diff" in ref["offline_losses"][0]:  # antmaze: 4-layer critics (docstring above)
        final = {net: ref["final"][net] for net in ("actor", "target_critic")}
        assert param_diff(out["final"], final) < PARAM_TOL
        critic = critic_diff_beyond_eps_gradients(
            out["agent"].online, ref["final"]["critic"], rms_floor=1e-4, max_skipped=0.04
        )
        assert critic < PARAM_TOL
    else:
        assert param_diff(out["final"], ref["final"]) < PARAM_TOL
    assert out["final"]["log_alpha"] == pytest.approx(ref["final"]["log_alpha"], abs=1e-6)


def test_wsrl_matches_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """5 CQL pre-training updates, the switch (temperature and Adam states carried), 5
    online high-UTD updates (20 critic steps, 5 actor/temperature steps) against
    zhouzypaul/wsrl's CQLAgent.update / SACAgent.update_high_utd, aligned reference."""
    golden_file = golden("wsrl")
    assert golden_file["aligned_flags"] == [
        "layer_norm_eps", "member_heads", "temperature_exp", "temperature_log_offline",
        "temperature_samples", "no_ghost_steps", "penalty_all_critics",
    ]  # fmt: skip
    check(run_wsrl(monkeypatch), golden_file["aligned"])


def _min_over_all(monkeypatch: pytest.MonkeyPatch, agent: object, inputs: dict) -> None:
    import rlcore.algos.cql
    import rlcore.algos.sac

    def all_critics(q: torch.Tensor, subset: int | None) -> torch.Tensor:
        torch.randperm(q.shape[0])  # the draw is still made (and used up), then ignored
        return q.min(0).values

    monkeypatch.setattr(rlcore.algos.sac, "subset_min", all_critics)
    monkeypatch.setattr(rlcore.algos.cql, "subset_min", all_critics)


def _no_terminal_mask(monkeypatch: pytest.MonkeyPatch, agent: object, inputs: dict) -> None:
    for step in inputs["offline"] + inputs["online"]:
        step["batch"]["terminated"] = np.zeros_like(step["batch"]["terminated"])


def _no_carry(monkeypatch: pytest.MonkeyPatch, agent: object, inputs: dict) -> None:
    monkeypatch.setattr(type(agent), "carry_state", lambda self: None)


def _temperature_sign(monkeypatch: pytest.MonkeyPatch, agent: object, inputs: dict) -> None:
    # the temperature loss's sign flipped: its gradient negated before each Adam step
    for part in (agent.offline, agent.online):
        step, log_alpha = part.alpha_optimizer.step, part.log_alpha

        def flipped(*args: object, _step: Callable = step, _p: torch.Tensor = log_alpha) -> None:
            _p.grad.neg_()
            _step(*args)

        monkeypatch.setattr(part.alpha_optimizer, "step", flipped)


@pytest.mark.parametrize(
    "mutate", [_min_over_all, _no_terminal_mask, _no_carry, _temperature_sign],
    ids=["min_over_all_10", "no_terminal_mask", "no_carried_state", "temperature_sign"],
)  # fmt: skip
def test_wsrl_parity_catches_mutations(monkeypatch: pytest.MonkeyPatch, mutate: Callable) -> None:
    """The comparison is sharp: each mutation of our update breaks it."""
    ref = golden("wsrl")["aligned"]
    with pytest.raises(AssertionError):
        check(run_wsrl(monkeypatch, mutate), ref)


def test_wsrl_golden_departures_recorded() -> None:
    """Every aligned departure has its measured size in the golden file, the reference as it
    is differs from the aligned one, and ghost steps and shared heads move parameters by more
    than 5x the parity tolerance in 10 updates."""
    departures = golden("wsrl")["departures"]
    assert set(departures) == {*golden("wsrl")["aligned_flags"], "all (reference as is)"}
    for name in ("no_ghost_steps", "member_heads", "all (reference as is)"):
        assert max(departures[name]["final"][k] for k in NETWORKS) > 5 * PARAM_TOL, name


def test_wsrl_antmaze_matches_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """configs/experiment/wsrl_antmaze.yaml's update against the reference's antmaze recipe
    (``finetune.py --agent calql`` with ``antmaze_cql`` + ``--use_redq``, then
    ``antmaze_wsrl``): 4-layer critics, Cal-QL's bound on the Monte-Carlo return-to-go,
    the tuned CQL weight (softplus multiplier from 1 toward a gap of 0.8), then online
    SAC with the max over 10 sampled next actions in the target. Aligned reference (the
    locomotion flags plus its state-independent log-std and the multiplier's loss on the
    critic step's draws; sizes in the golden file's ``departures``)."""
    golden_file = golden("wsrl_antmaze")
    assert golden_file["aligned_flags"][-2:] == ["state_dependent_std", "lagrange_same_draw"]
    assert len(antmaze_recipe()["critic_hidden"]) == golden_file["sizes"]["critic_layers"]
    check(run_wsrl(monkeypatch, variant="antmaze"), golden_file["aligned"])


def _no_bound(monkeypatch: pytest.MonkeyPatch, agent: object, inputs: dict) -> None:
    agent.offline.calibrate = False


def _one_backup_action(monkeypatch: pytest.MonkeyPatch, agent: object, inputs: dict) -> None:
    agent.online.config.backup_actions = 1  # the first sample only (the rest of the feed unused)
    for step in inputs["online"]:
        step["critic"] = step["critic"][:, :1]


def _lagrange_corl(monkeypatch: pytest.MonkeyPatch, agent: object, inputs: dict) -> None:
    agent.offline.config.cql_lagrange_form = "corl"


@pytest.mark.parametrize(
    "mutate", [_no_bound, _one_backup_action, _lagrange_corl],
    ids=["no_calql_bound", "one_backup_action", "corl_multiplier"],
)  # fmt: skip
def test_wsrl_antmaze_parity_catches_mutations(
    monkeypatch: pytest.MonkeyPatch, mutate: Callable
) -> None:
    """Each piece of the antmaze recipe matters to the comparison."""
    ref = golden("wsrl_antmaze")["aligned"]
    with pytest.raises(AssertionError):
        check(run_wsrl(monkeypatch, mutate, variant="antmaze"), ref)
