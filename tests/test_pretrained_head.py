"""Fine-tuners take their head settings from the pre-trained checkpoint they start from
(``rlcore.generative.resolve_head``): the committed assets run with the defaults, the
run records the checkpoint's head (resume, evaluation and export rebuild it from
there), and an explicit override that disagrees is refused naming the override."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from rlcore import catalog
from rlcore.checkpoint import load_checkpoint
from rlcore.cli import resumed_config
from rlcore.config import ConfigError
from rlcore.generative import declared_head_fields, head_settings, load_bc, resolve_head
from rlcore.policies import load_agent
from rlcore.train import train
from tests.conftest import FAST, REPO, make_config
from tests.test_cli import run_cli

ASSETS = {"ddpm": REPO / "benchmarks/assets/hopper_diffusion_bc.pt",
          "flow": REPO / "benchmarks/assets/hopper_flow_bc.pt"}  # fmt: skip
FINETUNERS = [name for name, spec in catalog.ALGORITHMS.items() if spec.pretrained_head]
# a few chunks of a short Hopper episode: seconds, with the assets' full-size heads
TINY = ["env=Hopper", *FAST, "env.num_envs=1", "algo.rollout_steps=4", "total_steps=8",
        "eval_every=8", "eval_episodes=1", "eval_envs=1", "env.max_episode_steps=12",
        "log_every=4", "checkpoint_every=8"]  # fmt: skip
SMALL_UPDATE = {"dppo": [], "reinflow": [], "resip": ["algo.num_minibatches=2"]}


def asset_of(algo: str) -> str:
    return str(ASSETS[catalog.get(algo).pretrained_head])


def recorded_head(algo: str, algo_node: dict) -> dict:
    """The head settings a config node records, as the checkpoint's ``HeadSettings``."""
    spec = catalog.get(algo)
    config = spec.config_from_dict(algo_node)
    return dataclasses.asdict(head_settings(spec.pretrained_head, config))


def test_the_assets_heads_differ_from_the_dataclass_defaults():
    """The feature is visible: each asset's head is not the fine-tuner's paper default
    (3 x 256, not 3 x 512), so running them with the defaults needs the checkpoint's."""
    for algo in FINETUNERS:
        bc = load_bc(asset_of(algo), catalog.get(algo).pretrained_head).head_settings()
        assert bc.hidden == (256, 256, 256)
        assert catalog.get(algo).config_class().hidden != bc.hidden


def test_cli_defaults_leave_the_head_unset():
    """``algo=<fine-tuner>`` composes null head settings ("the checkpoint's"), so any value
    there was set explicitly; other options keep their dataclass defaults."""
    for algo in FINETUNERS:
        node = OmegaConf.to_container(make_config(f"algo={algo}").algo)
        names = declared_head_fields(catalog.get(algo).config_class)
        assert {"horizon", "obs_history", "denoising_steps", "hidden"} <= set(names)
        assert all(node[name] is None for name in names), algo
        assert node["critic_hidden"] is not None


@pytest.mark.parametrize("algo", FINETUNERS)
def test_asset_runs_with_defaults_and_records_its_head(algo, tmp_path):
    """``algo=<fine-tuner> algo.pretrained=<asset>`` runs with no head override; the
    run's config.yaml, its checkpoint and the agent ``load_agent`` rebuilds carry the
    asset's head."""
    kind = catalog.get(algo).pretrained_head
    expected = dataclasses.asdict(load_bc(asset_of(algo), kind).head_settings())
    run = tmp_path / "run"
    result = train(make_config(f"algo={algo}", f"algo.pretrained={asset_of(algo)}", *TINY,
                               *SMALL_UPDATE[algo]), run)  # fmt: skip
    assert result["eval/return"] == result["eval/return"]
    recorded = OmegaConf.to_container(OmegaConf.load(run / "config.yaml"))["algo"]
    names = declared_head_fields(catalog.get(algo).config_class)
    assert {name: recorded[name] for name in names} == {
        name: list(value) if isinstance(value, tuple) else value
        for name, value in expected.items()
        if name in names
    }
    assert recorded_head(algo, load_checkpoint(run)["config"]["algo"]) == expected
    agent = load_agent(run)
    assert dataclasses.asdict(head_settings(kind, agent.config)) == expected


def test_resume_of_an_asset_run_rebuilds_the_recorded_head(tmp_path):
    """``resume=`` restores the run's recorded (resolved) config and continues it."""
    run = tmp_path / "run"
    train(make_config("algo=dppo", f"algo.pretrained={asset_of('dppo')}", *TINY), run)
    args = [f"resume={run}", "total_steps=16"]
    cfg = resumed_config(make_config(*args), args)
    assert list(cfg.algo.hidden) == [256, 256, 256]
    train(cfg, run)
    assert load_checkpoint(run)["loop"]["counters"]["step"] == 16
    resumed = OmegaConf.load(run / "config_resumed.yaml")
    assert list(resumed.algo.hidden) == [256, 256, 256] and resumed.algo.denoising_steps == 20


@pytest.mark.parametrize(
    ("algo", "override", "message"),
    [
        ("dppo", "algo.hidden=[512,512,512]",
         r"drop algo\.hidden=\[512,512,512\]: the pre-trained head has \(256, 256, 256\)"),
        ("reinflow", "algo.denoising_steps=10",
         r"drop algo\.denoising_steps=10: the pre-trained head has 4"),
        ("resip", "algo.horizon=8", r"drop algo\.horizon=8: the pre-trained head has 4"),
    ],
)  # fmt: skip
def test_a_disagreeing_explicit_override_is_refused_naming_it(algo, override, message, tmp_path):
    run = tmp_path / "run"
    with pytest.raises(ConfigError, match=message):
        train(make_config(f"algo={algo}", f"algo.pretrained={asset_of(algo)}", override, *TINY),
              run)  # fmt: skip
    assert not run.exists()


def test_the_command_line_refuses_in_one_line_and_writes_nothing(tmp_path):
    out = run_cli(["algo=dppo", f"algo.pretrained={asset_of('dppo')}", "algo.hidden=[512,512,512]",
                   "algo.horizon=4", f"run_dir={tmp_path / 'run'}"], tmp_path)  # fmt: skip
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: drop algo.hidden=[512,512,512]: ")
    assert "horizon" not in lines[0]  # the agreeing override is not named
    assert not (tmp_path / "run").exists()


def test_agreeing_overrides_are_kept_and_unset_ones_filled():
    """Explicit values equal to the checkpoint's are accepted (a list or a tuple alike);
    without a checkpoint the unset settings are the dataclass defaults."""
    spec = catalog.get("dppo")
    node = OmegaConf.to_container(make_config("algo=dppo").algo)
    agreeing = {**node, "pretrained": asset_of("dppo"), "hidden": [256, 256, 256],
                "horizon": 4, "clip_x0": 1}  # fmt: skip
    resolved = resolve_head("ddpm", spec.config_class, agreeing)
    assert resolved["hidden"] == [256, 256, 256] and resolved["clip_x0"] == 1
    assert resolved["denoising_steps"] == 20 and resolved["denoiser"] == "dppo"
    assert spec.config_from_dict(resolved).hidden == (256, 256, 256)
    without = resolve_head("ddpm", spec.config_class, node)
    assert spec.config_from_dict(without) == spec.config_class()


def test_init_from_an_agent_only_snapshot_is_refused_naming_the_fix(tmp_path):
    """The assets are for acting and for ``algo.pretrained`` / ``snapshot.teacher``:
    ``init_from=`` (which continues training the whole agent) names what they lack."""
    asset = REPO / "benchmarks/assets/hopper_sac_expert.pt"
    with pytest.raises(
        ConfigError, match=r"is an agent-only snapshot \(it lacks \[.*'actor_optimizer'"
    ):
        train(make_config("algo=sac", "env=Hopper", *FAST, f"init_from={asset}"), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_assets_readme_says_how_each_asset_was_made_and_is_used():
    """Every committed asset has a section with how it was made and how to use it; every
    ``rlcore.train`` command there composes (its keys exist) and its algorithm config is
    valid, a fine-tuner's head read from the asset it names."""
    import re
    import shlex

    readme = (REPO / "benchmarks/assets/README.md").read_text()
    for asset in sorted((REPO / "benchmarks/assets").glob("*.pt")):
        section = readme.split(f"### `{asset.name}`", 1)[-1].split("\n### ", 1)[0]
        assert f"### `{asset.name}`" in readme, asset.name
        assert "**Made by**" in section and "**Use**" in section, asset.name
    commands = re.findall(r"`python -m rlcore\.train ([^`]+)`", readme)
    assert len(commands) >= 7
    for command in commands:
        args = [a.replace("benchmarks/assets/", f"{REPO}/benchmarks/assets/")
                for a in shlex.split(command)]  # fmt: skip
        algo = OmegaConf.to_container(make_config(*args).algo)
        spec = catalog.get(algo["name"])
        if spec.pretrained_head:
            assert algo["pretrained"], command
            algo = resolve_head(spec.pretrained_head, spec.config_class, algo)
        spec.config_from_dict(algo)
