"""Determinism and resume: a run killed at an arbitrary moment and resumed from its last
checkpoint ends with exactly the numbers of an uninterrupted run (CPU)."""

import os
import random
import signal
import subprocess
import sys

import pytest
import torch

from rlcore.checkpoint import load_checkpoint
from rlcore.logging import read_csv
from rlcore.train import train
from tests.conftest import FAST, HANG_GUARD_S, REPO, make_config

CASES = {
    "sac": [
        "algo=sac",
        "env=InvertedPendulum",
        "total_steps=2400",
        "algo.learning_starts=300",
        "algo.batch_size=64",
        "algo.hidden=[64,64]",
        "checkpoint_every=300",
        "eval_every=600",
        "log_every=100",
        "env.num_envs=2",
    ],
    "td3": [
        "algo=td3",
        "env=Hopper",
        "total_steps=1600",
        "algo.learning_starts=300",
        "algo.batch_size=64",
        "algo.hidden=[64,64]",
        "checkpoint_every=300",
        "eval_every=800",
        "log_every=100",
        "env.max_episode_steps=100",
    ],
    "drqv2": [  # rendered images in the frame store, 3-step returns, the std schedule
        "algo=drqv2",
        "env=InvertedPendulum",
        "env.obs=pixels",
        "env.image_size=32",
        "env.frame_stack=3",
        "env.num_envs=2",
        "env.max_episode_steps=40",
        "total_steps=480",
        "algo.learning_starts=80",
        "algo.batch_size=16",
        "algo.hidden=[32,32]",
        "algo.feature_dim=16",
        "checkpoint_every=80",
        "eval_every=240",
        "eval_episodes=2",
        "log_every=40",
    ],
    "sac_pixels": [  # state + rendered image: a dict with an image part, frames stored once
        "algo=sac",
        "env=InvertedPendulum",
        "env.obs=state+pixels",
        "env.image_size=24",
        "env.frame_stack=2",
        "env.num_envs=2",
        "env.max_episode_steps=40",
        "total_steps=400",
        "algo.learning_starts=80",
        "algo.batch_size=16",
        "algo.hidden=[32,32]",
        "algo.encoder=drq",
        "algo.shift_pad=2",
        "algo.compile=false",
        "checkpoint_every=80",
        "eval_every=200",
        "eval_episodes=2",
        "log_every=40",
    ],
    "ppo": [
        "algo=ppo",
        "env=Hopper",
        "total_steps=4096",
        "algo.rollout_steps=128",
        "env.num_envs=2",
        "algo.num_minibatches=4",
        "algo.update_epochs=4",
        "checkpoint_every=256",
        "eval_every=1024",
        "env.max_episode_steps=100",
    ],
    "ppo_dict": [  # dict observations, standardised part by part by the env-side normaliser
        "algo=ppo",
        "env=tests.goal_env:RlcoreGoalPoint-v0",
        "total_steps=1024",
        "algo.rollout_steps=64",
        "env.num_envs=2",
        "algo.hidden=[16,16]",
        "checkpoint_every=128",
        "eval_every=512",
    ],
    "sac_native": [
        "algo=sac",
        "env=Hopper",
        "env.backend=native",
        "env.num_envs=4",
        "total_steps=2400",
        "algo.learning_starts=400",
        "algo.batch_size=64",
        "algo.hidden=[64,64]",
        "checkpoint_every=400",
        "eval_every=800",
        "log_every=100",
        "env.max_episode_steps=100",
    ],
    "iql": [
        "algo=iql",
        "env=Hopper",
        "total_steps=3000",
        "algo.batch_size=64",
        "algo.hidden=[64,64]",
        "checkpoint_every=200",
        "eval_every=1000",
        "log_every=100",
        "env.max_episode_steps=100",
        "dataset=local/hopper/random-v0",
    ],
}
# dict observations (observation / achieved_goal / desired_goal) through the observation
# seam: the buffer's parts, a dict obs in the loop state; the module registers the task
CASES["sac_goal"] = ["algo=sac", "env=tests.goal_env:RlcoreGoalPoint-v0", "total_steps=600",
                     "algo.learning_starts=100", "algo.batch_size=32", "algo.hidden=[32,32]",
                     "checkpoint_every=100", "eval_every=200", "log_every=50",
                     "env.num_envs=2"]  # fmt: skip
# a third-party goal task whose goal lives in Python, outside MjData (gymnasium-robotics'
# Fetch): the env state holds it (rlcore.envs.env_state), so HER's episodes continue
CASES["sac_her_fetch"] = ["algo=sac", "env=FetchReach-v4", "her=future", "total_steps=600",
                          "algo.learning_starts=100", "algo.batch_size=32",
                          "algo.hidden=[32,32]", "checkpoint_every=100", "eval_every=200",
                          "log_every=50", "env.num_envs=2", "env.max_episode_steps=30"]  # fmt: skip
# RLPD on a goal task: expert demonstrations of dict observations mixed into every batch
# with online rows whose goals HER relabels (the sampler's generator, the episode records)
CASES["rlpd_her_dict"] = ["algo=rlpd", "env=PandaReach", "dataset=local/pandareach/expert-v0",
                          "her=future", "total_steps=600", "algo.learning_starts=100",
                          "algo.utd_ratio=2", "algo.batch_size=32", "algo.hidden=[32,32]",
                          "checkpoint_every=100", "eval_every=200", "log_every=50"]  # fmt: skip
# DQN on the HER paper's bit flipping: discrete actions, a dict observation, goals relabelled
CASES["dqn_her"] = ["algo=dqn", "env=BitFlipping", "env.kwargs.n_bits=6", "her=future",
                    "total_steps=600", "algo.learning_starts=100", "algo.batch_size=32",
                    "algo.hidden=[32]", "checkpoint_every=100", "eval_every=200",
                    "log_every=50", "env.num_envs=2"]  # fmt: skip
# offline-to-online: IQL fine-tuning (offline 400 gradient steps, then 1,600 env steps)
CASES["iql_o2o"] = [*CASES["iql"][:2], "total_steps=400", "algo.online_steps=1600",
                    *CASES["iql"][3:]]  # fmt: skip
# WSRL: CQL pre-training, policy warm-up, online SAC with 4 critic minibatches per update
CASES["wsrl"] = ["algo=wsrl", "env=Hopper", "total_steps=500", "algo.offline_steps=200",
                 "algo.warmup_steps=100", "algo.hidden=[32,32]", "algo.batch_size=32",
                 "algo.compile=false", "checkpoint_every=100", "eval_every=250", "log_every=50",
                 "env.max_episode_steps=100", "dataset=local/hopper/random-v0"]  # fmt: skip
# S3RL snapshot reset on the native back end: resets from the committed teacher's
# snapshots (truncated after 40 steps) until env step 1,200, ordinary resets afterwards
CASES["sac_snapshot"] = [*CASES["sac_native"],
                         f"snapshot.teacher={REPO / 'benchmarks/assets/hopper_sac_expert.pt'}",
                         "snapshot.episodes=2", "snapshot.truncate_after=40",
                         "snapshot.switch_after=1200"]  # fmt: skip
# fine-tuners of a pre-trained chunk policy ({ddpm} / {flow}: behaviour-cloning runs the
# module fixture trains): DPPO and ReinFlow step a chunked env, ResiP keeps per-env base
# chunks in the agent (saved with it)
_FINETUNE = ["env=Hopper", "env.num_envs=2", "algo.rollout_steps=20", "algo.hidden=[32,32,32]",
             "algo.time_dim=8", "checkpoint_every=40", "eval_every=80", "eval_episodes=2",
             "log_every=20", "env.max_episode_steps=60"]  # fmt: skip
CASES["dppo"] = ["algo=dppo", "algo.pretrained={ddpm}", "algo.denoising_steps=5",
                 "algo.finetune_steps=3", "algo.minibatch_size=40", "total_steps=1200",
                 "algo.critic_hidden=[32,32]", *_FINETUNE]  # fmt: skip
# DPPO on images: the BC run's encoder fine-tuned with the actor, the critic's own, the
# rollout's images shifted once per update (rendered PandaLift, state + camera)
# PPO on a state + camera dict: the vector parts standardised env-side, the image not,
# frame stacks and the normaliser's statistics restored with the rollout
CASES["ppo_pixels_dict"] = ["algo=ppo", "env=PandaReach", "env.obs=state+pixels",
                            "env.image_size=16", "env.frame_stack=2", "algo.encoder=drq",
                            "env.num_envs=2", "algo.rollout_steps=16", "algo.num_minibatches=2",
                            "algo.hidden=[16]", "total_steps=160", "checkpoint_every=32",
                            "eval_every=96", "eval_episodes=1", "log_every=32",
                            "env.max_episode_steps=20"]  # fmt: skip
CASES["dppo_pixels"] = ["algo=dppo", "algo.pretrained={ddpm_pixels}", "env=PandaLift",
                        "env.obs=state+pixels", "env.image_size=16", "env.frame_stack=2",
                        "env.num_envs=2", "algo.rollout_steps=10", "algo.finetune_steps=3",
                        "algo.minibatch_size=20", "total_steps=120", "algo.critic_hidden=[16]",
                        "checkpoint_every=20", "eval_every=60", "eval_episodes=1",
                        "log_every=20", "env.max_episode_steps=15"]  # fmt: skip
CASES["reinflow"] = ["algo=reinflow", "algo.pretrained={flow}", "algo.num_minibatches=2",
                     "total_steps=1200", "algo.critic_hidden=[32,32]", *_FINETUNE]  # fmt: skip
CASES["resip"] = [
    "algo=resip",
    "algo.pretrained={ddpm_history}",
    "algo.obs_history=2",
    "algo.denoising_steps=5",
    "algo.num_minibatches=2",
    "total_steps=800",
    *_FINETUNE,
]  # fmt: skip (the last 2 observations: history in the env state)
# a native task whose reward reads derived quantities (body xpos, cfrc_ext), not only state
# FastTD3: per-env exploration noise (drawn again at episode starts) and updates per
# vector step on 4 native envs
CASES["fast_td3"] = ["algo=fast_td3", "env=Hopper", "env.backend=native", "env.num_envs=4",
                     "total_steps=2400", "algo.warmup_vector_steps=50", "algo.batch_size=64",
                     "algo.critic_hidden=[64,64]", "algo.actor_hidden=[64,64]",
                     "checkpoint_every=400", "eval_every=800", "log_every=100",
                     "env.max_episode_steps=100"]  # fmt: skip
CASES["sac_native_ant"] = [arg.replace("env=Hopper", "env=Ant") for arg in CASES["sac_native"]]
# constrained: costs, cost critics, lambda and the episode-cost window all resume exactly
_SAFE = ["env=SafetyHopperVelocity", "algo.cost_limit=5", "env.max_episode_steps=100",
         "algo.hidden=[32,32]", "eval_every=800", "log_every=100"]  # fmt: skip
CASES["ppo_lag"] = ["algo=ppo_lag", *_SAFE, "total_steps=3200", "env.num_envs=2",
                    "algo.rollout_steps=200", "algo.update_epochs=3", "checkpoint_every=400"]  # fmt: skip
CASES["cpo"] = [arg.replace("ppo_lag", "cpo") for arg in CASES["ppo_lag"]]
CASES["fisor"] = ["algo=fisor", "env=SafetyHopperVelocity", "dataset=local/safehopper/mixed-v0",
                  "total_steps=300", "algo.batch_size=64", "algo.critic_batch_size=32",
                  "algo.hidden=[32,32]", "algo.critic_hidden=[32,32]", "algo.time_dim=8",
                  "algo.num_samples=4", "checkpoint_every=50", "eval_every=150",
                  "log_every=50", "env.max_episode_steps=100"]  # fmt: skip
CASES["sac_lag"] = ["algo=sac_lag", *_SAFE, "total_steps=1600", "algo.learning_starts=300",
                    "algo.batch_size=64", "algo.multiplier_delay=100", "algo.lambda_lr=0.01",
                    "checkpoint_every=300"]  # fmt: skip


PRETRAINED: dict[str, str] = {}  # head -> behaviour-cloning run dir (module fixture)


def case(algo: str) -> list[str]:
    """The overrides of ``algo``'s case, with the pre-trained runs filled in."""
    return [arg.format(**PRETRAINED) for arg in CASES[algo]]


@pytest.fixture(scope="module", autouse=True)
def random_hopper_dataset(tmp_path_factory):
    """A small random Hopper dataset for the offline case (own Minari root)."""
    from rlcore.offline.recording import Rendering, collect
    from rlcore.offline.safe_recipe import record

    root = tmp_path_factory.mktemp("minari")
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root)
    collect("Hopper", "random", "local/hopper/random-v0", steps=2000, seed=0)
    collect("PandaReach", "expert", "local/pandareach/expert-v0", steps=300, seed=0)
    record("SafetyHopperVelocity", "local/safehopper/mixed-v0",
           [("random", 1500, 0.0), (str(REPO / "benchmarks/assets/hopper_sac_expert.pt"), 500, 0.1)])  # fmt: skip
    for name, algo, extra in (("ddpm", "diffusion_bc", ["algo.denoising_steps=5"]),
                              ("flow", "flow_bc", []),
                              ("ddpm_history", "diffusion_bc",
                               ["algo.denoising_steps=5", "algo.obs_history=2"])):  # fmt: skip
        run = root / f"bc_{name}"
        train(make_config(f"algo={algo}", "env=Hopper", "dataset=local/hopper/random-v0",
                          "total_steps=30", "algo.hidden=[32,32,32]", "algo.time_dim=8", *extra,
                          "eval_every=30", "eval_episodes=1", "logger=quiet"), run)  # fmt: skip
        PRETRAINED[name] = str(run)
    # a policy cloned from camera images (for DPPO on images)
    image_env = ["env=PandaLift", "env.obs=state+pixels", "env.image_size=16", "env.frame_stack=2"]
    collect("PandaLift", "expert", "local/pandalift/camera-v0", steps=150, seed=0,
            rendering=Rendering("state+pixels", image_size=16, frame_stack=2))  # fmt: skip
    train(make_config("algo=diffusion_bc", *image_env, "dataset=local/pandalift/camera-v0",
                      "algo.encoder=drq", "algo.image_features=8", "algo.hidden=[16,16,16]",
                      "algo.denoising_steps=5", "total_steps=20", "eval_every=20",
                      "eval_episodes=1", "logger=quiet"), root / "bc_ddpm_pixels")  # fmt: skip
    PRETRAINED["ddpm_pixels"] = str(root / "bc_ddpm_pixels")
    yield
    if old is None:
        os.environ.pop("MINARI_DATASETS_PATH", None)
    else:
        os.environ["MINARI_DATASETS_PATH"] = old


def _params(run_dir):
    return load_checkpoint(run_dir)["agent"]


def _assert_same_agent(a, b, path="agent"):
    """Every tensor of two agent state dicts is equal (nested dicts: WSRL's two agents)."""
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), f"{path} differs"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            _assert_same_agent(a[key], b[key], f"{path}.{key}")


def _metric_rows(run_dir, file, key):
    return [(r["step"], r[key]) for r in read_csv(run_dir / file) if key in r]


def test_same_seed_same_numbers_different_seed_different(tmp_path):
    args = [*CASES["sac"], *FAST, "total_steps=900"]
    train(make_config(*args), tmp_path / "a")
    train(make_config(*args), tmp_path / "b")
    train(make_config(*args, "seed=1"), tmp_path / "c")
    _assert_same_agent(_params(tmp_path / "a"), _params(tmp_path / "b"))
    key = "train/episode_return"
    assert _metric_rows(tmp_path / "a", "train.csv", key) == _metric_rows(
        tmp_path / "b", "train.csv", key
    )
    assert _metric_rows(tmp_path / "a", "train.csv", key) != _metric_rows(
        tmp_path / "c", "train.csv", key
    )


# Source run first in a child ``python -m rlcore.train``: it wraps rlcore.checkpoint's
# save_checkpoint so that the child SIGKILLs itself at its SAVE-th write of latest.pt:
# "before" the write (the steps since the previous checkpoint are lost: a kill mid-run),
# "during" it (at the rename over latest.pt: the old file already moved to previous.pt,
# the new one complete in its temporary file) or "after" it. An event of the run, not a
# timer: the kill lands at the same point on a fast, slow or busy machine.
_KILL_HOOK = """
import os, signal
from pathlib import Path
import rlcore.checkpoint as _checkpoint

_save, _replace, _saves, _armed = _checkpoint.save_checkpoint, os.replace, [0], [False]

def _die():
    os.kill(os.getpid(), signal.SIGKILL)

def _replace_hook(src, dst, *args, **kwargs):
    if _armed[0] and Path(dst).name == "latest.pt":
        _die()
    return _replace(src, dst, *args, **kwargs)

def _save_hook(state, path, *args, **kwargs):
    if Path(path).name == "latest.pt":
        _saves[0] += 1
        if _saves[0] == SAVE:
            if WHERE == "before":
                _die()
            _armed[0] = WHERE == "during"
            _save(state, path, *args, **kwargs)
            _die()
    return _save(state, path, *args, **kwargs)

os.replace = _replace_hook
_checkpoint.save_checkpoint = _save_hook
"""
KILL_POINTS = ("before", "during", "after")


def hooked_cli(args: list[str], hook: str, **popen) -> subprocess.Popen:
    """Start ``python -m rlcore.train *args`` in a child that first runs ``hook`` (Python
    source; it may wrap rlcore functions, which train.py then imports wrapped)."""
    script = (
        f"{hook}\nimport runpy, sys\nsys.argv = ['rlcore.train', *sys.argv[1:]]\n"
        "runpy.run_module('rlcore.train', run_name='__main__', alter_sys=True)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-c", script, *args], env=env, **popen)


def _kill_after_checkpoint(args, run_dir, rng, save=None, where=None):
    """Run the CLI into ``run_dir`` and SIGKILL it at its ``save``-th checkpoint (default:
    the 2nd or 3rd, drawn from ``rng``), ``where`` in KILL_POINTS (default: drawn); returns
    the step of the checkpoint a resume starts from."""
    save = rng.choice([2, 3]) if save is None else save
    where = rng.choice(KILL_POINTS) if where is None else where
    assert save > 1 or where == "after", "nothing to resume from: no checkpoint before"
    hook = f"SAVE, WHERE = {save}, {where!r}\n{_KILL_HOOK}"
    proc = hooked_cli([*args, f"run_dir={run_dir}"], hook, cwd=run_dir.parent,
                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    _, stderr = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == -signal.SIGKILL, (
        f"the run was not killed at checkpoint {save} ({where}): exit {proc.returncode}\n"
        f"{stderr[-3000:]}"
    )
    return load_checkpoint(run_dir)["loop"]["counters"]["step"]


@pytest.mark.parametrize("algo", sorted(CASES))
def test_killed_and_resumed_run_equals_uninterrupted(algo, tmp_path):
    args = [*case(algo), *FAST]
    train(make_config(*args), tmp_path / "full")

    killed = tmp_path / "killed"
    killed_at = _kill_after_checkpoint(args, killed, random.Random(algo))
    total = load_checkpoint(tmp_path / "full")["loop"]["counters"]["step"]  # every phase
    assert 0 < killed_at < total, "kill landed after the run finished; make the run longer"
    train(make_config(*args, f"resume={killed}"), killed)

    _assert_same_agent(_params(tmp_path / "full"), _params(killed))
    full_state, resumed_state = load_checkpoint(tmp_path / "full"), load_checkpoint(killed)
    assert full_state["loop"]["counters"] == resumed_state["loop"]["counters"]
    on_policy = {"ppo", "ppo_dict", "ppo_pixels_dict", "dppo", "dppo_pixels", "reinflow", "resip", "ppo_lag", "cpo"}
    loss = {
        "iql": "train/q_loss",
        "iql_o2o": "train/q_loss",
        "fisor": "train/cost_critic_loss",
        "dqn_her": "train/q_loss",
    }.get(algo, "train/value_loss" if algo in on_policy else "train/critic_loss")
    pairs = [("eval.csv", "eval/return"), ("train.csv", loss)]
    if algo not in ("iql", "fisor"):  # offline runs have no training episodes
        pairs.append(("train.csv", "train/episode_return"))
    assert all(_metric_rows(tmp_path / "full", f, k) for f, k in pairs)
    if algo == "sac_snapshot":
        pairs.append(("snapshot.csv", "snapshot/resets"))
    if algo in ("ppo_lag", "sac_lag", "cpo", "fisor"):
        pairs.append(("eval.csv", "eval/cost"))
    if algo in ("ppo_lag", "sac_lag", "cpo"):
        pairs.append(("train.csv", "train/episode_cost"))
        if algo != "cpo":
            pairs.append(("train.csv", "train/lagrange_multiplier"))
    for file, key in pairs:
        assert _metric_rows(tmp_path / "full", file, key) == _metric_rows(killed, file, key)


def test_a_resume_whose_env_changes_a_shape_is_refused_leaving_the_run_intact(tmp_path, capsys):
    """``resume=<run> env.kwargs.n_bits=5`` on a 4-bit run (named without algo= / env=, the
    run's groups are found): refused before anything is written, naming both shapes; the
    run resumes plainly afterwards (the refused config did not replace its own)."""
    from rlcore.cli import cli

    run = tmp_path / "run"
    args = ["algo=dqn", "env=BitFlipping", "env.kwargs.n_bits=4", "total_steps=300",
            "algo.learning_starts=100", "algo.batch_size=16", "algo.hidden=[16]",
            "eval_every=300", "eval_episodes=1", *FAST]  # fmt: skip
    train(make_config(*args), run)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    with pytest.raises(SystemExit) as stop:
        cli([f"resume={run}", "env.kwargs.n_bits=5", "total_steps=400"])
    assert stop.value.code == 2
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    err = capsys.readouterr().err
    assert "its agent reads observation (4,)" in err and "gives observation (5,)" in err
    train(make_config(*args, "total_steps=400", f"resume={run}"), run)
    assert load_checkpoint(run)["loop"]["counters"]["step"] == 400


def test_resume_finished_run_with_more_steps_extends_it(tmp_path):
    args = [*CASES["sac"], *FAST, "total_steps=600"]
    train(make_config(*args), tmp_path)
    state = load_checkpoint(tmp_path)
    assert state["loop"]["counters"]["step"] == 600
    train(make_config(*args, "total_steps=1200", f"resume={tmp_path}"), tmp_path)
    state = load_checkpoint(tmp_path)
    assert state["loop"]["counters"]["step"] == 1200
    assert (
        len(state["loop"]["stateful"]["buffer"]["data"]["obs"]) == 1200
    )  # buffer grew, nothing lost
    steps = [row["step"] for row in read_csv(tmp_path / "eval.csv")]
    assert steps == sorted(steps) and steps[-1] == 1200


def test_checkpoint_of_another_loop_layout_is_refused_clearly(tmp_path):
    """A checkpoint that lacks what this loop writes (another loop, an older rlcore) stops
    with a message naming the missing part, not a KeyError inside the restore."""
    from rlcore.checkpoint import CheckpointReadError, save_checkpoint

    args = [*CASES["sac"], *FAST, "total_steps=600"]
    train(make_config(*args), tmp_path)
    state = load_checkpoint(tmp_path)
    del state["loop"]["stateful"]
    save_checkpoint(state, tmp_path / "checkpoints" / "latest.pt")
    with pytest.raises(CheckpointReadError, match="lacks stateful: it was written by"):
        train(make_config(*args, "total_steps=1200", f"resume={tmp_path}"), tmp_path)


def test_diverged_parameters_keep_previous_checkpoint(tmp_path):
    """A loss that turns non-finite only after the parameters blew up must not overwrite
    the last good checkpoint with garbage."""
    from rlcore.loops import TrainingStopped

    args = [*CASES["sac"], *FAST, "algo.learning_starts=302", "checkpoint_every=300"]
    with pytest.raises(TrainingStopped, match="already non-finite; kept the previous"):
        train(make_config(*args, "algo.critic_lr=1e38", "algo.actor_lr=1e38"), tmp_path)
    state = load_checkpoint(tmp_path)
    assert state["loop"]["counters"]["step"] == 300
    assert all(torch.isfinite(v).all() for v in state["agent"]["critic"].values())


def test_run_total_steps_sets_the_algorithms_schedule(tmp_path):
    """``total_steps=300`` on the command line is also IQL's cosine-schedule length: the
    actor's learning rate is ~0 at the run's end (not 3e-4 of a 1M-step schedule)."""
    args = [*CASES["iql"], *FAST, "total_steps=300", "checkpoint_every=300", "eval_every=300"]
    train(make_config(*args), tmp_path / "run")
    saved = load_checkpoint(tmp_path / "run")
    assert saved["config"]["algo"]["total_steps"] == 300
    lr = saved["agent"]["actor_optimizer"]["param_groups"][0]["lr"]
    assert 0 <= lr < 1e-7  # cosine_lr(3e-4, 299, 300)


def test_killed_before_the_switch_and_resumed_equals_uninterrupted(tmp_path):
    """SIGKILL during offline pre-training; the resumed run crosses the switch to online
    (buffer, dataset generator, phase counters) and ends exactly as an uninterrupted one."""
    args = [*CASES["iql"][:2], "total_steps=1500", "algo.online_steps=600", *CASES["iql"][3:],
            "checkpoint_every=100", *FAST]  # fmt: skip
    train(make_config(*args), tmp_path / "full")
    killed = tmp_path / "killed"
    _kill_after_checkpoint(args, killed, random.Random(0), save=1, where="after")
    counters = load_checkpoint(killed)["loop"]["counters"]
    assert counters["phase"] == 0 and 0 < counters["step"] < 1500, counters
    train(make_config(*args, f"resume={killed}"), killed)
    _assert_same_agent(_params(tmp_path / "full"), _params(killed))
    full_state, resumed_state = load_checkpoint(tmp_path / "full"), load_checkpoint(killed)
    assert full_state["loop"]["counters"] == resumed_state["loop"]["counters"]
    for file, key in [("eval.csv", "eval/return"), ("train.csv", "train/q_loss"),
                      ("train.csv", "train/episode_return")]:  # fmt: skip
        rows = _metric_rows(tmp_path / "full", file, key)
        assert rows and rows == _metric_rows(killed, file, key), key


def test_checkpoint_of_the_former_on_policy_loop_resumes_exactly(tmp_path):
    """A mid-run checkpoint in the layout of the former ``on_policy`` loop (counters step,
    iteration, episodes; no stateful objects or warm-up generator) resumes in the rollout
    phase of ``run_phases`` and ends exactly as an uninterrupted run."""
    from rlcore.checkpoint import save_checkpoint

    args = [*CASES["ppo"], *FAST, "total_steps=1024", "eval_every=512"]
    train(make_config(*args), tmp_path / "full")
    old = tmp_path / "old"
    train(make_config(*args), old)
    state = load_checkpoint(old / "checkpoints" / "previous.pt")  # step 768 of 1,024
    loop = state["loop"]
    counters = loop["counters"]
    loop["counters"] = {"step": counters["step"], "iteration": counters["updates"],
                        "episodes": counters["episodes"]}  # fmt: skip
    del loop["stateful"], loop["warmup_rng"]
    save_checkpoint(state, old / "checkpoints" / "latest.pt")
    train(make_config(*args, f"resume={old}"), old)
    _assert_same_agent(_params(tmp_path / "full"), _params(old))
    assert (
        load_checkpoint(old)["loop"]["counters"]
        == load_checkpoint(tmp_path / "full")["loop"]["counters"]
    )
    for file, key in [("eval.csv", "eval/return"), ("train.csv", "train/value_loss"),
                      ("train.csv", "train/episode_return")]:  # fmt: skip
        rows = _metric_rows(tmp_path / "full", file, key)
        assert rows and rows == _metric_rows(old, file, key), key
