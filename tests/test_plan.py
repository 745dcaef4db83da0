"""Run plans and capabilities: what each algorithm declares to the core, and that the core
reads nothing else."""

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from rlcore import catalog
from rlcore.capabilities import MissingCapabilityError, OnPolicy, Planned, require
from rlcore.plan import DataRecipe, EnvRecipe, Returns, RunPlan, Schedule

ROOT = Path(__file__).resolve().parents[1]
ALGOS = sorted(catalog.ALGORITHMS)
ON_POLICY = {"ppo", "dppo", "reinflow", "resip", "ppo_lag", "cpo"}
TRAINS_ON_DATA = {"iql", "riql", "mopo", "morec", "td3_bc", "rebrac", "awac", "cql", "cal_ql", "famo2o", "diffusion_bc",
                  "flow_bc", "fisor"}  # fmt: skip


@pytest.mark.parametrize("name", ALGOS)
def test_every_config_declares_a_frozen_run_plan(name):
    spec = catalog.get(name)
    config = spec.config_class()
    assert isinstance(config, Planned)
    plan = config.plan()
    assert isinstance(plan, RunPlan)
    for part in (plan, plan.schedule, plan.env, plan.data, plan.returns):
        assert dataclasses.is_dataclass(part)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(part, dataclasses.fields(part)[0].name, None)
    # rollouts exactly for the PPO family; a dataset always for the offline algorithms
    assert plan.schedule.on_policy == (name in ON_POLICY)
    assert plan.data.required == (name in TRAINS_ON_DATA)
    # a constrained algorithm (it has a cost limit) asks for the task's costs
    has_limit = any(f.name == "cost_limit" for f in dataclasses.fields(spec.config_class))
    assert plan.env.cost == has_limit


def test_plans_map_each_algorithms_options_onto_the_phases():
    """total_steps is the main phase of each algorithm; the plan says which explicitly."""
    wsrl = catalog.get("wsrl").config_from_dict(
        {
            "total_steps": 30,
            "offline_steps": 7,
            "warmup_steps": 5,
            "utd_ratio": 3,
            "buffer_size": 100,
            "normalize_reward_by_returns": True,
        }  # fmt: skip
    )
    assert wsrl.plan().schedule == Schedule(
        offline_steps=7, online_steps=30, batch_size=256, buffer_size=100, learning_starts=0,
        warmup_steps=5, updates_per_step=1.0, utd_ratio=3, offline_data="drop",
    )  # fmt: skip
    assert wsrl.plan().data == DataRecipe(normalize_reward_by_returns=True)
    iql = catalog.get("iql").config_from_dict({"total_steps": 10, "online_steps": 20})
    schedule = iql.plan().schedule
    assert (schedule.offline_steps, schedule.online_steps, schedule.offline_data) == (
        10,
        20,
        "keep",
    )
    assert schedule.buffer_size is None  # IQL keeps every online transition
    cal_ql = catalog.get("cal_ql").config_from_dict({"online_steps": 4, "offline_fraction": 0.25})
    assert (cal_ql.plan().schedule.offline_data, cal_ql.plan().schedule.offline_fraction) == (
        "mix", 0.25)  # fmt: skip
    ppo = catalog.get("ppo").config_from_dict({"total_steps": 64, "rollout_steps": 16})
    assert ppo.plan().schedule.rollout_steps == 16 and ppo.plan().schedule.online_steps == 64
    assert ppo.plan().env == EnvRecipe(normalize_obs=True, normalize_reward=True)
    assert ppo.plan().returns == Returns(0.99, 0.95)
    cpo = catalog.get("cpo").config_from_dict({"cost_gamma": 0.9})
    assert cpo.plan().returns.cost_gamma == 0.9 and cpo.plan().env.cost
    dppo = catalog.get("dppo").config_from_dict({"horizon": 8, "pretrained": "x.pt"})
    assert dppo.plan().env.action_chunk == 8 and dppo.plan().pretrained == "x.pt"
    assert dppo.plan().needs_pretrained
    resip = catalog.get("resip").config_from_dict({"horizon": 8})
    assert resip.plan().env.action_chunk == 1  # ResiP executes the base's chunk itself


def _names(tree: ast.AST, functions: tuple[str, ...]) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in functions
    ]


@pytest.mark.parametrize("module", ["rlcore/train.py", "rlcore/run.py", "rlcore/build.py",
                                    "rlcore/checks.py", "rlcore/cli.py", "rlcore/loops.py",
                                    "rlcore/evaluate.py", "rlcore/evaluation.py"])  # fmt: skip
def test_composition_root_and_loops_fish_for_nothing(module):
    """No getattr / hasattr: settings come from the plan, capabilities from Protocols."""
    tree = ast.parse((ROOT / module).read_text())
    assert _names(tree, ("getattr", "hasattr")) == []


def test_a_missing_capability_is_one_clear_error():
    class Actor:
        def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
            return obs

    with pytest.raises(MissingCapabilityError, match="Actor does not implement OnPolicy.*rollout"):
        require(Actor(), OnPolicy, "the rollout loop needs")


def test_run_metadata_records_the_speed_modes_the_agent_resolved(tmp_path):
    """meta.json's "effective" block: compile=auto on a run shorter than the threshold is
    resolved to eager by the agent, whatever the config said."""
    import json

    from rlcore.train import train
    from tests.conftest import make_config

    cfg = make_config("algo=sac", "env=pendulum", "total_steps=300", "algo.learning_starts=100",
                      "algo.compile=auto", "eval_every=0", "eval_episodes=1")  # fmt: skip
    train(cfg, tmp_path / "run")
    effective = json.loads((tmp_path / "run" / "meta.json").read_text())["effective"]
    assert effective["compile"] is False and effective["precision"] == "float32"
