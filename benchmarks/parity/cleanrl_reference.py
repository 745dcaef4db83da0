"""Golden numbers for SAC, TD3, PPO (Gaussian and categorical), DQN and DQN on Atari
from CleanRL itself.

Runs CleanRL's own single-file scripts (``sac_continuous_action.py``,
``td3_continuous_action.py``, ``ppo_continuous_action.py``, ``ppo.py``, ``dqn.py``,
``dqn_atari.py``, imported by path, never copied) on tiny networks, fixed batches and fixed noise, and
writes what they compute (losses per update, parameters after N updates) to
``tests/golden/<algo>.json``. ``tests/test_parity_online.py`` runs rlcore's updates on the
same inputs and checks them against these numbers.

How the scripts are driven (nothing in them is edited):
* a tiny registered env (``Parity{Box,Discrete}-v0``): observations N(0, 1), episodes end by
  termination (15% a step) or by a 12-step time limit (truncation);
* ``torch.nn.Linear`` is narrowed while the script runs (256 -> 16 wide, DQN's 120 / 84 ->
  16 / 12, PPO's 64 -> 16) so the weights fit a small JSON file; the networks' structure
  and their maths are CleanRL's;
* DQN on Atari (``dqn_atari.py``): a stand-in Atari env (``ParityAtari-v0``: 210 x 160 RGB
  frames, NOOP / FIRE actions, lives) passes through the script's own wrappers (no-ops,
  max-and-skip, episodic life, fire reset, reward clip, resize, grey, frame stack); the
  Nature network's ``Conv2d`` and ``Linear`` widths are narrowed as
  ``benchmarks/parity/atari_data.NARROW`` says; its initial weights and uint8 batches come
  from seeds (``atari_data``), so the golden file holds seeds, losses and the final
  weights;
* off-policy: ``cleanrl_utils.buffers.ReplayBuffer.sample`` returns our batches (numpy
  ``default_rng`` seeds; terminated AND truncated rows in each); its first call records
  the script's freshly initialised networks (the initial weights both sides start from),
  its last one the parameters after N updates (read through the calling frame's globals);
* noise: ``Normal.rsample`` (SAC) and ``torch.randn_like`` (TD3's target smoothing) take
  stored standard-normal draws for batch-sized calls, so both sides see identical epsilons;
* PPO: the script collects its own rollouts; ``np.random.shuffle`` records each epoch's
  permutation and (on the first epoch) the rollout, advantages and parameters before the
  update; ``SummaryWriter.add_scalar("losses/value_loss")`` records the losses and
  parameters after it. ``SyncVectorEnv.step`` records terminations, truncations and final
  observations separately (CleanRL's GAE merges them; ours does not: see the test).

SAC also records ``raw`` numbers: CleanRL's temperature loss draws a fresh action from the
*updated* actor (``with torch.no_grad(): _, log_pi, _ = actor.get_action(...)``) where rlcore
reuses the actor step's log pi. The golden ``contract`` run replaces that re-draw by the
actor step's log pi (the one departure, emulated); ``raw`` is CleanRL unchanged, with a
fresh stored epsilon for the re-draw, so the departure's effect is measured.

Run it in a side env outside the repository (CleanRL pins gymnasium 0.29.1):

    python3 -m venv /work/side/parity-online/venv
    /work/side/parity-online/venv/bin/pip install torch==2.13.0 gymnasium==0.29.1 \
        "numpy<2" tyro tensorboard
    # fetch github:vwxyzjn/cleanrl, then
    git --git-dir=<mirror> archive fe8d8a03c41a7ef5b523e2e354bd01c363e786bb cleanrl \
        cleanrl_utils | tar -x -C /work/side/parity-online/src
    OMP_NUM_THREADS=1 /work/side/parity-online/venv/bin/python \
        benchmarks/parity/cleanrl_reference.py --cleanrl /work/side/parity-online/src \
        --algo all --out-dir tests/golden
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import tempfile
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

CLEANRL_REPO = "vwxyzjn/cleanrl"
CLEANRL_COMMIT = "fe8d8a03c41a7ef5b523e2e354bd01c363e786bb"
BATCH = 32
OBS_BOX, OBS_DISCRETE, NUM_ACTIONS = 3, 4, 3
SCRIPTS = {
    "sac": "sac_continuous_action.py",
    "td3": "td3_continuous_action.py",
    "ppo": "ppo_continuous_action.py",
    "ppo_discrete": "ppo.py",
    "dqn": "dqn.py",
    "dqn_atari": "dqn_atari.py",
    "ppo_atari": "ppo_atari.py",
}
WIDTHS = {  # CleanRL's hidden width -> ours in the golden runs
    "sac": {256: 16},
    "td3": {256: 16},
    "ppo": {64: 16},
    "ppo_discrete": {64: 16},
    "dqn": {120: 16, 84: 12},
    "dqn_atari": {},  # set below from atari_data.NARROW["linear"]
    "ppo_atari": {},  # the same
}
CONV_WIDTHS: dict[str, dict[int, int]] = {}  # algo -> Conv2d output channels narrowed


class Stop(Exception):
    """Raised by a hook once the numbers are recorded: ends the script's training loop."""


class ParityEnv(gym.Env):
    """Observations N(0, 1); reward depends on the action; terminates 15% of the steps."""

    def __init__(self, discrete: bool = False) -> None:
        dim = OBS_DISCRETE if discrete else OBS_BOX
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (dim,), np.float32)
        self.action_space = (
            gym.spaces.Discrete(NUM_ACTIONS)
            if discrete
            else gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
        )
        self.discrete = discrete

    def _obs(self) -> np.ndarray:
        return self.np_random.standard_normal(self.observation_space.shape).astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.state = self._obs()
        return self.state, {}

    def step(self, action):
        a = float(action) - 1.0 if self.discrete else float(np.asarray(action).ravel()[0])
        reward = float(self.state[0] * a - 0.1 * a * a)
        self.state = self._obs()
        terminated = bool(self.np_random.random() < 0.15)
        return self.state, reward, terminated, False, {}


def register_envs() -> None:
    for name, discrete in (("ParityBox-v0", False), ("ParityDiscrete-v0", True)):
        if name not in gym.envs.registry:
            gym.register(
                name, entry_point=ParityEnv, max_episode_steps=12, kwargs={"discrete": discrete}
            )


def floats(x: torch.Tensor | np.ndarray | float) -> list | float:
    """Float32 values as JSON numbers (9 significant digits round-trip a float32)."""
    arr = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    arr = arr.astype(np.float64)
    if arr.ndim == 0:
        return float(f"{float(arr):.9g}")
    return np.vectorize(lambda v: float(f"{v:.9g}"))(arr).tolist()


def params(**modules: nn.Module | torch.Tensor) -> dict[str, list]:
    """Parameters (and buffers) by the reference's names: ``<global>.<parameter>``."""
    out = {}
    for prefix, module in modules.items():
        if isinstance(module, torch.Tensor):
            out[prefix] = floats(module)
            continue
        for name, value in module.state_dict().items():
            if name in ("action_scale", "action_bias"):
                continue
            out[f"{prefix}.{name}"] = floats(value)
    return out


def replay_batches(seed: int, count: int, discrete: bool) -> list[dict[str, np.ndarray]]:
    """``count`` batches of ``BATCH`` rows from ``default_rng(seed)``; each has terminated
    rows and truncated (not terminated) rows, rows 0 and 1 forced to one of each."""
    rng = np.random.default_rng(seed)
    out = []
    obs_dim = OBS_DISCRETE if discrete else OBS_BOX
    for _ in range(count):
        terminated = rng.random(BATCH) < 0.25
        truncated = ~terminated & (rng.random(BATCH) < 0.25)
        terminated[0], truncated[0] = True, False
        terminated[1], truncated[1] = False, True
        action = (
            rng.integers(0, NUM_ACTIONS, BATCH)
            if discrete
            else rng.uniform(-2.0, 2.0, (BATCH, 1)).astype(np.float32)
        )
        out.append(
            {
                "obs": rng.standard_normal((BATCH, obs_dim)).astype(np.float32),
                "action": action,
                "reward": rng.standard_normal(BATCH).astype(np.float32),
                "next_obs": rng.standard_normal((BATCH, obs_dim)).astype(np.float32),
                "terminated": terminated.astype(np.float32),
                "truncated": truncated.astype(np.float32),
            }
        )
    return out


def to_json_batch(batch: dict[str, np.ndarray]) -> dict[str, list]:
    return {k: (v.tolist() if v.dtype.kind == "i" else floats(v)) for k, v in batch.items()}


class Patches:
    """Monkeypatches installed for one script run and removed after it."""

    def __init__(self) -> None:
        self._undo: list[tuple[object, str, object]] = []

    def set(self, owner: object, name: str, value: object) -> None:
        self._undo.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def undo(self) -> None:
        for owner, name, value in reversed(self._undo):
            setattr(owner, name, value)
        self._undo.clear()


def narrow_linear(patches: Patches, widths: dict[int, int]) -> None:
    """``nn.Linear`` with CleanRL's hidden widths replaced by ``widths`` (same structure)."""
    base = nn.Linear

    class NarrowLinear(base):
        def __init__(self, in_features: int, out_features: int, *args, **kwargs) -> None:
            in_f, out_f = (
                widths.get(int(in_features), int(in_features)),
                widths.get(int(out_features), int(out_features)),
            )
            super().__init__(in_f, out_f, *args, **kwargs)

    patches.set(nn, "Linear", NarrowLinear)


def narrow_conv(patches: Patches, widths: dict[int, int]) -> None:
    """``nn.Conv2d`` with CleanRL's channel counts replaced by ``widths`` (same layers)."""
    base = nn.Conv2d

    class NarrowConv2d(base):
        def __init__(self, in_channels: int, out_channels: int, *args, **kwargs) -> None:
            super().__init__(
                widths.get(int(in_channels), int(in_channels)),
                widths.get(int(out_channels), int(out_channels)),
                *args,
                **kwargs,
            )

    patches.set(nn, "Conv2d", NarrowConv2d)


def run_script(cleanrl: Path, algo: str, argv: list[str], patches: Patches) -> None:
    """Run CleanRL's script for ``algo`` as ``__main__`` until a hook raises ``Stop``."""
    register_envs()
    narrow_linear(patches, WIDTHS[algo])
    if algo in CONV_WIDTHS:
        narrow_conv(patches, CONV_WIDTHS[algo])
    old_argv, old_cwd = sys.argv, os.getcwd()
    if str(cleanrl) not in sys.path:
        sys.path.insert(0, str(cleanrl))
    # CleanRL writes runs/ (TensorBoard) here; kept, as its writer thread still flushes
    os.chdir(tempfile.mkdtemp(prefix=f"cleanrl_{algo}_"))
    sys.argv = [SCRIPTS[algo], *argv]
    try:
        runpy.run_path(str(cleanrl / "cleanrl" / SCRIPTS[algo]), run_name="__main__")
        raise RuntimeError(f"{algo}: the script ended before the hooks stopped it")
    except Stop:
        pass
    finally:
        sys.argv = old_argv
        os.chdir(old_cwd)
        patches.undo()


def off_policy_run(
    cleanrl: Path,
    algo: str,
    argv: list[str],
    batches: list[dict[str, np.ndarray]],
    record_init,
    record_update,
    record_final,
    install_noise=None,
) -> None:
    """Drive an off-policy script: its replay buffer's ``sample`` returns ``batches`` in
    turn; the hooks read the script's globals (``sys._getframe``) to record numbers."""
    from cleanrl_utils.buffers import ReplayBuffer, ReplayBufferSamples

    patches = Patches()
    calls = {"n": 0}

    def sample(self, batch_size: int, env=None):  # noqa: ANN001
        g = sys._getframe(1).f_globals
        c = calls["n"]
        calls["n"] += 1
        if c == 0:
            record_init(g)
        else:
            record_update(g, c - 1)
        if c == len(batches):
            record_final(g)
            raise Stop
        b = batches[c]
        action = torch.as_tensor(b["action"])
        action = action.long().view(-1, 1) if action.dtype == torch.int64 else action.float()
        # images stay uint8, as CleanRL's buffer returns them (its network scales by 1/255)
        return ReplayBufferSamples(
            observations=torch.as_tensor(b["obs"]),
            actions=action,
            next_observations=torch.as_tensor(b["next_obs"]),
            dones=torch.as_tensor(b["terminated"]).view(-1, 1),  # CleanRL stores terminations
            rewards=torch.as_tensor(b["reward"]).view(-1, 1),
        )

    patches.set(ReplayBuffer, "sample", sample)
    if install_noise is not None:
        install_noise(patches)
    run_script(cleanrl, algo, argv, patches)


def header(algo: str, argv: list[str], settings: dict) -> dict:
    return {
        "reference": {
            "repo": CLEANRL_REPO,
            "commit": CLEANRL_COMMIT,
            "script": f"cleanrl/{SCRIPTS[algo]}",
            "script_args": argv,
            "widths": {str(k): v for k, v in WIDTHS[algo].items()},
            "torch": torch.__version__,
            "gymnasium": gym.__version__,
            "numpy": np.__version__,
        },
        "command": (
            "OMP_NUM_THREADS=1 /work/side/parity-online/venv/bin/python "
            f"benchmarks/parity/cleanrl_reference.py --cleanrl <cleanrl@{CLEANRL_COMMIT[:8]}> "
            f"--algo {algo} --out-dir tests/golden"
        ),
        "settings": settings,
    }


# ---------------------------------------------------------------- SAC
def sac(cleanrl: Path, updates: int = 8) -> dict:
    batches = replay_batches(1, updates, discrete=False)
    rng = np.random.default_rng(2)
    bursts = [(u + 1) % 2 == 0 for u in range(updates)]
    # per update: target eps; per burst: 2 x (actor eps, re-draw eps for CleanRL's alpha loss)
    noise = []
    for burst in bursts:
        draws = {"target": rng.standard_normal((BATCH, 1)).astype(np.float32)}
        if burst:
            for i in range(2):
                draws[f"actor{i}"] = rng.standard_normal((BATCH, 1)).astype(np.float32)
                draws[f"alpha{i}"] = rng.standard_normal((BATCH, 1)).astype(np.float32)
        noise.append(draws)
    argv = [
        "--env-id", "ParityBox-v0", "--seed", "1", "--no-cuda", "--total-timesteps", "1000",
        "--learning-starts", "10", "--batch-size", str(BATCH), "--policy-frequency", "2",
        "--target-network-frequency", "1",
    ]  # fmt: skip
    out = header("sac", argv, {
        "gamma": 0.99, "tau": 0.005, "actor_lr": 3e-4, "critic_lr": 1e-3, "alpha_lr": 1e-3,
        "hidden": [16, 16], "policy_frequency": 2, "init_alpha": 1.0, "log_std": [-5, 2],
        "target_entropy": -1.0, "updates": updates, "action_low": -2.0, "action_high": 2.0,
    })  # fmt: skip
    out["inputs"] = {
        "batches": [to_json_batch(b) for b in batches],
        "noise": [{k: floats(v) for k, v in d.items()} for d in noise],
    }
    for mode in ("contract", "raw"):
        record: dict = {"updates": []}
        queue: list[np.ndarray] = []
        for d in noise:
            queue.append(d["target"])
            for i in range(2):
                if f"actor{i}" in d:
                    queue.append(d[f"actor{i}"])
                    if mode == "raw":
                        queue.append(d[f"alpha{i}"])
        memo: dict = {}

        def install_noise(patches: Patches, queue=queue) -> None:
            original = torch.distributions.Normal.rsample

            def rsample(self, sample_shape=()):  # noqa: ANN001
                if self.loc.shape[0] != BATCH:  # acting (one env): CleanRL's own draws
                    return original(self, torch.Size(sample_shape))
                return self.loc + torch.as_tensor(queue.pop(0)) * self.scale

            patches.set(torch.distributions.Normal, "rsample", rsample)

        def record_init(g: dict, record=record, memo=memo, mode=mode) -> None:
            record["init"] = params(actor=g["actor"], qf1=g["qf1"], qf2=g["qf2"])
            actor = g["actor"]
            draw = actor.get_action

            def get_action(x, draw=draw):  # noqa: ANN001
                if mode == "contract" and "log_pi" in memo and not torch.is_grad_enabled():
                    # the temperature step: rlcore reuses the actor step's log pi
                    log_pi = memo.pop("log_pi")
                    return None, log_pi.detach(), None
                result = draw(x)
                if torch.is_grad_enabled() and x.shape[0] == BATCH:  # the actor step
                    memo["log_pi"] = result[1]
                return result

            actor.get_action = get_action

        def record_update(g: dict, u: int, record=record) -> None:
            row = {
                "critic_loss": floats(g["qf_loss"]),
                "q": floats((g["qf1_a_values"].mean() + g["qf2_a_values"].mean()) / 2),
            }
            if bursts[u]:
                row |= {
                    "actor_loss": floats(g["actor_loss"]),
                    "alpha_loss": floats(g["alpha_loss"]),
                    "alpha": floats(g["alpha"]),
                }
            record["updates"].append(row)

        def record_final(g: dict, record=record, queue=queue) -> None:
            assert not queue, f"{len(queue)} noise draws left unused"
            record["final"] = params(
                actor=g["actor"], qf1=g["qf1"], qf2=g["qf2"], qf1_target=g["qf1_target"],
                qf2_target=g["qf2_target"], log_alpha=g["log_alpha"],
            )  # fmt: skip

        memo.clear()
        off_policy_run(
            cleanrl, "sac", argv, batches, record_init, record_update, record_final, install_noise
        )
        if mode == "contract":
            out["inputs"]["init"] = record.pop("init")
        else:
            assert record.pop("init") == out["inputs"]["init"], "the two runs start apart"
        out[mode] = record
    return out


# ---------------------------------------------------------------- TD3
def td3(cleanrl: Path, updates: int = 8) -> dict:
    batches = replay_batches(3, updates, discrete=False)
    rng = np.random.default_rng(4)
    noise = [rng.standard_normal((BATCH, 1)).astype(np.float32) for _ in range(updates)]
    argv = [
        "--env-id", "ParityBox-v0", "--seed", "1", "--no-cuda", "--total-timesteps", "1000",
        "--learning-starts", "10", "--batch-size", str(BATCH), "--policy-frequency", "2",
        "--policy-noise", "0.5", "--noise-clip", "0.5",
    ]  # fmt: skip
    out = header("td3", argv, {
        "gamma": 0.99, "tau": 0.005, "actor_lr": 3e-4, "critic_lr": 3e-4, "hidden": [16, 16],
        "policy_frequency": 2, "policy_noise": 0.5, "noise_clip": 0.5, "updates": updates,
        "action_low": -2.0, "action_high": 2.0,
    })  # fmt: skip
    out["inputs"] = {
        "batches": [to_json_batch(b) for b in batches],
        "noise": [floats(n) for n in noise],
    }
    record: dict = {"updates": []}
    queue = list(noise)

    def install_noise(patches: Patches) -> None:
        original = torch.randn_like

        def randn_like(x, *args, **kwargs):  # noqa: ANN001
            if x.shape[0] != BATCH:
                return original(x, *args, **kwargs)
            return torch.as_tensor(queue.pop(0)).to(x.dtype)

        patches.set(torch, "randn_like", randn_like)

    clipped = []

    def record_init(g: dict) -> None:
        record["init"] = params(actor=g["actor"], qf1=g["qf1"], qf2=g["qf2"])

    def record_update(g: dict, u: int) -> None:
        row = {"critic_loss": floats(g["qf_loss"])}
        if (u + 1) % 2 == 0:
            row["actor_loss"] = floats(g["actor_loss"])
        clipped.append(float((np.abs(noise[u] * 0.5) > 0.5).mean()))
        record["updates"].append(row)

    def record_final(g: dict) -> None:
        assert not queue, f"{len(queue)} noise draws left unused"
        record["final"] = params(
            actor=g["actor"], target_actor=g["target_actor"], qf1=g["qf1"], qf2=g["qf2"],
            qf1_target=g["qf1_target"], qf2_target=g["qf2_target"],
        )  # fmt: skip

    off_policy_run(
        cleanrl, "td3", argv, batches, record_init, record_update, record_final, install_noise
    )
    out["inputs"]["init"] = record.pop("init")
    out["settings"]["fraction_of_target_noise_clipped"] = float(np.mean(clipped))
    out["contract"] = record
    return out


# ---------------------------------------------------------------- DQN
def dqn(cleanrl: Path, updates: int = 12) -> dict:
    batches = replay_batches(5, updates, discrete=True)
    argv = [
        "--env-id", "ParityDiscrete-v0", "--seed", "1", "--no-cuda", "--total-timesteps", "1000",
        "--learning-starts", "8", "--batch-size", str(BATCH), "--train-frequency", "1",
        "--target-network-frequency", "4", "--learning-rate", "1e-3",
    ]  # fmt: skip
    out = header("dqn", argv, {
        "gamma": 0.99, "lr": 1e-3, "hidden": [16, 12], "target_update_interval": 4, "tau": 1.0,
        "double_q": False, "loss": "mse", "updates": updates,
    })  # fmt: skip
    out["inputs"] = {"batches": [to_json_batch(b) for b in batches]}
    record: dict = {"updates": []}

    def record_init(g: dict) -> None:
        record["init"] = params(q_network=g["q_network"])

    def record_update(g: dict, u: int) -> None:
        record["updates"].append(
            {"q_loss": floats(g["loss"]), "q_value": floats(g["old_val"].mean())}
        )

    def record_final(g: dict) -> None:
        record["final"] = params(q_network=g["q_network"], target_network=g["target_network"])

    off_policy_run(cleanrl, "dqn", argv, batches, record_init, record_update, record_final)
    out["inputs"]["init"] = record.pop("init")
    out["contract"] = record
    return out


# ---------------------------------------------------------------- DQN on Atari
class ParityAtariEnv(gym.Env):
    """A stand-in Atari game for dqn_atari.py's wrappers: 210 x 160 RGB uint8 frames of
    noise, ALE's action meanings (NOOP, FIRE, RIGHT, LEFT), three lives lost at random,
    terminating 5% of the frames. Only its plumbing matters: the updates read the
    ``atari_data`` batches."""

    metadata = {"render_modes": []}

    class _Ale:
        def __init__(self, env: ParityAtariEnv) -> None:
            self.env = env

        def lives(self) -> int:
            return self.env.lives

    def __init__(self, bands: bool = False) -> None:
        self.observation_space = gym.spaces.Box(0, 255, (210, 160, 3), np.uint8)
        self.action_space = gym.spaces.Discrete(4)
        self.ale = self._Ale(self)
        self.lives = 3
        self.bands = bands  # frames of 7 horizontal bands: a rollout stored in a few KB

    def get_action_meanings(self) -> list[str]:
        return ["NOOP", "FIRE", "RIGHT", "LEFT"]

    def _frame(self) -> np.ndarray:
        if self.bands:
            colours = self.np_random.integers(0, 256, (7, 1, 3), dtype=np.uint8)
            return np.ascontiguousarray(np.broadcast_to(colours.repeat(30, 0), (210, 160, 3)))
        return self.np_random.integers(0, 256, (210, 160, 3), dtype=np.uint8)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.lives = 3
        return self._frame(), {}

    def step(self, action):
        if self.np_random.random() < 0.02:
            self.lives -= 1
        terminated = self.lives == 0 or bool(self.np_random.random() < 0.05)
        return self._frame(), float(self.np_random.integers(-1, 2)), terminated, False, {}


def atari_setup(algo: str) -> Any:
    """The narrowed widths of ``algo``'s Nature network and the stand-in Atari envs
    (``ParityAtari-v0``: noise frames, a 200-step limit; ``ParityAtariBands-v0``: banded
    frames, episodes ended by lives and terminations only); returns ``atari_data``."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import atari_data

    WIDTHS[algo] = dict(atari_data.NARROW["linear"])
    CONV_WIDTHS[algo] = dict(atari_data.NARROW["conv"])
    if "ParityAtari-v0" not in gym.envs.registry:
        gym.register("ParityAtari-v0", entry_point=ParityAtariEnv, max_episode_steps=200)
        gym.register("ParityAtariBands-v0", entry_point=ParityAtariEnv, kwargs={"bands": True})
    return atari_data


def packed_uint8(x: torch.Tensor) -> dict:
    """Integral pixel values as zlib-compressed base64 uint8 (``unpack_uint8`` in
    benchmarks/parity/atari_data.py reads it back)."""
    import base64
    import zlib

    array = x.detach().cpu().numpy()
    assert np.array_equal(array, np.round(array)) and array.min() >= 0 and array.max() <= 255
    data = zlib.compress(array.astype(np.uint8).tobytes(), 9)
    return {"shape": list(array.shape), "zlib_b64": base64.b64encode(data).decode()}


def dqn_atari(cleanrl: Path, updates: int = 6) -> dict:
    atari_data = atari_setup("dqn_atari")
    batch_seed, weight_seed = 11, 12
    batches = atari_data.atari_batches(batch_seed, updates)
    argv = [
        "--env-id", "ParityAtari-v0", "--seed", "1", "--no-cuda", "--total-timesteps", "1000",
        "--learning-starts", "8", "--batch-size", str(atari_data.BATCH), "--train-frequency",
        "1", "--target-network-frequency", "2", "--learning-rate", "1e-3", "--buffer-size",
        "100",
    ]  # fmt: skip
    out = header("dqn_atari", argv, {
        "gamma": 0.99, "lr": 1e-3, "hidden": [], "target_update_interval": 2, "tau": 1.0,
        "double_q": False, "loss": "mse", "updates": updates, "encoder": "nature",
        "conv_widths": list(atari_data.CONV_WIDTHS), "features": atari_data.FEATURES,
    })  # fmt: skip
    out["inputs"] = {"batches": {"module": "benchmarks/parity/atari_data.py",
                                 "seed": batch_seed, "count": updates},
                     "init": {"seed": weight_seed}}  # fmt: skip
    record: dict = {"updates": []}
    weights = atari_data.init_weights(weight_seed)

    def record_init(g: dict) -> None:  # the script's networks start from the seeded weights
        state = {name: torch.as_tensor(value) for name, value in weights.items()}
        g["q_network"].load_state_dict(state)
        g["target_network"].load_state_dict(state)

    def record_update(g: dict, u: int) -> None:
        record["updates"].append(
            {"q_loss": floats(g["loss"]), "q_value": floats(g["old_val"].mean())}
        )

    def record_final(g: dict) -> None:
        record["final"] = params(q_network=g["q_network"], target_network=g["target_network"])

    off_policy_run(cleanrl, "dqn_atari", argv, batches, record_init, record_update, record_final)
    out["contract"] = record
    return out


# ---------------------------------------------------------------- PPO
def ppo(cleanrl: Path, discrete: bool, iterations: int = 2, atari: bool = False) -> dict:
    """PPO on the vector tasks, or (``atari``) ppo_atari.py on banded stand-in Atari frames
    (the rollout's uint8 stacks packed; no truncations, so no final observations)."""
    algo = "ppo_atari" if atari else "ppo_discrete" if discrete else "ppo"
    num_envs, num_steps, minibatches, epochs = 2, 16 if atari else 32, 4, 2 if atari else 3
    lr = 1.5e-2 if atari else 1e-2  # large enough that ratios leave the clip range
    env_id = "ParityAtariBands-v0" if atari else "ParityDiscrete-v0" if discrete else "ParityBox-v0"
    argv = [
        "--env-id", env_id, "--seed", "1",
        "--no-cuda", "--num-envs", str(num_envs), "--num-steps", str(num_steps),
        "--num-minibatches", str(minibatches), "--update-epochs", str(epochs),
        "--total-timesteps", str(iterations * num_envs * num_steps), "--learning-rate", str(lr),
        "--ent-coef", "0.01",
    ]  # fmt: skip
    settings = {
        "lr": lr, "anneal_lr": True, "gamma": 0.99, "gae_lambda": 0.95,
        "num_minibatches": minibatches, "update_epochs": epochs,
        "clip_coef": 0.1 if atari else 0.2, "clip_value_loss": True, "ent_coef": 0.01,
        "vf_coef": 0.5, "max_grad_norm": 0.5, "norm_adv": True,
        "hidden": [] if atari else [16, 16], "num_envs": num_envs, "num_steps": num_steps,
        "iterations": iterations,
    }  # fmt: skip
    if atari:
        atari_data = atari_setup(algo)
        settings |= {"encoder": "nature", "conv_widths": list(atari_data.CONV_WIDTHS),
                     "features": atari_data.FEATURES}  # fmt: skip
    out = header(algo, argv, settings)
    patches = Patches()
    steps: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    iters: list[dict] = []
    shuffles = {"n": 0}

    original_step = gym.vector.SyncVectorEnv.step

    def step(self, actions):  # noqa: ANN001
        result = original_step(self, actions)
        _, _, term, trunc, infos = result
        final = np.zeros(
            (num_envs, 1 if atari else OBS_DISCRETE if discrete else OBS_BOX), np.float32
        )
        assert not (atari and trunc.any()), "the banded stand-in env never truncates"
        for i in np.flatnonzero(trunc):
            final[i] = infos["final_observation"][i]
        steps.append((term.astype(np.float32), trunc.astype(np.float32), final))
        return result

    original_shuffle = np.random.shuffle

    def shuffle(x):  # noqa: ANN001
        original_shuffle(x)
        g = sys._getframe(1).f_globals
        epoch = shuffles["n"] % epochs
        shuffles["n"] += 1
        if epoch == 0:
            agent = g["agent"]
            window = steps[-num_steps:]
            iters.append(
                {
                    "params_before": params(agent=agent),
                    "lr": floats(g["optimizer"].param_groups[0]["lr"]),
                    "obs": packed_uint8(g["obs"]) if atari else floats(g["obs"]),
                    "action": g["actions"].long().tolist() if discrete else floats(g["actions"]),
                    "log_prob": floats(g["logprobs"]),
                    "value": floats(g["values"]),
                    "reward": floats(g["rewards"]),
                    "terminated": floats(np.stack([s[0] for s in window])),
                    "truncated": floats(np.stack([s[1] for s in window])),
                    "final_obs": floats(np.stack([s[2] for s in window])),
                    "next_value": floats(g["next_value"].reshape(-1)),
                    "advantage": floats(g["advantages"]),
                    "returns": floats(g["returns"]),
                    "permutations": [],
                }
            )
        iters[-1]["permutations"].append(np.asarray(x).tolist())

    from torch.utils.tensorboard import SummaryWriter

    original_add = SummaryWriter.add_scalar

    def add_scalar(self, tag, value, *args, **kwargs):  # noqa: ANN001
        if tag == "losses/value_loss":
            g = sys._getframe(1).f_globals
            iters[-1]["losses"] = {
                "value_loss": floats(g["v_loss"]),
                "policy_loss": floats(g["pg_loss"]),
                "entropy": floats(g["entropy_loss"]),
                "approx_kl": floats(g["approx_kl"]),
                "clip_fraction": floats(np.mean(g["clipfracs"])),
            }
            iters[-1]["params_after"] = params(agent=g["agent"])
            if len(iters) == iterations:
                raise Stop
        return original_add(self, tag, value, *args, **kwargs)

    patches.set(gym.vector.SyncVectorEnv, "step", step)
    patches.set(np.random, "shuffle", shuffle)
    patches.set(SummaryWriter, "add_scalar", add_scalar)
    run_script(cleanrl, algo, argv, patches)
    out["inputs"] = {"init": iters[0]["params_before"]}
    if atari:  # the golden file's size: the test reads the first iteration's from "init"
        for it in iters:
            del it["params_before"]
    out["contract"] = {"iterations": iters}
    return out


ALGOS = {
    "sac": sac,
    "td3": td3,
    "dqn": dqn,
    "dqn_atari": dqn_atari,
    "ppo": lambda c: ppo(c, discrete=False),
    "ppo_discrete": lambda c: ppo(c, discrete=True),
    "ppo_atari": lambda c: ppo(c, discrete=True, atari=True),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cleanrl", type=Path, required=True, help="CleanRL source tree")
    parser.add_argument("--algo", choices=[*ALGOS, "all"], default="all")
    parser.add_argument("--out-dir", type=Path, default=Path("tests/golden"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    sys.path.insert(0, str(args.cleanrl.resolve()))  # cleanrl_utils
    args.out_dir = args.out_dir.resolve()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for algo in ALGOS if args.algo == "all" else [args.algo]:
        result = ALGOS[algo](args.cleanrl.resolve())
        path = args.out_dir / f"{algo}.json"
        path.write_text(json.dumps(result, separators=(",", ":")) + "\n")
        print(f"{algo}: wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
