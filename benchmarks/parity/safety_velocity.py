"""Safety-Gymnasium's velocity tasks against ours (envs/safety.py): one rollout of fixed
actions per task, observations / rewards / costs / terminations compared step by step.

Two halves, two environments. Record with safety-gymnasium 1.0.0 at its own pins
(Python 3.10, gymnasium 0.28.1, mujoco 2.3.3, numpy 1.23; side venv outside the repo):

    /root/.pyenv/versions/3.10.13/bin/python -m venv sgvenv
    sgvenv/bin/pip install gymnasium==0.28.1 mujoco==2.3.3 "numpy<1.24" xmltodict pyyaml \\
        imageio jinja2 pygame==2.1.0
    sgvenv/bin/pip install --no-deps safety-gymnasium==1.0.0 gymnasium-robotics==1.2.2 \\
        pettingzoo==1.23.1
    sgvenv/bin/python benchmarks/parity/safety_velocity.py record /tmp/sg_rollouts.npz

then compare in the project's environment (gymnasium 1.4, mujoco 4):

    python -m rlcore.benchmarks.parity.safety_velocity compare /tmp/sg_rollouts.npz
    python -m rlcore.benchmarks.parity.safety_velocity golden /tmp/sg_rollouts.npz  # the test's file

The record half imports nothing from this repository; the compare half loads only
envs/safety.py (by path), so it runs in either environment: in the reference's it checks the
task definition on the same simulator, in ours it adds MuJoCo 4's differences. The time
limit compared is the inner gymnasium task's (our ids register none of their own).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np

TASKS = ("Hopper", "HalfCheetah", "Walker2d", "Swimmer", "Ant", "Humanoid")
STEPS = 400  # per task, through resets (unseeded) where an episode terminates
SEED = 0
ROOT = Path(__file__).resolve().parents[2]


def _actions(task: str, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(TASKS.index(task))
    return rng.uniform(low, high, (STEPS, *low.shape)).astype(np.float64)


def record(path: str) -> None:
    """Roll safety-gymnasium's ``Safety<Task>Velocity-v1`` out; save everything to ``path``."""
    import safety_gymnasium

    out: dict[str, np.ndarray] = {}
    for task in TASKS:
        env = safety_gymnasium.make(f"Safety{task}Velocity-v1")
        obs, _ = env.reset(seed=SEED)
        actions = _actions(task, env.action_space.low, env.action_space.high)
        rows = {"obs": [obs], "reward": [], "cost": [], "terminated": [], "truncated": []}
        for action in actions:
            obs, reward, cost, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                obs, _ = env.reset()
            for key, value in zip(rows, (obs, reward, cost, terminated, truncated)):
                rows[key].append(value)
        out[f"{task}/actions"] = actions
        out |= {f"{task}/{k}": np.asarray(v, np.float64) for k, v in rows.items()}
        out[f"{task}/max_episode_steps"] = np.asarray(env.spec.max_episode_steps)
        env.close()
    np.savez(path, **out)
    print(f"wrote {path}")


def compare(path: str) -> dict[str, dict[str, float]]:
    """Our ids on the recorded actions: max |difference| per quantity and task."""
    import gymnasium as gym

    # envs/safety.py by path: this half also runs in the reference's environment
    spec = importlib.util.spec_from_file_location("rlcore_safety", ROOT / "envs" / "safety.py")
    safety = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(safety)
    gym.register(id="RlcoreVelocity-v1", entry_point=safety.make_velocity_task)
    data = np.load(path)
    table: dict[str, dict[str, float]] = {}
    for task in TASKS:
        env = gym.make("RlcoreVelocity-v1", task=task)
        obs, _ = env.reset(seed=SEED)
        rows = {"obs": [obs], "reward": [], "cost": [], "terminated": [], "truncated": []}
        for action in data[f"{task}/actions"]:
            obs, reward, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                obs, _ = env.reset()
            for key, value in zip(rows, (obs, reward, info["cost"], terminated, truncated)):
                rows[key].append(value)
        ours = {k: np.asarray(v, np.float64) for k, v in rows.items()}
        obs_diff = np.abs(ours["obs"] - data[f"{task}/obs"]).max(axis=1)
        table[task] = {
            "steps": len(ours["reward"]),
            "obs_dim": ours["obs"].shape[1],
            "ref_obs_dim": data[f"{task}/obs"].shape[1],
            "episodes": 1 + int(ours["terminated"].sum() + ours["truncated"].sum()),
            "time_limit": _time_limit(env),
            "first_step_obs_differs": int(np.argmax(obs_diff > 1e-9))
            if obs_diff.max() > 1e-9
            else -1,
            "ref_time_limit": int(data[f"{task}/max_episode_steps"]),
            **{
                f"max_abs_{k}": float(np.abs(ours[k] - data[f"{task}/{k}"]).max())
                for k in ours
                if ours[k].shape == data[f"{task}/{k}"].shape
            },
            "cost_steps": float(ours["cost"].sum()),
        }
        env.close()
    for task, row in table.items():
        print(task, {k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in row.items()})
    return table


# steps of the recording kept as tests/golden/safety_velocity.json: as far as MuJoCo 4
# reproduces MuJoCo 2.3.3 here (Hopper's and HalfCheetah's contacts part from step 9 / 39;
# Ant's and Humanoid's reset already differs: 2.3.3's mj_forward normalises the free
# joint's quaternion in qpos, 4.0 leaves it), with Swimmer's first costs and three of
# Walker2d's terminations and resets
GOLDEN_STEPS = {"Hopper": 8, "HalfCheetah": 38, "Walker2d": 50, "Swimmer": 52}


def golden(path: str, out: str) -> None:
    """The first GOLDEN_STEPS of a recording as JSON (actions, observations, rewards,
    costs, terminations) for tests/test_safety.py."""
    import json

    data = np.load(path)
    table = {
        task: {
            "actions": data[f"{task}/actions"][:steps].tolist(),
            **{
                k: data[f"{task}/{k}"][: steps + (k == "obs")].tolist()
                for k in ("obs", "reward", "cost", "terminated")
            },
        }  # fmt: skip
        for task, steps in GOLDEN_STEPS.items()
    }
    source = (
        "safety-gymnasium 1.0.0 (PKU-Alignment/safety-gymnasium), gymnasium 0.28.1, mujoco "
        f"2.3.3, Python 3.10; reset(seed={SEED}), then the recorded actions, unseeded resets "
        "after terminations; python benchmarks/parity/safety_velocity.py record / golden"
    )
    Path(out).write_text(json.dumps({"source": source, "tasks": table}) + "\n")
    print(f"wrote {out}")


def _time_limit(env: object) -> int:
    """The innermost TimeLimit's step count (gymnasium 0.28 has no ``get_wrapper_attr``)."""
    while not hasattr(env, "_max_episode_steps"):
        env = env.env
    return int(env._max_episode_steps)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("record", "compare", "golden"))
    parser.add_argument("path", help="the recording (.npz)")
    parser.add_argument("--out", default=str(ROOT / "tests" / "golden" / "safety_velocity.json"))
    args = parser.parse_args(argv)
    if args.mode == "golden":
        golden(args.path, args.out)
    else:
        (record if args.mode == "record" else compare)(args.path)


if __name__ == "__main__":
    main(sys.argv[1:])
