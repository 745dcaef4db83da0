"""The composition root: ``train(cfg, run_dir)`` runs one training job (exported as
``rlcore.train.train``).

    from rlcore.train import train
    result = train(cfg, "runs/my_run")       # cfg: a config composed by Hydra

The steps, each in its own module: the config is settled and typed (rlcore.settings:
the run's options, the algorithm's config from the catalog); the run directory is
checked (rlcore.run_dir: a new run, a resume, a run without a checkpoint, another live
writer); the envs, dataset and agent are built and every check passed (rlcore.build);
only then is anything written: the lock, the logger, the config and metadata, the
checkpoint writer. The phases the plan declares run in the one loop skeleton
(rlcore.loops.run_phases) and the run ends with its summary. ``python -m rlcore.train``
is the command line (rlcore.cli).
"""

from __future__ import annotations

import math
import re
import signal
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from rlcore import catalog
from rlcore.build import Built, actors, build, build_phases, eval_video
from rlcore.capabilities import Planned, require
from rlcore.checkpoint import CHECKPOINT_DIR, LATEST
from rlcore.config import ConfigError
from rlcore.logging import Logger
from rlcore.loops import LoopSettings, RunContext, run_phases
from rlcore.observations import ObsSpec
from rlcore.overrides import config_file_defaults
from rlcore.run_dir import (
    checkpoint_writer,
    clear_uncheckpointed_run,
    resume_state_or_new_run,
    write_run_metadata,
)
from rlcore.run_lock import RunLock
from rlcore.settings import ResumeMismatchError, RunSettings, algorithm_name, settle
from rlcore.spaces import action_space_from, describe_action_space
from rlcore.threads import apply_threads
from rlcore.utils import seed_everything


def train(
    cfg: DictConfig,
    run_dir: str | Path,
    on_valid: Callable[[], None] | None = None,
    label: str = "",
) -> dict[str, float]:
    """Run one training job described by a composed config; returns final metrics.

    Nothing is written to ``run_dir`` until the config, the inputs and the env are checked
    (``on_valid`` is called then, before the first write: the CLI writes Hydra's record).
    ``run_dir/run.lock`` keeps a second process from writing the same run. ``label``
    follows the algorithm and env in the progress lines' prefix (a sweep job's values)."""
    cfg_dict: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    run_dir = Path(run_dir)
    algorithm = catalog.get(algorithm_name(cfg_dict))
    run = settle(cfg_dict, algorithm.config_class, algorithm.pretrained_head,
                 defaults=lambda: config_file_defaults(cfg_dict))  # fmt: skip
    require(run.algo, Planned, "the composition root reads a run's schedule from")
    settings = run.settings
    resume_state, notes, replaces = resume_state_or_new_run(run.record, settings.resume, run_dir)
    apply_threads(settings.threads)  # auto: one thread (rlcore/threads.py says why)
    seed_everything(settings.seed)
    device = torch.device(settings.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda was requested but CUDA is not available: use device=cpu")
    if device.type != "cpu":  # mps on a torch built without it, cuda:3 on one GPU, ...
        try:
            torch.empty(0, device=device)
        except (RuntimeError, AssertionError):
            raise ConfigError(
                f"device={settings.device}: this PyTorch ({torch.__version__}) cannot place "
                "a tensor there (a build without that back end, or no such device index); "
                "use device=cpu"
            ) from None
    built = build(algorithm, run, run_dir, device, resuming=resume_state is not None)
    try:
        if resume_state is not None and "spaces" in resume_state:
            env = built.env
            check_resumed_spaces(resume_state["spaces"], env.single_observation_space,
                                 env.single_action_space, run_dir)  # fmt: skip
        lock = RunLock(run_dir)
        lock.acquire()  # the first write: the run is valid
        try:
            if replaces:  # a run without a checkpoint: nothing in it to continue
                clear_uncheckpointed_run(run_dir)
            if on_valid is not None:
                on_valid()
            return _run(algorithm, built, run_dir, resume_state, [*run.notes, *notes], label)
        finally:
            lock.release()
    finally:
        built.close()


def check_resumed_spaces(
    saved: dict[str, Any], obs_space: Any, action_space: Any, run_dir: Path
) -> None:
    """Refuse a resume whose env observes or acts otherwise than the checkpoint's agent
    was built for (an ``env.kwargs`` that changes a shape: ``n_bits``, a camera size),
    before anything in the run dir changes: a later resume still finds the run as it was."""
    want, got = ObsSpec.from_record(saved), ObsSpec.from_space(obs_space)
    action = describe_action_space(action_space)
    same_action = saved.keys() >= action.keys() and all(
        np.array_equal(np.asarray(saved[key]), np.asarray(value)) for key, value in action.items()
    )
    if want != got or not same_action:

        def parts(spec: ObsSpec) -> str:
            return ", ".join(f"{part.name} {tuple(part.shape)}" for part in spec.parts)

        raise ResumeMismatchError(
            f"cannot resume {run_dir}: its agent reads {parts(want)} and acts in "
            f"{action_space_from(saved)}; this config's env gives {parts(got)} and "
            f"{action_space} (an env option changed a shape): drop that override, or "
            "start a new run"
        )


def _run(
    algorithm: catalog.Algorithm,
    built: Built,
    run_dir: Path,
    resume_state: dict[str, Any] | None,
    notes: list[str],
    label: str,
) -> dict[str, float]:
    """The run once it is known to be valid and its lock is held: logger, metadata,
    checkpoint writer, the phases in the loop, and the closing summary."""
    settings, plan, agent, env = built.run.settings, built.plan, built.agent, built.env
    resume_step = resume_state["loop"]["counters"]["step"] if resume_state else None
    logger = make_logger(settings, run_dir, resume_step)
    # the speed modes the agent resolved (compile=auto, bf16 on a CPU without it)
    resolved = agent.config.plan()
    offline_steps, online_steps = plan.phase_lengths(bool(settings.init_from))
    effective = {
        "env_backend": type(env.unwrapped).__name__,
        "precision": resolved.precision,
        "compile": resolved.compile,
        # the phases' lengths: init_from skips the pre-training that algo.total_steps
        # (an offline algorithm's gradient steps) counts
        "offline_steps": offline_steps,
        "online_steps": online_steps,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
    }
    if built.dataset is not None and built.dataset.corruption:  # what it trained on
        effective["dataset_corruption"] = built.dataset.corruption
    write_run_metadata(run_dir, built.run.record, resume_state is not None, effective)
    for note in notes:
        logger.note(note)
    for record in effective.get("dataset_corruption", []):
        logger.note(
            f"dataset corrupted ({record['mode']} {record['kind']}): {record['rows']:,} rows "
            f"(rate {record['rate']:g}, scale {record['scale']:g}, seed {record['seed']})"
        )
    obs_space, action_space = env.single_observation_space, env.single_action_space
    # the observation seam's record ("obs") beside "obs_shape" for older readers
    spaces = {
        **ObsSpec.from_space(obs_space).spaces_record(),
        **describe_action_space(action_space),
    }
    context = RunContext(
        name=f"{algorithm.name} {settings.env.id}{f' {label}' if label else ''}",
        logger=logger,
        save=checkpoint_writer(
            algorithm.name, built.run.record, spaces, run_dir, settings.keep_agent_snapshots
        ),  # fmt: skip
        resume=resume_state["loop"] if resume_state else None,
        eval_video=eval_video(settings, plan, run_dir, logger),
    )
    loop_settings = loop_settings_of(settings, compiled=bool(resolved.compile))
    logger.progress(f"[{context.name}] run dir {run_dir}", force=True)
    with stop_signals(context, logger), log_warnings(logger):
        try:
            result = run_loop(algorithm, built, loop_settings, context, logger)
            for line in closing_summary(result, loop_settings, run_dir):
                logger.progress(line, force=True)
            return result
        finally:
            logger.close()


def run_loop(
    algorithm: catalog.Algorithm,
    built: Built,
    settings: LoopSettings,
    run: RunContext,
    logger: Logger,
) -> dict[str, float]:
    """Build the phases the algorithm's plan declares (and the Ray actors that feed them)
    and run them in the one loop skeleton (``rlcore.loops.run_phases``)."""
    phases = build_phases(built, logger)
    described = phases.describe(built.plan.schedule.offline_data)
    if described is not None:
        logger.progress(f"[{run.name}] {described}", force=True)
    source, rollouts = actors(algorithm, built, phases, run, logger)
    try:
        return run_phases(
            built.agent, phases.phases, built.env, built.eval_env, settings, run,
            buffer=phases.buffer, stateful=phases.stateful, score=phases.score,
            reward_transform=phases.reward_transform, evaluate_first=phases.evaluate_first,
            source=source, rollouts=rollouts,
        )  # fmt: skip
    finally:  # a finished, failed or interrupted (Ctrl-C) run stops every actor
        for remote in (source, rollouts):
            if remote is not None:
                remote.close()


def make_logger(settings: RunSettings, run_dir: Path, resume_step: int | None) -> Logger:
    """The run's logger, as the ``logger`` options ask."""
    options = settings.logger
    return Logger(
        run_dir, tensorboard=options.tensorboard, csv_files=options.csv,
        console=options.console, resume_step=resume_step,
        progress_interval_s=options.progress_interval_s,
    )  # fmt: skip


def loop_settings_of(settings: RunSettings, compiled: bool) -> LoopSettings:
    """The loop's cadences and stops (``compiled``: the agent resolved ``compile`` on, its
    first update compiles); what the phases do is the plan's."""
    return LoopSettings(
        seed=settings.seed, eval_every=settings.eval_every,
        eval_episodes=settings.eval_episodes, checkpoint_every=settings.checkpoint_every,
        checkpoint_every_s=settings.checkpoint_every_s, log_every=settings.log_every,
        stop_at_return=settings.stop_at_return, stop_at_success=settings.stop_at_success,
        stop_after_s=settings.stop_after_s,
        compiled=compiled,
    )  # fmt: skip


def closing_summary(result: dict[str, float], settings: LoopSettings, run_dir: Path) -> list[str]:
    """The lines that end a run: why it stopped, the final and best evaluation, where the
    run and its checkpoint are, and the commands that continue or evaluate it."""
    step = int(result["run/step"])
    more = "total_steps=<more>"  # what a resume changes to continue
    if result["run/reached_stop_at_return"]:
        success = result.get("eval/success_rate", math.nan)
        if settings.stop_at_success is not None and success >= settings.stop_at_success:
            why = f"stop_at_success={settings.stop_at_success:g} reached at step {step:,}"
            more = "stop_at_success=<higher or null>"
        else:
            why = f"stop_at_return={settings.stop_at_return:g} reached at step {step:,}"
            more = "stop_at_return=<higher or null>"
    elif result.get("run/out_of_time"):
        why = (
            f"stop_after_s={settings.stop_after_s:g} reached at step {step:,} "
            f"({result['run/train_seconds']:,.0f} s of training)"
        )
        more = "stop_after_s=<more or null>"
    else:
        why = f"all {step:,} steps done"
    final, best = result["eval/return"], result["eval/best_return"]
    cost = f" (cost {result['eval/cost']:.1f})" if "eval/cost" in result else ""
    evaluation = f"final evaluation return {final:.1f}{cost}, best {best:.1f}"
    if "eval/success_rate" in result:
        evaluation += f", success rate {result['eval/success_rate']:.2f}"
    if "eval/normalized_score" in result:
        evaluation += (
            f" (normalised score {result['eval/normalized_score']:.1f}, "
            f"best {result['eval/best_normalized_score']:.1f})"
        )
    checkpoint = run_dir / CHECKPOINT_DIR / LATEST
    return [
        f"finished: {why}; {evaluation}",
        f"run dir {run_dir}; checkpoint {checkpoint}",
        f"continue: python -m rlcore.train resume={run_dir} {more}",
        f"evaluate: python -m rlcore.evaluate {run_dir} [episodes=N] [video=true]; "
        f"in Python: rlcore.load_policy('{run_dir}')(obs)",
    ]


@contextmanager
def stop_signals(run: RunContext, logger: Logger) -> Iterator[None]:
    """While the block runs, SIGINT (Ctrl-C) and SIGTERM ask the loop to save a checkpoint
    and stop (``run.stop_request``); a second Ctrl-C aborts at once without saving.
    Only in the main thread (signal handlers cannot be set elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if run.stop_request is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        run.stop_request = name
        logger.note(
            f"received {name}: saving a checkpoint at the next step boundary, then stopping"
            + (" (Ctrl-C again aborts without saving)" if signum == signal.SIGINT else "")
        )

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@contextmanager
def log_warnings(logger: Logger) -> Iterator[None]:
    """Warnings raised during the run are shown as usual and also written to train.log."""
    original = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        # gymnasium colours its warnings with terminal escape codes: plain text here
        message = ANSI_ESCAPE.sub("", str(message))
        original(message, category, filename, lineno, file, line)
        logger.write_log(f"{category.__name__}: {message}")

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = original
