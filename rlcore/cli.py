"""The command line of ``python -m rlcore.train`` (``rlcore-train``): friendly names and
overrides checked before Hydra runs (rlcore.overrides), run directories and ``resume=``,
the one ``error:`` line and the exit code every refusal or failure ends with
(docs/cli.md, "Exit codes"), and Hydra's main, which calls ``rlcore.run.train``.

    python -m rlcore.train algo=sac env=Hopper
    python -m rlcore.train algo=ppo env=Walker2d env.num_envs=8 total_steps=200000 seed=3
    python -m rlcore.train -m algo=sac env=Hopper seed=0,1,2        # a sweep
    python -m rlcore.train resume=runs/sac/hopper/2026-11-22_10-00-00
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlcore import catalog
from rlcore.checkpoint import CheckpointWriteError, read_checkpoint
from rlcore.config import ConfigError
from rlcore.envs.make import UnknownEnvError, resolve_env_id
from rlcore.loops import TrainingInterrupted, TrainingStopped
from rlcore.overrides import check_overrides, normalize_overrides, train_help
from rlcore.run import train
from rlcore.run_dir import RunDirExistsError, check_new_run_dir, has_checkpoint, resume_run_dir
from rlcore.run_lock import RunLockedError
from rlcore.settings import ResumeMismatchError


def _resuming(resume: str | None) -> bool:
    return resume not in (None, "", "None", "null")


def _fail(message: str, code: int = 2, run_dir: Path | None = None) -> None:
    """Print one ``error:`` line (also into the run's train.log) and exit with ``code``.
    Called while handling an exception with ``HYDRA_FULL_ERROR=1`` set, it re-raises that
    exception instead, so its traceback is shown."""
    print(f"error: {message}", file=sys.stderr)
    if run_dir is not None and run_dir.is_dir():
        with (run_dir / "train.log").open("a") as log:
            log.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] error: {message}\n")
    if os.environ.get("HYDRA_FULL_ERROR") == "1" and sys.exc_info()[1] is not None:
        raise  # noqa: PLE0704 - re-raise the exception being handled by the caller
    raise SystemExit(code)


def _remove_if_never_started(run_dir: Path) -> None:
    """Delete a sweep job's directory that Hydra created and the refused run left empty
    (single runs write nothing before the run is known to be valid)."""
    if not run_dir.is_dir():
        return
    entries = {p.name for p in run_dir.iterdir()}
    log = run_dir / "train.log"
    if entries <= {".hydra", "train.log"} and (not log.exists() or log.stat().st_size == 0):
        shutil.rmtree(run_dir, ignore_errors=True)
        # and the runs/<algo>/<env>/ folders it may have created, while they are empty
        for parent in list(run_dir.parents)[:3]:
            if parent == Path.cwd() or not parent.is_dir() or any(parent.iterdir()):
                break
            parent.rmdir()


# Exit codes of ``python -m rlcore.train`` (docs/cli.md, "Exit codes")
EXIT_FAILED = 1  # the run started and failed: a NaN loss, a full disk, an unexpected error

EXIT_CONFIG = 2  # refused before anything was written: the command or its config is wrong

EXIT_MISSING = 3  # refused before anything was written: an input file or directory is missing

EXIT_SIGINT, EXIT_SIGTERM = 130, 143  # stopped on request (checkpoint saved): not an error

_CONFIG_GROUPS = ("algo", "env", "logger", "her")


def _saved_config(resume: str | Path) -> dict[str, Any]:
    """The composed config the resumed run last ran with: its ``config_resumed.yaml``
    (written by its latest resume) or ``config.yaml``, else the checkpoint's own."""
    run_dir = resume_run_dir(resume)
    for name in ("config_resumed.yaml", "config.yaml"):
        if (run_dir / name).is_file():
            return OmegaConf.to_container(OmegaConf.load(run_dir / name))  # type: ignore[return-value]
    if Path(resume).is_dir() and not has_checkpoint(resume):
        raise FileNotFoundError(
            f"resume={resume}: {run_dir} holds no run (no config.yaml, no checkpoint); pass "
            "the directory of an earlier run, or start a new one with run_dir="
        )
    return read_checkpoint(resume)[0]["config"]


def resumed_config(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """The config of a ``resume=`` run: the run's own composed config (algorithm, env and
    every override it ran with), with only the keys the command line names (``overrides``,
    Hydra's task overrides) taken from ``cfg``, the config Hydra composed for them. A
    group override (``algo=``, ``env=``) must name the run's own algorithm / env."""
    saved = _saved_config(cfg.resume)
    out = OmegaConf.create(saved)
    for item in overrides:
        key = item.split("=", 1)[0].lstrip("+")
        if key.startswith("~"):
            raise ConfigError(f"{item}: removing a key is not possible with resume=")
        if key in ("resume", "algo_env"):
            continue
        if key == "algo" and cfg.algo.name != saved["algo"]["name"]:
            raise ResumeMismatchError(
                f"cannot resume: {resume_run_dir(cfg.resume)} is a {saved['algo']['name']} run; "
                f"drop algo= (resume= restores the run's own config), or start a new run"
            )
        if key == "env" and resolve_env_id(cfg.env.id) != saved["env"]["id"]:
            raise ResumeMismatchError(
                f"cannot resume: {resume_run_dir(cfg.resume)} trained on {saved['env']['id']}; "
                f"drop env= (resume= restores the run's own config), or start a new run"
            )
        if key in _CONFIG_GROUPS:
            if key == "logger":
                out.logger = cfg.logger
            if key == "her":  # the strategy is checked against the run's (SHAPE_FIELDS)
                out.her = cfg.her
            continue
        OmegaConf.update(out, key, OmegaConf.select(cfg, key), force_add=True)
    out.resume = cfg.resume
    return out


def _hydra_record(hydra_cfg: Any, cfg: DictConfig, run_dir: Path, resumed: bool) -> None:
    """Hydra's record of the run (what ``hydra.output_subdir`` would write), written once
    the run is valid: ``.hydra/`` (``.hydra_resumed/`` beside it on resume)."""
    out = run_dir / (".hydra_resumed" if resumed else ".hydra")
    out.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, out / "config.yaml")
    OmegaConf.save(OmegaConf.create({"hydra": hydra_cfg}), out / "hydra.yaml")
    OmegaConf.save(hydra_cfg.overrides.task, out / "overrides.yaml")


# the keys a sweep varies, from the command line (cli) to every job, whichever process
# (joblib, SLURM, Ray) the launcher runs it in: the environment is inherited
SWEPT_KEYS_ENV = "RLCORE_SWEPT_KEYS"


def swept_keys(args: list[str]) -> list[str]:
    """The override keys a ``-m`` command line sweeps (``seed=0,1,2``, ``range(3)``...)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides([a for a in args if not a.startswith("-")])
    return [o.key_or_group for o in parsed if o.is_sweep_override()]


def sweep_label(job_overrides: list[str]) -> str:
    """A sweep job's values of the swept keys (``seed=1 algo.tau=0.01``) for its progress
    lines, algorithm and env left out (the prefix names them); the seed when the sweep
    keys are unknown (a launcher that drops the environment)."""
    swept = os.environ.get(SWEPT_KEYS_ENV)
    keys = set(swept.split(",")) if swept is not None else {"seed"}
    values = [o.lstrip("+") for o in job_overrides
              if o.split("=", 1)[0].lstrip("+") in keys - {"algo", "env"}]  # fmt: skip
    return " ".join(values)


def _continue_command(run_dir: Path) -> str:
    return f"python -m rlcore.train resume={run_dir}"


def hydra_main(cfg: DictConfig) -> float:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    resuming = _resuming(cfg.get("resume"))
    if multirun:  # Hydra made the job's directory under the sweep dir
        run_dir = Path(hydra_cfg.runtime.output_dir)
    else:
        run_dir = resume_run_dir(cfg.resume) if resuming else Path(cfg.run_dir)
    # in a sweep, say which job failed (launchers run the jobs in other processes)
    job = f"job {hydra_cfg.job.num} ({run_dir}): " if multirun else ""
    label = sweep_label(list(hydra_cfg.overrides.task)) if multirun else ""
    try:
        if resuming:
            cfg = resumed_config(cfg, list(hydra_cfg.overrides.task))
        result = train(
            cfg,
            run_dir,
            on_valid=lambda: _hydra_record(hydra_cfg, cfg, run_dir, resuming),
            label=label,
        )
    except (ConfigError, RunDirExistsError, ResumeMismatchError, RunLockedError) as error:
        if multirun and not resuming:
            _remove_if_never_started(run_dir)
        _fail(f"{job}{error}", EXIT_CONFIG)
    except FileNotFoundError as error:
        if multirun and not resuming:
            _remove_if_never_started(run_dir)
        _fail(f"{job}{error}", EXIT_MISSING)
    except TrainingInterrupted as error:
        code = EXIT_SIGINT if error.signal_name == "SIGINT" else EXIT_SIGTERM
        _stopped(f"{job}{error}", code, run_dir)
    except CheckpointWriteError as error:
        _fail(
            f"{job}{error}. The run stopped; free disk space, then continue with "
            f"{_continue_command(run_dir)} (from its last good checkpoint)",
            EXIT_FAILED,
            run_dir,
        )
    except (TrainingStopped, ValueError) as error:
        _fail(f"{job}{error}", EXIT_FAILED, run_dir)
    except KeyboardInterrupt:
        _stopped(
            f"aborted without saving; {_continue_command(run_dir)} continues from the last "
            "checkpoint written before (if any)",
            EXIT_SIGINT,
            run_dir,
        )
    return float(result.get("eval/return", float("nan")))


def _stopped(message: str, code: int, run_dir: Path) -> None:
    """A run stopped on the user's request: one ``interrupted:`` line (not an error), the
    command that continues it, and ``code``."""
    line = f"interrupted: {message}"
    if "resume=" not in message:
        line += f". Continue with: {_continue_command(run_dir)}"
    print(line, file=sys.stderr)
    if run_dir.is_dir():
        with (run_dir / "train.log").open("a") as log:
            log.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {line}\n")
    raise SystemExit(code)


def check_run_dir_overrides(args: list[str]) -> None:
    """Before Hydra composes the config: ``resume=`` must exist, and ``run_dir=`` must not
    already hold a run unless it is being resumed."""
    if "-m" in args or "--multirun" in args:
        return
    values = dict(arg.split("=", 1) for arg in args if "=" in arg and not arg.startswith("-"))
    resume = values.get("resume")
    if resume not in (None, "", "null", "None"):
        if not Path(resume).exists():
            _fail(
                f"resume={resume}: no such run directory or checkpoint file (nothing was "
                "created); pass the directory of an earlier run",
                EXIT_MISSING,
            )
        own = resume_run_dir(resume)
        if "run_dir" in values and Path(values["run_dir"]).resolve() != own.resolve():
            _fail(
                f"run_dir={values['run_dir']} with resume={resume}: a resumed run continues in "
                f"its own directory ({own}); to branch it, copy that directory and resume the "
                "copy",
                EXIT_CONFIG,
            )
        return
    if "run_dir" in values:  # hydra.run.dir= was mapped onto it (normalize_overrides)
        try:
            check_new_run_dir(values["run_dir"])  # one without a checkpoint is reused
        except (RunDirExistsError, RunLockedError) as error:
            _fail(str(error), EXIT_CONFIG)


def _with_the_resumed_groups(args: list[str], multirun: bool) -> list[str]:
    """``resume=<run>`` without ``algo=`` / ``env=``: the run's own, so that the options
    the command line changes (``env.kwargs.n_bits=``) are checked against its config
    groups, not the defaults' (sac on Hopper)."""
    values = dict(arg.split("=", 1) for arg in args if "=" in arg and not arg.startswith("-"))
    resume = values.get("resume")
    if multirun or resume in (None, "", "null", "None") or not Path(resume).exists():
        return args
    try:
        saved = _saved_config(resume)
        groups = {"algo": saved["algo"]["name"], "env": saved["env"]["id"]}
    except (FileNotFoundError, KeyError, TypeError, ValueError):
        return args  # the resume itself reports what is wrong with the run
    named = {arg.split("=", 1)[0] for arg in args}
    extra = [f"{key}={value}" for key, value in groups.items() if value and key not in named]
    try:
        normalize_overrides(extra)
    except (catalog.UnknownAlgorithmError, UnknownEnvError, ConfigError, ImportError):
        return args  # composed as before: the resume checks the run's own config
    return [*extra, *args]


def cli(argv: list[str] | None = None) -> None:
    """``python -m rlcore.train`` / ``rlcore-train``: Hydra CLI with friendly names."""
    import hydra

    args = list(sys.argv[1:] if argv is None else argv)
    if "--help" in args or "-h" in args:
        print(train_help())
        raise SystemExit(0)
    multirun = "-m" in args or "--multirun" in args
    try:
        args = normalize_overrides(_with_the_resumed_groups(args, multirun))
        check_overrides(args, multirun)
    except (catalog.UnknownAlgorithmError, UnknownEnvError, ConfigError) as error:
        _fail(str(error))
    check_run_dir_overrides(args)
    if multirun:
        os.environ[SWEPT_KEYS_ENV] = ",".join(swept_keys(args))
    sys.argv = [sys.argv[0], *args]
    main = hydra.main(version_base="1.3", config_path="pkg://rlcore.configs", config_name="config")(
        hydra_main
    )
    main()


if __name__ == "__main__":
    cli()
