"""Reports over finished runs: grouped scores with confidence intervals, figures, Markdown.

    python -m rlcore.report runs/multirun/2026-11-25_17-25-00
    python -m rlcore.report runs/sac runs/td3 --metric eval/return --last-k 3 --out report/

Runs are found recursively (any folder holding ``config.yaml`` and ``eval.csv``, as
``rlcore/train.py`` writes them) and grouped by their saved config: (algorithm, env id,
dataset) plus every other setting that differs between runs of that triple, except the
per-run keys of ``PER_RUN_KEYS`` (seed, run dir, resume, device...). Per group the report
gives the seeds, the final and the best score as IQM, mean and median with stratified
bootstrap confidence intervals, and the normalised scores where a reference exists.

Runs that stopped before their end (``RunEnd``: train.log's last session has no
``finished:`` line) and runs of one group that share a seed stop the command line unless
``--incomplete include|exclude`` / ``--duplicate-seeds keep`` ask otherwise; included,
they are marked in the table, report.md and report.json (docs/reports.md).

The estimators follow rliable (Agarwal et al. 2021, "Deep RL at the Edge of the
Statistical Precipice"; google-research/rliable), written here on numpy/scipy because
rliable 1.2.0 does not import with pandas 3:

- scores are a list of tasks, each an array of per-run scores (rliable's runs x tasks
  matrix; tasks may have different numbers of runs here);
- IQM = ``scipy.stats.trim_mean(all scores, 0.25)`` over all runs x tasks (rliable's
  ``aggregate_iqm``: ``int(0.25 n)`` scores cut from each end, so three runs give their
  plain mean; fractional ends are not weighted);
- mean = mean over tasks of per-task mean scores; median = median over tasks of per-task
  mean scores (rliable's ``aggregate_mean`` / ``aggregate_median``);
- stratified bootstrap = resample runs with replacement within each task, never across
  tasks (rliable's ``StratifiedBootstrap``); percentile intervals (2.5 / 97.5 % for 95 %);
- performance profile = fraction of runs with score > tau, averaged over tasks
  (rliable's ``run_score_distribution``), with the same bootstrap band.

Departures from rliable: with a single task (one group's seeds) the median is taken over
runs, since rliable's median of one per-task mean is the mean; tasks may hold different
numbers of runs; 2000 bootstrap repetitions by default (rliable: 50,000); one set of
resampled indices serves every statistic of a key (rliable draws per statistic).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf
from scipy.stats import trim_mean

from rlcore.evaluation import ScoreReferenceError, pinned_reference_scores
from rlcore.logging import read_csv

# Keys that differ from run to run without making a different experiment.
PER_RUN_KEYS = (
    "seed",
    "run_dir",
    "resume",
    "device",
    "threads",
    "checkpoint_every",
    "keep_agent_snapshots",
    "logger",
    "algo.compile",
    "algo.fused_optimizer",
    "algo.dynamics_from",  # MOPO / MOREC: each seed's run starts from its own fitted model
)
# Keys copied from another key by train.py: they group runs but are left out of labels.
DERIVED_KEYS = ("algo.total_steps",)
IDENTITY_KEYS = ("algo.name", "env.id", "dataset")
NORMALISABLE = ("eval/return", "eval/best_return", "eval/return_min", "eval/return_max")
STATISTICS = ("iqm", "mean", "median")
STAT_TITLES = {"iqm": "IQM", "mean": "Mean", "median": "Median"}


class ReportError(ValueError):
    """Input a user can fix: no runs found, an unknown metric, an unreadable file."""


# --------------------------------------------------------------------------- estimators


def iqm(scores: np.ndarray, axis: int | None = -1) -> np.ndarray | float:
    """Interquartile mean as rliable defines it: the 25 % trimmed mean."""
    return trim_mean(scores, proportiontocut=0.25, axis=axis)


def _task_means(scores: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """Per-task mean scores along a new last axis: (..., runs) -> (..., tasks)."""
    return np.stack([scores[..., owner == j].mean(axis=-1) for j in np.unique(owner)], -1)


def aggregate_iqm(scores: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """rliable's ``aggregate_iqm``: 25 % trimmed mean over all runs x tasks."""
    return np.asarray(iqm(scores, axis=-1))


def aggregate_mean(scores: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """rliable's ``aggregate_mean``: mean over tasks of the per-task mean scores."""
    return _task_means(scores, owner).mean(axis=-1)


def aggregate_median(scores: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """rliable's ``aggregate_median`` (median over tasks of per-task mean scores) when
    there are several tasks; with one task, the median over runs (rliable's would equal
    the mean there)."""
    if np.unique(owner).size == 1:
        return np.median(scores, axis=-1)
    return np.median(_task_means(scores, owner), axis=-1)


# name -> statistic of (..., runs) scores whose columns belong to the tasks in ``owner``;
# reducing the last axis lets one call handle every bootstrap sample
AGGREGATES: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "iqm": aggregate_iqm,
    "mean": aggregate_mean,
    "median": aggregate_median,
}

Scores = Sequence[Sequence[float]] | np.ndarray


def as_tasks(scores: Scores) -> list[np.ndarray]:
    """Scores as a list of per-task float arrays of run scores.

    A 1-D array (or a flat list) is one task; a 2-D array is rliable's (runs, tasks)
    matrix; a list of arrays is one array per task (their numbers of runs may differ).
    """
    if not isinstance(scores, np.ndarray) and all(np.ndim(t) == 0 for t in scores):
        scores = np.asarray(scores, dtype=np.float64)  # a flat list: one task
    if isinstance(scores, np.ndarray):
        if scores.ndim == 1:
            tasks = [scores]
        elif scores.ndim == 2:
            tasks = [scores[:, j] for j in range(scores.shape[1])]
        else:
            raise ValueError(f"scores must be 1-D or (runs, tasks), got shape {scores.shape}")
    else:
        tasks = list(scores)
    out = [np.asarray(t, dtype=np.float64).ravel() for t in tasks]
    if not out or any(t.size == 0 for t in out):
        raise ValueError("every task needs at least one run score")
    if any(not np.all(np.isfinite(t)) for t in out):
        raise ValueError("scores contain NaN or inf")
    return out


def stratified_bootstrap(
    scores: Scores, reps: int = 2000, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``reps`` stratified resamples: runs drawn with replacement within each task.

    Returns ``(samples, task_of_column)``: ``samples`` is (reps, total runs), its columns
    ordered task by task like the input, and ``task_of_column`` names each column's task.
    A resample never moves a score from one task to another.
    """
    tasks = as_tasks(scores)
    rng = np.random.default_rng(seed)
    blocks = [t[rng.integers(0, t.size, size=(reps, t.size))] for t in tasks]
    owner = np.concatenate([np.full(t.size, j) for j, t in enumerate(tasks)])
    return np.concatenate(blocks, axis=1), owner


def percentile_interval(samples: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """The percentile bootstrap interval of 1-D bootstrap ``samples``."""
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(samples, [alpha, 1.0 - alpha])
    return float(low), float(high)


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its confidence interval."""

    point: float
    low: float
    high: float

    def to_dict(self) -> dict[str, float]:
        return {"point": self.point, "low": self.low, "high": self.high}


def interval_estimates(
    score_dict: Mapping[str, Scores],
    statistics: Sequence[str] = STATISTICS,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, dict[str, Estimate]]:
    """rliable's ``get_interval_estimates``: ``{key: {statistic: Estimate}}``.

    Point estimates use all scores; intervals are percentile intervals over ``reps``
    stratified bootstrap resamples drawn with ``seed`` (the same seed for every key, so
    the result does not depend on the keys' order).
    """
    out: dict[str, dict[str, Estimate]] = {}
    for key, scores in score_dict.items():
        tasks = as_tasks(scores)
        samples, owner = stratified_bootstrap(tasks, reps, seed)
        out[key] = {}
        for name in statistics:
            fn = AGGREGATES[name]
            low, high = percentile_interval(fn(samples, owner), confidence)
            out[key][name] = Estimate(float(fn(np.concatenate(tasks), owner)), low, high)
    return out


def performance_profile(
    scores: Scores,
    taus: np.ndarray,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fraction of runs with score > tau (averaged over tasks) and its bootstrap band.

    Returns ``(profile, low, high)``, each of ``taus``' length.
    """
    tasks = as_tasks(scores)
    taus = np.asarray(taus, dtype=np.float64)

    def distribution(columns: np.ndarray, owner: np.ndarray) -> np.ndarray:
        above = columns[..., None] > taus  # (..., runs, taus)
        per_task = [above[..., owner == j, :].mean(axis=-2) for j in range(len(tasks))]
        return np.mean(per_task, axis=0)

    owner = np.concatenate([np.full(t.size, j) for j, t in enumerate(tasks)])
    point = distribution(np.concatenate(tasks), owner)
    samples, owner = stratified_bootstrap(tasks, reps, seed)
    boot = distribution(samples, owner)  # (reps, taus)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(boot, [alpha, 1.0 - alpha], axis=0)
    return point, low, high


def aggregate_curves(
    values: np.ndarray, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """IQM over runs at every step of ``values`` (runs, steps) and its bootstrap band.

    The runs are resampled together across steps (a resample is a set of whole curves).
    """
    values = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, values.shape[0], size=(reps, values.shape[0]))
    boot = iqm(values[idx], axis=1)  # (reps, steps)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(boot, [alpha, 1.0 - alpha], axis=0)
    return np.asarray(iqm(values, axis=0)), low, high


# --------------------------------------------------------------------------- runs


@dataclass(frozen=True)
class RunEnd:
    """How a run ended, as its folder records it.

    ``finished`` is True for a run that ended by its own rules (all its steps done,
    ``stop_at_return`` reached, ``stop_after_s`` spent) and False for one that stopped
    early (interrupted, failed, killed, or still running); ``step`` is the step it
    reached and ``planned`` the steps its config asked for (None when unknown).
    """

    finished: bool
    why: str
    step: int | None
    planned: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "finished": self.finished,
            "why": self.why,
            "step": self.step,
            "planned": self.planned,
        }


@dataclass
class Run:
    """One run directory: its flattened config and its metric tables.

    ``log`` holds the lines of its train.log that mark how a training session ended or
    began (``finished:``, ``interrupted:``, ``error:``, ``resuming from``), oldest first;
    None when the run dir has no train.log.
    """

    path: Path
    config: dict[str, Any]
    tables: dict[str, list[dict[str, float | str]]]  # csv group ("eval", "train") -> rows
    resumed: bool = False
    log: list[str] | None = None

    @property
    def seed(self) -> Any:
        return self.config.get("seed")

    @cached_property
    def end(self) -> RunEnd:
        """How the run ended (``run_end``)."""
        return run_end(self)

    def last_step(self) -> int | None:
        """The largest ``step`` any of its tables logged (None: no rows)."""
        steps = [float(r["step"]) for rows in self.tables.values() for r in rows
                 if _finite(r.get("step"))]  # fmt: skip
        return int(max(steps)) if steps else None

    def available_metrics(self) -> list[str]:
        numeric = {k for rows in self.tables.values() for r in rows for k, v in r.items()
                   if isinstance(v, float)}  # fmt: skip
        return sorted(numeric - {"step"})

    def has_metric(self, metric: str) -> bool:
        rows = self.tables.get(metric.split("/", 1)[0] if "/" in metric else "train", [])
        return any(_finite(r.get(metric)) for r in rows)

    def series(self, metric: str, x: str = "step") -> tuple[np.ndarray, np.ndarray]:
        """(x, values) of ``metric`` over the rows that have both, in x order; ``x`` is a
        column of the same table (``step``, ``eval/env_steps``, ``eval/train_seconds``)."""
        rows = self.tables.get(metric.split("/", 1)[0] if "/" in metric else "train", [])
        pairs = sorted(
            (r[x], r[metric]) for r in rows if _finite(r.get(x)) and _finite(r.get(metric))
        )
        if not pairs and x != "step" and any(_finite(r.get(metric)) for r in rows):
            raise ReportError(
                f"x-axis '{x}' not found next to '{metric}' in run {self.path} (a run "
                "logged before it existed?); available columns: "
                + ", ".join(self.available_metrics())
            )
        if not pairs:
            raise ReportError(
                f"metric '{metric}' not found in run {self.path}; available metrics: "
                + (", ".join(self.available_metrics()) or "none (empty CSV files)")
            )
        steps, values = zip(*pairs)
        return np.asarray(steps, dtype=np.float64), np.asarray(values, dtype=np.float64)


# train.log lines that end a session (rlcore.train's closing summary, its ``interrupted:``
# and ``error:`` lines) or start a resumed one; the text after the time stamp
END_MARKERS = ("finished: ", "interrupted: ", "error: ", "resuming from ")
_STAMP = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] ")
_AT_STEP = re.compile(r"(?:at step|all) ([\d,]+)")


def read_end_markers(log_file: Path) -> list[str] | None:
    """The lines of a train.log that start with one of ``END_MARKERS`` (time stamp
    removed), oldest first; None when there is no such file."""
    if not log_file.is_file():
        return None
    lines = (_STAMP.sub("", line.rstrip("\n")) for line in log_file.open(errors="replace"))
    return [line for line in lines if line.startswith(END_MARKERS)]


def planned_steps(config: Mapping[str, Any]) -> int | None:
    """The ``step`` a run of this (flattened) config ends at when nothing stops it early:
    ``total_steps``, plus ``algo.online_steps`` of offline algorithms that fine-tune
    online (their ``total_steps`` are the offline gradient steps; ``init_from=`` skips
    those). None when the config has no ``total_steps``."""
    total = config.get("total_steps", config.get("algo.total_steps"))
    if not isinstance(total, int) or isinstance(total, bool):
        return None
    online = config.get("algo.online_steps")
    if isinstance(online, int) and not isinstance(online, bool):
        return (0 if config.get("init_from") else total) + online
    return total


def _step_in(text: str) -> int | None:
    match = _AT_STEP.search(text)
    return int(match.group(1).replace(",", "")) if match else None


def _session_end(markers: Sequence[str]) -> str | None:
    """The train.log marker that ends the run's last training session: the first end
    line after the last ``resuming from``; None when that session has none (killed, out
    of memory, still running). A later ``interrupted:`` or ``error:`` line with no
    ``resuming from`` before it comes from a resume that failed before it started
    training (the run's rows are still those of the session that ended first)."""
    end: str | None = None
    for line in markers:
        if line.startswith("resuming from "):
            end = None
        elif end is None:
            end = line
    return end


def run_end(run: Run) -> RunEnd:
    """How ``run`` ended, from its train.log: the last session's ``finished:`` line (all
    steps done, ``stop_at_return`` or ``stop_after_s`` reached) means finished; an
    ``interrupted:`` or ``error:`` line, or no end line after the last start (killed,
    out of memory, or still running), means it stopped early (``_session_end``).

    Without a train.log (a trimmed copy, another library's run) the end is inferred from
    the logged rows: finished when the last step reached the planned steps, when
    ``eval/train_seconds`` reached ``stop_after_s``, or when the last ``eval/return``
    reached ``stop_at_return``; a run whose config gives no length counts as finished.
    """
    planned = planned_steps(run.config)
    last = run.last_step()
    if run.log is not None:
        end = _session_end(run.log)
        if end is None:
            after = " after its last resume" if run.log else ""
            why = f"no end line in train.log{after} (killed, crashed or still running)"
            return RunEnd(False, why, last, planned)
        if end.startswith("finished: "):
            why = end.removeprefix("finished: ").split(";")[0]
            return RunEnd(True, why, _step_in(why) or last, planned)
        step = _step_in(end) if end.startswith("interrupted: ") else None
        return RunEnd(False, end.split(";")[0], step or last, planned)
    inferred = " (no train.log: inferred from the logged rows)"
    if planned is None:
        return RunEnd(True, "length unknown (no total_steps in its config)" + inferred, last, None)
    if last is not None and last >= planned:
        return RunEnd(True, f"all {planned:,} steps done" + inferred, last, planned)
    rows = run.tables.get("eval", [])
    budget, target = run.config.get("stop_after_s"), run.config.get("stop_at_return")
    seconds = [float(r["eval/train_seconds"]) for r in rows if _finite(r.get("eval/train_seconds"))]
    if isinstance(budget, int | float) and seconds and max(seconds) >= budget:
        return RunEnd(True, f"stop_after_s={budget:g} reached" + inferred, last, planned)
    returns = [float(r["eval/return"]) for r in rows if _finite(r.get("eval/return"))]
    if isinstance(target, int | float) and returns and returns[-1] >= target:
        return RunEnd(True, f"stop_at_return={target:g} reached" + inferred, last, planned)
    rates = [float(r["eval/success_rate"]) for r in rows if _finite(r.get("eval/success_rate"))]
    rate_target = run.config.get("stop_at_success")
    if isinstance(rate_target, int | float) and rates and rates[-1] >= rate_target:
        return RunEnd(True, f"stop_at_success={rate_target:g} reached" + inferred, last, planned)
    reached = "nothing" if last is None else f"step {last:,}"
    why = f"no train.log, and it logged up to {reached} of {planned:,}"
    return RunEnd(False, why, last, planned)


def _finite(value: float | str | None) -> bool:
    """A plottable cell: a finite number (label cells such as ``eval/phase`` are not)."""
    return isinstance(value, float) and math.isfinite(value)


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, Mapping):
        if not node and prefix:
            return {prefix: "{}"}
        flat: dict[str, Any] = {}
        for key, value in node.items():
            flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    if isinstance(node, list | tuple):  # hashable, so values can be compared and grouped
        return {prefix: tuple(v if not isinstance(v, Mapping | list) else repr(v) for v in node)}
    return {prefix: node}


def find_run_dirs(path: str | Path) -> list[Path]:
    """Every folder under ``path`` (itself included) holding config.yaml and eval.csv."""
    root = Path(path)
    if not root.exists():
        raise ReportError(f"no such directory: {root}")
    if not root.is_dir():
        raise ReportError(f"not a directory: {root} (pass run directories or a sweep directory)")
    found = [
        d.parent
        for d in root.rglob("config.yaml")
        if (d.parent / "eval.csv").is_file()
        and not any(part.startswith(".") for part in d.parent.relative_to(root).parts)
    ]
    return sorted(set(found))


def load_run(path: str | Path) -> Run:
    """Read one run dir; ``config_resumed.yaml`` (the last resume's config) wins if present."""
    path = Path(path)
    resumed = (path / "config_resumed.yaml").is_file()
    config_file = path / ("config_resumed.yaml" if resumed else "config.yaml")
    try:
        config = OmegaConf.to_container(OmegaConf.load(config_file), resolve=False)
    except Exception as error:  # malformed YAML: name the file
        raise ReportError(f"cannot read {config_file}: {error}") from error
    tables = {csv.stem: read_csv(csv) for csv in sorted(path.glob("*.csv"))}
    return Run(path, _flatten(config), tables, resumed, read_end_markers(path / "train.log"))


def load_runs(paths: Sequence[str | Path]) -> list[Run]:
    """All runs under ``paths`` (run dirs or sweep dirs, searched recursively)."""
    if not paths:
        raise ReportError("no directories given")
    dirs: list[Path] = []
    for path in paths:
        found = find_run_dirs(path)
        if not found:
            raise ReportError(
                f"no runs under {path}: a run dir holds config.yaml and eval.csv "
                "(written by python -m rlcore.train)"
            )
        dirs.extend(d for d in found if d not in dirs)
    return [load_run(d) for d in dirs]


DEFAULT_METRIC = "eval/return"
SUCCESS_METRIC = "eval/success_rate"  # goal tasks log it beside the return


def split_by_metric(runs: Sequence[Run], metric: str) -> tuple[list[Run], list[Run]]:
    """(runs that logged ``metric``, runs that did not); an error when none did."""
    kept = [r for r in runs if r.has_metric(metric)]
    if not kept:
        available = sorted({m for r in runs for m in r.available_metrics()})
        raise ReportError(
            f"metric '{metric}' not found in any of the {len(runs)} run(s); available "
            "metrics: " + (", ".join(available) or "none (empty CSV files)")
        )
    return kept, [r for r in runs if not r.has_metric(metric)]


# --------------------------------------------------------------------------- grouping


def _ignored(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in PER_RUN_KEYS)


def _short_dataset(dataset: Any) -> str | None:
    if dataset in (None, "", "None"):
        return None
    text = str(dataset)
    return Path(text).name if text.endswith((".hdf5", ".h5")) or text.startswith("/") else text


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return "[" + ",".join(_show(v) for v in value) + "]"
    return "null" if value is None else str(value)


@dataclass
class Group:
    """Runs that share a config up to per-run keys."""

    algo: str
    env: str
    dataset: str | None
    overrides: dict[str, Any]  # the keys that single this group out, with their values
    runs: list[Run] = field(default_factory=list)

    @property
    def label(self) -> str:
        parts = [self.algo, self.env]
        if self.dataset:
            parts.append(self.dataset)
        parts += [f"{k}={_show(v)}" for k, v in self.overrides.items() if k not in DERIVED_KEYS]
        return " ".join(parts)

    @property
    def task(self) -> str:
        """The environment (and dataset) the group's scores belong to."""
        return self.env + (f" {self.dataset}" if self.dataset else "")

    @property
    def seeds(self) -> list[Any]:
        return sorted((r.seed for r in self.runs), key=_seed_order)

    def duplicate_seeds(self) -> dict[Any, list[Run]]:
        """Seeds that more than one of the group's runs used, with those runs."""
        by_seed: dict[Any, list[Run]] = {}
        for run in self.runs:
            by_seed.setdefault(run.seed, []).append(run)
        return {s: runs for s, runs in sorted(by_seed.items(), key=lambda kv: _seed_order(kv[0]))
                if len(runs) > 1}  # fmt: skip

    def seeds_cell(self) -> str:
        """The seeds as the table prints them: each seed once, ``(xN)`` after a seed N
        runs share, ``*`` after a seed whose run stopped early."""
        cells = []
        for seed in dict.fromkeys(self.seeds):
            runs = [r for r in self.runs if r.seed == seed]
            early = "*" if any(not r.end.finished for r in runs) else ""
            cells.append(_show(seed) + early + (f" (x{len(runs)})" if len(runs) > 1 else ""))
        return ",".join(cells)


def _seed_order(seed: Any) -> tuple[str, Any]:
    return (str(type(seed)), seed)


_MISSING = "<unset>"


def group_runs(runs: Sequence[Run]) -> list[Group]:
    """Group runs by (algo, env id, dataset) and every other differing config key.

    Keys are compared within one (algo, env, dataset) triple, so SAC's and TD3's own
    hyper-parameters do not label each other's groups; keys of ``PER_RUN_KEYS`` never
    count. A key missing from some runs counts as a differing value ("<unset>").
    """
    triples: dict[tuple[str, str, str | None], list[Run]] = {}
    for run in runs:
        algo = str(run.config.get("algo.name", "?"))
        env = str(run.config.get("env.id", run.config.get("env.name", "?")))
        triples.setdefault((algo, env, _short_dataset(run.config.get("dataset"))), []).append(run)
    groups: list[Group] = []
    for (algo, env, dataset), members in sorted(triples.items(), key=lambda kv: str(kv[0])):
        keys = sorted(
            {k for r in members for k in r.config}
            - set(IDENTITY_KEYS)
            - {k for r in members for k in r.config if _ignored(k)}
        )
        differing = [k for k in keys if len({repr(r.config.get(k, _MISSING)) for r in members}) > 1]
        by_values: dict[tuple[str, ...], Group] = {}
        for run in members:
            values = {k: run.config.get(k, _MISSING) for k in differing}
            sig = tuple(repr(v) for v in values.values())
            if sig not in by_values:
                by_values[sig] = Group(algo, env, dataset, values)
            by_values[sig].runs.append(run)
        groups.extend(sorted(by_values.values(), key=lambda g: g.label))
    return groups


def duplicate_seed_message(groups: Sequence[Group]) -> str | None:
    """What is wrong when runs of one group share a seed (None when no seed repeats):
    the group, the seed and every run dir that used it. Such runs are not independent
    samples, so counting them as n runs overstates the evidence."""
    found = [
        f"{g.label}: seed {_show(seed)} in {len(runs)} runs ("
        + ", ".join(str(r.path) for r in runs) + ")"
        for g in groups
        for seed, runs in g.duplicate_seeds().items()
    ]  # fmt: skip
    if not found:
        return None
    return (
        "runs with the same seed in one group: " + "; ".join(found)
        + " (copies, or repeats of one seed, are not independent runs)"
    )  # fmt: skip


# --------------------------------------------------------------------------- aggregation


@dataclass
class GroupResult:
    """Every number the report shows for one group."""

    group: Group
    final: dict[str, Estimate]
    best: dict[str, Estimate]
    final_scores: np.ndarray  # per run, in the order of group.runs
    best_scores: np.ndarray
    normalized_final: dict[str, Estimate] | None
    normalized_best: dict[str, Estimate] | None
    normalized_final_scores: np.ndarray | None
    reference: str  # where the normalised scores come from, or why there are none
    curve_steps: np.ndarray  # the curve's x values (the ``curve_x`` column)
    curve: tuple[np.ndarray, np.ndarray, np.ndarray]  # IQM, low, high
    auc: dict[str, Estimate] = field(default_factory=dict)
    auc_scores: np.ndarray = field(default_factory=lambda: np.zeros(0))
    curve_x: str = "step"
    # the step of each run's last evaluation (where its final score comes from)
    final_steps: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def stopped_early(self) -> list[tuple[Run, int]]:
        """The group's runs that stopped before their end, each with the step of the last
        evaluation its final score comes from."""
        return [(run, int(step)) for run, step in zip(self.group.runs, self.final_steps)
                if not run.end.finished]  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        def est(d: dict[str, Estimate] | None) -> dict[str, Any] | None:
            return None if d is None else {k: v.to_dict() for k, v in d.items()}

        return {
            "label": self.group.label,
            "algo": self.group.algo,
            "env": self.group.env,
            "dataset": self.group.dataset,
            "overrides": {k: _show(v) for k, v in self.group.overrides.items()},
            "seeds": list(self.group.seeds),
            "runs": [str(r.path) for r in self.group.runs],
            "run_ends": [r.end.to_dict() for r in self.group.runs],
            "final_step": [int(step) for step in self.final_steps],
            "incomplete": incomplete_note(self),
            "duplicate_seeds": {
                _show(s): [str(r.path) for r in runs]
                for s, runs in self.group.duplicate_seeds().items()
            },
            "final_scores": self.final_scores.tolist(),
            "best_scores": self.best_scores.tolist(),
            "auc_scores": self.auc_scores.tolist(),
            "final": est(self.final),
            "best": est(self.best),
            "auc": est(self.auc),
            "normalized_final": est(self.normalized_final),
            "normalized_best": est(self.normalized_best),
            "normalization": self.reference,
            "curve": {
                "x": self.curve_x,
                "step": self.curve_steps.tolist(),
                "iqm": self.curve[0].tolist(),
                "low": self.curve[1].tolist(),
                "high": self.curve[2].tolist(),
            },
        }


def align_curves(series: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Runs' (steps, values) on one step grid: (steps, values of shape (runs, steps)).

    Identical step lists are used as they are; otherwise every run is linearly
    interpolated onto the union of all steps inside the range every run covers (a
    run that stopped early shortens the curve rather than being extrapolated).
    """
    first_steps = series[0][0]
    if all(s.shape == first_steps.shape and np.array_equal(s, first_steps) for s, _ in series):
        return first_steps, np.stack([v for _, v in series])
    start = max(s[0] for s, _ in series)
    stop = min(s[-1] for s, _ in series)
    grid = np.unique(np.concatenate([s for s, _ in series]))
    grid = grid[(grid >= start) & (grid <= stop)]
    if grid.size == 0:
        grid = np.asarray([stop])
    return grid, np.stack([np.interp(grid, s, v) for s, v in series])


References = Callable[[str], tuple[float, float]]
LOGGED = "logged eval/normalized_score"


def d4rl_references(env_or_dataset_id: str) -> tuple[float, float]:
    """(random, expert) returns from the pinned D4RL table (``rlcore.evaluate``).

    Raises ValueError (ScoreReferenceError) when the id has no entry.
    """
    pinned = pinned_reference_scores(env_or_dataset_id)
    if pinned is None:
        raise ScoreReferenceError(f"'{env_or_dataset_id}' is not in the pinned D4RL table")
    return pinned


def _normalised_scores(
    group: Group,
    metric: str,
    final: np.ndarray,
    best: np.ndarray,
    last_k: int,
    references: References | None,
) -> tuple[np.ndarray | None, np.ndarray | None, str]:
    """(normalised final, normalised best, where the reference comes from or why none).

    A run that logged ``eval/normalized_score`` (offline runs: D4RL table or the
    dataset's Minari references) is normalised by that column; otherwise the env id
    (then the dataset) is looked up in ``references``.
    """
    if metric not in NORMALISABLE:
        return None, None, f"not a return metric ({metric})"
    if metric == "eval/return" and all(r.has_metric("eval/normalized_score") for r in group.runs):
        pairs = [_scores(run, "eval/normalized_score", last_k)[:2] for run in group.runs]
        return np.asarray([p[0] for p in pairs]), np.asarray([p[1] for p in pairs]), LOGGED
    for candidate in (group.env, group.dataset):
        if candidate and references is not None:
            try:
                low, high = references(candidate)
            except ValueError:
                continue
            scale = 100.0 / (high - low)
            return (
                (final - low) * scale,
                (best - low) * scale,
                f"reference returns of {candidate}: random {low:g}, expert {high:g}",
            )
    return None, None, "no reference"


def area_under_curve(xs: np.ndarray, values: np.ndarray) -> float:
    """The curve's mean height: trapezoid area over [first x, last x] divided by that
    range (one point: its value), in the metric's units, so runs of different lengths
    compare; higher means it learned sooner or better."""
    if len(xs) < 2 or xs[-1] <= xs[0]:
        return float(values[-1])
    widths = np.diff(xs)
    return float(np.sum(widths * (values[1:] + values[:-1]) / 2.0) / (xs[-1] - xs[0]))


def _scores(
    run: Run, metric: str, last_k: int, x: str = "step"
) -> tuple[float, float, float, tuple[np.ndarray, np.ndarray]]:
    """(final, best, AUC, (xs, values)) of one run; ``xs[-1]`` is where "final" is."""
    xs, values = run.series(metric, x)
    final, best = float(np.mean(values[-last_k:])), float(np.max(values))
    return final, best, area_under_curve(xs, values), (xs, values)


def aggregate(
    groups: Sequence[Group],
    metric: str = "eval/return",
    last_k: int = 1,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    references: References | None = d4rl_references,
    x: str = "step",
) -> list[GroupResult]:
    """Final and best scores per group with interval estimates, plus learning curves.

    ``final`` = mean of a run's last ``last_k`` evaluations of ``metric``; ``best`` = its
    maximum over evaluations; ``auc`` = the mean height of its curve over ``x``
    (``area_under_curve``). Each group is one task, so its bootstrap resamples seeds.
    ``references`` maps an env or dataset id to (random, expert) returns for normalised
    scores (None: none). ``x`` is the eval column the curves and the AUC run along:
    ``step`` (default), ``eval/env_steps`` or ``eval/train_seconds`` (equal wall time).
    """
    if last_k < 1:
        raise ReportError(f"--last-k must be >= 1, got {last_k}")
    results = []
    for group in groups:
        per_run = [_scores(run, metric, last_k, x) for run in group.runs]
        final = np.asarray([p[0] for p in per_run])
        best = np.asarray([p[1] for p in per_run])
        auc = np.asarray([p[2] for p in per_run])
        steps, curves = align_curves([p[3] for p in per_run])
        norm_final, norm_best, reference = _normalised_scores(
            group, metric, final, best, last_k, references
        )
        score_dict: dict[str, np.ndarray] = {"final": final, "best": best, "auc": auc}
        if norm_final is not None and norm_best is not None:
            score_dict.update(normalized_final=norm_final, normalized_best=norm_best)
        est = interval_estimates(score_dict, reps=reps, confidence=confidence, seed=seed)
        results.append(
            GroupResult(
                group=group,
                final=est["final"],
                best=est["best"],
                final_scores=final,
                best_scores=best,
                normalized_final=est.get("normalized_final"),
                normalized_best=est.get("normalized_best"),
                normalized_final_scores=norm_final,
                reference=reference,
                curve_steps=steps,
                curve=aggregate_curves(curves, reps, confidence, seed),
                auc=est["auc"],
                auc_scores=auc,
                curve_x=x,
                final_steps=np.asarray([run.series(metric)[0][-1] for run in group.runs]),
            )
        )
    return results


@dataclass
class AcrossTasks:
    """Normalised final scores of one configuration pooled over several tasks."""

    label: str  # the groups' label without the env / dataset
    tasks: list[str]
    runs_per_task: list[int]
    estimates: dict[str, Estimate]

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "tasks": self.tasks,
            "runs_per_task": self.runs_per_task,
            "normalized_final": {k: v.to_dict() for k, v in self.estimates.items()},
        }


def aggregate_across_tasks(
    results: Sequence[GroupResult], reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> list[AcrossTasks]:
    """IQM / mean / median of normalised final scores over tasks, per configuration.

    Groups with the same algorithm and overrides on different envs or datasets are one
    configuration; only groups with normalised scores count, and a configuration needs
    two tasks or more. The bootstrap is stratified: seeds are resampled within each task.
    """
    configs: dict[str, list[GroupResult]] = {}
    for r in results:
        if r.normalized_final_scores is not None:
            g = r.group
            extra = [f"{k}={_show(v)}" for k, v in g.overrides.items() if k not in DERIVED_KEYS]
            configs.setdefault(" ".join([g.algo, *extra]), []).append(r)
    out = []
    for label, members in configs.items():
        if len({m.group.task for m in members}) < 2:
            continue
        scores = [np.asarray(m.normalized_final_scores) for m in members]
        est = interval_estimates({label: scores}, reps=reps, confidence=confidence, seed=seed)
        out.append(
            AcrossTasks(
                label, [m.group.task for m in members], [len(x) for x in scores], est[label]
            )
        )
    return out


# --------------------------------------------------------------------------- output


def fmt(value: float) -> str:
    """Numbers as the tables print them (2 decimals)."""
    return "nan" if math.isnan(value) else f"{value:.2f}"


def fmt_estimate(e: Estimate) -> str:
    return f"{fmt(e.point)} [{fmt(e.low)}, {fmt(e.high)}]"


def markdown_table(results: Sequence[GroupResult]) -> str:
    """One row per group: seeds, final IQM / mean / median, best IQM, AUC IQM (the
    curve's mean height), normalised."""
    header = (
        "| group | seeds | n | final IQM [CI] | final mean [CI] | final median [CI] "
        "| best IQM [CI] | AUC IQM [CI] | normalised final IQM [CI] |"
    )
    lines = [header, "|" + "---|" * 9]
    for r in results:
        norm = (
            fmt_estimate(r.normalized_final["iqm"])
            if r.normalized_final is not None
            else r.reference
        )
        seeds = r.group.seeds_cell()
        lines.append(
            f"| {r.group.label} | {seeds} | {len(r.group.runs)} | {fmt_estimate(r.final['iqm'])} "
            f"| {fmt_estimate(r.final['mean'])} | {fmt_estimate(r.final['median'])} "
            f"| {fmt_estimate(r.best['iqm'])} | {_auc_cell(r)} | {norm} |"
        )
    return "\n".join(lines)


def _steps_of(steps: Sequence[int | None], planned: Sequence[int | None]) -> str:
    """``2,000 and 3,534 of 20,000 steps`` (each run's own length when they differ)."""

    def show(step: int | None) -> str:
        return "?" if step is None else f"{step:,}"

    if len(set(planned)) == 1:
        reached = " and ".join(show(s) for s in steps)
        return reached + (f" of {planned[0]:,} steps" if planned[0] is not None else " steps")
    return " and ".join(f"{show(s)} of {show(p)}" for s, p in zip(steps, planned)) + " steps"


def incomplete_note(r: GroupResult) -> str | None:
    """The note on a group whose runs include some that stopped early (None if none):
    how many, where they stopped, and the steps their "final" score comes from."""
    early = r.stopped_early
    if not early:
        return None
    runs = [run for run, _ in early]
    finals = " and ".join(f"{step:,}" for _, step in early)
    return (
        f"incomplete: {len(early)} of {len(r.group.runs)} runs stopped early "
        f"({_steps_of([run.end.step for run in runs], [run.end.planned for run in runs])}); "
        f"their final score is taken where they stopped (last evaluation at step {finals})"
    )


def incomplete_details(results: Sequence[GroupResult]) -> list[str]:
    """One line per run that stopped early: its dir, why, where, and what was scored."""
    return [
        f"{run.path}: {run.end.why}; final score from step {step:,}"
        + (f" of {run.end.planned:,}" if run.end.planned is not None else "")
        for r in results
        for run, step in r.stopped_early
    ]


def table_notes(results: Sequence[GroupResult]) -> list[str]:
    """The lines under the table: ``*`` (runs that stopped early) and ``(xN)`` (a seed
    several runs share), one per group concerned."""
    notes = []
    for r in results:
        if note := incomplete_note(r):
            notes.append(f"*: {r.group.label}: {note}")
        for seed, runs in r.group.duplicate_seeds().items():
            notes.append(
                f"(x{len(runs)}) {r.group.label}: seed {_show(seed)} was run {len(runs)} times ("
                + ", ".join(str(run.path) for run in runs)
                + "): n counts these runs, which are not independent"
            )
    return notes


def _auc_cell(r: GroupResult) -> str:
    return fmt_estimate(r.auc["iqm"]) if r.auc else "-"


def across_tasks_table(rows: Sequence[AcrossTasks]) -> str:
    """One row per configuration seen on several tasks (normalised final scores)."""
    lines = [
        "| configuration | tasks (runs) | normalised final IQM [CI] | mean [CI] | median [CI] |",
        "|" + "---|" * 5,
    ]
    for a in rows:
        tasks = ", ".join(f"{t} ({n})" for t, n in zip(a.tasks, a.runs_per_task))
        lines.append(
            f"| {a.label} | {tasks} | {fmt_estimate(a.estimates['iqm'])} "
            f"| {fmt_estimate(a.estimates['mean'])} | {fmt_estimate(a.estimates['median'])} |"
        )
    return "\n".join(lines)


def _settings_line(
    metric: str, last_k: int, reps: int, confidence: float, seed: int, x: str = "step"
) -> str:
    final = "last evaluation" if last_k == 1 else f"mean of the last {last_k} evaluations"
    return (
        f"metric `{metric}`; final = {final}, best = max over evaluations, AUC = the "
        f"curve's mean height over `{x}`; "
        f"IQM = 25% trimmed mean; {confidence:.0%} percentile intervals from {reps} "
        f"stratified bootstrap resamples of runs (seed {seed})"
    )


def _tasks(results: Sequence[GroupResult]) -> dict[str, list[GroupResult]]:
    tasks: dict[str, list[GroupResult]] = {}
    for r in results:
        tasks.setdefault(r.group.task, []).append(r)
    return tasks


MIN_SEEDS = 3  # below this a bootstrap "CI" is only the range of the runs (min-max)
_METRIC_WORDS = {
    "eval/return": "evaluation return",
    "eval/best_return": "best evaluation return",
    "eval/normalized_score": "normalised score",
    "eval/cost": "evaluation episode cost",
    "eval/success_rate": "evaluation success rate",
}
X_LABEL = "environment steps (offline runs: gradient steps)"
X_LABELS = {
    "step": X_LABEL,
    "eval/env_steps": "environment steps",
    "eval/train_seconds": "training time, s (evaluations not counted)",
}


def metric_words(metric: str) -> str:
    """An axis label in words for a metric column (``eval/return`` -> evaluation return)."""
    return _METRIC_WORDS.get(metric, metric)


def few_seeds_warning(results: Sequence[GroupResult]) -> str | None:
    """The warning for groups with fewer than MIN_SEEDS runs (None when every group has
    enough): their bootstrap interval is the runs' min-max, not a confidence interval."""
    few = [r for r in results if len(r.group.runs) < MIN_SEEDS]
    if not few:
        return None
    names = ", ".join(f"{r.group.label} (n={len(r.group.runs)})" for r in few)
    single = " (a single run has none)" if any(len(r.group.runs) == 1 for r in few) else ""
    return (
        f"fewer than {MIN_SEEDS} seeds in {names}: the interval shown is the range of the "
        f"runs (min-max), not a confidence interval{single}; run {MIN_SEEDS} seeds or more"
    )


def _thousands(axis: Any) -> None:
    """Tick labels with thousands separators (1,000,000, not 1e6)."""
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.10g}"))


def _new_figure(nrows: int, ncols: int, width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height * nrows), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _wrapped(label: str, width: int = 48) -> str:
    """A group label broken over lines (labels list the differing config keys)."""
    import textwrap

    return "\n".join(textwrap.wrap(label, width, break_on_hyphens=False)) or label


def _legend_below(ax: Any) -> None:
    """The legend under the panel, where long labels cannot cover the curves or run off."""
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)


def _colors(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]


def band_words(runs: int, confidence: float = 0.95) -> str:
    """What the interval around a group's IQM is, for ``runs`` runs: the one source of
    the learning-curve legend and y-label. The bootstrap over two runs only spans them
    (its resamples are (a, a), (a, b), (b, b)), and over one run it is the run itself."""
    if runs == 1:
        return "1 run, no band"
    if runs < MIN_SEEDS:
        return "band = min-max of the runs, not a CI"
    return f"band = {confidence:.0%} bootstrap CI"


def curve_texts(
    members: Sequence[GroupResult], metric: str, confidence: float = 0.95
) -> tuple[str, list[str]]:
    """(y-label, legend entries) of one learning-curve panel. Both say what the band is
    (``band_words``): the y-label names it when every group of the panel has the same
    kind of band, otherwise it points to the legend, which always names it."""
    kinds = {band_words(len(r.group.runs), confidence) for r in members}
    band = kinds.pop() if len(kinds) == 1 else "band: see legend"
    legend = [
        f"{r.group.label} (n={len(r.group.runs)}: {band_words(len(r.group.runs), confidence)})"
        for r in members
    ]
    return f"{metric_words(metric)} (IQM; {band})", legend


def plot_learning_curves(
    results: Sequence[GroupResult], metric: str, path: Path, confidence: float = 0.95
) -> Path:
    """One panel per task: each group's IQM curve over seeds with its band
    (``band_words``); a curve of one point (one evaluation, or runs that overlap at one
    x only) is a marker with an error bar."""
    tasks = _tasks(results)
    fig, axes = _new_figure(1, len(tasks), 5.0, 3.6)
    colors = _colors(len(results))
    color_of = {id(r): colors[i] for i, r in enumerate(results)}
    for ax, (task, members) in zip(axes[0], tasks.items()):
        ylabel, legend = curve_texts(members, metric, confidence)
        for r, label in zip(members, legend):
            c = color_of[id(r)]
            mid, low, high = r.curve
            if len(r.curve_steps) == 1:
                yerr = [[max(mid[0] - low[0], 0.0)], [max(high[0] - mid[0], 0.0)]]
                ax.errorbar(
                    r.curve_steps, mid, yerr=yerr, fmt="o", color=c, ms=6, capsize=5,
                    elinewidth=1.6, label=_wrapped(label),
                )  # fmt: skip
                continue
            ax.plot(r.curve_steps, mid, color=c, label=_wrapped(label), lw=1.6)
            ax.fill_between(r.curve_steps, low, high, color=c, alpha=0.2, lw=0)
        ax.set_title(task, fontsize=10)
        ax.set_xlabel(X_LABELS.get(members[0].curve_x, members[0].curve_x))
        words, _, band = ylabel.partition(" (")  # the band's words on lines of their own
        ax.set_ylabel(words + "\n" + _wrapped("(" + band, 34))
        _thousands(ax.xaxis)
        ax.grid(alpha=0.3)
        _legend_below(ax)
    fig.savefig(path)
    return path


def _padded_range(estimates: Sequence[Estimate]) -> tuple[float, float]:
    """x-limits around every interval, never zero-width (equal scores collapse a CI)."""
    low = min(e.low for e in estimates)
    high = max(e.high for e in estimates)
    pad = 0.05 * (high - low) if high > low else max(1.0, 0.05 * abs(low))
    return low - pad, high + pad


def plot_interval_estimates(results: Sequence[GroupResult], path: Path) -> Path:
    """rliable-style interval estimates of the final score: rows = tasks, cols = IQM/median/mean."""
    tasks = _tasks(results)
    stats = ("iqm", "median", "mean")
    height = max(1.4, 0.45 * max(len(m) for m in tasks.values()) + 0.9)
    fig, axes = _new_figure(len(tasks), len(stats), 3.2, height)
    colors = _colors(len(results))
    color_of = {id(r): colors[i] for i, r in enumerate(results)}
    for row, (task, members) in enumerate(tasks.items()):
        for col, stat in enumerate(stats):
            ax = axes[row][col]
            for y, r in enumerate(members):
                e = r.final[stat]
                c = color_of[id(r)]
                ax.barh(y, e.high - e.low, left=e.low, height=0.6, color=c, alpha=0.7)
                ax.vlines(e.point, y - 0.3, y + 0.3, color=c if e.high == e.low else "black", lw=2)
            ax.set_xlim(*_padded_range([r.final[stat] for r in members]))
            ax.ticklabel_format(axis="x", useOffset=False)
            ax.set_yticks(range(len(members)))
            labels = [_wrapped(r.group.label, 36) for r in members]
            ax.set_yticklabels(labels if col == 0 else [], fontsize=8)
            ax.set_ylim(-0.6, len(members) - 0.4)
            ax.grid(axis="x", alpha=0.3)
            ax.set_title(STAT_TITLES[stat] + (f"  ({task})" if col == 0 else ""), fontsize=9)
            _thousands(ax.xaxis)
            if row == len(tasks) - 1:
                ax.set_xlabel("final score")
    fig.savefig(path)
    return path


def plot_performance_profiles(
    results: Sequence[GroupResult], path: Path, reps: int, confidence: float, seed: int
) -> tuple[Path, dict[str, dict[str, list[float]]]]:
    """Per task: fraction of runs whose final score exceeds tau, with its CI band."""
    tasks = _tasks(results)
    fig, axes = _new_figure(1, len(tasks), 5.0, 3.6)
    colors = _colors(len(results))
    color_of = {id(r): colors[i] for i, r in enumerate(results)}
    profiles: dict[str, dict[str, list[float]]] = {}
    for ax, (task, members) in zip(axes[0], tasks.items()):
        pooled = np.concatenate([r.final_scores for r in members])
        lo, hi = float(pooled.min()), float(pooled.max())
        taus = np.linspace(*_padded_range([Estimate(lo, lo, hi)]), 101)
        for r in members:
            c = color_of[id(r)]
            p, plow, phigh = performance_profile(r.final_scores, taus, reps, confidence, seed)
            ax.plot(taus, p, color=c, label=_wrapped(r.group.label), lw=1.6)
            ax.fill_between(taus, plow, phigh, color=c, alpha=0.2, lw=0)
            profiles[r.group.label] = {
                "tau": taus.tolist(),
                "fraction": p.tolist(),
                "low": plow.tolist(),
                "high": phigh.tolist(),
            }
        ax.set_title(task, fontsize=10)
        ax.set_xlabel(r"final score $\tau$")
        ax.set_ylabel(r"fraction of runs with score > $\tau$")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        _legend_below(ax)
    fig.savefig(path)
    return path, profiles


def write_report(
    results: Sequence[GroupResult],
    out: str | Path,
    metric: str = "eval/return",
    last_k: int = 1,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    sources: Sequence[str | Path] = (),
    across: Sequence[AcrossTasks] | None = None,
    command: str | None = None,
    notes: Sequence[str] = (),
) -> dict[str, Path]:
    """Write report.md, report.json and the three PNG figures into ``out``.

    ``across`` is ``aggregate_across_tasks(results, ...)``, computed when not given;
    ``command`` (the command line that made the report) is quoted in report.md; ``notes``
    (runs left out, and why) go into both files. Runs that stopped early and seeds that
    several runs share are marked in the table and listed below it.
    """
    if across is None:
        across = aggregate_across_tasks(results, reps, confidence, seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "learning_curves": plot_learning_curves(
            results, metric, out / "learning_curves.png", confidence
        ),
        "final_scores": plot_interval_estimates(results, out / "final_scores.png"),
    }
    files["performance_profile"], profiles = plot_performance_profiles(
        results, out / "performance_profile.png", reps, confidence, seed
    )
    x = results[0].curve_x if results else "step"
    settings = _settings_line(metric, last_k, reps, confidence, seed, x)
    lines = [
        "# Run report",
        "",
        f"Generated by `{command}`."
        if command
        else f"Generated by `rlcore.report` from {', '.join(f'`{s}`' for s in sources)}.",
        "",
        settings + ".",
        *([f"**Warning**: {warning}.", ""] if (warning := few_seeds_warning(results)) else []),
        *(
            [
                "**Warning**: runs that stopped early are scored where they stopped:",
                "",
                *(f"- {line}" for line in early),
                "",
            ]
            if (early := incomplete_details(results))
            else []
        ),
        *(line for note in notes for line in (f"Note: {note}.", "")),
        "Groups: runs with the same algorithm, env, dataset and config up to per-run keys "
        "(seed, run dir, resume, device, threads, logger); a label lists the keys that differ.",
        "",
        markdown_table(results),
        "",
        *(line for note in table_notes(results) for line in (note, "")),
        "Normalised scores: " + "; ".join(f"{r.group.label}: {r.reference}" for r in results) + ".",
        "",
        *(
            [
                "Across tasks (normalised final scores; seeds resampled within each task):",
                "",
                across_tasks_table(across),
                "",
            ]
            if across
            else []
        ),
        "Per-seed final (best) scores:",
        "",
        *(
            f"- {r.group.label}: "
            + ", ".join(
                f"seed {_show(run.seed)} {fmt(f)} ({fmt(b)})"
                for run, f, b in sorted(
                    zip(r.group.runs, r.final_scores, r.best_scores),
                    key=lambda t: (str(type(t[0].seed)), t[0].seed),
                )
            )
            for r in results
        ),
        "",
        "## Learning curves",
        "",
        f"IQM over a group's runs at each evaluation (x: `{x}`); the band is the "
        f"{confidence:.0%} bootstrap CI with {MIN_SEEDS} runs or more, the runs' min-max "
        "with two, none with one (the legend says which). A curve covers the range every "
        "run of its group reached (runs evaluated at different x are linearly interpolated "
        "onto a common grid); a curve of one point is drawn as a marker with an error bar.",
        "",
        "![learning curves](learning_curves.png)",
        "",
        "## Final scores (interval estimates)",
        "",
        "![final scores](final_scores.png)",
        "",
        "## Performance profiles",
        "",
        "![performance profile](performance_profile.png)",
        "",
    ]
    files["markdown"] = out / "report.md"
    files["markdown"].write_text("\n".join(lines))
    payload = {
        "metric": metric,
        "x": x,
        "last_k": last_k,
        "reps": reps,
        "confidence": confidence,
        "seed": seed,
        "sources": [str(s) for s in sources],
        "command": command,
        "notes": list(notes),
        "groups": [r.to_dict() for r in results],
        "across_tasks": [a.to_dict() for a in across],
        "performance_profiles": profiles,
    }
    files["json"] = out / "report.json"
    files["json"].write_text(json.dumps(payload, indent=1))
    return files


# --------------------------------------------------------------------------- CLI

INCOMPLETE_CHOICES = ("refuse", "include", "exclude")
DUPLICATE_CHOICES = ("refuse", "keep")


def apply_incomplete_policy(runs: Sequence[Run], policy: str) -> tuple[list[Run], str | None]:
    """``--incomplete``: (the runs to score, a note on the runs left out or None).

    ``refuse`` raises ReportError naming every run that stopped before its end (its last
    evaluation is not a final score, and next to finished runs it compares different
    lengths); ``include`` keeps them (the report marks them); ``exclude`` drops them.
    """
    if policy not in INCOMPLETE_CHOICES:
        raise ReportError(f"--incomplete must be one of {', '.join(INCOMPLETE_CHOICES)}")
    early = [r for r in runs if not r.end.finished]
    if not early or policy == "include":
        return list(runs), None
    listing = "; ".join(
        f"{r.path} (at {_steps_of([r.end.step], [r.end.planned])}: {r.end.why})" for r in early
    )
    if policy == "refuse":
        raise ReportError(
            f"{len(early)} of {len(runs)} runs stopped before their end: {listing}. Their "
            "last evaluation is not a final score: pass --incomplete include to score them "
            "there (marked * in the table), or --incomplete exclude to leave them out"
        )
    kept = [r for r in runs if r.end.finished]
    if not kept:
        raise ReportError(f"every run stopped before its end (--incomplete exclude): {listing}")
    return (
        kept,
        f"left out {len(early)} run(s) that stopped early (--incomplete exclude): {listing}",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rlcore.report DIRS...``: print the table, write the report files."""
    parser = argparse.ArgumentParser(
        prog="python -m rlcore.report",
        description="Group runs by config; IQM/mean/median with bootstrap CIs; figures.",
    )
    parser.add_argument("dirs", nargs="+", help="run dirs or sweep dirs (searched recursively)")
    parser.add_argument(
        "--metric", default=DEFAULT_METRIC, help="column of eval.csv (or group/name)"
    )
    parser.add_argument("--out", default=None, help="output folder (default <first dir>/report)")
    parser.add_argument("--last-k", type=int, default=1, help="final = mean of the last k evals")
    parser.add_argument("--reps", type=int, default=2000, help="bootstrap resamples")
    parser.add_argument("--confidence", type=float, default=0.95, help="interval size")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    parser.add_argument(
        "--x", default="step",
        help="eval column the curves and the AUC run along: step (default), eval/env_steps, "
        "or eval/train_seconds (training time: equal-wall-time comparisons)",
    )  # fmt: skip
    parser.add_argument(
        "--incomplete", choices=INCOMPLETE_CHOICES, default="refuse",
        help="runs that stopped before their end (interrupted, failed, killed, still "
        "running): refuse (default: exit 2, naming them), include (score them at their "
        "last evaluation, marked *) or exclude (leave them out, with a note)",
    )  # fmt: skip
    parser.add_argument(
        "--duplicate-seeds", choices=DUPLICATE_CHOICES, default="refuse",
        help="runs of one group with the same seed: refuse (default: exit 2, naming the "
        "run dirs) or keep (count every run, marked (xN))",
    )  # fmt: skip
    args = parser.parse_args(argv)
    try:
        if args.reps < 1 or not 0.0 < args.confidence < 1.0:
            raise ReportError("--reps must be >= 1 and --confidence inside (0, 1)")
        runs, skipped = split_by_metric(load_runs(args.dirs), args.metric)
        notes = []
        if skipped:
            notes.append(
                f"skipping {len(skipped)} run(s) without '{args.metric}' values "
                "(crashed or still starting): " + ", ".join(str(r.path) for r in skipped)
            )
            print(f"note: {notes[-1]}", file=sys.stderr)
        if args.metric == DEFAULT_METRIC and all(r.has_metric(SUCCESS_METRIC) for r in runs):
            print(
                f"note: these runs log {SUCCESS_METRIC} (goal tasks): --metric "
                f"{SUCCESS_METRIC} reports success rates instead of returns",
                file=sys.stderr,
            )
        runs, left_out = apply_incomplete_policy(runs, args.incomplete)
        if short := [r for r in runs if len(r.series(args.metric, args.x)[1]) < args.last_k]:
            fewest = min(len(r.series(args.metric, args.x)[1]) for r in short)
            print(
                f"warning: {len(short)} run(s) logged fewer than --last-k={args.last_k} "
                f"evaluations of {args.metric} (fewest: {fewest}); their final score is the "
                "mean of those they have",
                file=sys.stderr,
            )
        if left_out:
            notes.append(left_out)
            print(f"note: {left_out}", file=sys.stderr)
        groups = group_runs(runs)
        if duplicates := duplicate_seed_message(groups):
            if args.duplicate_seeds == "refuse":
                raise ReportError(
                    f"{duplicates}. Remove the copies or give the runs different seeds; "
                    "--duplicate-seeds keep counts every run (marked (xN) in the table)"
                )
            print(f"warning: {duplicates}; kept (--duplicate-seeds keep)", file=sys.stderr)
        results = aggregate(
            groups, args.metric, args.last_k, args.reps, args.confidence, args.seed, x=args.x
        )
        across = aggregate_across_tasks(results, args.reps, args.confidence, args.seed)
        if warning := few_seeds_warning(results):
            print(f"warning: {warning}", file=sys.stderr)
        for line in incomplete_details(results):
            print(f"warning: stopped early, scored where it stopped: {line}", file=sys.stderr)
        out = Path(args.out) if args.out else Path(args.dirs[0]) / "report"
        files = write_report(
            results,
            out,
            args.metric,
            args.last_k,
            args.reps,
            args.confidence,
            args.seed,
            args.dirs,
            across,
            " ".join(["python -m rlcore.report", *(argv if argv is not None else sys.argv[1:])]),
            notes,
        )
    except ReportError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(_settings_line(args.metric, args.last_k, args.reps, args.confidence, args.seed, args.x))
    print(f"{len(runs)} runs in {len(results)} groups\n")
    print(markdown_table(results))
    for note in table_notes(results):
        print(note)
    if across:
        print("\nacross tasks (normalised final scores):\n" + across_tasks_table(across))
    print("\nwrote " + ", ".join(str(p) for p in files.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
