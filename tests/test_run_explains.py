"""Runs that explain themselves (issue 34, section 2) from the command line.

A refused run writes nothing, one process writes a run, ``resume=<dir>`` alone continues
any run (the command a Ctrl-C prints works), exit codes follow the documented rule, and a
run ends with a summary."""

from __future__ import annotations

import os
import platform
import re
import shlex
import signal
import subprocess
import sys

import pytest

from rlcore.cli import EXIT_CONFIG, EXIT_FAILED, EXIT_MISSING, EXIT_SIGINT, EXIT_SIGTERM
from rlcore.run_lock import LOCK_FILE, RunLock, RunLockedError
from tests.conftest import FAST, HANG_GUARD_S, REPO, python_cmd
from tests.test_resume import hooked_cli

SAC_TINY = [
    "algo=sac",
    "env=InvertedPendulum",
    "total_steps=300",
    "algo.learning_starts=100",
    "algo.batch_size=32",
    "algo.hidden=[32,32]",
    "eval_every=300",
    "checkpoint_every=300",
    *FAST,
]
DQN_TINY = [
    "algo=dqn",
    "env=CartPole-v1",
    "total_steps=1200",
    "algo.learning_starts=200",
    "algo.batch_size=32",
    "eval_every=600",
    "checkpoint_every=0",
    "checkpoint_every_s=0",
    "log_every=100",
    *FAST,
]


def _cli(args: list[str], cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        python_cmd(*args), cwd=cwd, capture_output=True, text=True, timeout=HANG_GUARD_S, env=env
    )


def _tree(path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


# ----------------------------------------------------------------------------- refused runs


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["algo=iql", "env=Hopper", "dataset=missing/d4rl.hdf5"], EXIT_MISSING, "does not exist"),
        (["algo=iql", "env=Hopper"], EXIT_CONFIG, "trains on offline data"),
        (["algo=ppo_lag", "env=Hopper", "total_steps=40000"], EXIT_CONFIG, "no info['cost']"),
    ],
    ids=["missing-dataset", "iql-without-dataset", "ppo_lag-on-Hopper"],
)
def test_refused_run_writes_nothing(args, code, needle, tmp_path):
    out = _cli([*args, "threads=1", f"run_dir={tmp_path / 'run'}"], tmp_path)
    assert out.returncode == code, out.stderr
    assert out.stderr.startswith("error: ") and needle in out.stderr, out.stderr
    assert _tree(tmp_path) == set()  # no run dir, no .hydra/, no train.log (nor in the cwd)


def test_refused_default_run_dir_leaves_no_runs_folder(tmp_path):
    out = _cli(["algo=iql", "env=Hopper", "threads=1"], tmp_path)
    assert out.returncode == EXIT_CONFIG, out.stderr
    assert _tree(tmp_path) == set()


def test_failed_resume_keeps_the_previous_resume_record(tmp_path):
    run_dir = tmp_path / "run"
    assert _cli([*SAC_TINY, f"run_dir={run_dir}"], tmp_path).returncode == 0
    assert _cli(["total_steps=400", f"resume={run_dir}"], tmp_path).returncode == 0
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    out = _cli(["algo.hidden=[64,64]", "total_steps=500", f"resume={run_dir}"], tmp_path)
    assert out.returncode == EXIT_CONFIG and "algo.hidden" in out.stderr, out.stderr
    after = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert after == before  # .hydra_resumed/, config_resumed.yaml, train.log: untouched
    assert "total_steps=400" in (run_dir / ".hydra_resumed" / "overrides.yaml").read_text()


# ----------------------------------------------------------------------------- one writer


def test_run_lock_refuses_a_live_holder_and_takes_over_a_stale_one(tmp_path):
    first = RunLock(tmp_path)
    first.acquire()
    holder = (tmp_path / LOCK_FILE).read_text()
    assert str(os.getpid()) in holder and platform.node() in holder
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    first.release()
    assert not (tmp_path / LOCK_FILE).exists()
    # a live process (the test's parent) holds it: refused, naming pid, host and start
    (tmp_path / LOCK_FILE).write_text(
        f'{{"pid": {os.getppid()}, "host": "{platform.node()}", "started": "2026-11-27 01:00"}}'
    )
    with pytest.raises(RunLockedError, match=f"pid {os.getppid()} on host .* since 2026-11-27"):
        RunLock(tmp_path).acquire()
    # the same host's dead pid: stale, taken over
    (tmp_path / LOCK_FILE).write_text(f'{{"pid": {dead.pid}, "host": "{platform.node()}"}}')
    lock = RunLock(tmp_path)
    lock.acquire()
    assert str(os.getpid()) in (tmp_path / LOCK_FILE).read_text()
    lock.release()


def test_second_process_on_a_run_is_refused_and_a_stale_lock_resumes(tmp_path):
    run_dir = tmp_path / "run"
    assert _cli([*SAC_TINY, f"run_dir={run_dir}"], tmp_path).returncode == 0
    assert not (run_dir / LOCK_FILE).exists()  # released at the end
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        (run_dir / LOCK_FILE).write_text(
            f'{{"pid": {holder.pid}, "host": "{platform.node()}", "started": "x"}}'
        )
        before = (run_dir / "train.log").read_text()
        out = _cli(["total_steps=400", f"resume={run_dir}"], tmp_path)
        assert out.returncode == EXIT_CONFIG, out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and f"pid {holder.pid} on host {platform.node()}" in lines[0]
        assert (run_dir / "train.log").read_text() == before  # the holder's run untouched
    finally:
        holder.kill()
        holder.wait()
    out = _cli(["total_steps=400", f"resume={run_dir}"], tmp_path)  # its pid is dead now
    assert out.returncode == 0, out.stderr
    assert "step 400/400" in (run_dir / "train.log").read_text()


# ----------------------------------------------------------------------------- resume


_SIGINT_HOOK = """
import os
import rlcore.logging as _logging

_log = _logging.Logger.log

def _log_hook(self, metrics, step):
    _log(self, metrics, step)
    if step >= 600 and not getattr(_logging, "_sent", False):
        _logging._sent = True
        os.kill(os.getpid(), SIG)

_logging.Logger.log = _log_hook
"""


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, EXIT_SIGINT), (signal.SIGTERM, EXIT_SIGTERM)]
)
def test_printed_resume_command_continues_a_non_default_algorithm(sig, code, tmp_path):
    run_dir = tmp_path / "run"
    proc = hooked_cli([*DQN_TINY, f"run_dir={run_dir}"], f"SIG = {int(sig)}\n{_SIGINT_HOOK}",
                      cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                      text=True)  # fmt: skip
    _, stderr = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == code, stderr
    assert stderr.startswith("interrupted: ") and "error" not in stderr, stderr
    command = re.search(r"Continue with: (python -m rlcore\.train .*)$", stderr.strip()).group(1)
    assert command == f"python -m rlcore.train resume={run_dir}"
    out = _cli(shlex.split(command)[3:], tmp_path)  # the printed command, as it is
    assert out.returncode == 0, out.stderr
    saved = (run_dir / "config_resumed.yaml").read_text()
    assert "name: dqn" in saved and "id: CartPole-v1" in saved and "total_steps: 1200" in saved
    assert "step 1,200/1,200" in (run_dir / "train.log").read_text()


def test_resume_overrides_change_only_what_they_name(tmp_path):
    from omegaconf import OmegaConf

    run_dir = tmp_path / "run"
    assert _cli([*DQN_TINY, "total_steps=600", f"run_dir={run_dir}"], tmp_path).returncode == 0
    out = _cli(["total_steps=1200", f"resume={run_dir}"], tmp_path)
    assert out.returncode == 0, out.stderr
    original = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"))
    resumed = OmegaConf.to_container(OmegaConf.load(run_dir / "config_resumed.yaml"))
    assert resumed["total_steps"] == resumed["algo"]["total_steps"] == 1200
    assert resumed["resume"] == str(run_dir)
    for config in (original, resumed):
        for key in ("total_steps", "resume"):
            config.pop(key)
        config["algo"].pop("total_steps")
    assert resumed == original  # algo, env, batch size, cadences: the run's own


# ----------------------------------------------------------------------------- summary


def test_closing_summary_says_why_where_and_what_next(tmp_path):
    run_dir = tmp_path / "run"
    out = _cli([*SAC_TINY, "logger.console=true", f"run_dir={run_dir}"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert re.search(r"finished: all 300 steps done; final evaluation return -?\d", out.stdout)
    assert f"checkpoint {run_dir / 'checkpoints' / 'latest.pt'}" in out.stdout
    assert f"python -m rlcore.train resume={run_dir} total_steps=" in out.stdout
    assert f"evaluate: python -m rlcore.evaluate {run_dir}" in out.stdout
    assert f"rlcore.load_policy('{run_dir}')" in out.stdout
    args = ["total_steps=900", "stop_at_return=-1000", "logger.console=true"]
    out = _cli([*SAC_TINY, *args, f"run_dir={tmp_path / 's'}"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert "finished: stop_at_return=-1000 reached at step 300;" in out.stdout, out.stdout
    # a time budget far below one evaluation's worth of steps ends the run on the step
    # that used it up, with the time said
    args = ["total_steps=900", "stop_after_s=0.001", "logger.console=true"]
    out = _cli([*SAC_TINY, *args, f"run_dir={tmp_path / 't'}"], tmp_path)
    assert out.returncode == 0, out.stderr
    found = re.search(r"finished: stop_after_s=0.001 reached at step (\d+) \(0 s of training\)",
                      out.stdout)  # fmt: skip
    assert found and int(found[1]) < 900, out.stdout


def test_exit_codes_are_documented():
    text = (REPO / "docs" / "cli.md").read_text()
    section = text[text.index("**Exit codes**") :]
    for code in (EXIT_FAILED, EXIT_CONFIG, EXIT_MISSING, EXIT_SIGINT, EXIT_SIGTERM):
        assert f"| {code} |" in section, code


# ----------------------------------------------------------------------------- compilation


def test_progress_speed_leaves_a_compilation_stall_out(monkeypatch):
    from rlcore import loops

    clock = [100.0]
    monkeypatch.setattr(loops.time, "monotonic", lambda: clock[0])
    run = loops.RunContext("x", logger=None, save=lambda state: None)
    progress = loops._Progress(run, total=10_000, start=0)
    for second in range(1, 11):  # 100 steps/s for 10 s
        clock[0] = 100.0 + second
        progress.recent_sps(100 * second)
    clock[0] += 50.0  # a 50 s compilation, then 1 s at 20 steps/s (updates now)
    progress.restart(1000)
    clock[0] += 1.0
    assert progress.recent_sps(1020) == pytest.approx(20.0)
    # without the restart the stall and the warm-up would count: 1020 steps in 61 s
    stalled = loops._Progress(run, total=10_000, start=0)
    stalled._samples = type(stalled._samples)([(100.0, 0)])
    assert stalled.recent_sps(1020) == pytest.approx(1020 / 61)


def test_progress_eta_of_a_time_budget_is_the_time_it_leaves(monkeypatch):
    from rlcore import loops

    clock, shown, left = [100.0], [], [30.0]
    monkeypatch.setattr(loops.time, "monotonic", lambda: clock[0])
    run = loops.RunContext("x", logger=None, save=lambda state: None)
    run.logger = type("L", (), {"progress": lambda self, text, force=False: shown.append(text)})()
    progress = loops._Progress(run, total=10**8, start=0, seconds_left=lambda: left[0])
    clock[0] += 10.0
    progress.mark(1000)
    progress.show(1000, 1.0, 2.0)  # 100 steps/s: 10**8 steps would take 11 days
    assert shown[-1].endswith("ETA 0m30s"), shown
    left[0] = -1.0  # overrun by the last tick: nothing left, never negative
    progress.show(1100, 1.0, 2.0)
    assert shown[-1].endswith("ETA 0m00s"), shown


def test_eta_comes_from_measured_rates_only(monkeypatch):
    """A fast random warm-up does not set the online ETA, the online phase's slow first
    tick (a JIT compilation, the first update) is left out, and until a phase has a
    measured rate the line says so: SAC Hopper once showed ETA 0m29s at step 5,098 of
    20,000 (8.5 minutes were needed), an MJX run on the CPU ETA 47h37m."""
    from rlcore import loops

    clock, shown = [0.0], []
    monkeypatch.setattr(loops.time, "monotonic", lambda: clock[0])
    run = loops.RunContext("x", logger=None, save=lambda state: None)
    run.logger = type("L", (), {"progress": lambda self, text, force=False: shown.append(text)})()
    progress = loops._Progress(run, total=20_000, start=0)
    progress.start_phase("random warm-up", 0, 5_000, final=False)
    progress.show(0, 1.0, 2.0)
    assert shown[-1].endswith("| - steps/s | episode return 1.0 | eval 2.0 | ETA estimating")
    for second in range(1, 5):  # 1,000 steps/s
        clock[0] = float(second)
        progress.mark(1_000 * second)
    progress.show(4_000, 1.0, 2.0)  # 2 s of samples (from the end of the first tick)
    assert shown[-1].endswith("ETA estimating (random warm-up phase: 0m01s left)"), shown
    progress.start_phase("online", 5_000, 20_000, final=True)
    clock[0] = 105.0  # the first online tick: 100 s (a compilation, the first update)
    progress.mark(5_001)
    progress.show(5_001, 1.0, 2.0)
    assert shown[-1].endswith("| - steps/s | episode return 1.0 | eval 2.0 | ETA estimating")
    for second in range(1, 4):  # then 25 steps/s
        clock[0] = 105.0 + second
        progress.mark(5_001 + 25 * second)
    progress.show(5_076, 1.0, 2.0)
    assert "| 25 steps/s |" in shown[-1]
    assert shown[-1].endswith(f"ETA {loops.format_duration((20_000 - 5_076) / 25)}")  # 9m56s


@pytest.mark.parametrize("compiled", [True, False])
def test_first_update_of_a_compiled_agent_is_announced_with_its_duration(compiled, tmp_path):
    import time

    from rlcore.logging import Logger
    from rlcore.loops import LoopSettings, Phase, RunContext, run_phases
    from tests.test_loops import _envs
    from tests.test_o2o_core import Source, SpyAgent

    class Compiling(SpyAgent):
        def update(self, batch, progress=None):
            if not any(event[0] == "update" for event in self.events):
                time.sleep(0.3)  # the first call compiles
            return super().update(batch)

    env, eval_env = _envs()
    logger = Logger(tmp_path, tensorboard=False, console=False)
    run = RunContext("spy", logger, save=lambda state: tmp_path)
    settings = LoopSettings(eval_every=1000, eval_episodes=1, checkpoint_every=0,
                            compiled=compiled)  # fmt: skip
    result = run_phases(
        Compiling(1), [Phase("offline", 3, Source(0.0), batch_size=4)], env, eval_env,
        settings, run,
    )  # fmt: skip
    logger.close()
    log = (tmp_path / "train.log").read_text()
    if compiled:
        assert log.count("compiling the update") == 1
        took = float(re.search(r"compiled in (\d+\.\d) s", log).group(1))
        assert 0.3 <= took < 5.0
        # the compilation is not training time (stop_after_s, eval/train_seconds)
        assert result["run/train_seconds"] < 0.3
    else:
        assert "compil" not in log
        assert result["run/train_seconds"] >= 0.3
