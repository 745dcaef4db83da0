"""benchmarks/whole_agent.py: an agent-only snapshot rebuilt into a checkpoint that
``init_from=`` continues from (targets = their networks, fresh optimisers, no buffer)."""

from __future__ import annotations

import pytest
import torch

from rlcore.benchmarks.whole_agent import whole_agent
from rlcore.checkpoint import load_checkpoint, save_checkpoint
from rlcore.train import train
from tests.conftest import FAST, REPO, make_config

ASSET = REPO / "benchmarks/assets/hopper_sac_expert.pt"
TINY = ["algo=sac", "env=Hopper", *FAST, "env.num_envs=1", "algo.learning_starts=64",
        "algo.batch_size=32", "total_steps=96", "eval_every=96", "eval_episodes=1",
        "eval_envs=1", "env.max_episode_steps=32"]  # fmt: skip


def test_a_snapshot_becomes_a_whole_checkpoint_init_from_accepts(tmp_path) -> None:
    train(make_config(*TINY, "seed=1"), tmp_path / "template")
    template, snapshot = load_checkpoint(tmp_path / "template"), load_checkpoint(ASSET)
    state = whole_agent(snapshot, template)
    agent = state["agent"]
    assert set(agent) == set(template["agent"]) and "loop" not in state
    for name, tensor in snapshot["agent"]["critic"].items():
        assert torch.equal(agent["critic"][name], tensor)
        assert torch.equal(agent["target_critic"][name], tensor)  # the target starts equal
        assert agent["target_critic"][name] is not agent["critic"][name]
    for name, tensor in snapshot["agent"]["actor"].items():
        assert torch.equal(agent["actor"][name], tensor)
    assert torch.equal(agent["log_alpha"], snapshot["agent"]["log_alpha"])
    for name in ("actor_optimizer", "critic_optimizer", "alpha_optimizer"):
        assert agent[name]["state"] == {}  # no Adam moments: as at step 0
        assert agent[name]["param_groups"] == template["agent"][name]["param_groups"]
    assert state["config"] == template["config"]
    path = save_checkpoint(state, tmp_path / "whole.pt")
    # init_from refuses the snapshot itself (test_pretrained_head) but continues from this
    train(make_config(*TINY, f"init_from={path}"), tmp_path / "continued")
    assert (tmp_path / "continued" / "checkpoints" / "latest.pt").exists()


def test_a_snapshot_of_another_algorithm_or_with_unknown_parts_is_refused() -> None:
    template = {"algo": "sac", "agent": {"actor": {}, "critic": {}, "target_critic": {}}}
    with pytest.raises(ValueError, match="holds a td3 agent, the template a sac one"):
        whole_agent({"algo": "td3", "agent": {}}, template)
    with pytest.raises(ValueError, match=r"parts \['ema'\] the template's lacks"):
        whole_agent({"algo": "sac", "agent": {"actor": {}, "ema": {}}}, template)
    with pytest.raises(ValueError, match="nothing for the agent's part 'critic'"):
        whole_agent({"algo": "sac", "agent": {"actor": {}}}, template)
