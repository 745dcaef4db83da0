"""Every shipped config composes, matches its dataclass, and runs a few hundred steps."""

import dataclasses
from pathlib import Path

import pytest
import torch
import yaml

from rlcore import catalog
from rlcore.logging import read_csv
from rlcore.train import train
from tests.conftest import FAST, REPO, make_config

ALGOS = sorted(catalog.ALGORITHMS)


def _constrained(spec: catalog.Algorithm) -> bool:
    return any(f.name == "cost_limit" for f in dataclasses.fields(spec.config_class))


# constrained algorithms need a task with costs / a cost-labelled dataset: each config runs
# in tests/test_safe_rl.py (online) and tests/test_fisor.py (offline)
CONSTRAINED = sorted(name for name, spec in catalog.ALGORITHMS.items() if _constrained(spec))
OFFLINE = sorted(
    name
    for name, spec in catalog.ALGORITHMS.items()
    if spec.config_class().plan().data.required and not _constrained(spec)
)
# online algorithms that need a dataset too (RLPD mixes it in, WSRL pre-trains on it)
WITH_DATA = sorted(
    name
    for name, spec in catalog.ALGORITHMS.items()
    if not spec.config_class().plan().data.required
    and not spec.config_class().plan().schedule.on_policy
    and any(f.name == "offline_data" for f in dataclasses.fields(spec.config_class))
)
# on-policy fine-tuners of a pre-trained diffusion / flow policy (algo.pretrained)
FINETUNERS = sorted(
    name
    for name, spec in catalog.ALGORITHMS.items()
    if any(f.name == "pretrained" for f in dataclasses.fields(spec.config_class))
)
ONLINE = sorted(
    name
    for name, spec in catalog.ALGORITHMS.items()
    if not spec.config_class().plan().data.required
    and name not in WITH_DATA
    and name not in FINETUNERS
    and name not in CONSTRAINED
    and not spec.images_only  # rendered tasks: tests/test_drqv2.py, tests/test_resume.py
)
# every env config, but of the seven robot tasks one per observation kind (PandaLift: a
# vector, PandaPush: a goal dict); the others run in tests/test_robot_tasks.py
# the AntMaze envs (antgoal, antmaze*eval) are exercised in tests/test_antmaze.py and by
# the antmaze experiment configs below; Atari (env=ALE/<Game>-v5: configs/env/atari.yaml,
# a generic config like gym.yaml) in tests/test_atari.py and tests/test_pixel_dqn.py
# NeoRL-2's tasks: DMSD here, Pipeline (1,000-step episodes) in tests/test_neorl2.py
ENVS = sorted(
    p.stem for p in (REPO / "configs" / "env").glob("*.yaml")
    if p.stem not in ("gym", "atari", "pipeline") and (not p.stem.startswith("panda") or p.stem in ("pandalift", "pandapush"))
    and (not p.stem.startswith("ant") or p.stem == "ant")
)  # fmt: skip
# the online algorithms that read dict observations as they are (replay: stored part by
# part; PPO: its rollout stores them flattened; what refuses them names env.flatten_obs:
# tests/test_observations.py)
DICT_OBS_ALGOS = ("sac", "td3", "fast_td3", "ppo")


def _kinds(env: str) -> tuple[str, bool]:
    """The kind of action space of an env config's task (rlcore.spaces.action_kind) and
    whether it observes a dict."""
    import gymnasium as gym

    import rlcore.envs  # noqa: F401  (registers the robot tasks)
    from rlcore.spaces import action_kind

    env_id = yaml.safe_load((REPO / "configs" / "env" / f"{env}.yaml").read_text())["id"]
    made = gym.make(env_id)
    return action_kind(made.action_space), isinstance(made.observation_space, gym.spaces.Dict)


ENV_KINDS, DICT_ENVS = {}, set()
for _env in ENVS:
    ENV_KINDS[_env], _dict = _kinds(_env)
    if _dict:
        DICT_ENVS.add(_env)
# each algorithm with each env whose action space it can use (the others are refused,
# tests/test_discrete.py)
ONLINE_PAIRS = [
    (algo, env)
    for algo in ONLINE
    for env in ENVS
    if ENV_KINDS[env] in catalog.get(algo).action_spaces
    and (env not in DICT_ENVS or algo in DICT_OBS_ALGOS)
]
# the offline matrices record a tiny random dataset per env: the locomotion envs (a
# random policy never succeeds at a robot task, so its sparse returns are all equal and the
# return-range reward scaling refuses them, as it should)
BOX_ENVS = [env for env in ENVS if ENV_KINDS[env] == "box" and not env.startswith("panda")]


@pytest.mark.parametrize("algo", ALGOS)
def test_algo_defaults_come_from_the_dataclass_alone(algo):
    """``algo=<name>`` composes the config dataclass's defaults (registered in Hydra's
    ConfigStore by rlcore.configs); the algorithm's YAML file holds only what the command
    line runs differently: long runs compile (``compile: auto``), a hand-built agent not.
    A fine-tuner's head settings compose to null: its pre-trained checkpoint's
    (tests/test_pretrained_head.py); so do sizes that depend on the device: the run's
    device's (FastTD3, tests/test_fast_td3.py)."""
    from omegaconf import OmegaConf

    from rlcore.capabilities import DeviceSized
    from rlcore.configs import plain
    from rlcore.generative import declared_head_fields

    spec = catalog.get(algo)
    # on an env that no algo_env file names (they hold per-task values: fast_td3_hopper.yaml)
    cfg = make_config(f"algo={algo}", "env=Pendulum-v1")
    composed = OmegaConf.to_container(cfg.algo, resolve=True)
    assert composed.pop("name") == algo
    defaults = {f.name: f.default for f in dataclasses.fields(spec.config_class)}
    if spec.pretrained_head is not None:
        defaults.update(dict.fromkeys(declared_head_fields(spec.config_class)))
    config = spec.config_class()
    if isinstance(config, DeviceSized):
        for device in ("cpu", "cuda"):
            assert set(config.device_sizes(torch.device(device))) <= set(defaults)
        defaults.update(dict.fromkeys(config.device_sizes(torch.device("cpu"))))
    assert set(composed) == set(defaults), "composed config and dataclass list different options"
    for key, value in composed.items():
        if key == "compile":  # "auto" where the algorithm compiles (its YAML), else eager
            assert (value, defaults[key]) in (("auto", False), (False, False)), key
            continue
        assert plain(defaults[key]) == value, key
    in_yaml = yaml.safe_load((REPO / "configs" / "algo" / f"{algo}.yaml").read_text())
    assert in_yaml.pop("defaults") == [f"{algo}_defaults", "_self_"]
    assert set(in_yaml) <= {"compile"}, "the YAML restates dataclass defaults"


def test_required_short_names_exist():
    for name in [
        "hopper",
        "halfcheetah",
        "walker2d",
        "ant",
        "humanoid",
        "swimmer",
        "invertedpendulum",
        "inverteddoublependulum",
        "reacher",
    ]:
        assert name in ENVS


def test_overrides_and_friendly_names_compose():
    cfg = make_config(
        "algo=SAC",
        "env=HalfCheetah",
        "algo.batch_size=512",
        "env.num_envs=8",
        "total_steps=200000",
        "seed=3",
        "device=cpu",
    )
    assert cfg.algo.name == "sac" and cfg.algo.batch_size == 512
    assert cfg.env.id == "HalfCheetah-v5" and cfg.env.num_envs == 8
    assert cfg.total_steps == 200000 and cfg.seed == 3
    assert make_config("algo=ppo", "env=hopper").total_steps == 1_000_000
    gym_cfg = make_config("env=Pendulum-v1")
    assert gym_cfg.env.id == "Pendulum-v1" and gym_cfg.env.name == "pendulum-v1"
    # the generic config by name, as the sweep hint spells it
    explicit = make_config("env=gym", "env.id=Pendulum-v1")
    assert explicit.env.id == "Pendulum-v1" and explicit.env.backend == "auto"


def _smoke_overrides(algo: str) -> list[str]:
    if algo == "ppo":
        return [
            "algo.rollout_steps=64",
            "algo.num_minibatches=4",
            "algo.update_epochs=2",
            "total_steps=256",
            "algo.hidden=[32,32]",
        ]
    if algo == "fast_td3":  # a policy-acting warm-up in vector steps; two network widths
        return [
            "algo.warmup_vector_steps=100",
            "algo.batch_size=32",
            "total_steps=250",
            "algo.buffer_size=1000",
            "algo.actor_hidden=[32,32]",
            "algo.critic_hidden=[32,32]",
        ]
    return [
        "algo.learning_starts=100",
        "algo.batch_size=32",
        "total_steps=250",
        "algo.buffer_size=1000",
        "algo.hidden=[32,32]",
    ]


@pytest.mark.parametrize("algo,env", ONLINE_PAIRS)
def test_every_algo_env_pair_runs(algo, env, tmp_path):
    cfg = make_config(
        f"algo={algo}",
        f"env={env}",
        *FAST,
        *_smoke_overrides(algo),
        "env.max_episode_steps=40",
        "eval_every=200",
        "checkpoint_every=200",
        "eval_episodes=1",
        "log_every=50",
    )
    result = train(cfg, tmp_path)
    assert result["eval/return"] == result["eval/return"]  # finite, not NaN
    assert (tmp_path / "checkpoints" / "latest.pt").is_file()
    rows = read_csv(tmp_path / "train.csv")
    assert rows and rows[-1]["step"] <= cfg.total_steps
    if algo != "ppo":  # gradient updates happened after the warm-up
        loss = "train/q_loss" if algo == "dqn" else "train/critic_loss"
        assert any(loss in r for r in rows)
    assert Path(tmp_path / "config.yaml").is_file() and (tmp_path / "meta.json").is_file()


@pytest.fixture(scope="session")
def tiny_datasets(tmp_path_factory):
    """One 120-step random Minari dataset per env config, in a private dataset root."""
    import os

    from rlcore.offline.recording import collect

    root = tmp_path_factory.mktemp("minari")
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root)
    ids = {}
    for env in BOX_ENVS:
        ids[env] = f"local/{env}/random-v0"
        collect(env, "random", ids[env], steps=120, seed=0, max_episode_steps=40)
    yield ids
    if old is None:
        os.environ.pop("MINARI_DATASETS_PATH", None)
    else:
        os.environ["MINARI_DATASETS_PATH"] = old


@pytest.mark.parametrize("env", BOX_ENVS)
@pytest.mark.parametrize("algo", OFFLINE)
def test_every_offline_algo_env_pair_runs(algo, env, tmp_path, tiny_datasets):
    fields = {f.name for f in dataclasses.fields(catalog.get(algo).config_class)}
    cfg = make_config(
        f"algo={algo}",
        f"env={env}",
        *FAST,
        f"dataset={tiny_datasets[env]}",
        *(["algo.online_steps=0"] if "online_steps" in fields else []),  # offline phase only
        # model-based: a short fit, short rollouts, a short dynamics-reward game (MOREC)
        *(["algo.max_dynamics_epochs=2", "algo.rollout_length=5", "algo.rollout_batch=50"]
          if "max_dynamics_epochs" in fields else []),  # fmt: skip
        *(["algo.reward_iterations=50", "algo.reward_snapshot_every=10"]
          if "reward_iterations" in fields else []),  # fmt: skip
        "total_steps=60",
        "algo.batch_size=16",
        # DPPO's residual layout (diffusion / flow BC) needs an odd number of widths
        "algo.hidden=[32,32,32]" if "denoiser" in fields else "algo.hidden=[32,32]",
        "env.max_episode_steps=40",
        "eval_every=30",
        "checkpoint_every=30",
        "eval_episodes=1",
        "log_every=10",
    )
    result = train(cfg, tmp_path)
    assert result["eval/return"] == result["eval/return"]
    rows = read_csv(tmp_path / "train.csv")
    assert [r["step"] for r in rows] == [10, 20, 30, 40, 50, 60]  # gradient steps
    assert len(read_csv(tmp_path / "eval.csv")) == 2


@pytest.mark.parametrize("env", BOX_ENVS)
@pytest.mark.parametrize("algo", WITH_DATA)
def test_every_offline_to_online_algo_env_pair_runs(algo, env, tmp_path, tiny_datasets):
    """Online algorithms that use a dataset run their phases on every Box env."""
    phases, (warmup_start, warmup_end) = {
        "wsrl": (["algo.offline_steps=20", "algo.warmup_steps=20", "total_steps=60"], (20, 40)),
        "rlpd": (["algo.learning_starts=20", "total_steps=50", "algo.utd_ratio=4"], (0, 20)),
    }[algo]
    cfg = make_config(
        f"algo={algo}",
        f"env={env}",
        *FAST,
        f"dataset={tiny_datasets[env]}",
        *phases,
        "algo.batch_size=16",
        "algo.hidden=[32,32]",
        "algo.compile=false",
        "env.max_episode_steps=40",
        "eval_every=1000",
        "eval_episodes=1",
        "log_every=10",
    )
    result = train(cfg, tmp_path)
    assert result["eval/return"] == result["eval/return"]
    rows = read_csv(tmp_path / "train.csv")
    metric_rows = [r for r in rows if "train/episode_return" not in r]
    # no training metrics during the warm-up (no updates there)
    assert all(not warmup_start < r["step"] <= warmup_end for r in metric_rows)
    online = [r for r in metric_rows if r["step"] > warmup_end]
    assert online and all("train/critic_loss" in r for r in online)


@pytest.fixture(scope="session")
def tiny_bc_runs(tmp_path_factory, tiny_datasets):
    """A 20-step diffusion_bc (5 denoising steps) and flow_bc run per Box env config."""
    root = tmp_path_factory.mktemp("bc")
    runs = {}
    for env in BOX_ENVS:
        for algo, head in (("diffusion_bc", "ddpm"), ("flow_bc", "flow")):
            runs[env, head] = root / f"{env}_{head}"
            train(make_config(f"algo={algo}", f"env={env}", *FAST, f"dataset={tiny_datasets[env]}",
                              "total_steps=20", "algo.hidden=[32,32,32]", "algo.denoising_steps=3",
                              "eval_every=20", "eval_episodes=1"), runs[env, head])  # fmt: skip
    return runs


@pytest.mark.parametrize("env", BOX_ENVS)
@pytest.mark.parametrize("algo", FINETUNERS)
def test_every_finetuner_env_pair_runs(algo, env, tmp_path, tiny_bc_runs):
    head = "flow" if algo == "reinflow" else "ddpm"
    cfg = make_config(
        f"algo={algo}",
        f"env={env}",
        *FAST,
        f"algo.pretrained={tiny_bc_runs[env, head]}",
        "algo.hidden=[32,32,32]",
        "algo.denoising_steps=3",
        *(
            ["algo.finetune_steps=2", "algo.minibatch_size=32"]
            if algo == "dppo"
            else ["algo.num_minibatches=2"]
        ),  # fmt: skip
        "algo.rollout_steps=16",
        "env.num_envs=2",
        "total_steps=64",
        "env.max_episode_steps=40",
        "eval_every=64",
        "eval_episodes=1",
        "log_every=16",
    )
    result = train(cfg, tmp_path)
    assert result["eval/return"] == result["eval/return"]
    rows = read_csv(tmp_path / "train.csv")
    assert sum("train/value_loss" in r for r in rows) == 2  # two iterations of 32 steps


def test_finetuner_without_pretrained_policy_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="fine-tunes a pre-trained policy: pass algo.pretrained="):
        train(make_config("algo=dppo", "env=hopper", *FAST), tmp_path)


def test_offline_algo_without_dataset_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="trains on offline data: pass dataset="):
        train(make_config("algo=iql", "env=hopper", *FAST), tmp_path)
    with pytest.raises(ValueError, match="trains on offline data: pass dataset="):
        train(make_config("algo=rlpd", "env=hopper", *FAST), tmp_path / "rlpd")


def test_offline_dataset_env_mismatch_is_a_clear_error(tmp_path, tiny_datasets):
    cfg = make_config("algo=td3_bc", "env=hopper", *FAST, f"dataset={tiny_datasets['ant']}")
    with pytest.raises(ValueError, match="does not match the environment"):
        train(cfg, tmp_path)


@pytest.mark.parametrize(
    "experiment", sorted(p.stem for p in (REPO / "configs" / "experiment").glob("*.yaml"))
)
def test_experiment_configs_compose_into_valid_algo_configs(experiment):
    cfg = make_config(f"+experiment={experiment}")
    spec = catalog.get(cfg.algo.name)
    from omegaconf import OmegaConf

    config = spec.config_from_dict(OmegaConf.to_container(cfg.algo, resolve=True))
    # the D4RL recipes on Hopper, the AntMaze recipes on the evaluation maze, DrQ-v2's CPU
    # recipe on the rendered pendulum
    expected = {"antmaze": "AntMazeUMazeEval-v0", "invertedpendulum": "InvertedPendulum-v5",
                "pandalift": "PandaLift-v1"}  # fmt: skip
    env = next((v for k, v in expected.items() if k in experiment), "Hopper-v5")
    assert cfg.env.id == env
    plan = config.plan()
    offline = (
        plan.data.required or plan.schedule.offline_steps or plan.schedule.offline_data != "drop"
    )
    assert cfg.dataset or not offline  # offline recipes name their dataset
    assert experiment.startswith(spec.name)
    assert config is not None
