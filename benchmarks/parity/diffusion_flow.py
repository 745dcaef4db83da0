"""Parity of rlcore's diffusion / flow pieces with the reference code of DPPO and ReinFlow.

The reference repositories are NOT part of this one: fetch them and point this script at
their source trees (the modules used here need only torch and numpy):

    DPPO_SRC=<irom-lab/dppo @ 7b10df6> REINFLOW_SRC=<ReinFlow/ReinFlow @ aed2819> \\
        OMP_NUM_THREADS=1 python -m rlcore.benchmarks.parity.diffusion_flow

(this session: /work/side/diffusion/src/{irom-lab+dppo,ReinFlow+ReinFlow}, run with the
project's venv). Prints one line per comparison: what, max |difference|. With
``--golden-dir tests/golden`` it also records the reference's numbers on small fixed
cases (weights included) for ``tests/test_finetune.py``'s golden tests. ReinFlow's
modules import ``einops`` (``pip install --target <dir> einops``, then ``PYTHONPATH=<dir>``).

1. Learning-rate schedules: the references' ``CosineAnnealingWarmupRestarts`` stepped
   through a run (ReinFlow's Hopper actor / critic, DPPO's pre-training) against
   ``rlcore.generative.warmup_cosine_lr``.
2. ReinFlow's noise bound schedule (``get_scheduler("cosine")``) against
   ``ReinFlow.sigma_max_at``.
3. The denoiser trunk: DPPO's ``ResidualMLP([in, 512, 512, 512, out], ReLU)`` with its
   weights copied into ``DenoisingMLP(layout="dppo")``.
5. ReinFlow (``PPOFlow`` with our velocity and noise networks behind its
   ``actor_ft.forward`` interface, so that only the chain / loss maths is compared):
   ``get_actions`` (noise clip 3, mean clip, final clamp, normalised log-likelihood;
   exploring and ``eval_mode``, its step index mapped to our grid t_k = k / K) against
   ``ReinFlow._sample``; ``get_logprobs`` (log-likelihood, entropy rate) against
   ``chain_log_prob``; ``loss`` (log-prob clamp, ratio, entropy, value loss, approx. KL) on
   a rollout whose stored log-likelihoods are perturbed beyond the clamp, against the
   first minibatch's metrics of ``ReinFlow.update`` (one minibatch, one epoch).
4. DDPM sampling with the same epsilon network and the same global-RNG draws:
   DPPO's ``DiffusionModel.forward`` (the pre-trained model's evaluation sampler) against
   ``DDPMHead.sample(evaluation=True, noise_clip=10)``; DPPO's ``VPGDiffusion.forward``
   (fine-tuning: exploring with std >= 0.1 and noise clip 3, and ``deterministic=True``)
   against ``DPPO._denoise``, and its ``get_logprobs`` (clamped to [-5, 2], averaged over
   the chunk) against the stored step scores.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn


def _import_reference(env: str) -> None:
    root = os.environ.get(env)
    if not root or not Path(root).is_dir():
        raise SystemExit(f"set {env} to the reference's source tree (see this file's docstring)")
    sys.path.insert(0, root)


def lr_schedules(dppo_scheduler: type) -> list[tuple[str, float]]:
    from rlcore.generative import warmup_cosine_lr

    out = []
    cases = [("ReinFlow actor lr, 1000 iterations", 4.5e-5, 2e-5, 100, 10, 1000),
             ("ReinFlow critic lr, 1000 iterations", 6.5e-4, 3e-4, 100, 10, 1000),
             ("DPPO pre-training lr, 3000 epochs", 1e-3, 1e-4, 3000, 1, 3000)]  # fmt: skip
    for name, high, low, cycle, warmup, steps in cases:
        opt = torch.optim.AdamW([nn.Parameter(torch.zeros(1))], lr=high)
        sched = dppo_scheduler(opt, first_cycle_steps=cycle, cycle_mult=1.0, max_lr=high,
                               min_lr=low, warmup_steps=warmup, gamma=1.0)  # fmt: skip
        diff = 0.0
        for i in range(steps):
            ours = warmup_cosine_lr(i, high, low, cycle, warmup)
            diff = max(diff, abs(opt.param_groups[0]["lr"] - ours))
            sched.step()
        out.append((name, diff))
    return out


def noise_schedule() -> tuple[str, float]:
    from util.scheduler_simple import get_scheduler

    from rlcore.algos.reinflow import ReinFlowConfig

    cfg, n = ReinFlowConfig(), 1000
    decayed = cfg.sigma_min * (1 - cfg.noise_decay) + cfg.sigma_max * cfg.noise_decay
    ref = get_scheduler(schedule_type="cosine", max=cfg.sigma_max, hold_steps=n * cfg.noise_hold,
                        anneal_steps=n * (1 - cfg.noise_hold), min=decayed)  # fmt: skip
    agent = _reinflow_stub(cfg)
    diff = max(abs(float(ref(i)) - agent.sigma_max_at(i / n)) for i in range(n))
    return "ReinFlow sigma_max schedule, 1000 iterations", diff


def _reinflow_stub(cfg):  # noqa: ANN001, ANN202
    from rlcore.algos.reinflow import ReinFlow

    stub = ReinFlow.__new__(ReinFlow)
    stub.config = cfg
    return stub


def trunk() -> tuple[str, float]:
    from model.common.mlp import ResidualMLP

    from rlcore.generative import DenoisingMLP

    torch.manual_seed(0)
    obs_dim, horizon, act = 11, 4, 3
    ours = DenoisingMLP(obs_dim, horizon, act, (512, 512, 512), 16, "dppo", "relu")
    feat_dim = obs_dim + horizon * act + 16
    ref = ResidualMLP([feat_dim, 512, 512, 512, horizon * act], activation_type="ReLU")
    with torch.no_grad():
        pairs = [(ours.inp, ref.layers[0]), (ours.blocks[0][1], ref.layers[1].l1),
                 (ours.blocks[0][3], ref.layers[1].l2), (ours.out[0], ref.layers[2])]  # fmt: skip
        for mine, theirs in pairs:
            mine.weight.copy_(theirs.weight)
            mine.bias.copy_(theirs.bias)
        features = torch.randn(256, feat_dim)
        diff = (ours.trunk(features) - ref(features)).abs().max().item()
    return "DPPO ResidualMLP([in, 512, 512, 512, out], ReLU) vs DenoisingMLP('dppo')", diff


class _AsReference(nn.Module):
    """Our epsilon network called as the references call theirs: network(x, t, cond)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x, time, cond, **kwargs):  # noqa: ANN001, ANN003, ANN201
        return self.net(cond["state"].flatten(1), x, time.view(-1))


def ddpm_samplers() -> list[tuple[str, float]]:
    import gymnasium as gym
    from model.diffusion.diffusion import DiffusionModel
    from model.diffusion.diffusion_vpg import VPGDiffusion

    from rlcore.algos.dppo import DPPO, DPPOConfig
    from rlcore.generative import DDPMHead

    out = []
    torch.manual_seed(0)
    obs_dim, horizon, act, steps, batch = 11, 4, 3, 20, 64
    head = DDPMHead(obs_dim, act, horizon, steps, hidden=(64, 64, 64), time_dim=16,
                    layout="dppo", activation="relu")  # fmt: skip
    ref = DiffusionModel(network=_AsReference(head.net), horizon_steps=horizon, obs_dim=obs_dim,
                         action_dim=act, device="cpu", denoising_steps=steps,
                         denoised_clip_value=1.0, randn_clip_value=10)  # fmt: skip
    obs = torch.randn(batch, obs_dim)
    torch.manual_seed(1)
    theirs = ref(cond={"state": obs.unsqueeze(1)}, deterministic=True).trajectories
    torch.manual_seed(1)
    mine = head.sample(obs, noise_clip=10.0, evaluation=True)
    diff = (theirs.clamp(-1, 1) - mine).abs().max().item()
    out.append(("DPPO DiffusionModel.forward (evaluation) vs DDPMHead.sample(evaluation)", diff))

    space_obs = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
    space_act = gym.spaces.Box(
        -np.ones((horizon, act), np.float32), np.ones((horizon, act), np.float32)
    )
    cfg = DPPOConfig(hidden=(64, 64, 64), denoising_steps=steps, finetune_steps=10)
    agent = DPPO(space_obs, space_act, cfg)
    agent.base.load_state_dict(head.state_dict())
    agent.actor.load_state_dict(head.state_dict())
    vpg = VPGDiffusion(actor=_AsReference(agent.base.net), critic=nn.Identity(),
                       ft_denoising_steps=10, horizon_steps=horizon, obs_dim=obs_dim,
                       action_dim=act, device="cpu", denoising_steps=steps,
                       denoised_clip_value=1.0, randn_clip_value=3,
                       min_sampling_denoising_std=0.1, min_logprob_denoising_std=0.1)  # fmt: skip
    cond = {"state": obs.unsqueeze(1)}
    for deterministic in (False, True):
        torch.manual_seed(2)
        sample = vpg(cond=cond, deterministic=deterministic, return_chain=True)
        torch.manual_seed(2)
        unit, chain, log_prob = agent._denoise(obs, evaluation=deterministic)
        name = "evaluation" if deterministic else "exploring"
        out.append((f"DPPO VPGDiffusion.forward ({name}) vs DPPO._denoise: chains",
                    (sample.chains - chain).abs().max().item()))  # fmt: skip
    torch.manual_seed(2)
    sample = vpg(cond=cond, deterministic=False, return_chain=True)
    torch.manual_seed(2)
    _, _, log_prob = agent._denoise(obs)
    ref_lp = vpg.get_logprobs(cond, sample.chains).clamp(-5, 2).mean(dim=(-1, -2))
    out.append(("DPPO get_logprobs (clamped, chunk mean) vs stored step scores",
                (ref_lp.view(batch, 10) - log_prob).abs().max().item()))  # fmt: skip
    return out


def golden(path: Path) -> None:
    """The reference's samples and scores of a small fixed DPPO case (weights, draws)."""
    import json

    import gymnasium as gym
    from model.diffusion.diffusion import DiffusionModel
    from model.diffusion.diffusion_vpg import VPGDiffusion

    from rlcore.algos.dppo import DPPO, DPPOConfig

    obs_dim, horizon, act, steps, tuned, batch = 3, 2, 2, 5, 3, 48
    torch.manual_seed(0)
    cfg = DPPOConfig(horizon=horizon, hidden=(16, 16, 16), time_dim=8, denoising_steps=steps,
                     finetune_steps=tuned)  # fmt: skip
    space_obs = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
    space_act = gym.spaces.Box(
        -np.ones((horizon, act), np.float32), np.ones((horizon, act), np.float32)
    )
    agent = DPPO(space_obs, space_act, cfg)
    obs = torch.randn(batch, obs_dim)
    kw = {"horizon_steps": horizon, "obs_dim": obs_dim, "action_dim": act, "device": "cpu",
          "denoising_steps": steps, "denoised_clip_value": 1.0}  # fmt: skip
    cond = {"state": obs.unsqueeze(1)}
    torch.manual_seed(1)
    evaluation = DiffusionModel(network=_AsReference(agent.base.net), randn_clip_value=10, **kw)(
        cond=cond, deterministic=True
    ).trajectories
    vpg = VPGDiffusion(actor=_AsReference(agent.base.net), critic=nn.Identity(),
                       ft_denoising_steps=tuned, randn_clip_value=3,
                       min_sampling_denoising_std=0.1, min_logprob_denoising_std=0.1, **kw)  # fmt: skip
    torch.manual_seed(2)
    chains = vpg(cond=cond, deterministic=False, return_chain=True).chains
    scores = vpg.get_logprobs(cond, chains).clamp(-5, 2).mean(dim=(-1, -2)).view(batch, tuned)
    torch.manual_seed(3)
    evaluation_chains = vpg(cond=cond, deterministic=True, return_chain=True).chains
    record = {
        "source": "irom-lab/dppo @ 7b10df6: model/diffusion/diffusion.py DiffusionModel.forward"
        " (deterministic=True, randn_clip_value=10) and diffusion_vpg.py VPGDiffusion.forward"
        " (deterministic=False, randn_clip_value=3, min std 0.1) / get_logprobs, clamped to"
        " [-5, 2] and averaged over the chunk, and VPGDiffusion.forward(deterministic=True), on"
        " the weights below; draws: torch.manual_seed(1) / (2) / (3) before sampling",
        "command": "PYTHONPATH=<einops> DPPO_SRC=... REINFLOW_SRC=... python -m"
        " rlcore.benchmarks.parity.diffusion_flow --golden-dir tests/golden",
        "weights": {k: v.tolist() for k, v in agent.base.state_dict().items()},
        "obs": obs.tolist(),
        "evaluation_actions": evaluation.clamp(-1, 1).tolist(),
        "exploring_chains": chains.tolist(),
        "step_scores": scores.tolist(),
        "evaluation_chains": evaluation_chains.tolist(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record) + "\n")


class _FlowAsReference(nn.Module):
    """ReinFlow's ``NoisyFlowMLP.forward(x, t, cond, learn_noise, step) -> (v, sigma)`` over
    our velocity and noise networks, at our grid time t_step = step / K."""

    def __init__(self, agent) -> None:  # noqa: ANN001
        super().__init__()
        self.agent = agent

    def forward(self, action, time, cond, learn=False, step=0, **kw):  # noqa: ANN001, ANN003, ANN201
        agent, obs = self.agent, cond["state"].flatten(1)
        t = agent.actor.times()[step].expand(len(action))
        vel = agent.actor.velocity(obs, action, t)
        std = agent.noise(obs, action, t, agent.config.sigma_min, agent.sigma_max)
        return vel, std.flatten(1)


class _CriticAsReference(nn.Module):
    def __init__(self, critic: nn.Module) -> None:
        super().__init__()
        self.critic = critic

    def forward(self, cond):  # noqa: ANN001, ANN201
        return self.critic(cond["state"].flatten(1))


def reinflow_pieces(golden: Path | None = None) -> list[tuple[str, float]]:
    """The comparisons of item 5; with ``golden``, a small case (hidden 16, 32 rows) whose
    weights, rollout and the reference's loss terms are written there instead."""
    import gymnasium as gym
    from model.flow.ft_ppo.ppoflow import PPOFlow

    from rlcore.algos.reinflow import ReinFlow, ReinFlowConfig
    from rlcore.buffers import RolloutBuffer

    obs_dim, horizon, act, batch = (3, 2, 2, 32) if golden else (11, 4, 3, 256)
    torch.manual_seed(0)
    cfg = ReinFlowConfig(horizon=horizon, hidden=(16, 16, 16) if golden else (64, 64, 64),
                         time_dim=8 if golden else 16, noise_hidden=(8, 8) if golden else (64, 64),
                         critic_hidden=(16, 16) if golden else (256, 256, 256), update_epochs=1,
                         repeat_samples=1, num_minibatches=1, target_kl=None)  # fmt: skip
    space_obs = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
    space_act = gym.spaces.Box(
        -np.ones((horizon, act), np.float32), np.ones((horizon, act), np.float32)
    )
    agent = ReinFlow(space_obs, space_act, cfg)
    ref = PPOFlow.__new__(PPOFlow)
    nn.Module.__init__(ref)
    for name, value in {"device": "cpu", "inference_steps": cfg.denoising_steps,
                        "horizon_steps": horizon, "action_dim": act, "act_dim_total": horizon * act,
                        "act_min": -1.0, "act_max": 1.0, "randn_clip_value": 3.0,
                        "min_sampling_denoising_std": cfg.sigma_min, "logprob_min": -1.0,
                        "logprob_max": 1.0, "clip_ploss_coef": cfg.clip_coef, "clip_vloss_coef": None,
                        "denoised_clip_value": 1.0, "logprob_debug_sample": False,
                        "logprob_debug_recalculate": False}.items():  # fmt: skip
        setattr(ref, name, value)
    ref.actor_ft = _FlowAsReference(agent)
    ref.critic = _CriticAsReference(agent.critic)
    flags = {"normalize_denoising_horizon": True, "normalize_act_space_dimension": True,
             "clip_intermediate_actions": True, "account_for_initial_stochasticity": True}  # fmt: skip
    out = []
    obs = torch.randn(batch, obs_dim)
    cond = {"state": obs.unsqueeze(1)}
    for eval_mode in (False, True):
        torch.manual_seed(5)
        _, chain_ref, lp_ref = ref.get_actions(cond, eval_mode=eval_mode, save_chains=True, **flags)
        torch.manual_seed(5)
        _, chain, lp = agent._sample(obs, deterministic=eval_mode)
        name = "eval_mode" if eval_mode else "exploring"
        out.append((f"ReinFlow get_actions ({name}) vs ReinFlow._sample: chains",
                    (chain_ref - chain).abs().max().item()))  # fmt: skip
        out.append((f"ReinFlow get_actions ({name}) vs ReinFlow._sample: log-likelihoods",
                    (lp_ref - lp).abs().max().item()))  # fmt: skip
    torch.manual_seed(6)
    _, chain, _ = agent._sample(obs, deterministic=False)
    lp_ref, ent_ref, _ = ref.get_logprobs(cond, chain, get_entropy=True, verbose_entropy_stats=False,
                                          **{k: v for k, v in flags.items()})  # fmt: skip
    lp, ent = agent.chain_log_prob(obs, chain)
    out.append(("ReinFlow get_logprobs vs chain_log_prob: log-likelihoods",
                (lp_ref - lp).abs().max().item()))  # fmt: skip
    out.append(("ReinFlow get_logprobs vs chain_log_prob: entropy rate",
                abs(ent_ref.mean().item() - ent.item())))  # fmt: skip
    # the loss on one minibatch: stored log-likelihoods perturbed, some beyond [-1, 1]
    g = torch.Generator().manual_seed(7)
    buffer = RolloutBuffer(batch // 8, 8, (obs_dim,), (horizon, act))
    for _ in range(batch // 8):
        o = torch.randn(8, obs_dim, generator=g)
        action, log_prob, value, channels = agent.explore(o)
        log_prob = log_prob + 0.5 * torch.randn(8, generator=g)
        buffer.add(o, action, log_prob, torch.randn(8, generator=g), value, torch.zeros(8),
                   torch.zeros(8), torch.zeros(8), channels)  # fmt: skip
    data = buffer.compute(torch.zeros(8), 0.99, 0.95)
    norm = agent.obs_normalizer(data.obs)
    weights = {part: {k: v.tolist() for k, v in getattr(agent, part).state_dict().items()}
               for part in ("actor", "noise", "critic")}  # fmt: skip
    pg, ent_loss, v_loss, _, clipfrac, approx_kl, *_ = ref.loss(
        {"state": norm.unsqueeze(1)}, data.extras["chain"], data.returns, data.value,
        data.advantage, data.log_prob, verbose=False, **flags)  # fmt: skip
    if golden is not None:
        import json

        record = {
            "source": "ReinFlow/ReinFlow @ aed2819: model/flow/ft_ppo/ppoflow.py PPOFlow.loss"
            " (normalised log-likelihoods clamped to [-1, 1], clip 0.01, entropy rate, value"
            " loss) with rlcore's velocity / noise / critic networks (weights below) behind its"
            " actor_ft / critic interfaces",
            "command": "PYTHONPATH=<einops> DPPO_SRC=... REINFLOW_SRC=... python -m"
            " rlcore.benchmarks.parity.diffusion_flow --golden-dir tests/golden",
            "weights": weights,
            "rollout": {k: getattr(data, k).tolist()
                        for k in ("obs", "action", "log_prob", "value", "advantage", "returns")},
            "chain": data.extras["chain"].tolist(),
            "loss": {"policy_loss": pg.item(), "entropy": -ent_loss.item(),
                     "value_loss": v_loss.item(), "approx_kl": approx_kl,
                     "clip_fraction": clipfrac},
        }  # fmt: skip
        golden.write_text(json.dumps(record) + "\n")
        return []
    metrics = agent.update(data)
    outside = ((data.log_prob < -1) | (data.log_prob > 1)).float().mean().item()
    for name, theirs, ours in (("policy loss", pg.item(), metrics["policy_loss"]),
                               ("entropy", -ent_loss.item(), metrics["entropy"]),
                               ("value loss", v_loss.item(), metrics["value_loss"]),
                               ("approx. KL", approx_kl, metrics["approx_kl"]),
                               ("clip fraction", clipfrac, metrics["clip_fraction"])):  # fmt: skip
        out.append((f"ReinFlow loss vs update ({outside:.0%} stored beyond the clamp): {name}",
                    abs(theirs - ours)))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> list[tuple[str, float]]:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--golden-dir", type=Path, default=None,
                        help="write the golden cases (diffusion_{dppo,reinflow}.json) here")  # fmt: skip
    args = parser.parse_args(argv)
    _import_reference("DPPO_SRC")
    if args.golden_dir is not None:
        golden(args.golden_dir / "diffusion_dppo.json")
    from util.scheduler import CosineAnnealingWarmupRestarts

    rows = lr_schedules(CosineAnnealingWarmupRestarts)
    rows += ddpm_samplers()
    rows.append(trunk())
    sys.path.insert(0, os.environ.get("REINFLOW_SRC", ""))
    for name in [m for m in sys.modules if m == "util" or m.startswith("util.")]:
        del sys.modules[name]  # ReinFlow's own util package
    sys.path.remove(os.environ["DPPO_SRC"])
    _import_reference("REINFLOW_SRC")
    for name in [m for m in sys.modules if m == "model" or m.startswith("model.")]:
        del sys.modules[name]  # ReinFlow's own model package
    rows.append(noise_schedule())
    rows += reinflow_pieces()
    if args.golden_dir is not None:
        reinflow_pieces(args.golden_dir / "diffusion_reinflow.json")
    for name, diff in rows:
        print(f"{name}: max |diff| = {diff:.3g}")
    assert all(math.isfinite(d) for _, d in rows)
    return rows


if __name__ == "__main__":
    main()
