"""What a new user meets in the first hour (issue 44): every bad override is one line and
exit code 2, every entry point answers --help, a run dir without a checkpoint can be
resumed from scratch or reused, the first checkpoint comes within a minute."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlcore import commands, loops
from rlcore.cli import EXIT_CONFIG, EXIT_MISSING, cli
from rlcore.logging import read_csv
from rlcore.loops import FIRST_CHECKPOINT_S, LoopSettings, RunContext
from rlcore.run_dir import RunDirExistsError
from rlcore.run_lock import LOCK_FILE, RunLockedError
from rlcore.train import train
from tests.conftest import FAST, HANG_GUARD_S, REPO, make_config, python_cmd

DQN_TINY = [
    "algo=dqn", "env=CartPole-v1", "total_steps=400", "algo.learning_starts=200",
    "algo.batch_size=32", "eval_every=200", "checkpoint_every=0", "checkpoint_every_s=0",
    "log_every=100", *FAST,
]  # fmt: skip


def _cli_in_process(args: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``python -m rlcore.train *args`` run in this process
    (for refusals that happen before Hydra starts the run)."""
    monkeypatch.setattr(sys, "argv", ["rlcore.train"])
    with pytest.raises(SystemExit) as info:
        cli(args)
    out = capsys.readouterr()
    return int(info.value.code or 0), out.out, out.err


def _cli(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environ = dict(os.environ, PYTHONPATH=str(REPO), **env)
    return subprocess.run(python_cmd(*args), cwd=cwd, capture_output=True, text=True,
                          timeout=HANG_GUARD_S, env=environ)  # fmt: skip


# ----------------------------------------------------------------------------- bad overrides


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("algo.batchsize=256", "algo.batchsize=256: not an algo option of this run (did you "
                               "mean algo.batch_size?)"),
        ("learning_starts=1000", "(did you mean algo.learning_starts?)"),
        ("optimizer=adam", "optimizer=adam: not an option of this run"),
        ("algo.batch_size==3", "malformed override 'algo.batch_size==3': extraneous input '='"),
        ("+experiment=sac_hopper_fast", "no experiment config 'sac_hopper_fast'; available: "
                                        "awac_hopper_medium,"),
        ("logger=foo", "no logger config 'foo'; available: default, quiet"),
        ("seed=0,1", "seed=0,1: a comma-separated value is a sweep: add -m"),
        ("algo.hidden=[64,64", "malformed override 'algo.hidden=[64,64'"),
        ("hydra.run.dirr=x", "(did you mean hydra.run.dir?)"),
        ("dataset=local/hopper/medium-v0", "algo=sac, as configured, trains online only and "
                                           "would not read it"),
        ("corruption.kind=obs", "corruption.kind=obs: corrupts an offline dataset, and algo=sac "
                                "reads none in this run"),
        ("corruption.mode=adversarial", "corruption.mode=adversarial without corruption.kind "
                                        "corrupts nothing"),
        ("snapshot.episodes=5", "snapshot.episodes=5 without snapshot.teacher resets nothing"),
    ],
)  # fmt: skip
def test_every_bad_override_is_one_line_and_exit_2(override, needle, tmp_path, monkeypatch,
                                                   capsys):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    code, out, err = _cli_in_process(["algo=sac", "env=Hopper", override], monkeypatch, capsys)
    assert code == EXIT_CONFIG, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert needle in err, err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_open_dict_options_take_names_their_config_does_not_list():
    """A task's constructor arguments and Ray resources are the user's names: given plainly
    (no +), they compose; Hydra alone refused them (its struct config)."""
    from rlcore.overrides import _compose_registering, normalize_overrides

    args = normalize_overrides(["algo=sac", "env=Hopper", "env.kwargs.frame_skip=2",
                                "distributed.resources={robot: 1}", "algo.tau=0.01"])  # fmt: skip
    assert "++env.kwargs.frame_skip=2" in args and "algo.tau=0.01" in args
    config = _compose_registering(args)
    assert dict(config.env.kwargs) == {"frame_skip": 2}
    assert dict(config.distributed.resources) == {"robot": 1}
    listed = normalize_overrides(["algo=dqn", "env=BitFlipping", "+env.kwargs.n_bits=5"])
    assert _compose_registering(listed).env.kwargs.n_bits == 5  # Hydra: "already there"


def test_a_sweep_checks_its_first_job(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = ["-m", "algo=sac", "seed=0,1", "algo.tau=0.1,0.2", "algo.taux=3"]
    code, _, err = _cli_in_process(args, monkeypatch, capsys)
    assert code == EXIT_CONFIG and "algo.taux=3: not an algo option" in err, err
    assert err.count("\n") == 1 and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["device=gpu"], "device='gpu': must be a torch device: cpu, cuda, cuda:N"),
        (["device=mps"], "device=mps: this PyTorch"),  # Linux wheels have no MPS back end
        (["env.backend=foo"], "env.backend='foo': must be one of sync, async, native, mjx"),
        (["algo=fast_td3", "algo.v_min=5", "algo.v_max=5"],
         "algo=fast_td3: v_min=5.0 must be below v_max=5.0"),
    ],
    ids=["device", "device-unavailable", "backend", "fast_td3-support"],
)  # fmt: skip
def test_values_the_run_refuses_are_exit_2(args, needle, tmp_path):
    out = _cli(["env=InvertedPendulum", "total_steps=300", *FAST, *args], tmp_path)
    assert out.returncode == EXIT_CONFIG, out.stderr
    assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1, out.stderr
    assert needle in out.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("dataset", "hint"),
    [("local/hopper/nonexistent-v0", ""),
     ("local/hopper/medium-v0", ". It is one of the D4RL-like levels `python -m rlcore.offline."
                                "collect recipe env=Hopper namespace=local version=0` records")],
    ids=["any-id", "a-recipe-level"],
)  # fmt: skip
def test_a_minari_id_that_is_not_here_is_exit_3_and_writes_nothing(dataset, hint, tmp_path):
    args = ["algo=iql", "env=Hopper", f"dataset={dataset}", "threads=1"]
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    out = _cli(args, cwd, MINARI_DATASETS_PATH=str(tmp_path / "datasets"))
    assert out.returncode == EXIT_MISSING, out.stderr
    assert out.stderr.startswith(f"error: dataset {dataset} is not available offline")
    assert out.stderr.count("\n") == 1 and "rlcore.offline.collect" in out.stderr
    assert hint in out.stderr and ".." not in out.stderr
    assert out.stdout == "" and list(cwd.iterdir()) == []  # no run folder


# ----------------------------------------------------------------------------- help


def test_train_help_lists_what_algo_and_env_accept(monkeypatch, capsys):
    code, out, _ = _cli_in_process(["--help"], monkeypatch, capsys)
    assert code == 0
    assert "sac_defaults" not in out and "_defaults" not in out
    for name in ("sac", "iql", "ppo_lag", "fast_td3"):
        assert f" {name}," in out or f" {name}\n" in out
    assert "hopper" in out and "total_steps:" in out and "+experiment=" in out


@pytest.mark.parametrize(("name", "module", "_"), commands.COMMANDS)
def test_every_command_answers_help(name, module, _, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["rlcore"])
    try:
        code = commands.main([name, "--help"])
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "usage" in out.out.lower() and "error" not in out.err.lower(), out


def test_python_m_rlcore_lists_the_commands(tmp_path):
    out = subprocess.run([sys.executable, "-m", "rlcore"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=HANG_GUARD_S)  # fmt: skip
    assert out.returncode == 0, out.stderr
    for name, module, _ in commands.COMMANDS:
        assert f"  {name} " in out.stdout and f"[{module}]" in out.stdout
    assert commands.main(["nope"]) == 2


def test_export_usage_error_is_one_line(capsys):
    from rlcore.export import main

    with pytest.raises(SystemExit) as info:
        main(["runs/x", "--format", "pdf"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1
    assert err.startswith("error: argument --format: invalid choice: 'pdf'") and "--help" in err


# ----------------------------------------------------------------------------- run dirs


def _lose_checkpoints(run_dir: Path) -> None:
    """What a run killed before its first checkpoint leaves: its files, no checkpoint."""
    for path in (run_dir / "checkpoints").iterdir():
        path.unlink()
    (run_dir / "checkpoints").rmdir()


def _eval_returns(run_dir: Path) -> list[tuple[float, float]]:
    return [(row["step"], row["eval/return"]) for row in read_csv(run_dir / "eval.csv")]


def test_resume_of_a_run_without_checkpoint_starts_it_again(tmp_path):
    run_dir = tmp_path / "run"
    train(make_config(*DQN_TINY), run_dir)
    first = _eval_returns(run_dir)
    _lose_checkpoints(run_dir)
    train(make_config(*DQN_TINY, f"resume={run_dir}"), run_dir)
    assert _eval_returns(run_dir) == first  # from step 0 again: the same numbers
    log = (run_dir / "train.log").read_text()
    assert f"note: resume={run_dir}: the run has no checkpoint yet" in log
    assert (run_dir / "config.yaml").is_file() and not (run_dir / "config_resumed.yaml").exists()


def test_a_new_run_reuses_a_run_dir_without_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    train(make_config(*DQN_TINY), run_dir)
    _lose_checkpoints(run_dir)
    train(make_config(*DQN_TINY, "seed=3"), run_dir)  # another config: replaces it
    assert "seed: 3" in (run_dir / "config.yaml").read_text()
    assert f"note: run_dir={run_dir} held a run without a checkpoint" in (
        run_dir / "train.log"
    ).read_text()
    with pytest.raises(RunDirExistsError, match="already holds a run"):  # now it has one
        train(make_config(*DQN_TINY), run_dir)


def test_a_live_run_without_checkpoint_is_refused_as_being_written(tmp_path):
    run_dir = tmp_path / "run"
    train(make_config(*DQN_TINY), run_dir)
    _lose_checkpoints(run_dir)
    (run_dir / LOCK_FILE).write_text(  # the test's parent process: alive, on this host
        json.dumps({"pid": os.getppid(), "host": os.uname().nodename, "started": "now"})
    )
    for overrides in ([f"resume={run_dir}"], []):
        with pytest.raises(RunLockedError, match="is being written by another process"):
            train(make_config(*DQN_TINY, *overrides), run_dir)


def test_first_checkpoint_comes_within_a_minute(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(loops.time, "monotonic", lambda: clock[0])
    saved: list[int] = []
    run = RunContext("t", logger=None, save=lambda state: saved.append(state) or Path("x"))  # type: ignore[arg-type]
    run.last_save_time = clock[0]  # the process starts
    settings = LoopSettings(checkpoint_every=0, checkpoint_every_s=300)

    def tick(seconds: float, step: int) -> None:
        clock[0] += seconds
        loops._checkpoint_if_due(run, settings, step, step - 1, False, lambda: step)

    tick(FIRST_CHECKPOINT_S - 1, 1)
    assert saved == []
    tick(1, 2)
    assert saved == [2]  # the first: after FIRST_CHECKPOINT_S
    tick(FIRST_CHECKPOINT_S, 3)
    assert saved == [2]  # then every checkpoint_every_s
    tick(300 - FIRST_CHECKPOINT_S, 4)
    assert saved == [2, 4]


# ----------------------------------------------------------------------------- compile=auto


def test_compile_auto_decides_on_the_steps_a_run_really_takes(monkeypatch):
    from rlcore import speed
    from rlcore.algos.iql import IQLConfig
    from rlcore.algos.wsrl import WSRLConfig

    monkeypatch.setattr(speed, "cxx_compiler", lambda: "g++")  # as on a machine with one
    wsrl = WSRLConfig(compile="auto", offline_steps=500, total_steps=600)
    assert speed.settle_compile(wsrl, 1_100).compile is False  # was: bool("auto") -> True
    assert speed.settle_compile(wsrl, 250_000 + 500_000).compile is True
    iql = IQLConfig(compile="auto", total_steps=1_000_000, online_steps=1_500)
    assert speed.settle_compile(iql, 1_500).compile is False  # init_from: no pre-training
    assert speed.settle_compile(IQLConfig(compile=True), 10).compile is True  # as asked


def test_an_init_from_run_neither_compiles_nor_counts_the_skipped_pretraining(tmp_path,
                                                                               monkeypatch):  # fmt: skip
    from rlcore.offline.recording import collect

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    collect("Hopper", "random", "local/hopper/random-v0", steps=300, seed=0)
    small = ["algo=iql", "env=Hopper", "algo.hidden=[32,32]", "algo.batch_size=32",
             "eval_every=100", "env.max_episode_steps=50", *FAST]  # fmt: skip
    train(make_config(*small, "dataset=local/hopper/random-v0", "total_steps=50",
                      "algo.compile=false"), tmp_path / "offline")  # fmt: skip
    run_dir = tmp_path / "online"
    train(make_config(*small, f"init_from={tmp_path / 'offline'}", "algo.online_steps=200"),
          run_dir)  # compile: auto (configs/algo/iql.yaml), total_steps: 1M (IQL's)  # fmt: skip
    effective = json.loads((run_dir / "meta.json").read_text())["effective"]
    assert effective["compile"] is False
    assert (effective["offline_steps"], effective["online_steps"]) == (0, 200)
    assert "compiling the update" not in (run_dir / "train.log").read_text()


# ----------------------------------------------------------------------------- safe RL output


def test_progress_line_and_summary_show_the_cost(monkeypatch):
    from rlcore.run import closing_summary

    shown: list[str] = []
    run = RunContext("x", logger=None, save=lambda state: Path("x"))  # type: ignore[arg-type]
    run.logger = type("L", (), {"progress": lambda self, text, force=False: shown.append(text)})()
    progress = loops._Progress(run, total=100, start=0)
    progress.show(50, 12.34, 70.0, last_cost=4.0, last_eval_cost=23.0)
    assert "| episode return 12.3 (cost 4.0) | eval 70.0 (cost 23.0) |" in shown[-1]
    progress.show(50, 12.34, 70.0)  # a task without costs: no cost
    assert "| episode return 12.3 | eval 70.0 |" in shown[-1]
    result = {"run/step": 100, "run/reached_stop_at_return": 0.0, "eval/return": 73.7,
              "eval/best_return": 80.0, "eval/cost": 23.0}  # fmt: skip
    first = closing_summary(result, LoopSettings(), Path("runs/x"))[0]
    assert first == "finished: all 100 steps done; final evaluation return 73.7 (cost 23.0), best 80.0"


def test_gymnasium_ids_get_lower_case_run_folders():
    cfg = make_config("algo=ppo_lag", "env=SafetyHopperVelocity")
    assert cfg.env.id == "SafetyHopperVelocity-v1" and cfg.env.name == "safetyhoppervelocity-v1"
    assert cfg.run_dir.startswith("runs/ppo_lag/safetyhoppervelocity-v1/")
    assert make_config("env=Pusher-v5").env.name == "pusher"  # short names as before


def test_safety_tasks_build_without_gymnasium_colour_coded_notices(tmp_path):
    import warnings

    import gymnasium as gym

    import rlcore.envs  # noqa: F401 - registers the Safety*Velocity ids
    from rlcore.logging import Logger
    from rlcore.run import log_warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gym.make("SafetyHopperVelocity-v1").close()
    assert not [w for w in caught if "out of date" in str(w.message)]
    logger = Logger(tmp_path, tensorboard=False, csv_files=False, console=False)
    with log_warnings(logger), warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("\x1b[33mWARN: a gymnasium notice\x1b[0m", UserWarning, stacklevel=1)
    logger.close()
    assert "UserWarning: WARN: a gymnasium notice\n" in (tmp_path / "train.log").read_text()
