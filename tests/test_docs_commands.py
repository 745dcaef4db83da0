"""The documentation's commands do what the pages say: every shell command of the code
blocks of README.md and docs/**/*.md, and the exit codes the pages give for wrong ones.

How a command is chosen. ``COMMANDS`` classifies every command line of the pages' shell
blocks (``bash``, ``sh``, ``shell``, ``console``), keyed by its text (continuation lines
joined, the comment dropped); ``test_every_command_is_classified`` fails on a new or
changed line until it is added there, and on an entry whose line left the pages:

* ``run``: runs here in seconds (``test_command_runs_as_documented``, slow). Placeholders
  are filled (``runs/sac/hopper/<time>``: a SAC run this module trains with the README's
  command; ``runs/multirun/<time>``, ``runs/a``, ``runs/b``: saved runs copied from
  ``benchmarks/results/``; ``[option]``: the option given), a training is cut short by the
  overrides appended in ``extra`` (a long ``steps=`` is replaced, said in ``why``), and
  the command must exit with the code the page gives (0 for every documented command) and
  leave what its comment names (``<run>/policy.onnx``).
* ``compose``: a training too long for a test. Its overrides (placeholders filled, a
  sweep's first value of each swept key) compose into a config that passes the checks
  ``rlcore.train`` makes before a run starts (``test_training_command_composes``, fast).
* ``skip``: cannot run here; ``why`` says why (installs packages, the whole suite, Ray or
  SLURM, a renderer, twenty full trainings, a shell loop's own syntax).

``FAILURES`` are the commands the pages say fail, with the exit code and behaviour they
give (docs/cli.md "Exit codes", docs/deploy.md).

The deploy page's onnxruntime snippet runs on the file the export command writes, and the
dataset ids the pages train on are those the documented recording commands write
(``test_dataset_ids_are_the_ones_the_recording_commands_write``).

Runtime: the fast tests take seconds; the slow ones (about 25 short processes) took 85 s
on 2 cores beside one busy process.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import HANG_GUARD_S, REPO, make_config

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
SHELL = {"bash", "sh", "shell", "console"}

# Overrides that cut a documented training to seconds (appended to the documented command).
TINY_ONLINE = (
    "total_steps=300", "algo.learning_starts=100", "algo.batch_size=32", "eval_every=300",
    "eval_episodes=1", "eval_envs=1", "logger.progress_interval_s=0",
)  # fmt: skip
TINY_OFFLINE = (
    "total_steps=30", "algo.batch_size=32", "eval_every=30", "eval_episodes=1", "eval_envs=1",
    "env.max_episode_steps=50", "logger.progress_interval_s=0",
)  # fmt: skip
SAC_RUN = "python -m rlcore.train algo=sac env=Hopper"  # the README's first command


@dataclass(frozen=True)
class Case:
    how: str  # "run" | "compose" | "skip"
    why: str = ""  # skip: why not; run: what was changed
    extra: tuple[str, ...] = ()  # run: arguments appended
    replace: tuple[tuple[str, str], ...] = ()  # run: (documented, used) arguments
    code: int = 0  # the exit code the page gives
    leaves: tuple[str, ...] = ()  # run: paths (placeholders filled) the command writes


def run(why: str = "as written", **kw) -> Case:
    return Case("run", why, **kw)


COMPOSE = Case("compose", "a full training")
INSTALL = Case("skip", "installs packages")
RAY = Case("skip", "Ray actors (tests/test_distributed.py runs them)")


def loop(line: str) -> Case:
    return Case("skip", f"shell loop syntax ({line}); its body lines compose")


COMMANDS: dict[str, Case] = {
    # README.md, docs/index.md
    "python -m venv .venv && . .venv/bin/activate": INSTALL,
    "pip install torch==2.13.0": INSTALL,
    "pip install -e .[dev]": INSTALL,
    "pip install rlcore[ray]": INSTALL,
    # docs/pixels.md
    "pip install rlcore[atari]": INSTALL,
    "python -m rlcore.train algo=dqn env=ALE/Pong-v5": COMPOSE,
    "python -m rlcore.train algo=ppo env=ALE/Breakout-v5": COMPOSE,
    "python -m rlcore.train algo=ppo env=Hopper env.obs=pixels env.frame_stack=3 "
    "algo.encoder=drq algo.normalize_obs=false": COMPOSE,
    "python -m rlcore.train algo=sac env=Hopper env.obs=state+pixels algo.encoder=drq "
    "snapshot.teacher=benchmarks/assets/hopper_sac_expert.pt": run(
        "300 steps, 32 x 32 images, one teacher episode",
        extra=(*TINY_ONLINE, "env.image_size=32", "snapshot.episodes=1"),
    ),
    "python -m rlcore.train algo=drqv2 env=InvertedPendulum env.obs=pixels env.frame_stack=3": (
        COMPOSE
    ),
    "python -m rlcore.train algo=sac env=InvertedPendulum env.obs=state+pixels algo.encoder=drq "
    "algo.shift_pad=4 algo.compile=false": COMPOSE,
    "python -m pytest -q -n 2 --durations=15": Case("skip", "the whole suite (CI runs it)"),
    SAC_RUN: run(
        "1M steps cut to 300 (TINY_ONLINE); the run the placeholders name", extra=TINY_ONLINE
    ),
    "python -m rlcore.train algo=sac env=Hopper algo.batch_size=512 total_steps=200000 seed=3": (
        COMPOSE
    ),
    "python -m rlcore.train resume=runs/sac/hopper/<time>": run("resumes the finished SAC run"),
    "python -m rlcore.train algo=sac env=InvertedPendulum distributed.actors=2": RAY,
    # docs/cli.md
    "python -m rlcore.train algo=td3 env=walker2d": COMPOSE,
    "python -m rlcore.train algo=ppo env=HalfCheetah env.num_envs=8": COMPOSE,
    "python -m rlcore.train algo=sac env=Pusher-v5": COMPOSE,
    "python -m rlcore.train -m algo=sac,td3 env=InvertedPendulum seed=0,1,2 "
    "hydra/launcher=rlcore_joblib": COMPOSE,
    "python -m rlcore.train -m ... hydra/launcher=joblib hydra.launcher.n_jobs=8": Case(
        "skip", "'...' stands for a sweep"
    ),
    "python -m rlcore.train -m ... hydra/launcher=rlcore_slurm hydra.launcher.partition=cpu": (
        Case("skip", "a SLURM cluster")
    ),
    "python -m rlcore.train -m ... hydra/launcher=rlcore_ray hydra.launcher.ray.init.address=auto "
    "~hydra.launcher.ray.init._node_ip_address": Case("skip", "a Ray cluster"),
    "python -m rlcore.train algo=ppo env=CartPole": COMPOSE,
    "python -m rlcore.train algo=dqn env=CartPole-v1": COMPOSE,
    "for s in 0 1 2 3 4 5 6 7 8 9; do": loop("for"),
    "python -m rlcore.train algo=dqn env=CartPole-v1 threads=1 seed=$s "
    "run_dir=runs/cartpole/dqn_$s": COMPOSE,
    "python -m rlcore.train algo=ppo env=CartPole-v1 threads=1 seed=$s stop_at_return=475 "
    "run_dir=runs/cartpole/ppo_$s": COMPOSE,
    "done": loop("done"),
    "python -m rlcore.benchmarks.cartpole runs/cartpole": Case(
        "skip", "reads the twenty CartPole runs of the loop above"
    ),
    # docs/datasets.md
    "python -m rlcore.offline.collect env=Hopper policy=random steps=1000000 "
    "dataset_id=local/hopper/random-v0": run(
        "steps=1000000 -> 500",
        replace=(("steps=1000000", "steps=500"),),
        leaves=("minari/local/hopper/random-v0",),
    ),
    "python -m rlcore.offline.collect env=Hopper policy=runs/sac/hopper/<time> steps=1000000 "
    "dataset_id=local/hopper/expert-v0 [sample=true] [noise=0.1] [seed=0]": run(
        "steps=1000000 -> 300, the bracketed options given",
        replace=(("steps=1000000", "steps=300"),),
        leaves=("minari/local/hopper/expert-v0",),
    ),
    "python -m rlcore.offline.collect policy=replay:runs/sac/hopper/<time> "
    "dataset_id=local/hopper/replay-v0": run(leaves=("minari/local/hopper/replay-v0",)),
    "python -m rlcore.offline.collect recipe env=Hopper": Case(
        "skip", "a 1M-step SAC training (tests/test_offline_datasets.py runs a small recipe)"
    ),
    # docs/deploy.md
    "python -m rlcore.evaluate runs/sac/hopper/<time> episodes=10": run(),
    "python -m rlcore.evaluate runs/sac/hopper/<time> episodes=3 video=true": Case(
        "skip", "renders video (EGL / OSMesa; tests/test_evaluate_cli.py records a short one)"
    ),
    "python -m rlcore.train algo=sac env=Hopper eval_video_every=5": COMPOSE,
    "python -m rlcore.export runs/sac/hopper/<time> --format onnx": run(
        leaves=("runs/sac/hopper/<time>/policy.onnx",)  # "# <run>/policy.onnx"
    ),
    "python -m rlcore.export runs/sac/hopper/<time> --format torchscript": run(
        leaves=("runs/sac/hopper/<time>/policy.ts",)  # "# <run>/policy.ts"
    ),
    "python -m rlcore.export benchmarks/assets/hopper_flow_bc.pt --format onnx --out flow.onnx": (
        run(leaves=("flow.onnx",))
    ),
    # docs/distributed.md
    "python -m rlcore.train algo=sac env=Hopper distributed.actors=4 distributed.publish_every=10": RAY,
    "python -m rlcore.train algo=ppo env=Hopper distributed.actors=2": RAY,
    "python -m rlcore.train algo=sac env=Hopper distributed.actors=1 distributed.address=auto "
    "distributed.resources={robot: 1}": Case("skip", "a Ray cluster with a 'robot' node"),
    "for n in 0 1 2 4; do": loop("for"),
    "python -m rlcore.train algo=sac env=Hopper total_steps=20000 eval_every=0 "
    "distributed.actors=$n run_dir=runs/dist/sac_actors$n": COMPOSE,
    "python -m rlcore.train algo=ppo env=Hopper total_steps=65536 eval_every=0 "
    "distributed.actors=$n run_dir=runs/dist/ppo_actors$n": COMPOSE,
    "python -m rlcore.train -m algo=sac env=Hopper total_steps=100000 eval_every=5000 seed=0,1 "
    "distributed.actors=0,2": COMPOSE,
    "python -m rlcore.report runs/multirun/<time>": run(
        "on saved runs (benchmarks/results/distributed_learning_runs)"
    ),
    # docs/finetune.md
    "python -m rlcore.train algo=diffusion_bc env=Hopper dataset=local/hopper/medium-v0 "
    "run_dir=runs/bc_ddpm": run(
        "on a 500-step recording under the recipe's id; 30 gradient steps (TINY_OFFLINE)",
        extra=TINY_OFFLINE,
        leaves=("runs/bc_ddpm/checkpoints/latest.pt",),
    ),
    "python -m rlcore.train algo=flow_bc env=Hopper dataset=local/hopper/medium-v0 "
    "run_dir=runs/bc_flow": COMPOSE,
    "python -m rlcore.train algo=dppo env=Hopper algo.pretrained=runs/bc_ddpm env.num_envs=40": (
        COMPOSE
    ),
    "python -m rlcore.train algo=reinflow env=Hopper algo.pretrained=runs/bc_flow "
    "env.num_envs=40": COMPOSE,
    "python -m rlcore.train algo=resip env=Hopper algo.pretrained=runs/bc_ddpm env.num_envs=8": (
        COMPOSE
    ),
    # docs/o2o.md
    "python -m rlcore.train algo=wsrl env=Hopper dataset=local/hopper/medium-replay-v0": COMPOSE,
    "python -m rlcore.train algo=rlpd env=Hopper dataset=local/hopper/medium-replay-v0": COMPOSE,
    "python -m rlcore.train algo=cal_ql env=Hopper dataset=... algo.online_steps=100000": COMPOSE,
    "python -m rlcore.train algo=iql env=Hopper dataset=... algo.online_steps=100000": COMPOSE,
    "python -m rlcore.train algo=famo2o env=Hopper dataset=...": COMPOSE,
    "python -m rlcore.train algo=iql init_from=runs/iql/hopper/<run> algo.online_steps=100000": (
        COMPOSE
    ),
    # docs/offline.md
    "python -m rlcore.train algo=iql env=Hopper dataset=local/hopper/medium-v0": run(
        "on a 500-step recording under the recipe's id; 30 gradient steps (TINY_OFFLINE)",
        extra=TINY_OFFLINE,
    ),
    "python -m rlcore.train algo=td3_bc env=Hopper dataset=path/to/hopper-medium-v2.hdf5": COMPOSE,
    "python -m rlcore.train +experiment=iql_hopper_medium": COMPOSE,
    # docs/reports.md
    "python -m rlcore.train -m algo=sac,td3 env=InvertedPendulum seed=0,1,2 total_steps=15000 "
    "eval_every=1000": COMPOSE,
    "python -m rlcore.report runs/a runs/b --metric eval/return --last-k 3 --out report/": run(
        "on saved runs (benchmarks/results/walltime_runs/Hopper: SAC and TD3, seed 0)",
        leaves=("report/report.md",),
    ),
    "python -m rlcore.report runs/a runs/b --x eval/train_seconds": run(
        "on saved runs (benchmarks/results/walltime_runs/Hopper: SAC and TD3, seed 0)"
    ),
    "python -m rlcore.report runs/sweep --incomplete include": run(
        "on saved runs (benchmarks/results/distributed_learning_runs)"
    ),
    # docs/robots.md
    "python -m rlcore.train algo=diffusion_bc env=PandaLift dataset=local/pandalift/mixed-v0 "
    "run_dir=runs/lift_bc": COMPOSE,
    "python -m rlcore.train algo=dppo env=PandaLift algo.pretrained=runs/lift_bc "
    "run_dir=runs/lift_dppo": COMPOSE,
    "python -m rlcore.evaluate runs/lift_dppo episodes=10 video=true": Case(
        "skip", "renders video (EGL / OSMesa; tests/test_evaluate_cli.py records a short one)"
    ),
    # PPO on a goal task's dict observations: one short rollout
    "python -m rlcore.train algo=ppo env=PandaReach total_steps=200000": run(
        "cut to one 256-step rollout", extra=("total_steps=256", "algo.rollout_steps=256",
        "env.num_envs=1", "eval_every=256", "eval_episodes=1", "eval_envs=1",
        "logger.progress_interval_s=0"),
    ),  # fmt: skip
    "python -m rlcore.train algo=sac env=PandaReach her=future stop_at_success=0.9": run(
        "cut to 300 steps (TINY_ONLINE)", extra=TINY_ONLINE
    ),
    "python -m rlcore.offline.collect env=PandaLift policy=expert steps=20000 "
    "dataset_id=local/pandalift/proficient-v0": run(
        "steps=20000 -> 200", replace=(("steps=20000", "steps=200"),),
        leaves=("minari/local/pandalift/proficient-v0",),
    ),
    "python -m rlcore.offline.collect env=PandaLift policy=expert steps=20000 "
    "dataset_id=local/pandalift/mixed-v0 noise=0.3 slowness=0.7": run(
        "steps=20000 -> 200", replace=(("steps=20000", "steps=200"),),
        leaves=("minari/local/pandalift/mixed-v0",),
    ),
    # RIQL's corruption of a dataset (docs/offline.md)
    "python -m rlcore.train algo=iql env=Hopper dataset=local/hopper/medium-replay-v0 "
    "corruption.kind=obs corruption.rate=0.3 corruption.scale=1.0": COMPOSE,
    "python -m rlcore.train algo=iql env=Hopper dataset=local/hopper/medium-replay-v0 "
    "corruption.kind=action corruption.mode=adversarial "
    "corruption.critic=runs/iql/hopper/<time>": COMPOSE,
    # NeoRL-2's DMSD (docs/offline.md)
    "python -m rlcore.offline.collect env=DMSD policy=random steps=20000 "
    "dataset_id=local/dmsd/random-v0": run(
        "steps=20000 -> 200", replace=(("steps=20000", "steps=200"),),
        leaves=("minari/local/dmsd/random-v0",),
    ),
    "python -m rlcore.train algo=iql env=DMSD dataset=local/dmsd/random-v0": COMPOSE,
    "python -m rlcore.offline.neorl2_recipe env=DMSD dataset_id=local/dmsd/high-v0": run(
        "transitions=200", extra=("transitions=200",),
        leaves=("minari/local/dmsd/high-v0",),
    ),
    "python -m rlcore.offline.neorl2_recipe env=DMSD dataset_id=local/dmsd/high-val-v0 "
    "split=val": run(
        "transitions=200", extra=("transitions=200",),
        leaves=("minari/local/dmsd/high-val-v0",),
    ),
    "python -m rlcore.train algo=sac env=RandomFrictionHopper total_steps=150000 "
    "eval_every=5000 checkpoint_every=5000 run_dir=runs/sac_rfh": COMPOSE,
    "python -m rlcore.offline.neorl2_recipe env=RandomFrictionHopper run=runs/sac_rfh "
    "dataset_id=local/randomfrictionhopper/high-v0": Case(
        "skip", "reads the 150k-step SAC run above (tests/test_neorl2.py runs the recipe on "
        "a short one)"
    ),
    "python -m rlcore.offline.collect env=Hopper policy=benchmarks/assets/hopper_sac_medium.pt "
    "steps=100000 sample=true dataset_id=local/hopper/medium-mb-v0": run(
        "steps=100000 -> 200", replace=(("steps=100000", "steps=200"),),
        leaves=("minari/local/hopper/medium-mb-v0",),
    ),
    "python -m rlcore.offline.collect env=Hopper policy=benchmarks/assets/hopper_sac_expert.pt "
    "steps=100000 sample=true dataset_id=local/hopper/expert-mb-v0": run(
        "steps=100000 -> 200", replace=(("steps=100000", "steps=200"),),
        leaves=("minari/local/hopper/expert-mb-v0",),
    ),
    "python -m rlcore.benchmarks.model_based --steps 10000 --seeds 0 1 2 --jobs 2 "
    "--set morec:algo.rollout_batch=200": Case(
        "skip", "36 trainings (tests/test_benchmarks.py runs the benchmark on a tiny grid)"
    ),
    "python -m rlcore.benchmarks.corruption --steps 10000 --seeds 0 1 2 --jobs 2": Case(
        "skip", "82 trainings (tests/test_benchmarks.py runs the benchmark on a tiny grid)"
    ),
    "python -m rlcore.offline.neorl2_recipe env=RandomFrictionHopper dataset_id=local/randomfrictionhopper/high-v0 "
    "policies=benchmarks/assets/neorl2/randomfrictionhopper/sac_1.pt,benchmarks/assets/neorl2/randomfrictionhopper/sac_2.pt,"
    "benchmarks/assets/neorl2/randomfrictionhopper/sac_3.pt,benchmarks/assets/neorl2/randomfrictionhopper/sac_4.pt": run(
        "transitions=1000", extra=("transitions=1000",),
        leaves=("minari/local/randomfrictionhopper/high-v0",),
    ),
    "python -m rlcore.offline.neorl2_recipe env=SafetyHalfCheetah dataset_id=local/safetyhalfcheetah/high-v0 "
    "policies=benchmarks/assets/neorl2/safetyhalfcheetah/sac_1.pt,benchmarks/assets/neorl2/safetyhalfcheetah/sac_2.pt,"
    "benchmarks/assets/neorl2/safetyhalfcheetah/sac_3.pt,benchmarks/assets/neorl2/safetyhalfcheetah/sac_4.pt": run(
        "transitions=1000", extra=("transitions=1000",),
        leaves=("minari/local/safetyhalfcheetah/high-v0",),
    ),
    "python -m rlcore.offline.neorl2_recipe env=Pipeline dataset_id=local/pipeline/high-v0 "
    "policies=benchmarks/assets/neorl2/pipeline/sac_1.pt,benchmarks/assets/neorl2/pipeline/sac_2.pt,"
    "benchmarks/assets/neorl2/pipeline/sac_3.pt,benchmarks/assets/neorl2/pipeline/sac_4.pt": run(
        "transitions=1000", extra=("transitions=1000",),
        leaves=("minari/local/pipeline/high-v0",),
    ),
    "python -m rlcore.offline.neorl2_recipe env=RocketRecovery dataset_id=local/rocketrecovery/high-v0 "
    "policies=benchmarks/assets/neorl2/rocketrecovery/sac_1.pt,benchmarks/assets/neorl2/rocketrecovery/sac_2.pt,"
    "benchmarks/assets/neorl2/rocketrecovery/sac_3.pt,benchmarks/assets/neorl2/rocketrecovery/sac_4.pt": run(
        "transitions=1000", extra=("transitions=1000",),
        leaves=("minari/local/rocketrecovery/high-v0",),
    ),
    "python -m rlcore.offline.neorl2_recipe env=Simglucose dataset_id=local/simglucose/high-v0 "
    "policies=benchmarks/assets/neorl2/simglucose/sac_1.pt,benchmarks/assets/neorl2/simglucose/sac_2.pt,"
    "benchmarks/assets/neorl2/simglucose/sac_3.pt,benchmarks/assets/neorl2/simglucose/sac_4.pt": run(
        "transitions=1000", extra=("transitions=1000",),
        leaves=("minari/local/simglucose/high-v0",),
    ),
    "python -m rlcore.train algo=sac env=Simglucose total_steps=100000 eval_every=5000 "
    "checkpoint_every=5000 keep_agent_snapshots=true algo.normalize_obs=true "
    "algo.target_entropy=-4 run_dir=runs/sac_simglucose": COMPOSE,
    # MOPO (docs/offline.md)
    "python -m rlcore.train algo=mopo env=Hopper dataset=local/hopper/medium-v0 "
    "algo.rollout_length=5 algo.penalty_coef=5.0": COMPOSE,
    "python -m rlcore.train algo=morec env=Hopper dataset=local/hopper/medium-v0 "
    "algo.penalty_coef=15 algo.select=softmax": COMPOSE,
    # camera demonstrations and the pixel recipes on them (docs/pixels.md)
    "python -m rlcore.offline.collect env=PandaLift policy=expert steps=2000 obs=state+pixels "
    "image_size=32 frame_stack=2 dataset_id=local/pandalift/camera-demos-v0": run(
        "steps=2000 -> 200", replace=(("steps=2000", "steps=200"),),
        leaves=("minari/local/pandalift/camera-demos-v0",),
    ),
    "python -m rlcore.train algo=rlpd env=PandaLift env.obs=state+pixels env.image_size=32 "
    "env.frame_stack=2 algo.encoder=drq dataset=local/pandalift/camera-demos-v0": COMPOSE,
    "python -m rlcore.train algo=diffusion_bc env=PandaLift env.obs=state+pixels "
    "env.image_size=32 env.frame_stack=2 algo.encoder=drq "
    "dataset=local/pandalift/camera-demos-v0": COMPOSE,
    "python -m rlcore.train algo=dppo env=PandaLift env.obs=state+pixels env.image_size=32 "
    "env.frame_stack=2 algo.pretrained=runs/diffusion_bc/pandalift/<time>": COMPOSE,
    "python -m rlcore.offline.collect env=PandaPegInsertion policy=expert steps=20000 "
    "flatten_obs=true dataset_id=local/pandapeginsertion/proficient-v0": run(
        "steps=20000 -> 200", replace=(("steps=20000", "steps=200"),),
        leaves=("minari/local/pandapeginsertion/proficient-v0",),
    ),
    "python -m rlcore.offline.collect env=PandaPegInsertion policy=expert steps=20000 "
    "flatten_obs=true dataset_id=local/pandapeginsertion/mixed-v0 noise=0.02 slowness=0.7": run(
        "steps=20000 -> 200", replace=(("steps=20000", "steps=200"),),
        leaves=("minari/local/pandapeginsertion/mixed-v0",),
    ),
    "python -m rlcore.train algo=sac env=PandaPush env.backend=mjx her=future device=cuda "
    "env.num_envs=1024": Case("skip", "needs a GPU (tests/test_robot_mjx.py runs MJX on the CPU)"),
    "python -m rlcore.offline.collect env=PandaPush policy=expert steps=20000 "
    "dataset_id=local/pandapush/proficient-v0": run(
        "steps=20000 -> 200", replace=(("steps=20000", "steps=200"),),
        leaves=("minari/local/pandapush/proficient-v0",),
    ),
    "python -m rlcore.train algo=rlpd env=PandaPush dataset=local/pandapush/proficient-v0 "
    "her=future": COMPOSE,
    "python -m rlcore.train algo=sac env=PandaReach env.kwargs.reward_type=dense "
    "total_steps=20000": run("20,000 steps cut to 300 (TINY_ONLINE)", extra=TINY_ONLINE),
    # docs/safe.md
    "python -m rlcore.train algo=ppo_lag env=SafetyHopperVelocity algo.cost_limit=25": COMPOSE,
    "python -m rlcore.train algo=ppo_lag env=SafetyHopperVelocity algo.multiplier=pid": COMPOSE,
    "python -m rlcore.train algo=sac_lag env=SafetyWalker2dVelocity": COMPOSE,
    "python -m rlcore.train algo=cpo env=SafetyHopperVelocity": COMPOSE,
    "python -m rlcore.train algo=fisor env=SafetyHopperVelocity "
    "dataset=local/safetyhoppervelocity/mixed-v0": COMPOSE,
    # docs/snapshot.md
    "python -m rlcore.train algo=sac env=Hopper "
    "snapshot.teacher=benchmarks/assets/hopper_sac_expert.pt": COMPOSE,
    "python -m rlcore.train algo=td3 env=Hopper snapshot.teacher=runs/sac/hopper/<run> "
    "snapshot.switch_after=50000": COMPOSE,
    "python -m rlcore.train algo=sac env=Hopper snapshot.teacher=snapshots.npz "
    "snapshot.selection=uniform": COMPOSE,
}

@dataclass(frozen=True)
class Failure:
    command: str
    code: int
    page: str  # where the pages say so
    stderr: str = "error: "  # how the message starts
    one_line: bool = True
    creates_nothing: bool = True  # "nothing written": no runs/ folder appears


FAILURES = [
    Failure(
        "python -m rlcore.train resume=runs/sac/hopper/none", 3, "cli.md: resume=<missing path>"
    ),
    Failure("python -m rlcore.train algo=sac env=Hopper algo.batch_size=0", 2, "cli.md: Errors"),
    Failure("python -m rlcore.train algo=sacc env=Hopper", 2, "cli.md: unknown algorithm"),
    pytest.param(
        Failure(
            "python -m rlcore.train algo=iql env=Hopper dataset=local/hopper/medium-v9",
            3,
            "cli.md: Exit codes, 3: dataset= does not exist; nothing written",
        ),
        id="missing-dataset",
    ),
    pytest.param(
        Failure(
            "python -m rlcore.train algo=sac env=Hopper algo.nope=1",
            2,
            "cli.md: Errors, unknown keys: one error: line, exit code 2",
        ),
        id="hydra-unknown-key",
    ),
    Failure("python -m rlcore.evaluate runs/sac/hopper/none", 1, "deploy.md: a missing path"),
    Failure(
        "python -m rlcore.evaluate runs/sac/hopper/<time> episodes=abc", 2, "deploy.md: a bad value"
    ),
    Failure(
        "python -m rlcore.evaluate runs/sac/hopper/<time> nope=1", 2, "deploy.md: an unknown option"
    ),
    pytest.param(
        Failure(
            "python -m rlcore", 0, "python -m rlcore lists the commands", stderr="", one_line=False
        ),
        id="rlcore-lists-commands",
    ),
    pytest.param(
        Failure(
            "python -m rlcore.evaluate --help",
            0,
            "rlcore.evaluate prints its help",
            stderr="",
            one_line=False,
        ),
        id="evaluate-help",
    ),
]


# -- the pages' commands ------------------------------------------------------------------
def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info string, body) of every fenced code block (indented fences too)."""
    blocks: list[tuple[str, str]] = []
    info: str | None = None
    body: list[str] = []
    indent = 0
    for line in text.splitlines():
        stripped = line.lstrip()
        if info is None:
            if stripped.startswith("```"):
                info, indent, body = stripped[3:].strip(), len(line) - len(stripped), []
        elif stripped.startswith("```") and not stripped.strip("`").strip():
            blocks.append((info, "\n".join(body)))
            info = None
        else:
            body.append(line[indent:])
    return blocks


def page_commands() -> dict[str, list[str]]:
    """Every command line of the pages' shell blocks -> its tokens (first occurrence)."""
    commands: dict[str, list[str]] = {}
    for page in PAGES:
        for info, body in fenced_blocks(page.read_text()):
            if (info.split() or [""])[0] not in SHELL:
                continue
            for line in body.replace("\\\n", " ").splitlines():
                tokens = shlex.split(line, comments=True)
                if tokens:
                    commands.setdefault(" ".join(tokens), tokens)
    return commands


COMMAND_TOKENS = page_commands()


def cases(how: str) -> list:
    return [pytest.param(key, id=key[:90]) for key, case in COMMANDS.items() if case.how == how]


def test_every_command_is_classified():
    """A command the pages add or change must be classified in COMMANDS (reviewed); an
    entry whose line left the pages must go."""
    unclassified = sorted(set(COMMAND_TOKENS) - set(COMMANDS))
    stale = sorted(set(COMMANDS) - set(COMMAND_TOKENS))
    assert not unclassified, f"classify in tests/test_docs_commands.py: {unclassified}"
    assert not stale, f"no longer in the pages: {stale}"
    assert all(case.how in ("run", "compose", "skip") for case in COMMANDS.values())
    assert len([c for c in COMMANDS.values() if c.how == "run"]) >= 12


# -- compose: the long trainings ------------------------------------------------------------
def sweep_first(value: str) -> str:
    """A sweep's first value (``a,b`` -> ``a``); brackets and braces are kept whole."""
    return value if value[:1] in "[{" else value.split(",")[0]


@pytest.mark.parametrize("key", cases("compose"))
def test_training_command_composes(key):
    """The command's overrides compose and pass the checks ``rlcore.train`` makes before a
    run starts (top-level values, the algorithm's typed config and its plan)."""
    from rlcore import catalog
    from rlcore.generative import HEAD_FIELDS
    from rlcore.settings import run_settings

    tokens = COMMAND_TOKENS[key]
    assert tokens[:3] == ["python", "-m", "rlcore.train"], key
    args = []
    for token in tokens[3:]:
        if token in ("-m", "--multirun") or token.startswith(("hydra/launcher=", "hydra.launcher")):
            continue  # the sweep and its launcher: checked below
        name, _, value = token.partition("=")
        value = sweep_first(value).replace("<time>", "TIME").replace("<run>", "RUN")
        args.append(f"{name}={value}".replace("$s", "0").replace("$n", "0"))
    for token in tokens:
        if token.startswith("hydra/launcher="):
            preset = token.split("=", 1)[1]
            assert (REPO / "configs" / "hydra" / "launcher" / f"{preset}.yaml").is_file(), preset
    cfg_dict = OmegaConf.to_container(make_config(*args), resolve=True)
    run_settings(cfg_dict)
    spec = catalog.get(cfg_dict["algo"]["name"])
    algo = {**cfg_dict["algo"], "total_steps": cfg_dict["total_steps"]}
    if spec.pretrained_head is not None:  # unset head settings come from the checkpoint
        algo = {k: v for k, v in algo.items() if not (k in HEAD_FIELDS and v is None)}
    spec.config_from_dict(algo).plan()


# -- dataset ids ----------------------------------------------------------------------------
def test_dataset_ids_are_the_ones_the_recording_commands_write():
    """Every Minari id the pages, configs/experiment/ and the benchmarks' defaults train on
    is one a documented recording writes: the recipe's own ids (offline/recipe.py
    ``dataset_ids``, its default namespace and version) or a ``dataset_id=`` the pages
    record with ``rlcore.offline.collect`` / ``safe_recipe``."""
    from rlcore.offline.recipe import dataset_ids

    texts = [page.read_text() for page in PAGES]
    recorded = set(re.findall(r"dataset_id=([\w./-]+)", "\n".join(texts)))
    recorded |= set(dataset_ids("Hopper").values())
    assert "local/hopper/medium-replay-v0" in recorded
    used = {
        (f"{page.name}", found)
        for page, text in zip(PAGES, texts)
        for found in re.findall(r"dataset=(local/[\w./-]+)", text)
    }
    for path in sorted((REPO / "configs" / "experiment").glob("*.yaml")):
        dataset = OmegaConf.load(path).get("dataset")
        if dataset:
            used.add((path.name, dataset))
    for path in sorted((REPO / "benchmarks").glob("*.py")):
        for found in re.findall(r'"--dataset", default="([^"]+)"', path.read_text()):
            used.add((path.name, found))
    assert len(used) > 10
    wrong = sorted((where, found) for where, found in used if found not in recorded)
    assert not wrong, f"ids no documented command records: {wrong}"


# -- run: short processes, as documented -----------------------------------------------------
def _env(root: Path) -> dict[str, str]:
    return dict(
        os.environ, PYTHONPATH=str(REPO), MINARI_DATASETS_PATH=str(root / "minari"),
        HF_HUB_OFFLINE="1",
    )  # fmt: skip


def _run(
    tokens: list[str], root: Path, stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """``tokens`` run in ``cwd`` (default ``root``) with ``root``'s Minari datasets."""
    if tokens[0] == "python":
        tokens = [sys.executable, *tokens[1:]]
    return subprocess.run(
        tokens, cwd=cwd or root, env=_env(root), input=stdin, capture_output=True, text=True,
        timeout=HANG_GUARD_S,
    )  # fmt: skip


@dataclass
class Workspace:
    root: Path
    sac_run: str  # runs/sac/hopper/<time>, relative to root
    sac_result: subprocess.CompletedProcess

    def fill(self, text: str) -> str:
        text = text.replace("runs/sac/hopper/<time>", self.sac_run)
        text = text.replace("runs/sweep", "runs/multirun/saved")
        return text.replace("runs/multirun/<time>", "runs/multirun/saved")

    def tokens(self, key: str) -> list[str]:
        case = COMMANDS[key]
        replace = dict(case.replace)
        out = [self.fill(replace.get(t, t)) for t in COMMAND_TOKENS[key]]
        return [t[1:-1] if t.startswith("[") and t.endswith("]") else t for t in out]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """A folder to run the pages' commands in: the committed assets, saved runs, the
    recipe's Hopper datasets (500 random steps each, under the ids the recipe writes)
    and the SAC run of the README's first command (cut to 300 steps)."""
    from rlcore.offline.recipe import dataset_ids
    from rlcore.offline.recording import collect

    root = tmp_path_factory.mktemp("docs_commands")
    shutil.copytree(REPO / "benchmarks" / "assets", root / "benchmarks" / "assets")
    saved = REPO / "benchmarks" / "results"
    shutil.copytree(saved / "distributed_learning_runs", root / "runs" / "multirun" / "saved")
    shutil.copytree(saved / "walltime_runs" / "Hopper" / "sac_seed0", root / "runs" / "a")
    shutil.copytree(saved / "walltime_runs" / "Hopper" / "td3_seed0", root / "runs" / "b")
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root / "minari")
    try:
        ids = dataset_ids("Hopper")
        for kind in ("medium", "medium-replay"):
            collect("Hopper", "random", ids[kind], steps=500, seed=1)
    finally:
        if old is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = old
    result = _run([*COMMAND_TOKENS[SAC_RUN], *COMMANDS[SAC_RUN].extra], root)
    (sac_run,) = (root / "runs" / "sac" / "hopper").iterdir()
    return Workspace(root, str(sac_run.relative_to(root)), result)


@pytest.mark.slow
@pytest.mark.parametrize("key", cases("run"))
def test_command_runs_as_documented(key, workspace):
    case = COMMANDS[key]
    if key == SAC_RUN:  # the workspace ran it
        result = workspace.sac_result
    else:
        result = _run([*workspace.tokens(key), *case.extra], workspace.root)
    assert result.returncode == case.code, result.stdout[-2000:] + result.stderr[-3000:]
    for path in case.leaves:
        assert (workspace.root / workspace.fill(path)).exists(), path


@pytest.mark.slow
def test_deploy_pages_onnxruntime_snippet_runs_on_the_exported_file(workspace):
    """docs/deploy.md's numpy + onnxruntime snippet, on the file ``rlcore.export <run>
    --format onnx`` writes (``runs/sac/hopper/<time>`` filled with the SAC run)."""
    pytest.importorskip("onnxruntime")
    text = (REPO / "docs" / "deploy.md").read_text()
    (snippet,) = [body for info, body in fenced_blocks(text) if info == "python"]
    export = "python -m rlcore.export runs/sac/hopper/<time> --format onnx"
    assert _run(workspace.tokens(export), workspace.root).returncode == 0
    result = _run([sys.executable, "-"], workspace.root, stdin=workspace.fill(snippet))
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("failure", FAILURES, ids=lambda f: f.command[10:60])
def test_documented_failure_exits_as_documented(failure, workspace, tmp_path):
    """A wrong command: the documented exit code, one ``error:`` line, no traceback, and
    (where the pages say "nothing written") no run folder."""
    cwd = tmp_path / "cwd"
    shutil.copytree(workspace.root / "runs" / "sac", cwd / "runs" / "sac")
    before = sorted(p.relative_to(cwd) for p in cwd.rglob("*"))
    result = _run(shlex.split(workspace.fill(failure.command)), workspace.root, cwd=cwd)
    text = result.stdout + result.stderr
    assert result.returncode == failure.code, f"{failure.page}\n{text[-3000:]}"
    assert "Traceback" not in text, text[-3000:]
    assert result.stderr.startswith(failure.stderr), result.stderr[-3000:]
    if failure.one_line:
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    if failure.code == 0:
        assert result.stdout.strip(), "prints nothing"
    if failure.creates_nothing:
        assert sorted(p.relative_to(cwd) for p in cwd.rglob("*")) == before
