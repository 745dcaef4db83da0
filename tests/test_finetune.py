"""Action-chunk execution, rollout channels and the fine-tuners of diffusion / flow
policies (DPPO, ReinFlow, ResiP): hand-computed likelihoods, the chunk wrapper on every
back end, K' = 0, the residual's start at its base, contracts, the CLI's errors and a
small behaviour-cloning learning test on a scripted expert."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcore.algos.dppo import DPPO, DPPOConfig
from rlcore.algos.generative_bc import DiffusionBCConfig, GenerativeBC
from rlcore.algos.reinflow import ReinFlow, ReinFlowConfig
from rlcore.algos.resip import ResiP, ResiPConfig
from rlcore.buffers import RolloutBuffer
from rlcore.checkpoint import save_checkpoint
from rlcore.envs.chunks import ChunkQueue
from rlcore.envs.make import make_vec_env
from rlcore.generative import DDPMHead
from rlcore.spaces import action_storage

OBS = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)
ACT = gym.spaces.Box(np.array([-2.0, -0.5, 0.0], np.float32), np.array([2.0, 0.5, 1.0], np.float32))
H = 2
CHUNK_ACT = gym.spaces.Box(np.stack([ACT.low] * H), np.stack([ACT.high] * H))
SMALL = {"horizon": H, "hidden": (32, 32, 32), "time_dim": 8}


def small_dppo(**kw) -> DPPO:
    cfg = DPPOConfig(**SMALL, denoising_steps=5, finetune_steps=kw.pop("finetune_steps", 3),
                     critic_hidden=(16, 16), minibatch_size=16, **kw)  # fmt: skip
    return DPPO(OBS, CHUNK_ACT, cfg)


def small_reinflow(**kw) -> ReinFlow:
    kw = {"num_minibatches": 2, "update_epochs": 2, **kw}
    cfg = ReinFlowConfig(**SMALL, denoising_steps=3, noise_hidden=(8, 8), critic_hidden=(16, 16),
                         **kw)  # fmt: skip
    return ReinFlow(OBS, CHUNK_ACT, cfg)


def small_resip(**kw) -> ResiP:
    cfg = ResiPConfig(**SMALL, denoising_steps=4, residual_hidden=(16, 16),
                      critic_hidden=(16, 16), num_minibatches=2, update_epochs=2, **kw)  # fmt: skip
    return ResiP(OBS, ACT, cfg)


FINETUNERS = {"dppo": small_dppo, "reinflow": small_reinflow, "resip": small_resip}


def rollout_of(agent, steps: int = 6, envs: int = 3, seed: int = 0):
    """A rollout of random observations and rewards, stored through RolloutBuffer."""
    g = torch.Generator().manual_seed(seed)
    space = ACT if isinstance(agent, ResiP) else CHUNK_ACT
    shape, dtype = action_storage(space)
    buffer = RolloutBuffer(steps, envs, (5,), shape, action_dtype=dtype)
    for _ in range(steps):
        obs = torch.randn(envs, 5, generator=g)
        action, log_prob, value, channels = agent.explore(obs)
        buffer.add(obs, action, log_prob, torch.randn(envs, generator=g), value,
                   torch.zeros(envs), torch.zeros(envs), torch.zeros(envs), channels)  # fmt: skip
    return buffer.compute(torch.zeros(envs), 0.99, 0.95)


# -- action chunks in the env --------------------------------------------------------
@pytest.mark.parametrize("backend", ["sync", "async", "native"])
def test_a_chunk_equals_its_env_steps_on_every_backend(backend):
    chunked = make_vec_env("hopper", 2, backend=backend, action_chunk=3)
    plain = make_vec_env("hopper", 2, backend=backend)
    try:
        obs_c, _ = chunked.reset(seed=4)
        obs_p, _ = plain.reset(seed=4)
        np.testing.assert_array_equal(obs_c, obs_p)
        assert chunked.single_action_space.shape == (3, 3)
        actions = np.random.default_rng(0).uniform(-1, 1, (2, 3, 3)).astype(np.float32)
        obs_c, reward_c, _, _, info = chunked.step(actions)
        total = np.zeros(2)
        for h in range(3):
            obs_p, reward_p, *_ = plain.step(actions[:, h])
            total += reward_p
        np.testing.assert_array_equal(obs_c, obs_p)
        np.testing.assert_allclose(reward_c, total, rtol=1e-6)
        np.testing.assert_array_equal(info["chunk_steps"], [3, 3])
    finally:
        chunked.close()
        plain.close()


@pytest.mark.parametrize("backend", ["sync", "native"])
def test_a_chunk_never_crosses_an_episode_end(backend):
    # episodes of 5 steps, chunks of 3: every episode is a chunk of 3 then one of 2
    env = make_vec_env("hopper", 2, backend=backend, action_chunk=3, max_episode_steps=5)
    zeros = np.zeros((2, 3, 3), np.float32)
    env.reset(seed=0)
    steps, lengths, truncated = [], [], []
    for _ in range(4):
        obs, _, term, trunc, info = env.step(zeros)
        steps.append(info["chunk_steps"].tolist())
        truncated.append(trunc.tolist())
        lengths += [x for x in info["episode_length"] if not np.isnan(x)]
        assert not term.any()
    assert steps == [[3, 3], [2, 2], [3, 3], [2, 2]]
    assert truncated == [[False, False], [True, True], [False, False], [True, True]]
    assert lengths == [5, 5, 5, 5]
    env.close()


def test_an_env_ending_mid_chunk_restarts_from_a_fresh_reset_while_others_go_on():
    # env 0 ends after 2 steps (time limit 2), env 1 never within the chunk (limit 10)
    env = make_vec_env("hopper", 2, backend="sync", action_chunk=4)
    base = env.env.env  # EpisodeStats -> ActionChunks -> SyncVectorEnv
    time_limit = base.envs[0]
    while not isinstance(time_limit, gym.wrappers.TimeLimit):
        time_limit = time_limit.env
    time_limit._max_episode_steps = 2
    env.reset(seed=0)
    obs, _, _, trunc, info = env.step(np.zeros((2, 4, 3), np.float32))
    assert info["chunk_steps"].tolist() == [2, 4]
    assert trunc.tolist() == [True, False]
    assert info["_final_obs"].tolist() == [True, False]
    assert time_limit._elapsed_steps == 0  # the steps after its end were discarded
    env.close()


class DeviceLike(gym.vector.VectorWrapper):
    """A numpy back end presented as a device back end is (rlcore.envs.mjx): torch tensors out,
    ``final_obs`` for every row, and episode statistics of its own that a partial reset
    restarts."""

    def __init__(self, env: gym.vector.VectorEnv) -> None:
        super().__init__(env)
        self.returns = torch.zeros(env.num_envs, dtype=torch.float64)
        self.lengths = torch.zeros(env.num_envs, dtype=torch.int64)

    def reset(self, *, seed=None, options=None):
        mask = (options or {}).get("reset_mask")
        mask = None if mask is None else np.asarray(mask)
        obs, info = self.env.reset(
            seed=seed, options=None if mask is None else {"reset_mask": mask}
        )
        rows = (
            torch.ones(self.num_envs, dtype=torch.bool) if mask is None else torch.as_tensor(mask)
        )
        self.returns[rows], self.lengths[rows] = 0.0, 0
        return torch.as_tensor(obs), info

    def step(self, actions):
        assert isinstance(actions, torch.Tensor)
        obs, reward, term, trunc, info = self.env.step(actions.numpy())
        from rlcore.envs.make import final_next_obs

        true_next = torch.as_tensor(final_next_obs(obs, info))
        reward, term, trunc = map(torch.as_tensor, (reward, term, trunc))
        done = term | trunc
        self.returns += reward
        self.lengths += 1
        nan = torch.tensor(float("nan"))
        stats = {"episode_return": torch.where(done, self.returns.float(), nan),
                 "episode_length": torch.where(done, self.lengths.float(), nan)}  # fmt: skip
        self.returns[done], self.lengths[done] = 0.0, 0
        out = {"final_obs": true_next, "_final_obs": done, **stats}
        return torch.as_tensor(obs), reward, term, trunc, out


def _hopper_base(limits: tuple[int, int]) -> gym.vector.VectorEnv:
    """A 2-env sync Hopper (no wrappers) whose envs' episodes last ``limits`` steps."""
    base = make_vec_env("hopper", 2, backend="sync").env  # below EpisodeStats
    for env, limit in zip(base.envs, limits):
        while not isinstance(env, gym.wrappers.TimeLimit):
            env = env.env
        env._max_episode_steps = limit
    return base


def test_action_chunks_on_a_device_back_end_equal_the_numpy_path():
    """Same chunks, same episode ends mid-chunk (env 0 every 2 steps, env 1 every 7), same
    partial resets: the tensor path of ActionChunks gives the numpy path's numbers, and the
    device back end's own episode statistics come through from where each chunk ended."""
    from rlcore.envs.make import ActionChunks, EpisodeStats

    host = EpisodeStats(ActionChunks(_hopper_base((2, 7)), 3))
    device = ActionChunks(DeviceLike(_hopper_base((2, 7))), 3)
    obs_h, _ = host.reset(seed=5)
    obs_d, _ = device.reset(seed=5)
    rng = np.random.default_rng(1)
    chunk_steps = []
    for _ in range(6):
        actions = rng.uniform(-0.3, 0.3, (2, 3, 3)).astype(np.float32)
        obs_h, reward_h, term_h, trunc_h, info_h = host.step(actions)
        obs_d, reward_d, term_d, trunc_d, info_d = device.step(torch.as_tensor(actions))
        assert isinstance(obs_d, torch.Tensor) and isinstance(reward_d, torch.Tensor)
        np.testing.assert_array_equal(obs_d.numpy(), obs_h)
        np.testing.assert_array_equal(reward_d.numpy(), reward_h)
        np.testing.assert_array_equal(term_d.numpy(), term_h)
        np.testing.assert_array_equal(trunc_d.numpy(), trunc_h)
        np.testing.assert_array_equal(info_d["chunk_steps"].numpy(), info_h["chunk_steps"])
        chunk_steps.append(info_h["chunk_steps"].tolist())
        done = term_h | trunc_h
        np.testing.assert_array_equal(info_d["_final_obs"].numpy(), done)
        if done.any():
            np.testing.assert_array_equal(
                info_d["final_obs"].numpy()[done], info_h["final_obs"][done]
            )
        for key in ("episode_return", "episode_length"):
            np.testing.assert_allclose(info_d[key].numpy(), info_h[key], rtol=1e-6)
    # the cases were exercised: env 0 ends mid-chunk while env 1 goes on, and vice versa
    assert [2, 3] in chunk_steps and any(b < 3 for _, b in chunk_steps)


@pytest.mark.parametrize("backend", ["sync", "native"])
def test_observation_history_stacks_the_last_steps_and_restarts_with_each_episode(backend):
    env = make_vec_env("hopper", 2, backend=backend, obs_history=3, max_episode_steps=4)
    plain = make_vec_env("hopper", 2, backend=backend, max_episode_steps=4)
    try:
        assert env.single_observation_space.shape == (33,)
        obs, _ = env.reset(seed=2)
        seen = [plain.reset(seed=2)[0]]
        np.testing.assert_array_equal(obs, np.concatenate([seen[0]] * 3, 1))
        action = np.full((2, 3), 0.1, np.float32)
        for t in range(4):
            obs, _, _, trunc, info = env.step(action)
            plain_obs, _, _, _, plain_info = plain.step(action)
            true_next = plain_info["final_obs"] if t == 3 else plain_obs
            seen.append(np.stack(list(true_next)) if t == 3 else plain_obs)
            if t < 3:  # the last three observations, oldest first
                window = [seen[max(i, 0)] for i in range(t - 1, t + 2)]
                np.testing.assert_array_equal(obs, np.concatenate(window, 1))
        # the episode ended (time limit 4): final_obs holds the history ending in the
        # final observation, the new observation repeats the new episode's first one
        assert trunc.all()
        np.testing.assert_array_equal(
            np.stack(list(info["final_obs"])), np.concatenate(seen[2:5], 1)
        )
        np.testing.assert_array_equal(obs, np.concatenate([plain_obs] * 3, 1))
        # a partial reset refills only the reset env's history
        before = env.step(action)[0]
        after, _ = env.reset(options={"reset_mask": np.array([True, False])})
        np.testing.assert_array_equal(after[1], before[1])
        np.testing.assert_array_equal(after[0], np.tile(after[0][:11], 3))
    finally:
        env.close()
        plain.close()


def test_observation_history_on_a_device_back_end_equals_the_numpy_path():
    """Tensor observations: the same stacks, final observations and partial resets as numpy
    ones, and the state round trip through numpy (checkpoints) continues the same."""
    from rlcore.envs.make import ObservationHistory

    host = ObservationHistory(_hopper_base((3, 5)), 3)
    device = ObservationHistory(DeviceLike(_hopper_base((3, 5))), 3)
    np.testing.assert_array_equal(device.reset(seed=2)[0].numpy(), host.reset(seed=2)[0])
    rng = np.random.default_rng(0)
    for t in range(7):
        action = rng.uniform(-0.2, 0.2, (2, 3)).astype(np.float32)
        obs_h, _, term_h, trunc_h, info_h = host.step(action)
        obs_d, _, _, _, info_d = device.step(torch.as_tensor(action))
        np.testing.assert_array_equal(obs_d.numpy(), obs_h)
        done = term_h | trunc_h
        if done.any():
            np.testing.assert_array_equal(
                info_d["final_obs"].numpy()[done], info_h["final_obs"][done]
            )
        if t == 3:
            mask = np.array([False, True])
            obs_h, _ = host.reset(options={"reset_mask": mask.copy()})
            obs_d, _ = device.reset(options={"reset_mask": torch.as_tensor(mask)})
            np.testing.assert_array_equal(obs_d.numpy(), obs_h)
    state = device.state_dict()
    assert isinstance(state["history"], np.ndarray)
    device.load_state_dict(state)
    action = np.zeros((2, 3), np.float32)
    np.testing.assert_array_equal(
        device.step(torch.as_tensor(action))[0].numpy(), host.step(action)[0]
    )


def test_dataset_observation_history_matches_the_envs_stacking():
    from rlcore.offline.datasets import OfflineDataset

    obs = torch.arange(5.0).view(5, 1)
    dataset = OfflineDataset(
        obs=obs, action=torch.zeros(5, 1), reward=torch.zeros(5), next_obs=obs + 10,
        terminated=torch.zeros(5), truncated=torch.tensor([0.0, 1, 0, 0, 1]),
        episode_id=torch.tensor([0, 0, 1, 1, 1]), mc_return=torch.zeros(5),
        episode_return=torch.zeros(2, dtype=torch.float64),
    )  # fmt: skip
    dataset.stack_observations(2)
    assert dataset.obs.tolist() == [[0, 0], [0, 1], [2, 2], [2, 3], [3, 4]]
    assert dataset.next_obs.tolist() == [[0, 10], [1, 11], [2, 12], [3, 13], [4, 14]]


# -- rollout channels ----------------------------------------------------------------
def test_rollout_channels_are_stored_flattened_and_follow_minibatch_indexing():
    buffer = RolloutBuffer(3, 2, (1,), (1,))
    for t in range(3):
        chain = torch.arange(2 * 4, dtype=torch.float32).view(2, 4) + 100 * t
        buffer.add(torch.full((2, 1), float(t)), torch.zeros(2, 1), torch.zeros(2),
                   torch.zeros(2), torch.zeros(2), torch.zeros(2), torch.zeros(2),
                   torch.zeros(2), {"chain": chain})  # fmt: skip
    batch = buffer.compute(torch.zeros(2), 0.99, 0.95)
    assert batch.extras["chain"].shape == (6, 4)
    # row 3 = step 1, env 1
    np.testing.assert_array_equal(batch.extras["chain"][3].numpy(), [104, 105, 106, 107])
    picked = batch.index(torch.tensor([3, 0]))
    np.testing.assert_array_equal(picked.extras["chain"][:, 0].numpy(), [104, 0])
    assert picked.obs[:, 0].tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="rollout channels changed"):
        buffer.reset()
        buffer.add(*[torch.zeros(2)] * 2, *[torch.zeros(2)] * 6)


# -- the heads' likelihoods ----------------------------------------------------------
def test_ddpm_transition_with_per_row_steps_equals_one_step_at_a_time():
    torch.manual_seed(0)
    head = DDPMHead(4, 2, horizon=3, steps=6, hidden=(16, 16), time_dim=8)
    obs, x = torch.randn(5, 4), torch.randn(5, 3, 2)
    steps = torch.tensor([0, 5, 2, 3, 5])
    mean, std = head.transition(obs, x, steps, std_floor=0.1)
    for row, i in enumerate(steps.tolist()):
        m, s = head.transition(obs[row : row + 1], x[row : row + 1], i, std_floor=0.1)
        torch.testing.assert_close(mean[row], m[0])
        torch.testing.assert_close(std[row], s[0])
    assert torch.all(std[1] == 0.1)  # last step: posterior std 0, raised to the floor


def test_reinflow_chain_log_likelihood_by_hand():
    """Zero velocity, sigma fixed at 0.2: x_{k+1} ~ N(clip(x_k, -1, 1), 0.04) (each mean
    clipped, clip_intermediate), the initial N(0, I) term, / (K + 1) H A; the entropy rate
    (H(x_0) + sum_k H_k) / ((K + 1) H A) = c + K / (K + 1) log 0.2, c = log(2 pi e) / 2
    (ReinFlow's, not the mean of the K transitions' c + log 0.2)."""
    torch.manual_seed(0)
    agent = small_reinflow(sigma_min=0.2, sigma_max=0.2)  # sigma fixed at 0.2
    for p in agent.actor.net.out.parameters():  # zero velocity
        torch.nn.init.zeros_(p)
    obs = torch.randn(2, 5)
    chain = torch.randn(2, 4, H, 3)  # K = 3 steps
    log_prob, entropy = agent.chain_log_prob(obs, chain)
    c = chain.double().numpy()
    d = H * 3
    for b in range(2):
        initial = -0.5 * (c[b, 0] ** 2).sum() - 0.5 * d * math.log(2 * math.pi)
        steps = sum(
            -0.5 * ((c[b, k + 1] - np.clip(c[b, k], -1, 1)) ** 2).sum() / 0.04
            - d * math.log(0.2) - 0.5 * d * math.log(2 * math.pi)
            for k in range(3)
        )  # fmt: skip
        assert log_prob[b].item() == pytest.approx((initial + steps) / (4 * d), rel=1e-5)
    half_log_2pie = 0.5 * math.log(2 * math.pi * math.e)
    assert entropy.item() == pytest.approx(half_log_2pie + 3 / 4 * math.log(0.2), rel=1e-5)


def test_reinflow_log_prob_of_its_own_samples_matches_explore_and_ratio_is_one():
    torch.manual_seed(0)
    agent = small_reinflow()
    obs = torch.randn(4, 5)
    _, log_prob, _, channels = agent.explore(obs)
    again, _ = agent.chain_log_prob(agent.obs_normalizer(obs), channels["chain"])
    torch.testing.assert_close(again, log_prob)


def test_reinflow_noise_schedule_holds_then_cosine_anneals():
    agent = small_reinflow(sigma_min=0.1, sigma_max=0.24, noise_hold=0.35, noise_decay=0.7)
    end = 0.1 + 0.7 * 0.14
    assert agent.sigma_max_at(0.0) == agent.sigma_max_at(0.35) == 0.24
    assert agent.sigma_max_at(1.0) == pytest.approx(end)
    assert agent.sigma_max_at(0.675) == pytest.approx((0.24 + end) / 2)
    chain = torch.zeros(64, 4, H, 3)
    agent.sigma_max = 0.15
    std = agent.noise(torch.randn(64, 5), chain[:, 0], torch.rand(64), 0.1, 0.15)
    assert std.min() >= 0.1 - 1e-6 and std.max() <= 0.15 + 1e-6


def test_dppo_log_densities_of_explore_are_those_update_recomputes():
    torch.manual_seed(0)
    agent = small_dppo()
    obs = torch.randn(3, 5)
    _, total, _, channels = agent.explore(obs)
    chain, steps = channels["chain"], channels["step_log_prob"]
    assert chain.shape == (3, 4, H, 3) and steps.shape == (3, 3)
    torch.testing.assert_close(total, steps.sum(-1))
    norm = agent.obs_normalizer(obs)
    for k in range(3):  # by hand: per-dim Gaussian terms, clamped to [-5, 2], averaged
        mean, std = agent.actor.transition(norm, chain[:, k], 2 + k, agent.config.std_floor)
        x, m, sd = (t.detach().double().numpy() for t in (chain[:, k + 1], mean, std))
        per_dim = -((x - m) ** 2) / (2 * sd**2) - np.log(sd) - 0.5 * np.log(2 * np.pi)
        expected = np.clip(per_dim, -5, 2).reshape(3, -1).mean(-1)
        np.testing.assert_allclose(steps[:, k].numpy(), expected, rtol=1e-5)


def test_dppo_with_no_finetuned_steps_leaves_the_policy_unchanged():
    torch.manual_seed(0)
    agent = small_dppo(finetune_steps=0)
    before = {k: v.clone() for k, v in agent.actor.state_dict().items()}
    obs = np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32)
    torch.manual_seed(1)
    act_before = agent.act(obs, deterministic=True)
    critic_before = [p.clone() for p in agent.critic.parameters()]
    metrics = agent.update(rollout_of(agent))
    assert "policy_loss" not in metrics and np.isfinite(metrics["value_loss"])
    for k, v in agent.actor.state_dict().items():
        assert torch.equal(before[k], v), k
    torch.manual_seed(1)
    np.testing.assert_array_equal(agent.act(obs, deterministic=True), act_before)
    assert any(not torch.equal(a, b) for a, b in zip(critic_before, agent.critic.parameters()))


def test_dppo_finetunes_only_the_last_steps_copy():
    torch.manual_seed(0)
    agent = small_dppo()
    base_before = {k: v.clone() for k, v in agent.base.state_dict().items()}
    agent.update(rollout_of(agent))
    for k, v in agent.base.state_dict().items():
        assert torch.equal(base_before[k], v), k
    assert any(not torch.equal(base_before[k], v) for k, v in agent.actor.state_dict().items())


# -- the references' sampling, clamps, schedules and early stop ----------------------
def test_reinflow_defaults_are_the_references_hopper_config():
    cfg = ReinFlowConfig()
    got = (cfg.update_epochs, cfg.repeat_samples, cfg.minibatch_size, cfg.actor_lr,
           cfg.actor_lr_min, cfg.critic_lr, cfg.critic_lr_min, cfg.lr_cycle, cfg.lr_warmup,
           cfg.critic_weight_decay, cfg.target_kl, cfg.noise_clip, cfg.ent_coef,
           (cfg.log_prob_min, cfg.log_prob_max), cfg.clip_intermediate, cfg.max_grad_norm,
           cfg.denoiser, cfg.activation)  # fmt: skip
    assert got == (5, 10, 50_000, 4.5e-5, 2e-5, 6.5e-4, 3e-4, 100, 10, 1e-5, 1.0, 3.0, 0.03,
                   (-1.0, 1.0), True, None, "dppo", "relu")  # fmt: skip
    dppo = DPPOConfig()
    assert (dppo.noise_clip, dppo.target_kl, dppo.use_bc_loss, dppo.bc_loss_coef,
            dppo.max_grad_norm, dppo.denoiser, dppo.activation) == (
        3.0, 1.0, False, 0.0, None, "dppo", "relu")  # fmt: skip


def test_reinflow_learning_rates_follow_the_warm_restart_cosine():
    agent = small_reinflow()
    mid_actor, mid_critic = 2e-5 + 2.5e-5 / 2, 3e-4 + 3.5e-4 / 2
    assert agent.lr_at(0) == pytest.approx((2e-5, 3e-4))
    assert agent.lr_at(5) == pytest.approx((mid_actor, mid_critic))
    assert agent.lr_at(10) == pytest.approx((4.5e-5, 6.5e-4))
    assert agent.lr_at(55) == pytest.approx((mid_actor, mid_critic))
    assert agent.lr_at(100) == pytest.approx((2e-5, 3e-4))  # the restart
    metrics = agent.update(rollout_of(agent))
    assert (metrics["actor_lr"], metrics["critic_lr"]) == pytest.approx((2e-5, 3e-4))
    assert agent.actor_optimizer.param_groups[0]["lr"] == pytest.approx(2e-5)
    assert agent.critic_optimizer.param_groups[0]["weight_decay"] == 1e-5
    assert agent.actor_optimizer.param_groups[0]["weight_decay"] == 0.0


def test_reinflow_epochs_see_every_row_repeat_samples_times():
    """18 rows x 10 = 180 per epoch in minibatches of 50: 4 (50, 50, 50, 30) x 5 epochs."""
    torch.manual_seed(0)
    agent = small_reinflow(num_minibatches=None, minibatch_size=50, update_epochs=5,
                           target_kl=None)  # fmt: skip
    assert agent.update(rollout_of(agent))["minibatches"] == 20
    seen = []
    original = agent.chain_log_prob

    def spy(obs, chain):
        seen.append(len(obs))
        return original(obs, chain)

    agent.chain_log_prob = spy
    agent.update(rollout_of(agent, seed=1))
    assert seen == [50, 50, 50, 30] * 5


@pytest.mark.parametrize("name", ["dppo", "reinflow"])
def test_kl_early_stop_ends_the_iteration_after_the_first_minibatch_above_target(name):
    """The first minibatch scores the policy that sampled the rollout (approx. KL ~1e-8,
    rounding); its large step (lr 1e-2) moves the policy, so the second minibatch's KL
    (~5e-3 here) exceeds 1e-4 and the iteration stops there: 2 minibatches, not 3 epochs
    x 4 (the earlier check at an epoch's end ran the first epoch's 4)."""
    torch.manual_seed(0)
    if name == "dppo":
        agent = small_dppo(target_kl=1e-4, actor_lr=1e-2, update_epochs=3)
    else:
        agent = small_reinflow(target_kl=1e-4, actor_lr=1e-2, actor_lr_min=1e-2,
                               update_epochs=3, num_minibatches=4)  # fmt: skip
    metrics = agent.update(rollout_of(agent))
    assert metrics["minibatches"] == 2, metrics
    agent.config.target_kl = None
    assert agent.update(rollout_of(agent, seed=1))["minibatches"] >= 3 * 4


def test_reinflow_clamps_both_log_likelihoods_before_the_ratio():
    """Chains far from the policy (normalised log-likelihood << -1) stored with log_prob
    -10: both clamp to -1, ratio 1: approx. KL 0, nothing clipped, and the surrogate is
    -mean(standardised advantage) = 0. Unclamped, the ratio would be ~0 (all clipped)."""
    torch.manual_seed(0)
    agent = small_reinflow(update_epochs=1, num_minibatches=1, target_kl=None)
    batch = rollout_of(agent)
    batch.extras["chain"].mul_(50.0)
    batch.log_prob.fill_(-10.0)
    norm = agent.obs_normalizer(batch.obs)
    assert agent.chain_log_prob(norm, batch.extras["chain"])[0].max() < -5
    metrics = agent.update(batch)
    assert metrics["approx_kl"] == 0.0 and metrics["clip_fraction"] == 0.0
    assert abs(metrics["policy_loss"]) < 1e-6


def test_reinflow_injected_noise_is_clipped_at_three_std():
    """sigma fixed at 0.2: every non-final step's x_{k+1} - mean_k lies within +-0.6, and
    draws beyond 3 std (~0.27% of them) sit exactly on the bound."""
    torch.manual_seed(0)
    agent = small_reinflow(sigma_min=0.2, sigma_max=0.2)
    norm = agent.obs_normalizer(torch.randn(3000, 5))
    _, chain, _ = agent._sample(norm, deterministic=False)
    steps = []
    for k in range(2):  # K = 3; the last sample is clipped to [-1, 1] besides
        mean, _ = agent._step(norm, chain[:, k], agent.actor.times()[k])
        steps.append(chain[:, k + 1] - mean)
    dev = torch.stack(steps).abs()
    assert dev.max() <= 0.6 + 1e-5 and (dev > 0.6 - 1e-5).sum() > 20


def test_dppo_injected_noise_is_clipped_at_three_std():
    torch.manual_seed(0)
    agent = small_dppo(finetune_steps=5)
    norm = agent.obs_normalizer(torch.randn(3000, 5))
    _, chain, _ = agent._denoise(norm)
    z = []
    for k in range(5):
        mean, std = agent.actor.transition(norm, chain[:, k], k, agent.config.std_floor)
        z.append((chain[:, k + 1] - mean) / std)
    z = torch.stack(z).abs()
    assert z.max() <= 3.0 + 1e-4 and (z > 3.0 - 1e-4).sum() > 20


def test_deterministic_acting_starts_from_the_rngs_noise_without_noise_at_the_end():
    """DPPO: the chain starts at the global RNG's x_K (not 0) and the last step adds no
    noise; ReinFlow: x_0 from the RNG, every step the clipped mean (no noise)."""
    torch.manual_seed(0)
    dppo = small_dppo(finetune_steps=5)  # K' = K: the chain holds x_K
    norm = dppo.obs_normalizer(torch.randn(4, 5))
    torch.manual_seed(3)
    x_k = torch.randn(4, H, 3)
    torch.manual_seed(3)
    _, chain, _ = dppo._denoise(norm, evaluation=True)
    torch.testing.assert_close(chain[:, 0], x_k)
    mean, _ = dppo.actor.transition(norm, chain[:, -2], 4, 0.0)
    torch.testing.assert_close(chain[:, -1], mean)
    assert (chain[:, 1] - dppo.actor.transition(norm, chain[:, 0], 0, 0.0)[0]).abs().max() > 0
    reinflow = small_reinflow()
    torch.manual_seed(3)
    _, chain, _ = reinflow._sample(norm, deterministic=True)
    torch.testing.assert_close(chain[:, 0], x_k)
    for k in range(3):
        mean, _ = reinflow._step(norm, chain[:, k], reinflow.actor.times()[k])
        torch.testing.assert_close(chain[:, k + 1], mean.clamp(-1, 1))


def test_dppo_bc_loss_scores_the_frozen_bases_chains_by_hand():
    """use_bc_loss: -mean of the fine-tuned network's clamped step scores of chains the
    base samples (same draws: seeded); it enters the loss and the metrics."""
    torch.manual_seed(0)
    agent = small_dppo(use_bc_loss=True, bc_loss_coef=0.5)
    norm = agent.obs_normalizer(torch.randn(6, 5))
    k = torch.tensor([0, 1, 2, 0, 1, 2])
    torch.manual_seed(4)
    _, teacher = agent.base.sample(norm, 0.1, return_chain=True, noise_clip=3.0)
    rows = torch.arange(6)
    mean, std = agent.actor.transition(norm, teacher[rows, 2 + k], 2 + k, 0.1)
    per_dim = gaussian_log_density_np(teacher[rows, 3 + k], mean, std)
    expected = -np.clip(per_dim, -5, 2).reshape(6, -1).mean(-1).mean()
    torch.manual_seed(4)
    assert agent.bc_loss(norm, k).item() == pytest.approx(expected, rel=1e-5)
    metrics = agent.update(rollout_of(agent))
    assert np.isfinite(metrics["bc_loss"])
    assert "bc_loss" not in small_dppo().update(rollout_of(small_dppo()))
    # the term moves the fine-tuned network: coefficient 0.5 vs 0 from the same state and
    # draws (both sample the teacher chains) give different weights
    after = []
    for coef in (0.5, 0.0):
        torch.manual_seed(0)
        other = small_dppo(use_bc_loss=True, bc_loss_coef=coef)
        other.update(rollout_of(other))
        after.append(torch.cat([p.flatten() for p in other.actor.parameters()]))
    assert not torch.equal(after[0], after[1])


def gaussian_log_density_np(x, mean, std):
    x, m, sd = (t.detach().double().numpy() for t in (x, mean, std))
    return -((x - m) ** 2) / (2 * sd**2) - np.log(sd) - 0.5 * np.log(2 * np.pi)


# Derived from the float32 error: chain values |x| < 3 (float32 spacing 2.4e-7 on [2, 4));
# each of the 5 denoising steps rounds a handful of operations (the mean from the noise
# estimate, the scaled draw): 1.5 spacings a step, 5 x 1.5 x 2.4e-7 = 1.8e-6 -> 2e-6.
# Measured <= 4.8e-7 on every AVX2 / AVX-512 kernel path (issue 44, docs/PARITY.md). Not
# covered: a CPU without AVX2, where torch's normal generator takes its scalar path and the
# seeded draws themselves differ (by up to 2.2e-6).
DPPO_GOLDEN_ATOL = 2e-6


def test_dppo_sampling_and_scores_reproduce_the_reference_golden_numbers():
    """tests/golden/diffusion_dppo.json: DPPO's own code (irom-lab/dppo @ 7b10df6, run by
    benchmarks/parity/diffusion_flow.py) on fixed weights and draws: its evaluation
    sampler's actions, its exploring chains (std >= 0.1, noise clip 3: 48 x 20 draws, some
    beyond 3 std) and their clamped, chunk-averaged step scores, its fine-tuning model's
    evaluation chains. Ours reproduces them within ``DPPO_GOLDEN_ATOL`` (float32 rounding)."""
    import json
    from pathlib import Path

    golden = json.loads((Path(__file__).parent / "golden" / "diffusion_dppo.json").read_text())
    obs_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    act_space = gym.spaces.Box(-np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))
    cfg = DPPOConfig(horizon=2, hidden=(16, 16, 16), time_dim=8, denoising_steps=5,
                     finetune_steps=3)  # fmt: skip
    agent = DPPO(obs_space, act_space, cfg)
    weights = {k: torch.tensor(v) for k, v in golden["weights"].items()}
    agent.base.load_state_dict(weights)
    agent.actor.load_state_dict(weights)
    obs = torch.tensor(golden["obs"])
    torch.manual_seed(1)
    evaluation = agent.base.sample(obs, noise_clip=10.0, evaluation=True)
    tol = {"atol": DPPO_GOLDEN_ATOL, "rtol": 0.0}
    torch.testing.assert_close(evaluation, torch.tensor(golden["evaluation_actions"]), **tol)
    torch.manual_seed(2)
    _, chain, scores = agent._denoise(obs)
    torch.testing.assert_close(chain, torch.tensor(golden["exploring_chains"]), **tol)
    torch.testing.assert_close(scores, torch.tensor(golden["step_scores"]), **tol)
    torch.manual_seed(3)
    _, chain, _ = agent._denoise(obs, evaluation=True)
    torch.testing.assert_close(chain, torch.tensor(golden["evaluation_chains"]), **tol)


def test_reinflow_loss_reproduces_the_reference_golden_numbers():
    """tests/golden/diffusion_reinflow.json: ReinFlow's own PPOFlow.loss (ReinFlow/ReinFlow
    @ aed2819, run by benchmarks/parity/diffusion_flow.py with these weights behind its
    network interfaces) on a 32-row rollout whose stored log-likelihoods were perturbed
    (4 beyond the [-1, 1] clamp): the first minibatch of our update (one epoch, one
    minibatch, no repeats) gives the same policy loss, entropy rate, value loss, approx.
    KL and clip fraction within 1e-6."""
    import json
    from pathlib import Path

    from rlcore.types import RolloutBatch

    golden = json.loads((Path(__file__).parent / "golden" / "diffusion_reinflow.json").read_text())
    obs_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    act_space = gym.spaces.Box(-np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))
    cfg = ReinFlowConfig(horizon=2, hidden=(16, 16, 16), time_dim=8, noise_hidden=(8, 8),
                         critic_hidden=(16, 16), update_epochs=1, repeat_samples=1,
                         num_minibatches=1, target_kl=None)  # fmt: skip
    agent = ReinFlow(obs_space, act_space, cfg)
    for part, state in golden["weights"].items():
        getattr(agent, part).load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    rollout = {k: torch.tensor(v) for k, v in golden["rollout"].items()}
    batch = RolloutBatch(**rollout, extras={"chain": torch.tensor(golden["chain"])})
    log_prob = rollout["log_prob"]
    assert ((log_prob < -1) | (log_prob > 1)).sum() == 4
    metrics = agent.update(batch)
    for key, value in golden["loss"].items():
        assert metrics[key] == pytest.approx(value, abs=1e-6), key


# -- ResiP ---------------------------------------------------------------------------
def test_chunk_queue_runs_chunks_open_loop_and_restarts_per_env():
    calls = []

    def make_chunk(obs):
        calls.append(obs[:, 0].tolist())
        return obs[:, :1, None].repeat(1, 3, 2) * 10 + torch.arange(3.0).view(1, 3, 1)

    queue = ChunkQueue()
    obs = torch.tensor([[1.0], [2.0]])
    got = [queue.next(obs, make_chunk)[:, 0].tolist() for _ in range(2)]
    assert got == [[10.0, 20.0], [11.0, 21.0]] and calls == [[1.0, 2.0]]
    queue.restart(np.array([False, True]))
    got = queue.next(torch.tensor([[1.0], [5.0]]), make_chunk)[:, 0].tolist()
    assert got == [12.0, 50.0] and calls[-1] == [5.0]
    got = queue.next(torch.tensor([[7.0], [5.0]]), make_chunk)[:, 0].tolist()
    assert got == [70.0, 51.0]


def test_residual_starts_exactly_at_the_base_policy():
    torch.manual_seed(0)
    agent = small_resip()
    obs = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32)
    norm = agent.obs_normalizer(torch.as_tensor(obs))
    base = agent.base_chunk(norm)  # the open-loop chunk, deterministic
    policy = agent.eval_policy()
    policy.episodes_started(np.ones(3, bool))
    for h in range(H):  # the whole chunk: base actions, in env units
        expected = agent.box.to_env(base[:, h].clamp(-1, 1)).numpy()
        np.testing.assert_allclose(policy(obs), expected, rtol=1e-6)
    # exploring adds only the residual's noise, scaled by 0.1, around the base action
    agent.episodes_started(np.ones(3, bool))
    torch.manual_seed(1)
    action, _, _, channels = agent.explore(torch.as_tensor(obs))
    torch.testing.assert_close(channels["base_action"], base[:, 0])
    unit = (base[:, 0] + 0.1 * channels["residual"]).clamp(-1, 1)
    torch.testing.assert_close(action, agent.box.to_env(unit))
    assert torch.count_nonzero(agent.residual_mean(norm, base[:, 0])) == 0


# -- the contract every fine-tuner meets ---------------------------------------------
@pytest.mark.parametrize("name", list(FINETUNERS))
def test_finetuner_contract(name):
    torch.manual_seed(0)
    agent = FINETUNERS[name]()
    obs = np.random.default_rng(0).normal(size=(7, 5)).astype(np.float32) * 10
    chunk_shape = (3,) if name == "resip" else (H, 3)
    single, batch = agent.act(obs[0]), agent.act(obs)
    assert single.shape == chunk_shape and batch.shape == (7, *chunk_shape)
    low, high = (ACT.low, ACT.high) if name == "resip" else (CHUNK_ACT.low, CHUNK_ACT.high)
    assert (batch >= low - 1e-6).all() and (batch <= high + 1e-6).all()
    torch.manual_seed(1)
    first = agent.act(obs, True)
    torch.manual_seed(1)
    np.testing.assert_array_equal(agent.act(obs, True), first)  # deterministic given the seed
    trained = [p for p in (agent.residual if name == "resip" else agent.actor).parameters()]
    before = [p.clone() for p in trained]
    metrics = agent.update(rollout_of(agent), progress=0.5)
    assert metrics and all(np.isfinite(v) for v in metrics.values()), metrics
    assert any(not torch.equal(a, b) for a, b in zip(before, trained))
    # a state_dict round trip gives the same future
    clone = FINETUNERS[name]()
    clone.load_state_dict(agent.state_dict())
    data = rollout_of(agent, seed=3)
    torch.manual_seed(5)
    m1 = agent.update(data, progress=0.6)
    torch.manual_seed(5)
    m2 = clone.update(data, progress=0.6)
    assert m1 == m2


def test_head_settings_come_from_the_declared_config_fields():
    """Each config's head fields, by their dataclass fields: ResiP's ``denoiser`` /
    ``activation`` default to None (the pre-trained run's, else the earlier layout), a
    flow head has no DDPM schedule, and a config lacking a head field is refused by name."""
    from dataclasses import dataclass

    from rlcore.generative import head_settings

    resip = head_settings("ddpm", ResiPConfig(**SMALL))
    assert (resip.horizon, resip.hidden, resip.time_dim) == (H, (32, 32, 32), 8)
    assert (resip.denoiser, resip.activation, resip.schedule) == ("rlcore_v1", "mish", "cosine")
    bc = head_settings("ddpm", DiffusionBCConfig(**SMALL, denoiser="dppo", activation="mish"))
    from_bc = head_settings("ddpm", ResiPConfig(**SMALL), bc)
    assert (from_bc.denoiser, from_bc.activation) == ("dppo", "mish")  # the base is the BC run's
    # ResiP's residual / critic activation is its own option, never the head's
    other = head_settings("ddpm", ResiPConfig(**SMALL, residual_activation="tanh"), bc)
    assert other.activation == "mish"
    declared = head_settings("ddpm", ResiPConfig(**SMALL, activation="relu", denoiser="dppo"))
    assert (declared.denoiser, declared.activation) == ("dppo", "relu")
    flow = head_settings("flow", ReinFlowConfig(horizon=H, hidden=[32, 32, 32]))
    assert (flow.schedule, flow.clip_x0, flow.denoising_steps) == (None, None, 4)
    assert flow.hidden == (32, 32, 32)  # a config's list: the tuple a checkpoint compares

    @dataclass
    class NoHorizon:
        hidden: tuple[int, ...] = (8,)

    with pytest.raises(TypeError, match="NoHorizon lacks the head setting 'horizon'"):
        head_settings("flow", NoHorizon())


def test_finetuners_load_the_pretrained_ema_weights_and_refuse_mismatches(tmp_path):
    from rlcore.policies import load_agent

    torch.manual_seed(0)
    bc_cfg = DiffusionBCConfig(horizon=H, hidden=(32, 32, 32), time_dim=8, denoising_steps=5)
    bc = GenerativeBC(OBS, ACT, bc_cfg)
    bc.obs_normalizer.fit(torch.randn(100, 5) * 3 + 1)
    torch.nn.init.normal_(bc.ema.shadow.net.out[-1].weight)
    run = tmp_path / "bc"
    path = _save_bc(run, bc, "diffusion_bc")
    assert isinstance(load_agent(path), GenerativeBC)
    agent = small_dppo(pretrained=str(path), noise_clip=10.0)  # BC's evaluation clip
    for k, v in bc.ema.shadow.state_dict().items():
        assert torch.equal(agent.actor.state_dict()[k], v)
        assert torch.equal(agent.base.state_dict()[k], v)
    assert torch.equal(agent.obs_normalizer.mean, bc.obs_normalizer.mean)
    # the evaluation policy is the BC policy's (same sampler, same draws)
    obs = np.random.default_rng(1).normal(size=(4, 5)).astype(np.float32)
    torch.manual_seed(2)
    finetuner = agent.act(obs, True)
    torch.manual_seed(2)
    np.testing.assert_allclose(finetuner, bc.act(obs, True), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"denoising_steps=20 \(pre-trained: 5\)"):
        DPPO(OBS, CHUNK_ACT, DPPOConfig(**SMALL, pretrained=str(path)))
    with pytest.raises(ValueError, match=r"obs_history=2 \(pre-trained: 1\)"):
        small_dppo(pretrained=str(path), obs_history=2)
    with pytest.raises(ValueError, match="fine-tunes a 'flow' policy"):
        small_reinflow(pretrained=str(path))


def _save_bc(run, bc: GenerativeBC, algo: str):
    """An agent checkpoint of ``bc`` as rlcore.train writes it (the parts load_agent reads)."""
    from dataclasses import asdict

    from rlcore.checkpoint import FORMAT_VERSION
    from rlcore.spaces import describe_action_space

    state = {
        "format": FORMAT_VERSION,
        "algo": algo,
        "config": {"algo": {**asdict(bc.config), "name": algo}},
        "spaces": {"obs_shape": [5], **describe_action_space(ACT)},
        "agent": bc.state_dict(),
    }
    return save_checkpoint(state, run / "checkpoints" / "latest.pt")


# -- learning: behaviour cloning of a scripted expert ------------------------------
def pendulum_expert(obs: np.ndarray) -> np.ndarray:
    """A scripted linear controller for InvertedPendulum-v5 (return 1000 from every
    start): push the cart towards the side the pole falls to."""
    return np.clip([5.0 * obs[1] + 0.5 * obs[2] + 1.0 * obs[3]], -3.0, 3.0)


@pytest.fixture(scope="module")
def expert_dataset(tmp_path_factory):
    import os

    from rlcore.offline.recording import rollout, write_dataset

    root = tmp_path_factory.mktemp("expert")
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root / "minari")
    env = gym.make("InvertedPendulum-v5", max_episode_steps=200)
    episodes = rollout(env, pendulum_expert, steps=3000, seed=0, noise=0.1)
    dataset_id = "local/invertedpendulum/scripted-v0"
    write_dataset(dataset_id, episodes, env, "scripted", "scripted PD expert, noise 0.1")
    yield dataset_id
    if old is None:
        os.environ.pop("MINARI_DATASETS_PATH", None)
    else:
        os.environ["MINARI_DATASETS_PATH"] = old


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["diffusion_bc", "flow_bc"])
def test_bc_of_a_scripted_expert_reaches_its_return(algo, expert_dataset, tmp_path):
    from rlcore.train import train
    from tests.conftest import FAST, make_config

    steps = ["algo.denoising_steps=10"] if algo == "diffusion_bc" else []
    # 1500 steps are ~60 epochs of this dataset: DPPO's EMA schedule (from epoch 10, once
    # every 5 epochs) would leave the EMA near the epoch-10 weights (measured: return 39);
    # a short run averages every step
    ema = ["algo.ema_start_epoch=0", "algo.ema_every=1", "algo.ema_unit=step"]
    cfg = make_config(f"algo={algo}", "env=InvertedPendulum", *FAST, f"dataset={expert_dataset}",
                      "env.max_episode_steps=200", "algo.hidden=[128,128,128]", *steps, *ema,
                      "total_steps=1500", "eval_every=1500", "eval_episodes=5")  # fmt: skip
    result = train(cfg, tmp_path)
    # the expert scores 200 (every step alive); a random policy about 5
    assert result["eval/return"] >= 190, result


@pytest.mark.parametrize("name", list(FINETUNERS))
def test_a_rollout_leaving_a_one_row_remainder_trains_without_nan(name):
    # 17 rows in minibatches of 17 // 2 = 8 (8 + 8 + 1): the lone row would have no
    # standard deviation; the shared minibatch iterator folds it into the last batch
    torch.manual_seed(0)
    agent = FINETUNERS[name]() if name != "dppo" else small_dppo(finetune_steps=1)
    if name == "dppo":
        agent.config.minibatch_size = 8  # 17 rows x 1 fine-tuned step = 17 pairs
    metrics = agent.update(rollout_of(agent, steps=17, envs=1), progress=0.1)
    assert all(np.isfinite(v) for v in metrics.values()), metrics
