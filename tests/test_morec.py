"""MOREC (algos/morec.py) and its dynamics reward (rlcore/dynamics_reward.py): the score
and the filtered rollout against the authors' code (tests/golden/morec.json,
benchmarks/parity/morec_reference.py), selection and termination by hand, the learned
reward telling data from wrong transitions, the command line and resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from rlcore.algos.morec import MOREC, MORECConfig
from rlcore.benchmarks.parity.mopo_reference import (
    ACT,
    DONE_ABOVE,
    HIDDEN,
    OBS,
    PENALTY,
    rollout_starts,
)
from rlcore.benchmarks.parity.morec_reference import (
    DISCRIMINATORS,
    DRAWS,
    STATE_CLIP,
    TERMINAL_REWARD,
    discriminators,
    score_rows,
)
from rlcore.benchmarks.parity.offline_common import Script
from rlcore.dynamics_reward import DynamicsReward, RewardLearning, learn_dynamics_reward
from rlcore.model_based import ModelRollouts
from rlcore.plan import ModelRecipe
from tests.test_mopo import (
    SPACES,
    LineModel,
    golden_agent,
    line_dataset,
    resume_equals_uninterrupted,
    scripted_torch,
)

GOLDEN = json.loads((Path(__file__).parent / "golden" / "morec.json").read_text())["cases"]


def golden_reward() -> DynamicsReward:
    params = {k: torch.from_numpy(v) for k, v in discriminators().items()}
    reward = DynamicsReward(OBS, ACT, capacity=DISCRIMINATORS)
    with torch.no_grad():
        for i, layer in enumerate([*reward.history.hidden_layers, reward.history.output_layer]):
            layer.weight.copy_(params[f"{i}.w"])
            layer.bias.copy_(params[f"{i}.b"])
        reward.expert_value.copy_(params["expert_value"])
        reward.learner_value.copy_(params["learner_value"])
        for name in ("obs_low", "obs_high", "action_low", "action_high"):
            getattr(reward, name).copy_(params[name])
        reward.count.fill_(DISCRIMINATORS)
    return reward


def test_the_dynamics_reward_matches_the_authors_code() -> None:
    """r_D of 16 transitions: min-max scaling, [s, z, a, s' - s], each discriminator's
    logit clamped and rescaled by its expert / learner values, prob_mean_clip."""
    rows = {k: torch.from_numpy(v) for k, v in score_rows().items()}
    ours = golden_reward()(rows["obs"], rows["action"], rows["next_obs"])
    torch.testing.assert_close(ours, torch.tensor(GOLDEN["score"]["reward"]), rtol=1e-5, atol=1e-6)


def test_the_filtered_rollout_matches_the_authors_code() -> None:
    """A 3-step MOREC rollout (2 draws per elite, state clip 25, the best r_D kept, r_D
    below 0.6 ends a rollout, MOPO's penalty) replaying the reference's draws."""
    agent = golden_agent(-float(ACT))
    recipe = ModelRecipe(rollout_batch=8, rollout_length=3, retain_epochs=1, penalty_coef=PENALTY,
                         state_clip=STATE_CLIP, candidate_draws=DRAWS,
                         terminal_reward=TERMINAL_REWARD)  # fmt: skip
    rollouts = ModelRollouts(None, agent.dynamics, agent.imagine_action,
                             lambda o, a, n: n[:, 0] > DONE_ABOVE, recipe,
                             dynamics_reward=golden_reward())  # fmt: skip
    draws = {
        k: [np.asarray(v, np.float32) for v in vs] for k, vs in GOLDEN["rollout"]["draws"].items()
    }
    with scripted_torch(randn_like=Script(draws["policy"]), randn=Script(draws["model"])):
        rollouts.rollout(torch.from_numpy(rollout_starts()))
    expected = {k: torch.tensor(v) for k, v in GOLDEN["rollout"]["transitions"].items()}
    rows = rollouts.imagined.batch(torch.arange(len(rollouts.imagined)))
    assert len(rows.obs) == len(expected["obss"]) == 9
    torch.testing.assert_close(rows.obs, expected["obss"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rows.next_obs, expected["next_obss"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rows.reward, expected["rewards"][:, 0], rtol=1e-5, atol=1e-5)
    assert rows.terminated.tolist() == expected["terminals"][:, 0].tolist()


class Candidates(LineModel):
    """Two candidates per state: s + 1 (reward 1) and s + 2 (reward 2); penalty 0."""

    def candidates(self, obs, action, draws=1, clip=None, generator=None):
        self.steps += 1
        first = torch.cat([obs + 1, torch.ones(len(obs), 1)], -1)
        second = torch.cat([obs + 2, torch.full((len(obs), 1), 2.0)], -1)
        return torch.stack([first, second]), torch.zeros(len(obs))


class ScoreByJump(torch.nn.Module):
    """r_D = 1 for a jump of +1, 0.5 for +2: the filter should prefer +1."""

    def forward(self, obs, action, next_obs):
        return torch.where((next_obs - obs)[:, 0] < 1.5, 1.0, 0.5)


def test_the_filter_keeps_the_best_candidate_and_ends_rollouts_it_distrusts() -> None:
    recipe = ModelRecipe(rollout_batch=2, rollout_length=3, retain_epochs=1, penalty_coef=0.0,
                         candidate_draws=1, terminal_reward=0.75)  # fmt: skip
    rollouts = ModelRollouts(line_dataset(), Candidates(), lambda o: torch.zeros(len(o), 1),
                             lambda o, a, n: n[:, 0] > 2.5, recipe, dynamics_reward=ScoreByJump())  # fmt: skip
    stats = rollouts.rollout(torch.tensor([[0.0], [2.0]]))
    rows = rollouts.imagined.batch(torch.arange(len(rollouts.imagined)))
    # 0 -> 1 and 2 -> 3 (ends: the task's rule), then 1 -> 2, then 2 -> 3 (ends)
    assert rows.next_obs[:, 0].tolist() == [1.0, 3.0, 2.0, 3.0]
    assert rows.reward.tolist() == [1.0, 1.0, 1.0, 1.0]  # the kept candidate's reward
    assert rows.terminated.tolist() == [0.0, 1.0, 0.0, 1.0]
    assert stats["rollout_dynamics_reward"] == 1.0
    # a threshold above every score ends each rollout at its first (stored) step
    strict = ModelRecipe(rollout_batch=2, rollout_length=3, retain_epochs=1, penalty_coef=0.0,
                         candidate_draws=1, terminal_reward=1.5)  # fmt: skip
    rollouts = ModelRollouts(line_dataset(), Candidates(), lambda o: torch.zeros(len(o), 1),
                             lambda o, a, n: n[:, 0] > 9, strict, dynamics_reward=ScoreByJump())  # fmt: skip
    rollouts.rollout(torch.tensor([[0.0], [2.0]]))
    assert rollouts.imagined.batch(torch.arange(2)).terminated.tolist() == [1.0, 1.0]
    assert len(rollouts.imagined) == 2


def test_softmax_selection_draws_by_ten_times_the_reward() -> None:
    """Scores 1 and 0.5: softmax(10 r) keeps the +1 candidate with p = 1 / (1 + e^-5)."""
    recipe = ModelRecipe(rollout_batch=4000, rollout_length=1, retain_epochs=1, penalty_coef=0.0,
                         candidate_draws=1, select="softmax", terminal_reward=0.0)  # fmt: skip
    rollouts = ModelRollouts(line_dataset(), Candidates(), lambda o: torch.zeros(len(o), 1),
                             lambda o, a, n: n[:, 0] > 99, recipe, dynamics_reward=ScoreByJump())  # fmt: skip
    rollouts.rollout(torch.zeros(4000, 1))
    share = (rollouts.imagined.batch(torch.arange(4000)).next_obs[:, 0] == 1.0).float().mean()
    assert share.item() == pytest.approx(1 / (1 + np.exp(-5)), abs=0.01)


def test_the_learned_reward_scores_data_above_wrong_transitions() -> None:
    """On a noisy linear system, after the adversarial game the reward is higher on held-out
    true transitions than on the same (s, a) with s' pushed off by one std of the step."""
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((3000, 3)).astype(np.float32)
    action = rng.uniform(-1, 1, (3000, 2)).astype(np.float32)
    step = 0.3 * obs[:, ::-1] + 0.5 * action[:, [0, 1, 0]]
    next_obs = (obs + step + 0.02 * rng.standard_normal(obs.shape)).astype(np.float32)
    obs, action, next_obs = map(torch.from_numpy, (obs, action, next_obs))
    torch.manual_seed(0)
    reward = DynamicsReward(3, 2, capacity=10, hidden=(64, 64))
    settings = RewardLearning(iterations=600, batch_size=128, snapshot_every=60,
                              generator_hidden=(64, 64), generator_fit_epochs=10)  # fmt: skip
    learn_dynamics_reward(reward, obs[:2500], action[:2500], next_obs[:2500], settings,
                          torch.Generator().manual_seed(0))  # fmt: skip
    assert int(reward.count) == 10
    held = slice(2500, 3000)
    true = reward(obs[held], action[held], next_obs[held])
    wrong = reward(obs[held], action[held], next_obs[held] + step[held].std(0))
    assert true.mean() > wrong.mean() + 0.15, (true.mean().item(), wrong.mean().item())


def test_morec_trains_and_resumes_from_the_command_line(tmp_path) -> None:
    """A Hopper run: the ensemble and the dynamics reward are learned once and saved; a run
    stopped at 40 steps and resumed to 80 ends with the uninterrupted run's parameters."""
    args = ["algo=morec", "algo.rollout_length=5", "algo.reward_iterations=40",
            "algo.reward_snapshot_every=10", "algo.discriminators=4"]  # fmt: skip
    log = resume_equals_uninterrupted(tmp_path, args,
                                      ("actor", "critic", "dynamics", "dynamics_reward"))  # fmt: skip
    assert log.count("learning the dynamics reward") == 1 and "dynamics reward" in log


def test_refusals() -> None:
    with pytest.raises(ValueError, match="algo=mopo"):
        MOREC(*SPACES, MORECConfig(transition_filter=False))
    with pytest.raises(RuntimeError, match="learn it first"):
        DynamicsReward(OBS, ACT)(torch.zeros(1, OBS), torch.zeros(1, ACT), torch.zeros(1, OBS))
    assert HIDDEN == 16  # the golden weights' width, shared with the MOPO golden file


def test_morec_rolls_out_in_a_mopo_runs_fitted_ensemble(tmp_path) -> None:
    """``algo.dynamics_from=<MOPO run>``: the MOREC run loads that run's fitted ensemble
    (no fit) and ends with it unchanged; on other data it refuses, naming both datasets."""
    from rlcore.config import ConfigError
    from rlcore.offline.recording import collect
    from rlcore.train import train
    from tests.conftest import FAST, make_config

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
        collect("Hopper", "random", "local/hopper/random-v0", steps=300, seed=0)
        collect("Hopper", "random", "local/hopper/other-v0", steps=300, seed=1)
        common = ["env=Hopper", *FAST, "algo.batch_size=16", "algo.hidden=[16,16]",
                  "algo.dynamics_hidden=[16,16]", "algo.dynamics_decays=[0.0,0.0,0.0]",
                  "algo.max_dynamics_epochs=2", "algo.rollout_batch=20", "algo.rollout_length=3",
                  "algo.rollout_freq=25", "total_steps=30", "eval_every=30", "eval_episodes=1",
                  "eval_envs=1", "env.max_episode_steps=20"]  # fmt: skip
        train(make_config("algo=mopo", "dataset=local/hopper/random-v0", *common),
              tmp_path / "mopo")  # fmt: skip
        morec = ["algo=morec", "algo.reward_iterations=20", "algo.reward_snapshot_every=10",
                 "algo.discriminators=2", f"algo.dynamics_from={tmp_path / 'mopo'}", *common]
        train(make_config(*morec, "dataset=local/hopper/random-v0"), tmp_path / "morec")
        with pytest.raises(ConfigError, match="fitted on dataset=local/hopper/random-v0.*"
                           "trains on dataset=local/hopper/other-v0"):  # fmt: skip
            train(make_config(*morec, "dataset=local/hopper/other-v0"), tmp_path / "other")
    log = (tmp_path / "morec" / "train.log").read_text()
    assert "dynamics ensemble loaded from" in log and "dynamics fitted" not in log
    assert "learning the dynamics reward" in log
    fitted = torch.load(tmp_path / "mopo" / "checkpoints" / "latest.pt", weights_only=False)
    used = torch.load(tmp_path / "morec" / "checkpoints" / "latest.pt", weights_only=False)
    for key, value in fitted["agent"]["dynamics"].items():
        torch.testing.assert_close(used["agent"]["dynamics"][key], value, rtol=0, atol=0)


def test_dynamics_from_refuses_runs_without_a_fitted_ensemble_of_this_shape(tmp_path) -> None:
    from rlcore.checkpoint import FORMAT_VERSION
    from rlcore.dynamics import ProbabilisticEnsemble
    from rlcore.model_based import load_fitted_dynamics

    def saved(name: str, agent: dict) -> str:
        state = {"format": FORMAT_VERSION, "algo": "mopo", "agent": agent,
                 "config": {"dataset": "d", "corruption": None}}  # fmt: skip
        torch.save(state, tmp_path / name)
        return str(tmp_path / name)

    model = ProbabilisticEnsemble(OBS, ACT, 3, 2, (8,), (0.0, 0.0))
    with pytest.raises(ValueError, match="no dynamics ensemble"):
        load_fitted_dynamics(model, saved("iql.pt", {"actor": {}}), "d", None)
    unfitted = saved("unfitted.pt", {"dynamics": model.state_dict()})
    with pytest.raises(ValueError, match="not fitted yet"):
        load_fitted_dynamics(model, unfitted, "d", None)
    model.fitted.fill_(True)
    wide = ProbabilisticEnsemble(OBS, ACT, 3, 2, (16,), (0.0, 0.0))
    with pytest.raises(ValueError, match="another shape"):
        load_fitted_dynamics(wide, saved("fitted.pt", {"dynamics": model.state_dict()}), "d", None)
    with pytest.raises(ValueError, match=r"corruption \{'kind': 'obs'\}"):
        load_fitted_dynamics(model, str(tmp_path / "fitted.pt"), "d", {"kind": "obs"})
    same = ProbabilisticEnsemble(OBS, ACT, 3, 2, (8,), (0.0, 0.0))
    assert "not refitted" in load_fitted_dynamics(same, str(tmp_path / "fitted.pt"), "d", None)
    assert bool(same.fitted) and torch.equal(same.elites, model.elites)
