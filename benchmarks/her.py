"""SAC + HER (or DQN + HER): rlcore next to Stable-Baselines3 on a goal task, and the same
algorithm without relabelling beside them.

    python -m rlcore.benchmarks.her --env PandaReach --steps 10000 --eval-every 1000 \\
        --seeds 0 1 2 --methods rlcore_her sb3_her rlcore_sac --run-dir runs/her_bench
    python -m rlcore.benchmarks.her --algo dqn --env BitFlipping --n-bits 10 --steps 10000 \\
        --seeds 0 1 2 --methods rlcore_her sb3_her rlcore_dqn

``--algo dqn`` runs the HER paper's own comparison on its bit-flipping task (discrete
actions, envs/bitflip.py): DQN with and without relabelling, and SB3's DQN with its
``HerReplayBuffer``, all with ``DQN_SETTING`` (one 256-wide layer, lr 2.5e-4, gamma 0.98,
batch 128, one update per env step after 1,000 random steps, a hard target copy every 250,
epsilon from 1 to 0.05 over the first 20% of the run, Huber loss, gradients clipped at
norm 10, no double-Q: SB3's DQN update, which rlcore's DQN takes with these options).

Methods: ``rlcore_her`` (``algo=sac her=future her.k=4``), ``sb3_her`` (SB3's SAC with its
``HerReplayBuffer``, future, 4 goals), ``rlcore_sac`` (no relabelling: the sparse reward
alone). Same hyper-parameters on both sides: the setting panda-gym's Reach is usually run
with in the RL Zoo (there with TQC): lr 1e-3 (actor, critics, temperature), gamma 0.95,
tau 0.05, batch 256; SAC's own: 256x256, one update per env step, initial temperature 1,
target entropy -|A|, ``--learning-starts`` uniform random steps (default 1,000: HER draws
from complete episodes). rlcore's SAC departs from SB3's in four listed ways
(algos/sac.py, "Against Stable-Baselines3").

rlcore-only options: ``--normalize-obs`` (the in-agent normaliser), ``--clip-return`` (the
TD target clipped to [-1/(1-gamma), 0], baselines' HER ``clip_return``; SB3 has neither).

Every ``--eval-every`` env steps, 20 deterministic episodes on the native back end
(rlcore's loop evaluates itself; SB3 trains in chunks and is evaluated with
``rlcore.evaluation.evaluate`` on the same env, seeds as rlcore's loop uses); the success
rate is the share of episodes whose last step is a success. Each run is a run dir under
``--run-dir`` (SB3's: config.yaml with ``algo.name: sb3_sac_her`` and eval.csv), so
``python -m rlcore.report <run dir>/* --metric eval/success_rate`` draws the curves; the
JSON (``--out``) has every evaluation and the lscpu record.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import time
from pathlib import Path
from typing import Any

from rlcore.benchmarks.runs import cpu_info

EVAL_EPISODES = 20
SB3_ALGO = {"sac": "sb3_sac_her", "dqn": "sb3_dqn_her"}
LR, GAMMA, TAU = 1e-3, 0.95, 0.05
# DQN + HER on bit flipping (module doc), rlcore's names; SB3's arguments in run_sb3
DQN_SETTING = {"lr": 2.5e-4, "gamma": 0.98, "hidden": [256], "batch_size": 128,
               "target_update_interval": 250, "exploration_fraction": 0.2, "start_e": 1.0,
               "end_e": 0.05, "loss": "huber", "max_grad_norm": 10.0, "double_q": False}  # fmt: skip


def rlcore_overrides(
    env: str, steps: int, her: bool, seed: int, args: argparse.Namespace
) -> list[str]:
    """rlcore's SAC with SB3's defaults, or its DQN with ``DQN_SETTING`` (module doc), with
    or without HER."""
    if args.algo == "dqn":
        return [
            "algo=dqn", f"env={env}", f"env.kwargs.n_bits={args.n_bits}", f"seed={seed}",
            f"total_steps={steps}", f"her={'future' if her else 'none'}", "her.k=4",
            *(f"algo.{key}={value}".replace(" ", "") for key, value in DQN_SETTING.items()),
            f"algo.buffer_size={steps}", f"algo.learning_starts={args.learning_starts}",
            "algo.updates_per_step=1", f"eval_every={args.eval_every}",
            f"eval_episodes={EVAL_EPISODES}", "eval_envs=5", "logger=quiet", "threads=1",
            f"checkpoint_every={steps}", "keep_agent_snapshots=false",
        ]  # fmt: skip
    return [
        "algo=sac", f"env={env}", f"seed={seed}", f"total_steps={steps}",
        f"her={'future' if her else 'none'}", "her.k=4",
        f"algo.actor_lr={LR}", f"algo.critic_lr={LR}", f"algo.alpha_lr={LR}",
        "algo.policy_frequency=1", "algo.init_alpha=1.0", "algo.batch_size=256",
        "algo.hidden=[256,256]", f"algo.tau={TAU}", f"algo.gamma={GAMMA}",
        f"algo.learning_starts={args.learning_starts}", f"eval_every={args.eval_every}",
        f"eval_episodes={EVAL_EPISODES}", "eval_envs=5", "logger=quiet", "threads=1",
        f"checkpoint_every={steps}", "keep_agent_snapshots=false",
        f"algo.updates_per_step={args.updates_per_step}",
        f"algo.normalize_obs={str(args.normalize_obs).lower()}", f"algo.compile={args.compile}",
    ] + ([f"algo.target_clip=[{-round(1.0 / (1.0 - GAMMA), 6)},0.0]"] if args.clip_return else [])  # fmt: skip


def run_rlcore(env: str, her: bool, seed: int, run_dir: Path, args: argparse.Namespace) -> list:
    from hydra import compose, initialize_config_module

    from rlcore.overrides import normalize_overrides
    from rlcore.train import train

    overrides = rlcore_overrides(env, args.steps, her, seed, args)
    with initialize_config_module(config_module="rlcore.configs", version_base="1.3"):
        cfg = compose("config", overrides=normalize_overrides(overrides))
    train(cfg, run_dir)
    with (run_dir / "eval.csv").open() as f:
        return [(int(float(r["step"])), float(r["eval/success_rate"])) for r in csv.DictReader(f)]


def run_sb3(env: str, seed: int, run_dir: Path, args: argparse.Namespace) -> list:
    import gymnasium as gym
    import stable_baselines3
    import torch
    from stable_baselines3 import SAC, HerReplayBuffer
    from stable_baselines3.common.callbacks import BaseCallback

    from rlcore.envs.make import make_vec_env, resolve_env_id
    from rlcore.evaluation import evaluate

    torch.set_num_threads(1)
    env_id = resolve_env_id(env)
    her = {"replay_buffer_class": HerReplayBuffer,
           "replay_buffer_kwargs": {"n_sampled_goal": 4, "goal_selection_strategy": "future"},
           "seed": seed, "device": "cpu", "verbose": 0, "buffer_size": args.steps,
           "learning_starts": args.learning_starts}  # fmt: skip
    if args.algo == "dqn":
        from stable_baselines3 import DQN

        hp = DQN_SETTING
        env_kwargs = {"n_bits": args.n_bits}
        model = DQN(
            "MultiInputPolicy", gym.make(env_id, **env_kwargs), learning_rate=hp["lr"],
            batch_size=hp["batch_size"], gamma=hp["gamma"], train_freq=1, gradient_steps=1,
            target_update_interval=hp["target_update_interval"],
            exploration_fraction=hp["exploration_fraction"],
            exploration_initial_eps=hp["start_e"], exploration_final_eps=hp["end_e"],
            max_grad_norm=hp["max_grad_norm"], policy_kwargs={"net_arch": hp["hidden"]}, **her,
        )  # fmt: skip
    else:
        env_kwargs = {}
        train_freq = round(1 / args.updates_per_step)  # SB3 spaces its updates by env steps
        model = SAC(
            "MultiInputPolicy", gym.make(env_id), learning_rate=LR, batch_size=256, tau=TAU,
            gamma=GAMMA, train_freq=train_freq, gradient_steps=1, ent_coef="auto",
            target_entropy="auto", policy_kwargs={"net_arch": [256, 256]}, **her,
        )  # fmt: skip
    evals = []
    eval_env = make_vec_env(env_id, 5, seed=seed + 1, env_kwargs=env_kwargs)

    class Evaluations(BaseCallback):
        """The greedy policy's success every ``--eval-every`` env steps, inside one
        ``learn`` call (so SB3's schedules, epsilon among them, span the whole run)."""

        def _on_step(self) -> bool:
            if self.num_timesteps % args.eval_every == 0:
                result = evaluate(lambda obs: model.predict(obs, deterministic=True)[0],
                                  eval_env, EVAL_EPISODES, seed=seed + 1_000_003)  # fmt: skip
                evals.append((self.num_timesteps, result["success_rate"]))
            return True

    model.learn(total_timesteps=args.steps, callback=Evaluations())
    eval_env.close()
    from omegaconf import OmegaConf

    run_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create({
        "algo": {"name": SB3_ALGO[args.algo],
                 "library": f"stable-baselines3 {stable_baselines3.__version__}",
                 "learning_starts": args.learning_starts},
        "env": {"id": env_id}, "seed": seed, "total_steps": args.steps,
    }), run_dir / "config.yaml")  # fmt: skip
    with (run_dir / "eval.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step", "eval/success_rate"])
        writer.writerows(evals)
    return evals


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", default="sac", choices=["sac", "dqn"])
    parser.add_argument("--env", default=None,
                        help="the goal task (default: PandaReach; BitFlipping with --algo dqn)")  # fmt: skip
    parser.add_argument("--n-bits", type=int, default=None,
                        help="BitFlipping's bits (--algo dqn; default 10)")  # fmt: skip
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--learning-starts", type=int, default=1000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=None,
                        help="rlcore_her, sb3_her and rlcore_<algo> (no relabelling); default all")  # fmt: skip
    parser.add_argument("--run-dir", default="runs/her_bench")
    parser.add_argument("--out", default=None, help="JSON (default: <run dir>/her_bench.json)")
    parser.add_argument(
        "--updates-per-step",
        type=float,
        default=1.0,
        help="gradient updates per env step (SB3: one update every 1/x steps)",
    )
    parser.add_argument(
        "--normalize-obs",
        action="store_true",
        help="rlcore's in-agent normaliser (algo.normalize_obs): rlcore only",
    )
    parser.add_argument(
        "--clip-return",
        action="store_true",
        help="clip rlcore's TD target to [-1/(1-gamma), 0] (baselines' HER clip_return): rlcore only",
    )
    parser.add_argument("--compile", default="false", choices=["true", "false", "auto"])
    args = parser.parse_args(argv)
    args.env = args.env or ("BitFlipping" if args.algo == "dqn" else "PandaReach")
    if args.algo == "dqn":
        from rlcore.envs.bitflip import ENV_ID
        from rlcore.envs.make import resolve_env_id

        if resolve_env_id(args.env) != ENV_ID:
            parser.error(f"--algo dqn runs on BitFlipping (discrete actions), not {args.env}")
        args.n_bits = 10 if args.n_bits is None else args.n_bits
        if args.n_bits < 1:
            parser.error(f"--n-bits {args.n_bits}: at least 1")
    elif args.n_bits is not None:
        parser.error("--n-bits is BitFlipping's option (--algo dqn)")
    if args.steps <= args.learning_starts:
        parser.error(f"--steps {args.steps} <= --learning-starts {args.learning_starts}: "
                     "no update would happen")  # fmt: skip
    if args.eval_every < 1 or args.eval_every > args.steps:
        parser.error(f"--eval-every {args.eval_every}: between 1 and --steps")
    known = ["rlcore_her", "sb3_her", f"rlcore_{args.algo}"]
    args.methods = args.methods or known
    if set(args.methods) - set(known):
        parser.error(f"--methods with --algo {args.algo}: choose from {known}")
    if args.algo == "dqn" and (args.clip_return or args.normalize_obs or args.updates_per_step != 1):
        parser.error("--clip-return, --normalize-obs and --updates-per-step are SAC's options")
    if args.clip_return and "sb3_her" in args.methods:
        parser.error("--clip-return has no SB3 counterpart; drop sb3_her")
    if args.normalize_obs and "sb3_her" in args.methods:
        parser.error("--normalize-obs has no SB3 counterpart with HER; drop sb3_her")
    if (
        "sb3_her" in args.methods
        and abs(1 / args.updates_per_step - round(1 / args.updates_per_step)) > 1e-9
    ):
        parser.error("--updates-per-step must be 1/n for SB3 (one update every n steps)")
    root = Path(args.run_dir)
    out = Path(args.out) if args.out else root / "her_bench.json"
    record: dict[str, Any] = json.loads(out.read_text()) if out.is_file() else {"runs": {}}
    record |= {"lscpu": cpu_info(), "cpu_count": os.cpu_count(), "env": args.env,
               "algo": args.algo, **({"n_bits": args.n_bits} if args.algo == "dqn" else {}),
               "steps": args.steps, "eval_episodes": EVAL_EPISODES,
               "updates_per_step": args.updates_per_step, "normalize_obs": args.normalize_obs,
               "learning_starts": args.learning_starts}  # fmt: skip
    for seed in args.seeds:
        for method in args.methods:
            run_dir = root / args.env.lower() / f"{method}_seed{seed}"
            start = time.perf_counter()
            if method == "sb3_her":
                evals = run_sb3(args.env, seed, run_dir, args)
            else:
                evals = run_rlcore(args.env, method == "rlcore_her", seed, run_dir, args)
            seconds = time.perf_counter() - start
            record["runs"][f"{method}/seed{seed}"] = {"evals": evals, "seconds": seconds}
            print(f"{args.env} {method} seed {seed}: success "
                  f"{' '.join(f'{s:.2f}' for _, s in evals)} ({seconds:.0f} s)", flush=True)  # fmt: skip
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
