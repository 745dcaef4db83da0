"""The GPU numbers of record (MJX, training on MJX, GPU updates) in one prepared device call.

    bash benchmarks/mjx_gpu.sh record                 # $OUT/gpu_record.json and .log
    RECORD_DRY=1 bash benchmarks/mjx_gpu.sh record    # tiny sizes, JAX's CPU device

Rows, in order of priority; each runs in its own process under its own cap, a failure or
a time-out is recorded in its row (status, the error's last line) and the next row runs,
and the JSON is rewritten after every row and every baseline:

a. ``throughput``: MJX env steps/s with the capped solver (4 Newton / 4 line-search
   iterations), Hopper and Ant at 65,536 / 16,384 / 4,096 envs, with the first step's
   seconds, next to the native back end on 2 cores (taskset) in the same run.
b. ``levers`` (section 3, the diagnosis): ms per vector step of Hopper at 4,096 envs with
   1 / 2 / 4 Newton iterations, of the physics alone (frame_skip RK4 steps, no
   observation, reward or autoreset) and of one forward pass (what a reset's forward pass
   costs), against native and the 30x target. Batch size is row a's.
c. ``ppo``: ``+experiment=ppo_hopper_mjx`` to 2,500: process wall time and env steps;
   the same experiment on the native back end on 2 cores beside it for as long.
d. ``fast_td3``: ``algo=fast_td3`` on MJX Hopper, 1,024 envs, to a stated return
   (``FAST_TD3_TARGET``); "skipped: algo missing" where this checkout has no fast_td3.
e. ``finetune``: DPPO and ReinFlow from the committed BC heads (benchmarks/assets) on
   1,024 MJX envs: seconds per iteration, native on 2 cores at the same sizes.
f. ``updates``: SAC and PPO gradient updates/s at their default batch sizes on CUDA:
   eager, ``algo.compile`` (torch.compile) and the same with CUDA graphs (inductor's
   ``triton.cudagraphs``, what ``mode="reduce-overhead"`` turns on), next to SB3.

Schedule. A device call is one command of at most 9 minutes, and an MJX function costs
~45 s to compile on the GPU, one after another far more than the budget. So the driver
first starts every MJX compilation the rows need, several at once in separate processes
(``warm`` jobs), into JAX's persistent cache (``RLCORE_JAX_CACHE``); a row waits for its
functions and loads them (its "first step" seconds say so, next to the compile's). On a
host with 8+ cores the cores are split: the native baselines on 0-1, one at a time,
beside the GPU rows; the GPU rows on 2-5; the compilations on the rest. Row f needs no
JAX and runs first, while the compilations run. The total budget (``RECORD_SECONDS``,
510) counts from ``--started`` (the shell script's start, wheel installation included);
each row gets ``min(its cap, what is left)`` and is skipped below its minimum.
``RECORD_SKIP="updates fast_td3"`` skips rows by name.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlcore.benchmarks.throughput.common import cpu_description, write_json

ASSETS = Path(__file__).resolve().parent / "assets"
# import name -> distribution: what the rows import (the GPU image lacks the ones from
# mujoco down; they come as carried wheels, benchmarks/mjx_gpu.sh)
REQUIRED = {
    "torch": "torch",
    "numpy": "numpy",
    "jax": "jax",
    "mujoco": "mujoco",
    "absl": "absl-py",
    "etils": "etils",
    "glfw": "glfw",
    "mujoco.mjx": "mujoco-mjx",
    "trimesh": "trimesh",
    "gymnasium": "gymnasium",
    "farama_notifications": "farama-notifications",
    "imageio": "imageio",
    "hydra": "hydra-core",
    "omegaconf": "omegaconf",
    "antlr4": "antlr4-python3-runtime",
    "stable_baselines3": "stable-baselines3",
}
MJX_ROWS = ("throughput", "levers", "ppo", "fast_td3", "finetune")
TRAIN_ROWS = ("ppo", "fast_td3", "finetune")
# rows that cannot run without a module (the others run)
NEEDS = {
    **{
        m: MJX_ROWS
        for m in (
            "jax",
            "mujoco",
            "absl",
            "etils",
            "glfw",
            "mujoco.mjx",
            "trimesh",
            "gymnasium",
            "farama_notifications",
            "imageio",
        )
    },
    **{m: TRAIN_ROWS for m in ("hydra", "omegaconf", "antlr4")},
    "stable_baselines3": ("updates",),
    "torch": (*MJX_ROWS, "updates"),
}
TARGET_RATIO = 30.0  # the mission's MJX / native-on-2-cores target (Hopper, 4,096+ envs)
# benchmarks/README.md, "MJX back end": the CPU figure cited next to the PPO row
PPO_CPU_CITATION = (
    "native back end, 1,024 envs, this experiment: 2,500 reached after 3.5M env steps "
    "(3,006; 1 thread, 2-core AMD EPYC); 64 envs: 501,760 env steps in 133 s of process wall"
)
AGREEMENT = {  # where the solver caps' agreement with native is checked (CPU)
    4: "tests/test_mjx.py::test_rollout_matches_native (Hopper 1e-5 over 30 steps)",
    2: "not checked",
    1: "envs/mjx.py docstring: Hopper drifts by 0.5 over 30 steps (CPU measurement)",
}


@dataclasses.dataclass(frozen=True)
class Plan:
    """Sizes and caps of one record run (``FULL`` on the GPU, ``DRY`` on the CPU)."""

    device: str
    tasks: tuple[str, ...]  # row a
    num_envs: tuple[int, ...]  # row a, largest first
    steps: int  # timed vector steps per round (MJX)
    rounds: int
    native_env_steps: int  # env steps per native measurement (at least 3 vector steps)
    native_rounds: int
    lever_envs: int  # row b's batch (Hopper)
    lever_iterations: tuple[int, ...]  # Newton iterations besides the default 4
    lever_parts: bool  # physics alone and one forward pass
    train_envs: int  # rows c-e
    ppo_extra: tuple[str, ...]
    fast_td3_extra: tuple[str, ...]
    finetune_methods: tuple[str, ...]  # row e
    finetune_rollout: int  # chunks per sub-env per iteration (x 4 env steps)
    finetune_extra: tuple[str, ...]
    updates: int  # SAC gradient steps per measurement (row f)
    update_modes: tuple[str, ...]  # of eager, compile, compile_cudagraphs (CUDA only)
    ppo_epochs: int | None  # None: PPO's default (10) in row f
    compile_workers: int  # warm jobs at once
    caps: dict[str, float]  # row -> seconds
    native_caps: dict[str, float]  # baseline -> seconds


FULL = Plan(
    device="cuda",
    tasks=("Hopper", "Ant"),
    num_envs=(65536, 16384, 4096),
    steps=20,
    rounds=3,
    native_env_steps=100_000,
    native_rounds=1,
    lever_envs=4096,
    lever_iterations=(1, 2),
    lever_parts=True,
    train_envs=1024,
    ppo_extra=(),
    # the recipe of the recorded row, kept so it reproduces: Playground's gamma 0.97 and the
    # reference's HumanoidBench support [-250, 250] (Hopper's discounted returns reach ~170
    # at gamma 0.97); configs/algo_env/fast_td3_hopper.yaml's gamma 0.99 / [-500, 500] are
    # the command line's default for Hopper since
    fast_td3_extra=("eval_every=100000", "algo.gamma=0.97", "algo.v_min=-250", "algo.v_max=250"),
    finetune_methods=("dppo", "reinflow"),
    finetune_rollout=8,
    finetune_extra=("eval_every=1000000000", "eval_episodes=1"),
    updates=200,
    update_modes=("eager", "compile", "compile_cudagraphs"),
    ppo_epochs=None,
    compile_workers=6,
    caps={
        "updates": 80,
        "throughput": 150,
        "levers": 80,
        "ppo": 180,
        "fast_td3": 90,
        "finetune": 70,
    },
    native_caps={"throughput": 120, "finetune": 60, "ppo": 60},
)
DRY = Plan(
    device="cpu",
    tasks=("Hopper",),
    num_envs=(3,),  # tests/test_mjx.py's Hopper env: its compilation, where cached, serves
    steps=3,
    rounds=1,
    native_env_steps=400,
    native_rounds=1,
    lever_envs=3,
    lever_iterations=(),
    lever_parts=False,
    train_envs=3,
    ppo_extra=(
        "algo.rollout_steps=8",
        "algo.num_minibatches=2",
        "algo.update_epochs=1",
        "algo.hidden=[16,16]",
        "total_steps=64",
        "eval_every=32",
        "eval_episodes=1",
        "eval_envs=1",
    ),
    fast_td3_extra=(
        "algo.batch_size=64",  # the GPU sizes (32,768 rows, 1024-wide critics): ~15 s an
        "algo.critic_hidden=[32,32]",  # update on 2 CPU cores
        "algo.actor_hidden=[32,32]",
        "total_steps=64",
        "eval_every=32",
        "eval_episodes=1",
    ),
    finetune_methods=("reinflow",),  # DPPO's path is the same (tests/test_mjx.py runs it)
    finetune_rollout=2,
    finetune_extra=(
        "eval_every=1000000000",
        "eval_episodes=1",
        "eval_envs=1",
    ),
    updates=4,
    update_modes=("eager",),  # CPU compilation costs ~1 min: not in the dry run
    ppo_epochs=1,
    compile_workers=1,
    caps={
        "updates": 150,
        "throughput": 240,
        "levers": 120,
        "ppo": 150,
        "fast_td3": 90,
        "finetune": 150,
    },
    native_caps={"throughput": 60, "finetune": 90, "ppo": 90},
)
MIN_ROW_S = 15.0  # a row with less time left than this is skipped
LETTERS = {"throughput": "a", "levers": "b", "ppo": "c", "fast_td3": "d", "finetune": "e",
           "updates": "f", "summary": "-"}  # fmt: skip


# --------------------------------------------------------------------------------------
# the machine
# --------------------------------------------------------------------------------------
def missing_modules() -> list[str]:
    """The required modules that do not import here, one line each ("name (pip name)")."""
    missing = []
    for module, dist in REQUIRED.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(f"{module} (pip install {dist})")
    return missing


def device_info() -> dict[str, Any]:
    """GPU name (nvidia-smi), library versions and the host CPU, for every row."""
    gpu = None
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                 "--format=csv,noheader"]  # fmt: skip
        result = subprocess.run(query, capture_output=True, text=True, check=False)
        gpu = result.stdout.strip() or None
    versions = {}
    for dist in ("torch", "jax", "jaxlib", "mujoco", "mujoco-mjx", "gymnasium",
                 "stable-baselines3", "numpy"):  # fmt: skip
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    return {"gpu": gpu, "host": platform.node(), "python": platform.python_version(),
            "cpu_count": os.cpu_count(), **cpu_description(), "versions": versions}  # fmt: skip


def core_split(count: int | None) -> dict[str, str | None]:
    """taskset core lists: native baselines, GPU rows, compilations (None: no pinning,
    on hosts with fewer than 8 cores)."""
    if count is None or count < 8:
        return {"native": None, "rows": None, "compile": None}
    return {"native": "0-1", "rows": "2-5", "compile": f"6-{count - 1}"}


# --------------------------------------------------------------------------------------
# running one capped process
# --------------------------------------------------------------------------------------
@dataclasses.dataclass
class Outcome:
    """How a capped process ended: status "ok" / "timed out" / "failed: <last line>"."""

    status: str
    wall_s: float
    result: dict[str, Any] | None  # its result JSON, where it wrote one


class Runner:
    """Runs capped processes (their output into one log), kills them all at the end."""

    def __init__(self, log: Path, work: Path, deadline: float) -> None:
        self.log, self.work, self.deadline = log, work, deadline
        self.lock = threading.Lock()
        self.procs: set[subprocess.Popen] = set()
        self.count = 0
        self.closed = False  # after stop_all nothing starts

    def left(self) -> float:
        return self.deadline - time.time()

    def write_log(self, text: str) -> None:
        with self.lock, self.log.open("a") as handle:
            handle.write(text)

    def run(self, name: str, command: Sequence[str], cap: float, cores: str | None = None,
            result: Path | None = None) -> Outcome:  # fmt: skip
        """Run ``command`` (under ``taskset -c cores``) for at most ``cap`` seconds (and
        never past the deadline); its output goes to the log when it ends."""
        with self.lock:
            if self.closed:
                return Outcome("skipped: the record had ended", 0.0, None)
            self.count += 1
            output = self.work / f"{self.count:03d}_{name}.out"
        if cores and shutil.which("taskset"):
            command = ["taskset", "-c", cores, *command]
        cap = max(1.0, min(cap, self.left()))
        start = time.time()
        with output.open("w") as handle:
            try:
                proc = subprocess.Popen(list(command), stdout=handle, stderr=subprocess.STDOUT,
                                        start_new_session=True)  # fmt: skip
            except OSError as error:
                return Outcome(f"failed: {error}", 0.0, None)
            with self.lock:
                self.procs.add(proc)
            try:
                code = proc.wait(timeout=cap)
                status = "ok" if code == 0 else None
            except subprocess.TimeoutExpired:
                stop(proc)
                code, status = None, f"timed out ({cap:.0f} s cap)"
            finally:
                with self.lock:
                    self.procs.discard(proc)
        wall = time.time() - start
        text = output.read_text(errors="replace")
        if status is None:
            status = f"failed (exit {code}): {last_line(text)}"
        self.write_log(f"\n===== {name} ({status}, {wall:.1f} s): {' '.join(command)}\n{text}")
        return Outcome(status, wall, load(result))

    def stop_all(self) -> None:
        with self.lock:
            self.closed = True
            procs = list(self.procs)
        stop(*procs)


def stop(*procs: subprocess.Popen) -> None:
    """End processes and their children (each its own session): SIGTERM to all, then,
    after 5 s, SIGKILL to those left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
        limit = time.time() + 5
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, limit - time.time()))
        if all(proc.poll() is not None for proc in procs):
            return


def save(path: Path, payload: dict[str, Any]) -> None:
    """``write_json`` through a temporary file and a rename: a reader, or a kill in the
    middle, never leaves half a file."""
    temporary = path.with_name(path.name + ".tmp")
    write_json(temporary, payload)
    os.replace(temporary, path)


def load(path: Path | None) -> dict[str, Any] | None:
    """A result file, or None where it is missing or unreadable."""
    try:
        return json.loads(path.read_text()) if path else None
    except (OSError, ValueError):
        return None


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][-300:] if lines else "(no output)"


def worker_command(kind: str, params: dict[str, Any], result: Path) -> list[str]:
    return [sys.executable, "-m", "rlcore.benchmarks.gpu_record", "--worker", kind,
            "--params", json.dumps(params), "--result", str(result)]  # fmt: skip


# --------------------------------------------------------------------------------------
# workers (one process each)
# --------------------------------------------------------------------------------------
def warm_key(item: dict[str, Any]) -> str:
    """File name of one MJX function's compilation (task, envs, part, iterations)."""
    return f"{item['task']}_{item['num_envs']}_{item['part']}_{item['iterations']}"


def open_part(item: dict[str, Any], device: str, seed: int) -> tuple[Callable[[], Any], float]:
    """One MJX function of row a / b, ready to time: a closure that runs one vector step
    (and returns something to wait on), and the seconds its first call took. Parts:
    ``env`` (MjxVectorEnv.step), ``physics`` (frame_skip mjx.step calls, nothing else),
    ``forward`` (one mjx.forward: what a reset's forward pass costs)."""
    from rlcore.benchmarks.throughput.mjx import open_mjx
    from rlcore.envs.mjx import MjxVectorEnv

    env_id, n, iterations = f"{item['task']}-v5", item["num_envs"], item["iterations"]
    if item["part"] == "env":
        env, actions, first_s = open_mjx(env_id, n, device, seed, solver_iterations=iterations)
        state = {"i": 0}

        def env_step() -> Any:
            state["i"] += 1
            return env.step(actions[state["i"] % len(actions)])[0]

        return env_step, first_s
    import jax
    import jax.numpy as jnp
    from mujoco import mjx

    env = MjxVectorEnv(env_id, n, device=device, solver_iterations=iterations)  # its model
    low, high = env.single_action_space.low, env.single_action_space.high
    with jax.default_device(env.jax_device):
        model = mjx.put_model(env.model, device=env.jax_device, impl=env.impl)
        one = mjx.make_data(env.model, device=env.jax_device, impl=env.impl)
        data = jax.tree_util.tree_map(lambda x: jnp.repeat(x[None], n, axis=0), one)
        ctrl = jax.random.uniform(jax.random.PRNGKey(seed), (n, low.size), minval=low, maxval=high)
    data = data.replace(ctrl=ctrl)
    frame_skip = env.spec_task.frame_skip
    if item["part"] == "physics":
        fn = jax.jit(jax.vmap(
            lambda d: jax.lax.fori_loop(0, frame_skip, lambda _, x: mjx.step(model, x), d)
        ))  # fmt: skip
    else:
        fn = jax.jit(jax.vmap(lambda d: mjx.forward(model, d)))
    start = time.perf_counter()
    # twice: a step's output differs from make_data's in weak types, which retraces once
    holder = {"data": fn(fn(data))}
    jax.block_until_ready(holder["data"])
    first_s = time.perf_counter() - start

    def part_step() -> Any:
        holder["data"] = fn(holder["data"]) if item["part"] == "physics" else fn(data)
        return holder["data"]

    return part_step, first_s


def _wait(value: Any) -> None:
    import jax
    import torch

    if isinstance(value, torch.Tensor):
        if value.is_cuda:
            torch.cuda.synchronize(value.device)
    else:
        jax.block_until_ready(value)


def worker_warm(params: dict[str, Any], result: Path) -> None:
    """Compile one MJX function into JAX's persistent cache (reset and first step)."""
    _, first_s = open_part(params["item"], params["device"], 0)
    save(result, {"compile_s": first_s})


def worker_mjx(params: dict[str, Any], result: Path) -> None:
    """ms per vector step of each item (row a / b), after its compilation (a ``warm``
    job's result file, waited for) is in the cache; results written after every item."""
    rows: list[dict[str, Any]] = []
    for item in params["items"]:
        warm = Path(params["warm_dir"]) / f"{warm_key(item)}.json"
        limit = time.time() + params["wait_s"]
        while not warm.exists() and time.time() < limit:
            time.sleep(0.5)
        row: dict[str, Any] = dict(item)
        row["compile"] = load(warm) or "not waited for"
        try:
            step, row["first_step_s"] = open_part(item, params["device"], params["seed"])
            samples = []
            for _ in range(params["rounds"]):
                start = time.perf_counter()
                for _ in range(params["steps"]):
                    out = step()
                _wait(out)
                samples.append((time.perf_counter() - start) / params["steps"] * 1000)
            row["ms_per_step_samples"] = samples
            row["ms_per_step"] = statistics.median(samples)
            row["steps_per_s"] = item["num_envs"] / row["ms_per_step"] * 1000
        except Exception as error:  # noqa: BLE001 (one item's failure is its row's record)
            row["error"] = f"{type(error).__name__}: {error}"[-300:]
        rows.append(row)
        print(json.dumps(row), flush=True)
        save(result, {"rows": rows})
        import gc

        gc.collect()


def worker_native(params: dict[str, Any], result: Path) -> None:
    """The native back end's env steps/s (``threads`` C threads) per (task, envs)."""
    from rlcore.benchmarks.throughput.env import env_rate
    from rlcore.envs.native import NativeVectorEnv

    rows = []
    for item in params["items"]:
        n = item["num_envs"]
        row: dict[str, Any] = dict(item)
        try:
            env = NativeVectorEnv(f"{item['task']}-v5", n, num_threads=params["threads"])
            env.reset(seed=params["seed"])
            low, high = env.single_action_space.low, env.single_action_space.high
            steps = max(3, params["native_env_steps"] // n)
            rng = np.random.default_rng(params["seed"])
            actions = rng.uniform(low, high, (min(steps, 8), n, low.size)).astype(np.float32)
            env_rate(env, actions[:1])  # warm-up
            samples = [env_rate(env, actions[np.arange(steps) % len(actions)])
                       for _ in range(params["rounds"])]  # fmt: skip
            env.close()
            row.update(steps=steps, samples=samples, steps_per_s=statistics.median(samples))
        except Exception as error:  # noqa: BLE001
            row["error"] = f"{type(error).__name__}: {error}"[-300:]
        rows.append(row)
        print(json.dumps(row), flush=True)
        save(result, {"rows": rows})


def worker_train(params: dict[str, Any], result: Path) -> None:
    """One training run to a target (``train_to_target``), for rows c-e."""
    from rlcore.benchmarks.throughput.mjx import train_to_target

    row = train_to_target(params["overrides"], params["backend"], params["device"],
                          params["seconds"], params["target"], params["threads"])  # fmt: skip
    save(result, row)
    if row["stopped"].startswith("exit code"):  # the row fails with the run's last line
        sys.exit(1)


def _updates_rate(update: Callable[[], None], steps_per_call: int, calls: int,
                  device: str) -> float:  # fmt: skip
    import torch

    update()  # warm-up (compilation, CUDA graph capture)
    update()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        update()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return calls * steps_per_call / (time.perf_counter() - start)


def worker_updates(params: dict[str, Any], result: Path) -> None:
    """SAC and PPO gradient steps/s at their default batch sizes (SAC 256 from a
    replay buffer; PPO 2,048-sample rollouts in 32 minibatches of 64, 10 epochs per
    update call) on ``device``: rlcore eager, SB3, then rlcore compiled and compiled with
    CUDA graphs (the slowest to build last; results written after each)."""
    import gymnasium as gym
    import torch

    from rlcore.algos.ppo import PPO, PPOConfig
    from rlcore.algos.sac import SAC, SACConfig
    from rlcore.benchmarks.throughput.common import HOPPER_ACT, HOPPER_OBS, box_spaces
    from rlcore.benchmarks.throughput.sac_update import filled_replay_buffer
    from rlcore.compiled import cxx_compiler
    from rlcore.types import RolloutBatch

    device, calls = params["device"], params["updates"]
    cuda = device.startswith("cuda")
    spaces = box_spaces(HOPPER_OBS, HOPPER_ACT)
    buffer = filled_replay_buffer(100_000, HOPPER_OBS, HOPPER_ACT, 0, device)
    gen = torch.Generator(device="cpu").manual_seed(0)
    rollout = RolloutBatch(*(t.to(device) for t in (
        torch.randn(2048, HOPPER_OBS, generator=gen), torch.rand(2048, HOPPER_ACT, generator=gen) * 2 - 1,
        -torch.rand(2048, generator=gen), torch.randn(2048, generator=gen),
        torch.randn(2048, generator=gen), torch.randn(2048, generator=gen))))  # fmt: skip
    ppo_config = PPOConfig(update_epochs=params["ppo_epochs"] or PPOConfig().update_epochs)
    ppo_steps = ppo_config.update_epochs * ppo_config.num_minibatches
    out: dict[str, Any] = {"unit": "gradient steps/s", "device": device, "rates": {},
                           "notes": {"cxx_compiler": cxx_compiler()}}  # fmt: skip

    def measure(name: str, rate: Callable[[], float]) -> None:
        try:
            out["rates"][name] = rate()
        except Exception as error:  # noqa: BLE001 (one contender's failure is its record)
            out["rates"][name] = None
            out["notes"][name] = f"failed: {type(error).__name__}: {error}"[-300:]
        print(name, out["rates"][name], flush=True)
        for algo in ("sac", "ppo"):  # every rlcore rate against SB3's
            sb3 = out["rates"].get(f"sb3_{algo}")
            for other, value in out["rates"].items():
                if other.startswith(f"rlcore_{algo}_") and value and sb3:
                    out.setdefault("vs_sb3", {})[other] = value / sb3
        save(result, out)

    def rlcore_rate(algo: str, mode: str) -> float:
        from torch._dynamo.utils import counters

        skips = counters["inductor"]["cudagraph_skips"]
        torch.manual_seed(0)
        # inductor's CUDA graphs (what mode="reduce-overhead" sets) around rlcore's graph
        with torch._inductor.config.patch({"triton.cudagraphs": mode == "compile_cudagraphs"}):
            if algo == "sac":
                config = SACConfig(compile=mode != "eager")
                sac = SAC(*spaces, config, device=device)
                rate = _updates_rate(lambda: sac.update(buffer.sample(config.batch_size)), 1,
                                     calls, device)  # fmt: skip
            else:
                ppo = PPO(*spaces, dataclasses.replace(ppo_config, compile=mode != "eager"),
                          device=device)  # fmt: skip
                rate = _updates_rate(lambda: ppo.update(rollout), ppo_steps,
                                     max(1, calls // ppo_steps), device)  # fmt: skip
        if mode == "compile_cudagraphs":
            skipped = counters["inductor"]["cudagraph_skips"] - skips
            out["notes"][f"rlcore_{algo}_{mode}"] = f"inductor skipped CUDA graphs {skipped} times"
        return rate

    def sb3_sac() -> float:
        from stable_baselines3.common.logger import Logger

        from rlcore.benchmarks.sac_hopper_vs_sb3 import make_sb3_sac

        model = make_sb3_sac(gym.make("Hopper-v5"), 100_000, 0, 0, device=device)
        model.set_logger(Logger(folder=None, output_formats=[]))
        _fill_sb3_replay(model.replay_buffer)
        return _updates_rate(lambda: model.train(gradient_steps=calls, batch_size=256), calls,
                             1, device)  # fmt: skip

    def sb3_ppo() -> float:
        from stable_baselines3 import PPO as SB3PPO
        from stable_baselines3.common.logger import Logger

        model = SB3PPO("MlpPolicy", gym.make("Hopper-v5"), n_epochs=ppo_config.update_epochs,
                       device=device, seed=0, verbose=0)  # fmt: skip
        model.set_logger(Logger(folder=None, output_formats=[]))
        _fill_sb3_rollout(model.rollout_buffer)
        steps = model.n_epochs * (model.n_steps // model.batch_size)
        return _updates_rate(model.train, steps, 1, device)

    modes = params["modes"]
    if not cuda:
        out["notes"]["rlcore_compile_cudagraphs"] = "skipped: CUDA graphs need a CUDA device"
    if cxx_compiler() is None:  # compile=true would run eager (rlcore.speed)
        out["notes"]["rlcore_compile"] = "skipped: no C++ compiler for torch.compile"
    for mode in ("compile", "compile_cudagraphs"):
        if mode not in modes:
            out["notes"].setdefault(f"rlcore_{mode}", "skipped: not in this plan (dry run)")
    compiled = [m for m in modes
                if m != "eager" and cxx_compiler() and (cuda or m != "compile_cudagraphs")]  # fmt: skip
    for algo in ("sac", "ppo"):
        measure(f"rlcore_{algo}_eager", lambda a=algo: rlcore_rate(a, "eager"))
    measure("sb3_sac", sb3_sac)
    measure("sb3_ppo", sb3_ppo)
    for mode in compiled:
        for algo in ("sac", "ppo"):
            measure(f"rlcore_{algo}_{mode}", lambda a=algo, m=mode: rlcore_rate(a, m))
    out["modes"] = ["eager", "sb3", *compiled]  # what this run timed
    save(result, out)


def _fill_sb3_replay(rb: Any) -> None:
    rng = np.random.default_rng(0)
    rb.observations[:] = rng.standard_normal(rb.observations.shape)
    rb.next_observations[:] = rng.standard_normal(rb.next_observations.shape)
    rb.actions[:] = rng.uniform(-1, 1, rb.actions.shape)
    rb.rewards[:] = rng.standard_normal(rb.rewards.shape)
    rb.dones[:] = rng.random(rb.dones.shape) < 0.01
    rb.full, rb.pos = True, 0


def _fill_sb3_rollout(rb: Any) -> None:
    rng = np.random.default_rng(0)
    for name in ("observations", "actions", "values", "log_probs", "advantages", "returns"):
        array = getattr(rb, name)
        array[:] = rng.standard_normal(array.shape)
    rb.log_probs[:] = -np.abs(rb.log_probs)
    rb.episode_starts[:] = 0
    rb.full, rb.generator_ready, rb.pos = True, False, rb.buffer_size


WORKERS: dict[str, Callable[[dict[str, Any], Path], None]] = {
    "warm": worker_warm,
    "mjx": worker_mjx,
    "native": worker_native,
    "train": worker_train,
    "updates": worker_updates,
}


# --------------------------------------------------------------------------------------
# the driver
# --------------------------------------------------------------------------------------
class Record:
    """The JSON of record: rows in priority order, rewritten whenever anything changes."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path, self.header = path, header
        self.rows: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()

    def set(self, name: str, **fields: Any) -> None:
        with self.lock:
            self.rows.setdefault(
                name, {"name": name, "row": LETTERS[name], "device": self.header["device"]}
            )
            self.rows[name].update(fields)
            save(self.path, {**self.header, "written": time.strftime("%H:%M:%S"),
                                   "rows": list(self.rows.values())})  # fmt: skip


def record(plan: Plan, out: Path, started: float, seconds: float, seed: int = 0) -> Path:
    """Run every row within ``seconds`` of ``started``; returns the JSON's path."""
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu_record_"))
    warm_dir = work / "warm"
    warm_dir.mkdir()
    log = out / "gpu_record.log"
    runner = Runner(log, work, started + seconds)

    def terminated(signum: int, frame: Any) -> None:  # the shell's hard stop: end the rows
        runner.stop_all()
        raise SystemExit(f"stopped by signal {signum}")

    previous = signal.signal(signal.SIGTERM, terminated)
    cores = core_split(os.cpu_count())
    missing = missing_modules()
    for line in missing:
        print(f"missing package: {line}", flush=True)
    info = device_info()
    header = {"dry_run": plan is DRY, "budget_s": seconds, "plan": dataclasses.asdict(plan),
              "cores": cores, "taskset": shutil.which("taskset") is not None,
              "missing": missing, "device": info,
              "target_ratio": TARGET_RATIO}  # fmt: skip
    rec = Record(out / "gpu_record.json", header)
    log.write_text(f"gpu_record: {json.dumps(header)}\n")
    lacking = {m.split(" ")[0] for m in missing}
    blocked = {row for module, rows in NEEDS.items() if module in lacking for row in rows}

    # MJX compilations, in the order the rows use them
    base = {"part": "env", "iterations": 4}
    tp_items = [{**base, "task": t, "num_envs": n} for t in plan.tasks for n in plan.num_envs]
    lever_items = [{**base, "task": "Hopper", "num_envs": plan.lever_envs}]
    lever_items += [{**base, "task": "Hopper", "num_envs": plan.lever_envs, "iterations": k}
                    for k in plan.lever_iterations]  # fmt: skip
    if plan.lever_parts:
        lever_items += [{**base, "task": "Hopper", "num_envs": plan.lever_envs, "part": p}
                        for p in ("physics", "forward")]  # fmt: skip
    train_item = {**base, "task": "Hopper", "num_envs": plan.train_envs}
    warm_items = {warm_key(i): i for i in [*tp_items, *lever_items, train_item]}
    pool = concurrent.futures.ThreadPoolExecutor(plan.compile_workers)
    lane = concurrent.futures.ThreadPoolExecutor(1)  # native baselines, one at a time

    def warm(key: str, item: dict[str, Any]) -> None:
        result = work / f"warm_{key}.json"
        cmd = worker_command("warm", {"item": item, "device": plan.device}, result)
        outcome = runner.run(f"warm_{key}", cmd, 300, cores["compile"], result)
        payload = {"status": outcome.status, "wall_s": outcome.wall_s, **(outcome.result or {})}
        save(warm_dir / f"{key}.json", payload)

    if not {"throughput", "levers"} <= blocked:
        for key, item in warm_items.items():
            pool.submit(warm, key, item)

    def native(name: str, kind: str, params: dict[str, Any], cap: float) -> Outcome:
        result = work / f"native_{name}.json"
        outcome = runner.run(f"native_{name}", worker_command(kind, params, result), cap,
                             cores["native"], result)  # fmt: skip
        return outcome

    native_common = {"threads": 2, "seed": seed, "rounds": plan.native_rounds,
                     "native_env_steps": plan.native_env_steps}  # fmt: skip
    tp_native = None
    if "throughput" not in blocked:
        # smallest first: 4,096 envs is the size of the target's definition
        by_size = sorted(tp_items, key=lambda i: (plan.tasks.index(i["task"]), i["num_envs"]))
        tp_native = lane.submit(native, "throughput", "native",
                                {**native_common, "items": by_size},
                                plan.native_caps["throughput"])  # fmt: skip

    def train_params(overrides: list[str], backend: str, seconds: float, target: float) -> dict:
        return {"overrides": overrides, "backend": backend, "seconds": seconds,
                "target": target, "threads": 2,
                "device": plan.device if backend == "mjx" else "cpu"}  # fmt: skip

    finetune = {m: finetune_overrides(m, plan, seed) for m in plan.finetune_methods}
    ft_native = {}
    if "finetune" not in blocked:
        for method, overrides in finetune.items():
            cap = plan.native_caps["finetune"]
            params = train_params(overrides, "native", cap, 1e9)
            ft_native[method] = lane.submit(native, f"finetune_{method}", "train", params,
                                            cap + 30)  # fmt: skip

    skip = set(os.environ.get("RECORD_SKIP", "").replace(",", " ").split())

    def cap_of(name: str) -> float | None:
        left = runner.left() - 5
        if name in skip:
            rec.set(name, status="skipped: RECORD_SKIP")
            return None
        if name in blocked:
            rec.set(name, status="skipped: missing " + ", ".join(sorted(lacking)))
            return None
        if left < MIN_ROW_S:
            rec.set(name, status=f"skipped: budget ({left:.0f} s left)")
            return None
        return min(plan.caps[name], left)

    def wait_warm(items: list[dict[str, Any]], cap: float) -> None:
        limit = time.time() + cap
        for item in items:
            path = warm_dir / f"{warm_key(item)}.json"
            while not path.exists() and time.time() < limit:
                time.sleep(0.5)

    def mjx_row(name: str, items: list[dict[str, Any]], cap: float) -> Outcome:
        result = work / f"{name}.json"
        params = {"items": items, "device": plan.device, "seed": seed, "steps": plan.steps,
                  "rounds": plan.rounds, "warm_dir": str(warm_dir), "wait_s": cap}  # fmt: skip
        return runner.run(name, worker_command("mjx", params, result), cap, cores["rows"], result)

    # f: update throughput (no JAX), while the compilations run
    def row_updates(cap: float) -> None:
        rec.set("updates", status="running",
                config={"updates": plan.updates, "modes": plan.update_modes,
                        "ppo_epochs": plan.ppo_epochs or 10, "sac_batch": 256,
                        "ppo_minibatch": 64, "hopper_shapes": "obs 11, act 3"},
                notes="runs first, beside the MJX compilations (other cores, same GPU)")  # fmt: skip
        result = work / "updates.json"
        params = {"device": plan.device, "updates": plan.updates, "modes": plan.update_modes,
                  "ppo_epochs": plan.ppo_epochs}  # fmt: skip
        o = runner.run("updates", worker_command("updates", params, result), cap, cores["rows"], result)  # fmt: skip
        rec.set("updates", status=o.status, wall_s=o.wall_s, numbers=o.result,
                baseline="Stable-Baselines3 on the same device (sb3_sac, sb3_ppo)",
                ratio=(o.result or {}).get("vs_sb3"))  # fmt: skip

    # a: throughput
    tp_rows: list[dict[str, Any]] = []

    def row_throughput(cap: float) -> None:
        nonlocal tp_rows
        rec.set("throughput", status="running", config={"items": tp_items, "steps": plan.steps,
                                                        "rounds": plan.rounds})  # fmt: skip
        o = mjx_row("throughput", tp_items, cap)
        tp_rows = (o.result or {}).get("rows", [])
        rec.set("throughput", status=o.status, wall_s=o.wall_s, numbers=tp_rows,
                baseline="native back end, 2 C threads on 2 cores (taskset), same run",
                notes=f"compile.compile_s: a warm job's reset + first step (the compilation; "
                      f"{plan.compile_workers} compiled at once on cores {cores['compile']}); "
                      "first_step_s: this row's, loaded from JAX's cache; ms per vector step "
                      f"is the median of {plan.rounds} rounds of {plan.steps} steps")  # fmt: skip

    def native_rows(wait: float) -> list[dict[str, Any]]:
        if tp_native is None:
            return []
        try:
            outcome = tp_native.result(timeout=max(0.0, wait))
        except concurrent.futures.TimeoutError:
            return []
        rec.set("throughput", baseline_status=outcome.status)
        return (outcome.result or {}).get("rows", [])

    def throughput_ratios(natives: list[dict[str, Any]]) -> None:
        rate = {(r["task"], r["num_envs"]): r.get("steps_per_s") for r in natives}
        ratios = []
        for row in tp_rows:
            base = rate.get((row["task"], row["num_envs"]))
            mjx = row.get("steps_per_s")
            ratios.append({"task": row["task"], "num_envs": row["num_envs"], "mjx": mjx,
                           "native": base, "ratio": mjx / base if mjx and base else None,
                           "of_target": mjx / base / TARGET_RATIO if mjx and base else None})  # fmt: skip
        rec.set("throughput", native=natives, ratio=ratios)

    # b: levers
    lever_rows: list[dict[str, Any]] = []

    def lever_ratios(natives: list[dict[str, Any]]) -> None:
        native_rate = next((r.get("steps_per_s") for r in natives if r["task"] == "Hopper"
                            and r["num_envs"] == plan.lever_envs), None)  # fmt: skip
        for row in lever_rows:
            if row["part"] == "env":
                rate = row.get("steps_per_s")
                row["ratio"] = rate / native_rate if rate and native_rate else None
                row["agreement_with_native"] = AGREEMENT.get(row["iterations"], "not checked")
        by_size = [{"task": r["task"], "num_envs": r["num_envs"], "ms_per_step": r.get("ms_per_step")}
                   for r in tp_rows]  # fmt: skip
        target_ms = plan.lever_envs / (TARGET_RATIO * native_rate) * 1000 if native_rate else None
        rec.set("levers", numbers=lever_rows, batch_size=by_size,
                baseline={"native_steps_per_s": native_rate, "ms_per_step_for_30x": target_ms},
                ratio={r["iterations"]: r.get("ratio") for r in lever_rows if r["part"] == "env"})  # fmt: skip

    def row_levers(cap: float) -> None:
        nonlocal lever_rows
        rec.set("levers", status="running", config={"items": lever_items},
                not_measured={
                    "euler": "not a config switch: MjxVectorEnv integrates as the XML says "
                             "(RK4 for the v5 tasks); Euler would depart from v5's physics",
                    "warp": "warp-lang's wheel (149 MB) does not reach the device machine",
                    "reset_forward_pass": "Hopper's reset runs none already (envs/mjx.py); "
                                          "the 'forward' part is what one costs (Ant's resets)",
                })  # fmt: skip
        o = mjx_row("levers", lever_items, cap)
        lever_rows = (o.result or {}).get("rows", [])
        rec.set("levers", status=o.status, wall_s=o.wall_s)
        natives = native_rows(0)
        throughput_ratios(natives)
        lever_ratios(natives)

    # c: PPO to 2,500, the native experiment beside it briefly
    ppo_native: concurrent.futures.Future | None = None

    def ppo_baseline(outcome: Outcome | None, mjx: dict[str, Any] | None) -> None:
        native_row = outcome.result if outcome else None
        mjx_sps, native_sps = (r.get("last_sps") if r else None for r in (mjx, native_row))
        rec.set("ppo", baseline=native_row,
                baseline_status=outcome.status if outcome else "not finished",
                baseline_cited=PPO_CPU_CITATION,
                ratio={"env_steps_per_s_mjx_over_native": mjx_sps / native_sps
                       if mjx_sps and native_sps else None})  # fmt: skip

    ppo_result: dict[str, Any] | None = None

    def row_ppo(cap: float) -> None:
        nonlocal ppo_native, ppo_result
        overrides = ["+experiment=ppo_hopper_mjx", f"seed={seed}",
                     f"env.num_envs={plan.train_envs}", *plan.ppo_extra]  # fmt: skip
        rec.set("ppo", status="running", config={"overrides": overrides, "target": 2500})
        wait_warm([train_item], min(cap / 2, 120))
        cap = max(MIN_ROW_S, min(cap, runner.left() - 5))
        brief = min(cap, plan.native_caps["ppo"])
        ppo_native = lane.submit(native, "ppo", "train",
                                 train_params(overrides, "native", brief, 2500), brief + 30)  # fmt: skip
        result = work / "ppo.json"
        cmd = worker_command("train", train_params(overrides, "mjx", cap, 2500), result)
        o = runner.run("ppo", cmd, cap + 30, cores["rows"], result)
        ppo_result = o.result
        rec.set("ppo", status=o.status, wall_s=o.wall_s, numbers=o.result)
        ppo_baseline(_result(ppo_native, 5), ppo_result)

    # d: fast_td3 on MJX
    def row_fast_td3(cap: float) -> None:
        target = float(os.environ.get("FAST_TD3_TARGET", "2500"))
        overrides = ["algo=fast_td3", "env=hopper", f"env.num_envs={plan.train_envs}",
                     f"seed={seed}", *plan.fast_td3_extra,
                     *os.environ.get("FAST_TD3_OVERRIDES", "").split()]  # fmt: skip
        if not fast_td3_available():
            rec.set("fast_td3", status="skipped: algo missing", config={"overrides": overrides})
        else:
            rec.set("fast_td3", status="running", config={"overrides": overrides, "target": target})
            result = work / "fast_td3.json"
            cmd = worker_command("train", train_params(overrides, "mjx", cap, target), result)
            o = runner.run("fast_td3", cmd, cap + 30, cores["rows"], result)
            rec.set("fast_td3", status=o.status, wall_s=o.wall_s, numbers=o.result,
                    baseline="none measured here: the comparison is fast_td3's CPU "
                             "table on native envs")  # fmt: skip

    # e: DPPO / ReinFlow seconds per iteration, native (run earlier, beside a-b) for ratio
    def row_finetune(cap: float) -> None:
        rec.set("finetune", status="running", config={"overrides": finetune})
        numbers: dict[str, Any] = {}
        baselines: dict[str, Any] = {}
        statuses = []
        for method, overrides in finetune.items():
            each = max(MIN_ROW_S, min(cap / 2, runner.left() - 5))
            result = work / f"finetune_{method}.json"
            cmd = worker_command("train", train_params(overrides, "mjx", each, 1e9), result)
            o = runner.run(f"finetune_{method}", cmd, each + 30, cores["rows"], result)
            numbers[method] = o.result
            statuses.append(f"{method}: {o.status}")
            native_o = _result(ft_native.get(method), 5)
            baselines[method] = native_o.result if native_o else "not finished"
        ratio = {}
        for method in finetune:
            mjx_s = _median_iteration(numbers.get(method))
            native_s = _median_iteration(baselines.get(method))
            ratio[method] = {"mjx_s_per_iteration": mjx_s, "native_s_per_iteration": native_s,
                             "native_over_mjx": native_s / mjx_s if mjx_s and native_s else None}  # fmt: skip
        heads = {m: str(a) for m, a in finetune_assets().items() if m in finetune}
        wall = sum((n or {}).get("process_wall_s") or 0.0 for n in numbers.values())
        rec.set("finetune", status="; ".join(statuses), numbers=numbers, baseline=baselines,
                wall_s=wall, ratio=ratio, heads=heads or "randomly initialised (no assets)")  # fmt: skip

    rows = {"updates": row_updates, "throughput": row_throughput, "levers": row_levers,
            "ppo": row_ppo, "fast_td3": row_fast_td3, "finetune": row_finetune}  # fmt: skip
    for name, row in rows.items():  # f first (no JAX: beside the compilations), then a-e
        if (cap := cap_of(name)) is None:
            continue
        try:
            row(cap)
        except Exception as error:  # noqa: BLE001 (the driver's own slip fails one row)
            rec.set(name, status=f"failed (driver): {type(error).__name__}: {error}"[:300])

    status = "ok"
    try:  # what came late: the throughput baseline (and the levers' ratios), PPO's baseline
        if tp_rows or lever_rows:
            natives = native_rows(max(0.0, runner.left() - 3))
            throughput_ratios(natives)
            lever_ratios(natives)
        if ppo_native is not None:
            ppo_baseline(_result(ppo_native, max(0.0, runner.left() - 2)), ppo_result)
    except Exception as error:  # noqa: BLE001
        status = f"failed (driver): {type(error).__name__}: {error}"[:300]
    pool.shutdown(wait=False, cancel_futures=True)  # nothing queued starts,
    lane.shutdown(wait=False, cancel_futures=True)
    runner.stop_all()  # and nothing running stays
    rec.set("summary", status=status, wall_s=time.time() - started,
            compilations={k: c for k in warm_items if (c := load(warm_dir / f"{k}.json"))})  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)
    signal.signal(signal.SIGTERM, previous)
    return rec.path


def _result(future: concurrent.futures.Future | None, wait: float) -> Outcome | None:
    if future is None:
        return None
    try:
        return future.result(timeout=wait)
    except concurrent.futures.TimeoutError:
        return None


def _last_step(row: dict[str, Any] | None) -> int | None:
    curve = (row or {}).get("curve") or []
    return curve[-1]["step"] if curve else None


def _median_iteration(row: Any) -> float | None:
    values = row.get("iteration_s") if isinstance(row, dict) else None
    return statistics.median(values) if values else None


def fast_td3_available() -> bool:
    """Whether this checkout has ``algo=fast_td3`` (the row is skipped where it does not)."""
    from rlcore.configs import __file__ as configs_init

    config = Path(configs_init).parent / "algo" / "fast_td3.yaml"
    return config.is_file() and importlib.util.find_spec("rlcore.algos.fast_td3") is not None


def finetune_assets() -> dict[str, Path]:
    """The committed BC heads (benchmarks/assets) of DPPO and ReinFlow, where present."""
    names = {"dppo": "hopper_diffusion_bc.pt", "reinflow": "hopper_flow_bc.pt"}
    return {m: ASSETS / f for m, f in names.items() if (ASSETS / f).is_file()}


def finetune_overrides(method: str, plan: Plan, seed: int) -> list[str]:
    """rlcore.train overrides of row e: the BC head, ``train_envs`` sub-envs, rollouts of
    ``finetune_rollout`` chunks (4 env steps each) per iteration, 3 iterations, no
    evaluation before the end."""
    asset = finetune_assets().get(method)
    head = [f"algo.pretrained={asset}"] if asset else []
    iterations = 3  # total_steps counts chunks over all sub-envs
    return [f"algo={method}", "env=hopper", *head, f"env.num_envs={plan.train_envs}",
            f"algo.rollout_steps={plan.finetune_rollout}",
            f"total_steps={iterations * plan.finetune_rollout * plan.train_envs}",
            f"seed={seed}", *plan.finetune_extra]  # fmt: skip


def summary_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per row (status, wall) and its headline numbers, for the console."""
    keys = {"throughput": "ratio", "levers": "numbers", "finetune": "ratio", "updates": "numbers"}
    run_keys = ("reached_at_step", "best_return", "process_wall_s", "stopped", "last_sps")
    lines = []
    for row in rows:
        wall = row.get("wall_s") or 0.0
        lines.append(f"[{row['row']}] {row['name']}: {row.get('status')} ({wall:.0f} s)")
        headline = row.get(keys.get(row["name"], ""))
        if row["name"] in ("ppo", "fast_td3") and isinstance(row.get("numbers"), dict):
            headline = {k: row["numbers"].get(k) for k in run_keys}
            headline["vs_native"] = row.get("ratio")
        if headline:
            lines.append("    " + json.dumps(headline, default=str)[:1500])
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "benchmarks/results/gpu_record")))  # fmt: skip
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("RECORD_SECONDS", 510)))  # fmt: skip
    parser.add_argument("--started", type=float, default=None, help="epoch seconds (budget start)")
    parser.add_argument("--dry", action="store_true", default=os.environ.get("RECORD_DRY") == "1",
                        help="tiny sizes on the CPU (RECORD_DRY=1)")  # fmt: skip
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--params", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        WORKERS[args.worker](json.loads(args.params), args.result)
        return
    started = args.started if args.started is not None else time.time()
    path = record(DRY if args.dry else FULL, args.out, started, args.seconds)
    for line in summary_lines(json.loads(path.read_text())["rows"]):
        print(line, flush=True)
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    main()
