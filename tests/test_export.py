"""``rlcore.export``: each exported file (ONNX through onnxruntime, TorchScript through
torch.jit.load) gives the actions ``load_policy`` gives (then the env's clip / index
shift) within 1e-5 on observations recorded from the env, for every family of policy:
SAC, TD3, PPO (Gaussian and categorical), DQN, IQL, diffusion BC (with an observation
history) and flow BC (with the recorded noise, and with zero noise)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcore.algos.dqn import DQN, DQNConfig
from rlcore.algos.generative_bc import DiffusionBCConfig, FlowBCConfig, GenerativeBC
from rlcore.algos.iql import IQL, IQLConfig
from rlcore.algos.ppo import PPO, PPOConfig
from rlcore.algos.sac import SAC, SACConfig
from rlcore.algos.td3 import TD3, TD3Config
from rlcore.export import drawing, main, record_draws
from rlcore.policies import load_policy
from rlcore.spaces import to_env_action
from tests.saved_runs import recorded_obs, save_run

onnxruntime = pytest.importorskip("onnxruntime", reason="pip install 'rlcore[export]'")

TOL = 1e-5
HOPPER, CARTPOLE = "Hopper-v5", "CartPole-v1"


def box(env_id: str) -> tuple[gym.spaces.Box, gym.Space, int]:
    probe = gym.make(env_id)
    return probe.observation_space, probe.action_space, probe.observation_space.shape[0]


def _agent(cls: Callable[..., Any], config: Any, env_id: str, history: int = 1) -> Any:
    obs_space, action_space, obs_dim = box(env_id)
    space = gym.spaces.Box(-np.inf, np.inf, (obs_dim * history,), np.float32)
    torch.manual_seed(0)
    return cls(space, action_space, config)


SMALL = (32, 32)
DIFFUSION = DiffusionBCConfig(hidden=(32, 32, 32), denoising_steps=5, horizon=2, obs_history=2)
FLOW = FlowBCConfig(hidden=(32, 32, 32), horizon=2)
CASES = {  # name: (algo, agent class, config, env, env-side obs normalisation)
    "sac": ("sac", SAC, SACConfig(hidden=SMALL), HOPPER, True),
    "td3": ("td3", TD3, TD3Config(hidden=SMALL), HOPPER, False),
    "ppo": ("ppo", PPO, PPOConfig(hidden=SMALL), HOPPER, True),
    "ppo_categorical": ("ppo", PPO, PPOConfig(hidden=SMALL), CARTPOLE, True),
    "dqn": ("dqn", DQN, DQNConfig(hidden=SMALL), CARTPOLE, False),
    "iql": ("iql", IQL, IQLConfig(hidden=SMALL), HOPPER, False),
    "diffusion_bc": ("diffusion_bc", GenerativeBC, DIFFUSION, HOPPER, False),
    "flow_bc": ("flow_bc", GenerativeBC, FLOW, HOPPER, True),
}


def run_export(tmp_path: Path, case: str, fmt: str, *extra: str) -> tuple[Path, Any, gym.Space]:
    algo, cls, config, env_id, normalise = CASES[case]
    run = tmp_path / case
    agent = _agent(cls, config, env_id, int(config.plan().env.obs_history))
    if case == "ppo":  # a Gaussian mean beyond the bounds: the file must clip it
        with torch.no_grad():
            for p in agent.actor.parameters():
                p.mul_(100.0)
    space, _ = save_run(run, algo, agent, config, env_id, normalise)
    out = run / f"policy.{fmt}"
    assert main([str(run), "--format", fmt, "--out", str(out), *extra]) == 0
    return run, out, space


def exported(out: Path, fmt: str) -> Callable[..., np.ndarray]:
    """The file as ``f(obs, noise=None) -> actions`` (numpy in and out)."""
    if fmt == "onnx":
        session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]

        def run_onnx(obs: np.ndarray, noise: np.ndarray | None = None) -> np.ndarray:
            feed = {"obs": obs} if noise is None else {"obs": obs, "noise": noise}
            assert sorted(feed) == sorted(names)
            return session.run(None, feed)[0]

        return run_onnx
    module = torch.jit.load(str(out))

    def run_ts(obs: np.ndarray, noise: np.ndarray | None = None) -> np.ndarray:
        args = [torch.as_tensor(obs)] + ([] if noise is None else [torch.as_tensor(noise)])
        return module(*args).numpy()

    return run_ts


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
@pytest.mark.parametrize("case", ["sac", "td3", "ppo", "ppo_categorical", "dqn", "iql"])
def test_export_equals_load_policy(tmp_path: Path, case: str, fmt: str) -> None:
    run, out, space = run_export(tmp_path, case, fmt)
    obs = recorded_obs(CASES[case][3])
    raw = load_policy(run)(obs)
    expected = to_env_action(raw, space)
    if case == "ppo":
        assert (np.abs(raw) > 1.0).any()  # the clip is exercised
    policy = exported(out, fmt)
    for batch in (obs, obs[:1]):  # any batch size
        got = policy(batch)
        want = expected[: len(batch)]
        assert got.shape == want.shape
        if isinstance(space, gym.spaces.Discrete):
            assert got.dtype == np.int64 and np.array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=0, atol=TOL)
            assert (got >= space.low).all() and (got <= space.high).all()


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
@pytest.mark.parametrize("case", ["diffusion_bc", "flow_bc"])
def test_sampling_policy_export_with_noise_input(tmp_path: Path, case: str, fmt: str) -> None:
    """The chain's draws, recorded from ``load_policy``, fed as the noise input: the same
    action chunks. The observation history is the file's (B, T, obs_dim) input."""
    run, out, space = run_export(tmp_path, case, fmt)
    config = CASES[case][2]
    history = config.plan().env.obs_history
    obs = recorded_obs(HOPPER, n=6, history=history)
    policy, deployed = load_policy(run), exported(out, fmt)
    for row in obs:
        torch.manual_seed(int(row.sum() * 1e3) % 1000)
        want, noise = record_draws(lambda row=row: policy(row[None]))
        assert noise.shape[1] > 0
        window = row[None].reshape(1, history, -1) if history > 1 else row[None]
        got = deployed(window, noise)
        assert got.shape == (1, config.horizon, space.shape[0])
        np.testing.assert_allclose(got, to_env_action(want, space), rtol=0, atol=TOL)


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_zero_noise_export_is_the_mean_path(tmp_path: Path, fmt: str) -> None:
    run, out, space = run_export(tmp_path, "flow_bc", fmt, "--noise", "zero")
    obs = recorded_obs(HOPPER, n=4)
    policy, deployed = load_policy(run), exported(out, fmt)
    with drawing(torch.zeros):
        want = to_env_action(policy(obs[:1]), space)
    np.testing.assert_allclose(deployed(obs[:1]), want, rtol=0, atol=TOL)
    if fmt == "onnx":
        import onnx

        props = {p.key: json.loads(p.value) for p in onnx.load(str(out)).metadata_props}
        assert props["noise"].startswith("zero") and props["algo"] == "flow_bc"
    else:
        files = {"rlcore.json": ""}
        torch.jit.load(str(out), _extra_files=files)
        assert json.loads(files["rlcore.json"])["noise"].startswith("zero")


def test_export_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "missing"), "--format", "onnx"]) == 1
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty"), "--format", "torchscript"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no checkpoint found") and err.count("\n") == 1


def test_the_deployment_example_runs_as_written(tmp_path: Path) -> None:
    """docs/deploy.md's numpy + onnxruntime example, on an exported SAC file and on a
    flow BC file (noise input, action chunks)."""
    import re

    from tests.conftest import REPO

    page = (REPO / "docs" / "deploy.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", page, re.S) if "onnxruntime" in b]
    assert "torch" not in block and "rlcore" not in block  # numpy and onnxruntime only
    for case in ("sac", "flow_bc"):
        _, out, _ = run_export(tmp_path, case, "onnx")
        code = block.replace("runs/sac/hopper/<time>/policy.onnx", str(out))
        if case == "flow_bc":  # one chunk's first action per step is enough to run it
            code = code.replace("env.step(act(obs))", "env.step(act(obs)[0])")
        namespace: dict[str, Any] = {}
        exec(compile(code, "deploy.md", "exec"), namespace)  # noqa: S102
        assert namespace["done"]


def test_a_draw_the_noise_input_does_not_replace_is_refused(tmp_path: Path) -> None:
    """A deterministic action that draws with torch.rand would be baked in as a random
    op: export says so instead of writing a file that differs from load_policy."""
    from torch import nn

    from rlcore.agent_state import Parts, numpy_act
    from rlcore.export import DeployedPolicy, ExportError, export_policy

    class Dithering:
        device = torch.device("cpu")

        def __init__(self) -> None:
            self.net = nn.Linear(3, 2)
            self.parts = Parts(net=self.net)

        @numpy_act
        def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
            return self.net(obs) + 0.01 * torch.rand(obs.shape[0], 2)

    policy = DeployedPolicy(Dithering(), gym.spaces.Box(-1.0, 1.0, (2,), np.float32))
    with pytest.raises(ExportError, match=r"outside torch.randn \(aten::rand\)"):
        export_policy(policy, tmp_path / "x.ts", "torchscript", [3])
    assert not (tmp_path / "x.ts").exists()
