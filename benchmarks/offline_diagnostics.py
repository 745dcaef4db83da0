"""Diagnostics behind the offline table: how trained policies fail, and whether a critic's
ranking of two policies' actions agrees with Monte-Carlo rollouts of the behaviour policy.

    # episodes survived / fall lengths / forward speed of each policy (deterministic actions)
    python -m rlcore.benchmarks.offline_diagnostics gaits --env Hopper-v5 --episodes 20 \\
        --policy behaviour=runs/recipe/hopper/expert/checkpoints/agent_step_120000.pt \\
        --policy iql=runs/bench/offline_v4/iql_medium_seed0_bf16
    # agent's critic: Q(s, agent(s)) - Q(s, reference(s)) against rollouts from s that take
    # that one action and then follow the (sampled) behaviour policy, common random numbers
    python -m rlcore.benchmarks.offline_diagnostics critic --dataset local/hopper/medium-v4 \\
        --agent runs/bench/offline_v4/iql_medium_seed0_bf16 --reference <BC run> \\
        --behaviour runs/recipe/hopper/expert/checkpoints/agent_step_120000.pt

Both need an environment whose observation is ``(qpos[1:], qvel)`` (Hopper, Walker2d,
HalfCheetah): the rollouts restart MuJoCo from dataset observations, and the forward speed
is ``qvel[0]``. Prints a table and writes JSON (``--out``, default
benchmarks/results/offline_diagnostics.json).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlcore.benchmarks.runs import write_result

RESULTS = Path(__file__).resolve().parent / "results"


def restore_state(env: gym.Env, obs: np.ndarray) -> None:
    """Put a MuJoCo locomotion env into the state an observation ``(qpos[1:], qvel)`` shows,
    with the x position (not observed, not used by the reward) at 0. The simulator's data is
    reset first, so the solver's warm start does not carry over from the last rollout."""
    import mujoco

    base = env.unwrapped
    nq, nv = base.model.nq, base.model.nv
    if obs.shape != (nq - 1 + nv,):
        raise ValueError(
            f"{env.spec.id if env.spec else base}: observation size {obs.shape} is not "
            f"qpos[1:] + qvel = {nq - 1 + nv}; only such envs (Hopper, Walker2d, HalfCheetah) "
            "can be restarted from an observation"
        )
    qpos = np.concatenate([[0.0], obs[: nq - 1]]).astype(np.float64)
    mujoco.mj_resetData(base.model, base.data)
    base.set_state(qpos, np.asarray(obs[nq - 1 :], dtype=np.float64))


def gaits(policies: dict[str, str], env_id: str, episodes: int, seed: int) -> dict[str, dict]:
    """Per policy (deterministic actions): mean return, episodes that reach the time limit,
    the lengths of those that fall, and the mean forward speed of each group."""
    from rlcore.policies import load_policy

    env = gym.make(env_id)
    out = {}
    for name, path in policies.items():
        policy = load_policy(path)
        returns, lengths, speeds, limits = [], [], [], []
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            total, steps, speed, truncated = 0.0, 0, 0.0, False
            terminated = False
            while not (terminated or truncated):
                obs, reward, terminated, truncated, _ = env.step(policy(obs))
                total, steps = total + float(reward), steps + 1
                speed += float(obs[env.unwrapped.model.nq - 1])
            returns.append(total)
            lengths.append(steps)
            speeds.append(speed / steps)
            limits.append(bool(truncated and not terminated))
        limits_arr, speeds_arr = np.array(limits), np.array(speeds)
        out[name] = {
            "mean_return": float(np.mean(returns)),
            "reached_time_limit": int(limits_arr.sum()),
            "episodes": episodes,
            "fall_lengths": sorted(int(n) for n, ok in zip(lengths, limits) if not ok),
            "speed_time_limit": float(speeds_arr[limits_arr].mean()) if limits_arr.any() else None,
            "speed_fell": float(speeds_arr[~limits_arr].mean()) if (~limits_arr).any() else None,
        }
    return out


def _discounted_rollout(
    env: gym.Env, obs: np.ndarray, first_action: np.ndarray, behaviour: Any, reward_scale: float,
    gamma: float, horizon: int,
) -> float:  # fmt: skip
    """Discounted, scaled return of taking ``first_action`` in ``obs`` and then following
    ``behaviour`` for up to ``horizon`` steps or until termination."""
    restore_state(env, obs)
    total, discount, action = 0.0, 1.0, first_action
    for _ in range(horizon + 1):
        next_obs, reward, terminated, _, _ = env.step(action)
        total += discount * float(reward) * reward_scale
        if terminated:
            break
        discount *= gamma
        action = behaviour(next_obs)
    return total


def critic_vs_rollouts(
    agent_path: str, reference_path: str, behaviour_path: str, dataset_spec: str, states: int,
    rollouts: int, horizon: int, to_end: tuple[int, int], seed: int,
) -> dict[str, Any]:  # fmt: skip
    """On ``states`` dataset states from terminating episodes, ``to_end`` steps before their
    end: the agent critic's Q(s, agent(s)) - Q(s, reference(s)) against the same difference
    estimated by ``rollouts`` rollouts per action of the sampled behaviour policy (the same
    random numbers for both actions, so the estimate's noise mostly cancels)."""
    from rlcore.offline import load_dataset
    from rlcore.policies import load_agent, load_policy

    agent = load_agent(agent_path)
    if not hasattr(agent, "critic") or not hasattr(agent, "obs_normalizer"):
        raise ValueError(f"{agent_path}: the agent has no `critic` / `obs_normalizer` to rank with")
    act, act_reference = load_policy(agent_path), load_policy(reference_path)
    behaviour = load_policy(behaviour_path, deterministic=False)
    data = load_dataset(dataset_spec)
    scale = (
        data.normalize_rewards_by_return_range()
        if agent.config.normalize_reward_by_returns
        else 1.0
    )
    gamma = float(agent.config.gamma)
    episode = data.episode_id.long()
    index = torch.arange(len(episode))
    last = torch.zeros(int(episode.max()) + 1, dtype=torch.long)
    last = last.scatter_reduce(0, episode, index, "amax")
    ended = torch.zeros(len(last)).scatter_reduce(0, episode, data.terminated, "amax")[episode]
    steps_left = last[episode] - index
    candidates = torch.nonzero((ended > 0) & (steps_left >= to_end[0]) & (steps_left < to_end[1]))
    if len(candidates) < states:
        raise ValueError(f"only {len(candidates)} states lie {to_end} steps before a fall")
    rng = np.random.default_rng(seed)
    picked = candidates.squeeze(-1)[rng.choice(len(candidates), states, replace=False)]
    env = gym.make(data.env_id)
    env.reset(seed=seed)
    restore_state(env, data.obs[picked[0]].numpy())  # checks the layout before any rollout
    rows = []
    for k, i in enumerate(picked.tolist()):
        obs = data.obs[i].numpy()
        actions = np.stack([act(obs), act_reference(obs)]).astype(np.float32)
        with torch.no_grad():
            normed = agent.obs_normalizer(torch.as_tensor(obs).repeat(2, 1))
            q = agent.critic(normed, torch.as_tensor(actions)).min(0).values
        mc = []
        for action in actions:
            values = []
            for j in range(rollouts):
                torch.manual_seed(seed + 1000 * k + j)  # common random numbers for both
                values.append(
                    _discounted_rollout(env, obs, action, behaviour, scale, gamma, horizon)
                )
            mc.append(np.mean(values))
        rows.append((float(q[0] - q[1]), float(mc[0] - mc[1])))
    learned, rolled = np.array(rows).T
    return {
        "states": states,
        "rollouts_per_action": rollouts,
        "horizon": horizon,
        "steps_before_fall": list(to_end),
        "reward_scale": scale,
        "learned_diff_mean": float(learned.mean()),
        "rollout_diff_mean": float(rolled.mean()),
        "rollout_diff_sem": float(rolled.std(ddof=1) / np.sqrt(states)),
        "learned_prefers_agent": float((learned > 0).mean()),
        "rollouts_prefer_agent": float((rolled > 0).mean()),
        "correlation": (
            float(np.corrcoef(learned, rolled)[0, 1]) if learned.std() and rolled.std() else None
        ),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run one diagnostic, print its numbers, write the JSON; returns the JSON payload."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gait = sub.add_parser("gaits", help="survival, fall lengths and speed per policy")
    gait.add_argument("--policy", action="append", required=True, metavar="NAME=RUN_OR_CKPT")
    gait.add_argument("--env", default="Hopper-v5")
    gait.add_argument("--episodes", type=int, default=20)
    gait.add_argument("--seed", type=int, default=1000)
    critic = sub.add_parser("critic", help="critic's action ranking vs behaviour rollouts")
    critic.add_argument("--agent", required=True)
    critic.add_argument("--reference", required=True)
    critic.add_argument("--behaviour", required=True)
    critic.add_argument("--dataset", required=True)
    critic.add_argument("--states", type=int, default=150)
    critic.add_argument("--rollouts", type=int, default=8)
    critic.add_argument("--horizon", type=int, default=300)
    critic.add_argument("--to-end", type=int, nargs=2, default=[100, 400], metavar=("MIN", "MAX"))
    critic.add_argument("--seed", type=int, default=0)
    for command in (gait, critic):
        command.add_argument("--out", type=Path, default=RESULTS / "offline_diagnostics.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    if args.command == "gaits":
        if any("=" not in item for item in args.policy):
            raise SystemExit(f"--policy expects NAME=RUN_OR_CHECKPOINT: {args.policy}")
        policies = dict(item.split("=", 1) for item in args.policy)
        result: dict[str, Any] = {"gaits": gaits(policies, args.env, args.episodes, args.seed)}
        print(f"| policy ({args.episodes} episodes) | mean return | reached limit | speed "
              "limit / fell | fall lengths |\n|---|---|---|---|---|")  # fmt: skip
        for name, row in result["gaits"].items():
            speeds = " / ".join("-" if v is None else f"{v:.2f}" for v in
                                (row["speed_time_limit"], row["speed_fell"]))  # fmt: skip
            print(f"| {name} | {row['mean_return']:.0f} | {row['reached_time_limit']} | "
                  f"{speeds} | {row['fall_lengths']} |")  # fmt: skip
    else:
        result = {"critic": critic_vs_rollouts(
            args.agent, args.reference, args.behaviour, args.dataset, args.states,
            args.rollouts, args.horizon, tuple(args.to_end), args.seed,
        )}  # fmt: skip
        for key, value in result["critic"].items():
            print(f"{key}: {value}")
    write_result(args, result)
    return result


if __name__ == "__main__":
    main()
