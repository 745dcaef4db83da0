"""Atari learning curves side by side: rlcore's training episodes next to CleanRL's, at
the same env-step (frame) counts, from runs made at the same budget on the same machine.

    python -m rlcore.benchmarks.atari_curves --rlcore <run dir> [<run dir> ...] \\
        --cleanrl <stdout log> [<stdout log> ...] [--bin 50000] [--out <json>]

``--rlcore``: rlcore run directories (their train.csv: ``train/game_return``, each whole
game's raw score at the env step it ended, as CleanRL's envpool scripts report theirs;
runs logged before that column existed fall back to ``train/episode_return``, a life's
clipped return, and the table says so). ``--cleanrl``: the standard output of CleanRL's
``ppo_atari_envpool.py`` / ``dqn_atari.py`` runs (their ``global_step=N,
episodic_return=R`` lines; DQN prints R as a one-element array). Each run's episodes are
averaged per bin of ``--bin`` env steps (4 frames each); the table gives, per library,
the mean and standard deviation of those run means, and the episode count. With
``train/game_return`` the two columns count the same thing on every game; the fallback
matches CleanRL's only on games without lives whose rewards are already -1 / 0 / +1
(Pong). Writes JSON with lscpu's model and flags.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
from collections.abc import Sequence
from pathlib import Path
from statistics import mean, pstdev
from typing import Any

from rlcore.benchmarks.runs import cpu_info

EPISODE = re.compile(r"global_step=(\d+), episodic_return=\[?\s*(-?[\d.]+(?:e[-+]?\d+)?)")


GAME, LIFE = "train/game_return", "train/episode_return"


def rlcore_episodes(run_dir: Path) -> tuple[list[tuple[int, float]], str]:
    """(env step, return) of every whole game of an rlcore run (``train/game_return``), or
    of every training episode where the run logged no game scores; and the column read."""
    with open(run_dir / "train.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    column = GAME if any(row.get(GAME) for row in rows) else LIFE
    return [(int(row["step"]), float(row[column])) for row in rows if row.get(column)], column


def cleanrl_episodes(log: Path) -> list[tuple[int, float]]:
    """(global step, episodic return) of every episode a CleanRL run printed."""
    return [(int(step), float(value)) for step, value in EPISODE.findall(log.read_text())]


def binned(runs: Sequence[list[tuple[int, float]]], width: int, end: int) -> list[dict[str, Any]]:
    """Per bin [k width, (k + 1) width): the mean over runs of each run's mean episode
    return in the bin (runs without an episode there left out), their spread, the count."""
    rows = []
    for start in range(0, end, width):
        means, count = [], 0
        for episodes in runs:
            inside = [value for step, value in episodes if start <= step < start + width]
            count += len(inside)
            if inside:
                means.append(mean(inside))
        rows.append({"from": start, "to": start + width, "runs": len(means), "episodes": count,
                     "mean": mean(means) if means else None,
                     "std": pstdev(means) if means else None})  # fmt: skip
    return rows


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rlcore", nargs="+", type=Path, required=True)
    parser.add_argument("--cleanrl", nargs="+", type=Path, required=True)
    parser.add_argument("--bin", type=int, default=50_000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    read = [rlcore_episodes(path) for path in args.rlcore]
    ours, columns = [episodes for episodes, _ in read], sorted({column for _, column in read})
    if columns != [GAME]:
        print(f"note: rlcore runs read from {' and '.join(columns)}"
              + (" (a life's clipped return, not a game's score)" if LIFE in columns else ""))  # fmt: skip
    theirs = [cleanrl_episodes(path) for path in args.cleanrl]
    for path, episodes in [*zip(args.rlcore, ours), *zip(args.cleanrl, theirs)]:
        if not episodes:
            raise SystemExit(f"{path}: no training episodes found")
    end = max(step for episodes in [*ours, *theirs] for step, _ in episodes) + 1
    table = {"rlcore": binned(ours, args.bin, end), "cleanrl": binned(theirs, args.bin, end)}

    def cell(row: dict[str, Any]) -> str:
        if row["mean"] is None:
            return "-"
        return f"{row['mean']:.2f} +- {row['std']:.2f} ({row['episodes']})"

    print(f"| env steps (frames) | rlcore ({len(ours)} runs) | CleanRL ({len(theirs)} runs) |")
    print("|---|---|---|")
    for mine, other in zip(table["rlcore"], table["cleanrl"], strict=True):
        span = f"{mine['from']:,}-{mine['to']:,} ({4 * mine['from']:,}-{4 * mine['to']:,})"
        print(f"| {span} | {cell(mine)} | {cell(other)} |")
    result = {"bin": args.bin, "rlcore_runs": [str(p) for p in args.rlcore],
              "cleanrl_logs": [str(p) for p in args.cleanrl], "rlcore_columns": columns,
              "table": table,
              "cpu": cpu_info()}  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
        print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
