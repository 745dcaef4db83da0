"""DQN on pixels: the Nature-DQN network of CleanRL's dqn_atari.py built from
``algo.encoder``, image observations through acting, updates, the frame-storing replay
buffer of a run, evaluation and ``load_policy``; clear refusals."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rlcore.algos.dqn import DQN, DQNConfig
from rlcore.nets import NatureCNN
from rlcore.types import Batch

ATARI = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)


def test_the_network_is_cleanrls_qnetwork() -> None:
    """Conv 32 8x8/4, conv 64 4x4/2, conv 64 3x3/1, Linear(3136, 512), ReLU, Linear(512, n)
    (CleanRL dqn_atari.py's QNetwork) with algo.encoder=nature and no hidden layers."""
    agent = DQN(ATARI, gym.spaces.Discrete(6), DQNConfig(encoder="nature", hidden=()))
    encoder, head = agent.q_network
    cnn = encoder.images["obs"]
    assert isinstance(cnn, NatureCNN) and cnn.conv_dim == 3136 and cnn.out_dim == 512
    convs = [m for m in cnn.convs if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.stride) for c in convs] == [
        (4, 32, (8, 8), (4, 4)), (32, 64, (4, 4), (2, 2)), (64, 64, (3, 3), (1, 1))
    ]  # fmt: skip
    linears = [m for m in head.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(512, 6)]
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    expected = head(cnn.head(cnn.convs(obs.float() / 255.0)))
    torch.testing.assert_close(agent.q_network(obs), expected)


def test_acting_and_updating_on_uint8_images() -> None:
    torch.manual_seed(0)
    space = gym.spaces.Box(0, 255, (2, 36, 36), np.uint8)
    agent = DQN(space, gym.spaces.Discrete(3), DQNConfig(encoder="drq", hidden=(16,)))
    rng = np.random.default_rng(0)
    one = rng.integers(0, 256, (2, 36, 36), dtype=np.uint8)
    assert np.shape(agent.act(one, deterministic=True)) == ()  # one image: one action
    assert agent.act(np.stack([one] * 5), deterministic=True).shape == (5,)
    obs = torch.as_tensor(rng.integers(0, 256, (8, 2, 36, 36), dtype=np.uint8))
    batch = Batch(obs=obs, action=torch.randint(0, 3, (8,)), reward=torch.ones(8),
                  next_obs=obs.flip(0), terminated=torch.zeros(8), truncated=torch.zeros(8))  # fmt: skip
    before = [p.detach().clone() for p in agent.q_network.parameters()]
    metrics = agent.update(batch)
    assert np.isfinite(metrics["q_loss"])
    changed = [not torch.equal(a, b) for a, b in zip(before, agent.q_network.parameters())]
    assert all(changed)  # the encoder learns with the head


def test_encoder_refusals_name_the_fix() -> None:
    with pytest.raises(ValueError, match="set algo.encoder to one of"):
        DQN(ATARI, gym.spaces.Discrete(6), DQNConfig())
    box = gym.spaces.Box(-1, 1, (4,), np.float32)
    with pytest.raises(ValueError, match="algo.encoder=nature encodes images; this task has none"):
        DQN(box, gym.spaces.Discrete(2), DQNConfig(encoder="nature"))


def test_a_pixel_dqn_run_from_the_command_line(tmp_path) -> None:
    """algo=dqn env=ALE/Pong-v5 (configs/algo_env/dqn_atari.yaml, shrunk): it trains with a
    frame-storing buffer, evaluates whole games, its policy loads for deployment and its
    evaluation records a video."""
    pytest.importorskip("ale_py")
    import rlcore
    from rlcore.checkpoint import load_checkpoint
    from rlcore.train import train
    from tests.conftest import FAST, make_config

    config = make_config(
        "algo=dqn", "env=ALE/Pong-v5", *FAST, "total_steps=300", "algo.learning_starts=200",
        "algo.buffer_size=1000", "eval_every=300", "eval_episodes=1", "eval_envs=1",
        "env.max_episode_steps=60",
    )  # fmt: skip
    assert config.algo.encoder == "nature" and config.algo.lr == 1.0e-4
    train(config, tmp_path / "run")
    state = load_checkpoint(tmp_path / "run")
    buffer = state["loop"]["stateful"]["buffer"]
    ring = buffer["frames"]["obs"]["frames"]
    assert ring.shape[1:] == (ring.shape[1], 1, 84, 84) and "obs" not in buffer["data"]
    assert state["spaces"]["obs"]["parts"][0]["kind"] == "image"
    policy = rlcore.load_policy(tmp_path / "run")
    assert 0 <= int(policy(np.zeros((4, 84, 84), np.uint8))) < 6
    from rlcore.evaluate import main as evaluate

    assert evaluate([str(tmp_path / "run"), "episodes=1", "video=true"]) == 0
    videos = sorted((tmp_path / "run" / "videos").glob("*.mp4"))
    assert [path.name for path in videos] == ["episode_1_seed0.mp4"]
    assert videos[0].stat().st_size > 1000  # frames of the agent's view (envs/atari.py)


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_an_image_policy_exports_with_uint8_input(tmp_path, fmt: str) -> None:
    """The exported file takes the env's uint8 stacks and gives the agent's greedy actions
    (the encoder's pixel scaling inside the graph); a sharpened head makes them differ."""
    from rlcore.checkpoint import FORMAT_VERSION, save_checkpoint
    from rlcore.export import export_policy, policy_from_checkpoint
    from rlcore.observations import ObsSpec
    from rlcore.spaces import describe_action_space

    torch.manual_seed(3)
    space, actions = gym.spaces.Box(0, 255, (4, 36, 36), np.uint8), gym.spaces.Discrete(5)
    config = DQNConfig(encoder="drq", hidden=(8,))
    agent = DQN(space, actions, config)
    with torch.no_grad():
        for module in agent.q_network[1].modules():
            if isinstance(module, nn.Linear):
                module.weight.mul_(40.0)
    spaces = {**ObsSpec.from_space(space).spaces_record(), **describe_action_space(actions)}
    run = tmp_path / "run"
    save_checkpoint({"format": FORMAT_VERSION, "algo": "dqn",
                     "config": {"algo": {"encoder": "drq", "hidden": [8]}, "env": {}},
                     "spaces": spaces, "agent": agent.state_dict()},
                    run / "checkpoints" / "latest.pt")  # fmt: skip
    policy, info = policy_from_checkpoint(run)
    assert info["obs_shape"] == [4, 36, 36]
    out = tmp_path / ("policy.onnx" if fmt == "onnx" else "policy.pt")
    export_policy(policy, out, fmt, info["obs_shape"], info=info)
    obs = np.random.default_rng(1).integers(0, 256, (32, 4, 36, 36), dtype=np.uint8)
    expected = agent.act(obs, deterministic=True)
    assert len(set(expected.tolist())) > 1
    if fmt == "onnx":
        onnxruntime = pytest.importorskip("onnxruntime")
        session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
        assert session.get_inputs()[0].type == "tensor(uint8)"
        (got,) = session.run(None, {"obs": obs})
    else:
        got = torch.jit.load(str(out))(torch.as_tensor(obs)).numpy()
    np.testing.assert_array_equal(got, expected)
