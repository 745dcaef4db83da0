"""D4RL-style AntMaze datasets, recorded here: a goal-reaching Ant driven through a maze by
waypoints, in gymnasium-robotics' ``AntMaze`` (MuJoCo 4).

    python -m rlcore.offline.antmaze variant=umaze-diverse policy=<goal-reaching run or .pt> \\
        steps=1000000 dataset_id=local/antmaze/umaze-diverse-v0 [seed=0] [noise=0.0] \\
        [sample=false] [max_turn=1.0] [threads=auto]
    python -m rlcore.offline.antmaze trial=umaze policy=<goal-reaching run or .pt> episodes=10

``trial=<maze>`` records nothing: it drives the policy from the maze's start to its goal
for ``episodes`` evaluation episodes and prints the share that reach it (is the policy good
enough to record with?).

D4RL (Fu et al., 2020, section 5 and appendix C) records AntMaze with "a goal-reaching
policy" for the Ant and "a high-level waypoint planner" that steers it through the maze to
commanded goals; the rewards are sparse with respect to the *evaluation* goal (1 within
0.5 m of it; gymnasium-robotics: 0.45 m), not the commanded one. The variants:

- ``umaze``: the commanded goal is the evaluation goal, every episode starts at the
  evaluation start (D4RL's antmaze-umaze).
- ``umaze-diverse``, ``medium-diverse``: episodes start in a random open cell and the Ant is
  commanded to random open cells, a new one each time it reaches one (D4RL's "diverse").
- ``medium-play``: starts and commanded goals drawn from hand-picked cells (D4RL's "play";
  D4RL does not list its cells, ``PLAY_CELLS`` are ours).

The goal-reaching policy is either an agent trained on ``AntGoal-v0``
(``rlcore.envs.antmaze``: the same Ant body on an open floor, walking to goal points; it
reads ``policy_input``: the Ant's 27 numbers and the waypoint's offset) or an agent
trained on ``Ant-v5`` with ``include_cfrc_ext_in_observation=False`` (running along +x),
shown the world turned so that the waypoint lies along its +x (``world_turned``); the
run's env says which (``policy_frame``). The planner (``next_waypoint``) is a breadth-first search over the
maze's cells: the target is the centre of the next cell on a shortest path from the Ant's
cell, or the commanded goal itself in the goal's cell.

The envs are ``AntMazeUMazeEval-v0`` and ``AntMazeMediumEval-v0`` (``rlcore.envs.antmaze``:
D4RL's evaluation maps and observation; an episode ends at the goal). A dataset is recorded
with ``continuing_task=True`` (Minari's AntMaze datasets: the Ant may pass through the goal),
its dict observation flattened (achieved goal = the Ant's xy, desired goal = the evaluation
goal, the 27 numbers: 31 in all) as the offline algorithms and ``env.flatten_obs=true``
read it; same seed, same bytes.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from rlcore.commands import print_help_if_asked
from rlcore.envs.antmaze import (
    ANT_GOAL_ID,
    ANT_GOAL_SYMMETRIC_ID,
    ANT_GOAL_TURNED_ID,
    EPISODE_STEPS,
    EVAL_IDS,
    EVAL_MAPS,
    FRAMES,
    G,
    R,
    policy_input,
    quarter_turned_action,
    steered_direction,
    symmetric_view,
    world_turned,
)
from rlcore.offline.cli import UsageError, bool_arg, number_arg, parse_args, seed_arg
from rlcore.offline.datasets import DatasetError
from rlcore.threads import AUTO, apply_threads

# medium-play's hand-picked cells (row, column): the corners and the middle of the maze
PLAY_CELLS = ((1, 1), (1, 6), (2, 4), (4, 1), (4, 6), (6, 3), (6, 6))


@dataclass(frozen=True)
class Variant:
    """A dataset variant: its maze and how starts and commanded goals are chosen
    (``eval``: the map's start / goal cell; ``play``: ``PLAY_CELLS``; ``diverse``: any open
    cell)."""

    maze: str
    cells: str


VARIANTS = {
    "umaze": Variant("umaze", "eval"),
    "umaze-diverse": Variant("umaze", "diverse"),
    "medium-play": Variant("medium", "play"),
    "medium-diverse": Variant("medium", "diverse"),
}


def open_cells(maze_map: Sequence[Sequence[Any]]) -> list[tuple[int, int]]:
    """Every cell (row, column) that is not a wall, in row-major order."""
    return [(r, c) for r, row in enumerate(maze_map) for c, cell in enumerate(row) if cell != 1]


def marked_cell(maze_map: Sequence[Sequence[Any]], mark: str) -> tuple[int, int]:
    """The one cell marked ``mark`` (``r`` or ``g``)."""
    cells = [(r, c) for r, row in enumerate(maze_map) for c, cell in enumerate(row) if cell == mark]
    if len(cells) != 1:
        raise ValueError(f"the map has {len(cells)} cells marked '{mark}', expected 1")
    return cells[0]


def next_cell(
    maze_map: Sequence[Sequence[Any]], start: tuple[int, int], goal: tuple[int, int]
) -> tuple[int, int]:
    """The cell after ``start`` on a shortest path to ``goal`` (moves to the 4 neighbours;
    ties broken in the order up, down, left, right); ``goal`` itself when ``start`` is it.
    A start inside a wall (the Ant's torso over a wall's edge) steps to its nearest open
    neighbour on a shortest path too."""
    if start == goal:
        return goal
    rows, cols = len(maze_map), len(maze_map[0])
    # search backwards from the goal: distance of every open cell to it
    distance = {goal: 0}
    frontier = deque([goal])
    while frontier:
        cell = frontier.popleft()
        for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
            r, c = cell[0] + dr, cell[1] + dc
            if 0 <= r < rows and 0 <= c < cols and maze_map[r][c] != 1 and (r, c) not in distance:
                distance[(r, c)] = distance[cell] + 1
                frontier.append((r, c))
    if start not in distance and maze_map[start[0]][start[1]] != 1:
        raise ValueError(f"no path from cell {start} to cell {goal}")
    best: tuple[int, int] | None = None
    for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
        neighbour = (start[0] + dr, start[1] + dc)
        if neighbour in distance and (best is None or distance[neighbour] < distance[best]):
            best = neighbour
    if best is None:
        raise ValueError(f"cell {start} has no open neighbour leading to {goal}")
    return best


class CommandedMaze(gym.Wrapper):
    """An AntMaze env whose episodes start, and whose Ant is commanded, as a ``Variant``
    says. The evaluation goal stays the env's (it defines the reward); ``commanded_goal``
    is where the planner steers, re-drawn each time the Ant comes within ``goal_radius``
    of it (``diverse`` and ``play``)."""

    def __init__(self, env: gym.Env, variant: Variant, goal_radius: float = 0.5) -> None:
        super().__init__(env)
        self.variant = variant
        self.goal_radius = goal_radius
        self.maze_map = EVAL_MAPS[variant.maze]
        self.goal_cell = marked_cell(self.maze_map, G)
        self.start_cell = marked_cell(self.maze_map, R)
        if variant.cells == "play":
            self.cells = list(PLAY_CELLS)
        else:
            self.cells = open_cells(self.maze_map)
        self.rng = np.random.default_rng(0)
        self.commanded_goal = np.zeros(2)

    @property
    def maze(self) -> Any:
        """gymnasium-robotics' ``Maze`` (cell <-> xy conversions)."""
        return self.env.unwrapped.maze

    def _draw_cell(self, avoid: tuple[int, int] | None = None) -> tuple[int, int]:
        choices = [cell for cell in self.cells if cell != avoid] or self.cells
        return choices[int(self.rng.integers(len(choices)))]

    def _command(self, cell: tuple[int, int]) -> None:
        self.commanded_goal = np.asarray(self.maze.cell_rowcol_to_xy(np.array(cell)), float)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        start = self.start_cell if self.variant.cells == "eval" else self._draw_cell()
        obs, info = self.env.reset(
            seed=seed,
            options={"goal_cell": np.array(self.goal_cell), "reset_cell": np.array(start)},
        )
        if self.variant.cells == "eval":
            self.commanded_goal = np.asarray(self.env.unwrapped.goal, float).copy()
        else:
            self._command(self._draw_cell(avoid=start))
        return obs, info

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        xy = np.asarray(obs["achieved_goal"], float)
        if (
            self.variant.cells != "eval"
            and np.linalg.norm(xy - self.commanded_goal) <= self.goal_radius
        ):
            here = tuple(int(v) for v in self.maze.cell_xy_to_rowcol(xy))
            self._command(self._draw_cell(avoid=here))
        info["commanded_goal"] = self.commanded_goal.copy()
        return obs, reward, terminated, truncated, info


def waypoint(
    maze: Any, maze_map: Sequence[Sequence[Any]], xy: np.ndarray, goal: np.ndarray
) -> np.ndarray:
    """Where the Ant at ``xy`` should walk to reach ``goal``: the centre of the next cell on
    a shortest path, or ``goal`` itself once in the goal's cell."""
    here = tuple(int(v) for v in maze.cell_xy_to_rowcol(np.asarray(xy)))
    goal_cell = tuple(int(v) for v in maze.cell_xy_to_rowcol(np.asarray(goal)))
    rows, cols = len(maze_map), len(maze_map[0])
    here = (min(max(here[0], 0), rows - 1), min(max(here[1], 0), cols - 1))
    if here == goal_cell:
        return np.asarray(goal, dtype=np.float64)
    return np.asarray(maze.cell_rowcol_to_xy(np.array(next_cell(maze_map, here, goal_cell))), float)


def driver(
    env: CommandedMaze,
    dict_space: gym.spaces.Dict,
    goal_reacher: Callable[[np.ndarray], np.ndarray],
    frame: str = "goal",
    max_turn: float = 1.0,
) -> Callable[[np.ndarray], np.ndarray]:
    """The planner and the goal-reaching policy as one policy of the flattened observation
    (it reads ``env.commanded_goal``, the wrapper's current command). ``frame``: ``goal``,
    a policy of ``AntGoal-v0`` (the 27 numbers and the waypoint's offset,
    ``policy_input``); ``turned``, a policy that runs along +x (``Ant-v5`` without contact
    forces), shown the world turned towards the waypoint (``world_turned``); ``symmetric``,
    the same runner shown its body relabelled by quarter turns first (``symmetric_view``),
    its action mapped back (``quarter_turned_action``). A runner shown a direction far from
    where it runs loses its gait (it trained with the +x direction always ahead), so the
    direction shown is at most ``max_turn`` radians from its velocity's (the waypoint's own
    when it moves slower than 0.5 m/s): it turns like a car. Measured with an Ant-v5 SAC
    runner at 168k steps on the U maze (6 episodes each): the waypoint's direction shown as
    it is reached the goal in 0 episodes (the Ant stops or flips at the corners),
    ``max_turn`` 0.75 / 1.0 / 1.5 / 2.0 in 1 / 2 / 0 / 0. The committed runner, 30
    episodes at ``max_turn`` 1.0, seed 0: ``turned`` 7, ``symmetric`` 14."""
    if frame not in FRAMES:
        raise ValueError(f"frame={frame!r}: one of {FRAMES}")

    def act(flat_obs: np.ndarray) -> np.ndarray:
        obs = gym.spaces.unflatten(dict_space, np.asarray(flat_obs, dtype=np.float64))
        xy = np.asarray(obs["achieved_goal"], np.float64)
        target = waypoint(env.maze, env.maze_map, xy, env.commanded_goal)
        proprio = np.asarray(obs["observation"], np.float64)
        if frame == "goal":
            return goal_reacher(policy_input(proprio, xy, target).astype(np.float32))
        velocity = proprio[13:15]  # world x, y
        if frame == "turned":
            direction = steered_direction(velocity, target - xy, max_turn)
            return goal_reacher(world_turned(proprio, direction).astype(np.float32))
        seen, turns = symmetric_view(proprio, velocity, target - xy, max_turn)
        action = np.asarray(goal_reacher(seen.astype(np.float32)), np.float64)
        return quarter_turned_action(action, turns).astype(np.float32)

    return act


RUNNER_FRAMES = ("symmetric", "turned")  # how the recorder may show an Ant-v5 runner its goal


def policy_frame(path: str, runner_frame: str = "symmetric") -> str:
    """The ``frame`` of a trained goal-reaching policy: ``goal`` for an ``AntGoal-v0`` run,
    ``turned`` / ``symmetric`` for an ``AntGoalTurned-v0`` / ``AntGoalSymmetric-v0`` run,
    and ``runner_frame`` (either) for an ``Ant-v5`` run whose observation has no contact
    forces (it runs along +x)."""
    from rlcore.checkpoint import load_checkpoint

    if runner_frame not in RUNNER_FRAMES:
        raise UsageError(f"frame={runner_frame}: one of {', '.join(RUNNER_FRAMES)}")
    env = load_checkpoint(path)["config"]["env"]
    env_id = str(env.get("id") or env.get("name"))
    trained = {
        ANT_GOAL_ID: "goal",
        ANT_GOAL_TURNED_ID: "turned",
        ANT_GOAL_SYMMETRIC_ID: "symmetric",
    }
    if env_id in trained:
        return trained[env_id]
    kwargs = env.get("kwargs") or {}
    if env_id == "Ant-v5" and kwargs.get("include_cfrc_ext_in_observation") is False:
        return runner_frame
    raise UsageError(
        f"policy={path} was trained on {env_id} {dict(kwargs)}; the goal-reaching policy is "
        f"an {ANT_GOAL_ID}, {ANT_GOAL_TURNED_ID} or {ANT_GOAL_SYMMETRIC_ID} run, or an Ant-v5 "
        "run with env.kwargs.include_cfrc_ext_in_observation=false (it runs along +x)"
    )


def make_recording_env(variant: Variant) -> tuple[gym.Env, CommandedMaze]:
    """The flattened, continuing AntMaze env a variant records in, and its command wrapper."""
    from rlcore.envs.third_party import adapt

    adapt()
    commanded = CommandedMaze(gym.make(EVAL_IDS[variant.maze], continuing_task=True), variant)
    return gym.wrappers.FlattenObservation(commanded), commanded


def record(
    variant: str,
    policy: str | Callable[[np.ndarray], np.ndarray],
    steps: int,
    dataset_id: str,
    seed: int = 0,
    noise: float = 0.0,
    sample: bool = False,
    frame: str = "goal",
    max_turn: float = 1.0,
    runner_frame: str = "symmetric",
) -> dict[str, Any]:
    """Record ``steps`` transitions of ``variant`` as a Minari dataset; returns its summary.
    ``policy``: a goal-reaching run / agent file (``load_policy``; its ``frame`` read from
    its env, ``policy_frame``; ``runner_frame`` for an Ant-v5 runner) or a callable
    reading ``frame``'s input."""
    import torch

    from rlcore.offline.recording import check_new_dataset_id, rollout, write_dataset
    from rlcore.policies import load_policy

    if variant not in VARIANTS:
        raise UsageError(f"variant={variant}: one of {', '.join(VARIANTS)}")
    if steps < 1:
        raise UsageError("steps=<n> (n >= 1)")
    if noise < 0:
        raise UsageError("noise must be >= 0")
    check_new_dataset_id(dataset_id)
    spec = VARIANTS[variant]
    if isinstance(policy, str):
        frame = policy_frame(policy, runner_frame)
        goal_reacher = load_policy(policy, deterministic=not sample)
    else:
        goal_reacher = policy
    env, commanded = make_recording_env(spec)
    with env, torch.random.fork_rng():
        torch.manual_seed(seed)
        act = driver(commanded, commanded.observation_space, goal_reacher, frame, max_turn)
        episodes = rollout(env, act, steps, seed=seed, noise=noise)
        source = policy if isinstance(policy, str) else "a given goal-reaching policy"
        algorithm = (
            f"waypoint planner + {'sampled' if sample else 'deterministic'} {source} "
            f"(frame {frame}, max_turn {max_turn})"
        )
        if noise > 0:
            algorithm += f" + Gaussian noise {noise}"
    # the dataset's env spec: the flattened continuing maze it was recorded in (the command
    # wrapper, which drives the recording, is not part of the task)
    with gym.wrappers.FlattenObservation(
        gym.make(EVAL_IDS[spec.maze], continuing_task=True)
    ) as spec_env:
        path = write_dataset(
            dataset_id,
            episodes,
            spec_env,
            algorithm_name=algorithm,
            description=(
                f"D4RL-style antmaze-{variant} on {EVAL_IDS[spec.maze]} (continuing), seed {seed} "
                "(rlcore.offline.antmaze)"
            ),
            ref_min_score=0.0,  # D4RL's antmaze references: a return of 1 is reaching the goal
            ref_max_score=1.0,
        )
    reached = [bool(ep.rewards.max() > 0) for ep in episodes]
    return {
        "dataset_id": dataset_id,
        "variant": variant,
        "env_id": EVAL_IDS[spec.maze],
        "path": str(path),
        "episodes": len(episodes),
        "steps": int(sum(len(ep) for ep in episodes)),
        "reward_rate": float(np.mean(np.concatenate([ep.rewards for ep in episodes]))),
        "episodes_reaching_goal": float(np.mean(reached)),
    }


def trial(
    maze: str,
    policy: str | Callable[[np.ndarray], np.ndarray],
    episodes: int,
    seed: int = 0,
    sample: bool = False,
    frame: str = "goal",
    max_turn: float = 1.0,
    runner_frame: str = "symmetric",
) -> dict[str, Any]:
    """Drive the goal-reaching ``policy`` through ``episodes`` evaluation episodes of
    ``maze`` (its start to its goal, 700 / 1,000 steps) and return the share that reach the
    goal: whether a policy is good enough to record with, before recording. Nothing is
    written."""
    import torch

    from rlcore.offline.recording import rollout
    from rlcore.policies import load_policy

    if maze not in EVAL_IDS:
        raise UsageError(f"maze={maze}: one of {', '.join(EVAL_IDS)}")
    if episodes < 1:
        raise UsageError("episodes=<n> (n >= 1)")
    if isinstance(policy, str):
        frame = policy_frame(policy, runner_frame)
        goal_reacher = load_policy(policy, deterministic=not sample)
    else:
        goal_reacher = policy
    env, commanded = make_recording_env(Variant(maze, "eval"))
    with env, torch.random.fork_rng():
        torch.manual_seed(seed)
        act = driver(commanded, commanded.observation_space, goal_reacher, frame, max_turn)
        rolled = rollout(env, act, episodes * EPISODE_STEPS[maze], seed=seed)
    reached = [bool(ep.rewards.max() > 0) for ep in rolled]
    first = [int(np.argmax(ep.rewards > 0)) for ep in rolled if ep.rewards.max() > 0]
    return {
        "maze": maze,
        "episodes": len(rolled),
        "success_rate": float(np.mean(reached)),
        "mean_steps_to_goal": float(np.mean(first)) if first else None,
    }


USAGE = (
    "usage: python -m rlcore.offline.antmaze trial=<umaze | medium> policy=<run or agent "
    "file> episodes=<n> [seed=0] [sample=false] [max_turn=1.0] [frame=symmetric]\n"
    "   or: python -m rlcore.offline.antmaze variant=<umaze | umaze-diverse | medium-play | "
    "medium-diverse> policy=<AntGoal run dir or agent file> steps=<n> "
    "dataset_id=<namespace/name-vN> [seed=0] [noise=0.0] [sample=false] [max_turn=1.0] "
    "[frame=symmetric] [threads=auto]"
)
KEYS = {
    "trial",
    "episodes",
    "variant",
    "policy",
    "steps",
    "dataset_id",
    "seed",
    "noise",
    "sample",
    "max_turn",
    "frame",
    "threads",
}


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    """Command line: record one AntMaze dataset and print its summary."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if print_help_if_asked(argv, f"{__doc__}\n{USAGE}"):
        return None
    try:
        if any(arg.startswith("trial=") for arg in argv):
            args = parse_args(argv, KEYS, required=("trial", "policy", "episodes"))
            apply_threads(args.get("threads", AUTO))
            summary = trial(
                args["trial"],
                args["policy"],
                number_arg(args, "episodes", int),
                seed=seed_arg(args),
                sample=bool_arg(args, "sample", False),
                max_turn=number_arg(args, "max_turn", float, 1.0),
                runner_frame=args.get("frame", "symmetric"),
            )
            for key, value in summary.items():
                print(f"{key}: {value}")
            return summary
        args = parse_args(argv, KEYS, required=("variant", "policy", "steps", "dataset_id"))
        apply_threads(args.get("threads", AUTO))
        summary = record(
            args["variant"],
            args["policy"],
            number_arg(args, "steps", int),
            args["dataset_id"],
            seed=seed_arg(args),
            noise=number_arg(args, "noise", float, 0.0),
            sample=bool_arg(args, "sample", False),
            max_turn=number_arg(args, "max_turn", float, 1.0),
            runner_frame=args.get("frame", "symmetric"),
        )
    except (UsageError, DatasetError) as error:
        print(f"error: {error}\n{USAGE}", file=sys.stderr)
        raise SystemExit(2) from error
    for key, value in summary.items():
        print(f"{key}: {value}")
    return summary


if __name__ == "__main__":
    main()
