"""Mutation table: would a fast test catch a wrong update?

Each entry of ``MUTATIONS`` is one single-line change to the maths of an update (a sign,
a terminal mask, an expectile side, a clip, a discount, a target, a temperature loss,
Polyak, advantage normalisation, the importance ratio, a KL estimate...) or to the data
paths that feed it (the observation normaliser's statistics, ``next_obs`` at a truncation,
the dataset kept or dropped online, exploration-noise scales, returns-to-go). For each, the
working tree is copied to a temporary folder (tracked and untracked-not-ignored files,
uncommitted edits included), the mutation is applied there (the original text must occur
exactly once in its file, else the harness stops: update the entry), and the tests named
for it run in that copy. A mutation is *caught* when a test fails (the first failing test
is recorded), *survived* when they all pass. Before the mutations, the same tests run on
the unmutated copy: a test that fails there cannot count as catching anything.

Run from the repository root (CPU, single-threaded children):

    python benchmarks/mutations.py                     # every mutation, its own tests
    python benchmarks/mutations.py --only sac_alpha_loss_sign --only iql_value_expectile_side
    python benchmarks/mutations.py --tests-all         # the whole fast suite (-m "not slow")
    python benchmarks/mutations.py --tests-all --pytest-args "-n 4" --jobs 2  # a big machine
    python benchmarks/mutations.py --list              # the table of mutations only

Writes ``benchmarks/results/mutations.json`` (merged by name with an existing file, so a
run with ``--only`` updates its rows), the same table as ``mutations.md``, and prints it. After changing the code a
mutation's ``original`` may no longer be found: the harness says which, fix its text.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "mutations.json"
MATHS = "tests/test_update_maths.py"


@dataclass(frozen=True)
class Mutation:
    """One single-line change: ``original`` (exactly once in ``file``) -> ``replacement``;
    ``tests``: pytest arguments (files, node ids, ``-k`` expressions) that should catch it."""

    name: str
    file: str
    original: str
    replacement: str
    description: str
    tests: tuple[str, ...]


def _t(*names: str) -> tuple[str, ...]:
    """Node ids of tests/test_update_maths.py."""
    return tuple(f"{MATHS}::{n}" for n in names)


MUTATIONS: list[Mutation] = [
    # --- rlcore/losses.py ---------------------------------------------------------------
    Mutation(
        "expectile_side",
        "rlcore/losses.py",
        "weight = torch.where(diff < 0, 1.0 - expectile, expectile)",
        "weight = torch.where(diff > 0, 1.0 - expectile, expectile)",
        "expectile loss weights the wrong side",
        _t("test_expectile_loss_hand_computed"),
    ),
    Mutation(
        "target_clip_dropped",
        "rlcore/losses.py",
        "return target.clamp(bounds[0], bounds[1])",
        "return target",
        "the TD-target clip (HER's clip_return) has no effect",
        (
            "tests/test_o2o_agents.py::test_sac_target_clip_clamps_the_td_target",
            "tests/test_o2o_agents.py::test_td3_target_clip_clamps_the_td_target",
        ),
    ),
    Mutation(
        "max_target_backup_takes_min",
        "algos/sac.py",
        "next_v = next_v.view(samples, -1).max(0).values",
        "next_v = next_v.view(samples, -1).min(0).values",
        "max-target backup (WSRL antmaze) takes the worst sampled next action",
        ("tests/test_o2o_agents.py::test_max_target_backup_takes_the_best_of_the_sampled_next_actions",),
    ),
    Mutation(
        "sparse_rule_all_inverted",
        "offline/datasets.py",
        "failed = failed[~torch.isin(failed, succeeded)]",
        "failed = failed[torch.isin(failed, succeeded)]",
        "WSRL's sparse return-to-go marks the episodes that succeeded instead",
        (
            "tests/test_cql.py::test_sparse_failure_rules_by_hand",
            "tests/test_cql.py::test_wsrl_sparse_reward_returns_match_the_reference",
        ),
    ),
    Mutation(
        "wsrl_lagrange_exp_not_softplus",
        "algos/cql.py",
        "alpha_prime, weight = torch.nn.functional.softplus(log_alpha_prime), 1.0",
        "alpha_prime, weight = log_alpha_prime.exp(), 1.0",
        "WSRL's Lagrange multiplier read through exp instead of softplus",
        ("tests/test_cql.py::test_lagrange_forms_by_hand",),
    ),
    Mutation(
        "surrogate_ratio_inverted",
        "rlcore/losses.py",
        "ratio = log_ratio.exp()",
        "ratio = (-log_ratio).exp()",
        "importance ratio pi_old / pi instead of pi / pi_old",
        _t("test_clipped_surrogate_hand_computed"),
    ),
    Mutation(
        "surrogate_min_not_max",
        "rlcore/losses.py",
        "loss = torch.max(-advantage * ratio, -advantage * ratio.clamp(1 - clip, 1 + clip)).mean()",
        "loss = torch.min(-advantage * ratio, -advantage * ratio.clamp(1 - clip, 1 + clip)).mean()",
        "optimistic instead of pessimistic clipped objective",
        _t("test_clipped_surrogate_hand_computed"),
    ),
    Mutation(
        "surrogate_sign",
        "rlcore/losses.py",
        "loss = torch.max(-advantage * ratio, -advantage * ratio.clamp(1 - clip, 1 + clip)).mean()",
        "loss = torch.max(advantage * ratio, advantage * ratio.clamp(1 - clip, 1 + clip)).mean()",
        "surrogate ascends the negative advantage",
        _t("test_clipped_surrogate_hand_computed", "test_ppo_update_direction"),
    ),
    Mutation(
        "approx_kl_sign",
        "rlcore/losses.py",
        "approx_kl = ((ratio - 1) - log_ratio).mean()",
        "approx_kl = (log_ratio - (ratio - 1)).mean()",
        "approximate KL of the wrong sign (the early stop never fires)",
        _t("test_clipped_surrogate_hand_computed"),
    ),
    Mutation(
        "standardize_no_centering",
        "rlcore/losses.py",
        "return (x - x.mean()) / (x.std() + eps)",
        "return x / (x.std() + eps)",
        "advantage normalisation without centring",
        _t("test_standardize_hand_computed"),
    ),
    Mutation(
        "target_noise_unclipped",
        "rlcore/losses.py",
        "noise = (torch.randn_like(target_action) * noise_std).clamp(-noise_clip, noise_clip)",
        "noise = torch.randn_like(target_action) * noise_std",
        "TD3 target-policy noise not clipped",
        _t("test_smoothed_target_action_clips_the_noise", "test_td3_critic_target_hand_computed"),
    ),
    # --- rlcore/nets.py (Polyak) --------------------------------------------------------
    Mutation(
        "polyak_reversed",
        "rlcore/nets.py",
        "torch._foreach_lerp_(list(target.parameters()), list(source.parameters()), tau)",
        "torch._foreach_lerp_(list(target.parameters()), list(source.parameters()), 1 - tau)",
        "Polyak rate 1 - tau instead of tau",
        _t("test_polyak_update_hand_computed"),
    ),
    # --- rlcore/buffers.py (GAE) --------------------------------------------------------
    Mutation(
        "gae_terminal_bootstraps",
        "rlcore/buffers.py",
        "successor = successor * (1.0 - terminated[t])",
        "successor = successor",
        "GAE bootstraps through a termination",
        ("tests/test_buffers.py", MATHS + "::test_gae_hand_computed"),
    ),
    Mutation(
        "gae_truncation_no_bootstrap",
        "rlcore/buffers.py",
        "successor = torch.where(truncated[t] > 0, bootstrap_values[t], next_value)",
        "successor = torch.where(truncated[t] > 0, 0.0 * bootstrap_values[t], next_value)",
        "GAE drops the bootstrap value at a truncation",
        ("tests/test_buffers.py", MATHS + "::test_gae_hand_computed"),
    ),
    Mutation(
        "gae_lambda_dropped",
        "rlcore/buffers.py",
        "next_advantage = delta + gamma * gae_lambda * (1.0 - done[t]) * next_advantage",
        "next_advantage = delta + gamma * (1.0 - done[t]) * next_advantage",
        "GAE without lambda (Monte-Carlo advantages)",
        ("tests/test_buffers.py", MATHS + "::test_gae_hand_computed"),
    ),
    Mutation(
        "gae_crosses_episodes",
        "rlcore/buffers.py",
        "next_advantage = delta + gamma * gae_lambda * (1.0 - done[t]) * next_advantage",
        "next_advantage = delta + gamma * gae_lambda * next_advantage",
        "GAE recursion runs across episode boundaries",
        ("tests/test_buffers.py", MATHS + "::test_gae_hand_computed"),
    ),
    # --- algos/sac.py (also RLPD, WSRL online, SAC-Lagrangian) -------------------------
    Mutation(
        "sac_alpha_loss_sign",
        "algos/sac.py",
        '"alpha_loss": -(scale * (log_prob + self.target_entropy)).mean()',
        '"alpha_loss": (scale * (log_prob + self.target_entropy)).mean()',
        "temperature loss of the wrong sign (SAC, RLPD, WSRL)",
        _t("test_sac_temperature_moves_toward_the_target_entropy"),
    ),
    Mutation(
        "sac_critic_no_terminal_mask",
        "algos/sac.py",
        "target_q = clip_target(reward + cfg.gamma * (1.0 - terminated) * next_v,",
        "target_q = clip_target(reward + cfg.gamma * next_v,",
        "SAC critic bootstraps terminal rows",
        _t("test_sac_terminal_rows_target_the_reward"),
    ),
    Mutation(
        "sac_backup_entropy_sign",
        "algos/sac.py",
        "next_v = next_v - alpha * next_log_prob",
        "next_v = next_v + alpha * next_log_prob",
        "soft value adds log pi instead of subtracting it",
        _t("test_sac_soft_target_hand_computed"),
    ),
    Mutation(
        "sac_actor_q_sign",
        "algos/sac.py",
        "loss = alpha * log_prob - q",
        "loss = alpha * log_prob + q",
        "SAC actor minimises Q",
        _t("test_sac_actor_loss_hand_computed"),
    ),
    Mutation(
        "rlpd_target_entropy_sign",
        "algos/rlpd.py",
        "self.target_entropy = -0.5 * float(self.plumbing.action_dim)",
        "self.target_entropy = 0.5 * float(self.plumbing.action_dim)",
        "RLPD's target entropy +dim(A)/2 instead of -dim(A)/2",
        _t("test_rlpd_default_target_entropy_is_minus_half_the_action_dim"),
    ),
    # --- rlcore/td3_step.py, algos/td3.py -------------------------------------------------
    Mutation(
        "td3_noise_clip_ignored",
        "algos/td3.py",
        "            cfg.policy_noise, cfg.noise_clip,\n",
        "            cfg.policy_noise, float('inf'),\n",
        "TD3's target-noise clip removed",
        _t("test_td3_critic_target_hand_computed"),
    ),
    Mutation(
        "td3_no_terminal_mask",
        "rlcore/td3_step.py",
        "return reward + gamma * (1.0 - terminated) * next_q",
        "return reward + gamma * next_q",
        "TD3's, TD3+BC's and ReBRAC's critics bootstrap terminal rows",
        (
            *_t("test_td3_critic_target_hand_computed"),
            "tests/test_rebrac_awac.py",
            *_t("test_td3_bc_terminal_rows_target_the_reward"),
        ),
    ),
    Mutation(
        "td3_max_not_min",
        "rlcore/td3_step.py",
        "next_q = target_critic(next_obs, next_action).min(0).values",
        "next_q = target_critic(next_obs, next_action).max(0).values",
        "TD3 target over the max of the twin critics",
        _t("test_td3_critic_target_hand_computed"),
    ),
    # --- algos/iql.py -------------------------------------------------------------------
    Mutation(
        "iql_value_expectile_side",
        "algos/iql.py",
        "return expectile_loss(advantage, self.config.expectile), advantage, next_v",
        "return expectile_loss(-advantage, self.config.expectile), advantage, next_v",
        "IQL's value fitted to the other expectile",
        _t("test_iql_losses_hand_computed"),
    ),
    Mutation(
        "iql_weight_sign",
        "algos/iql.py",
        "weight = torch.exp(cfg.beta * advantage.detach()).clamp(max=cfg.max_weight)",
        "weight = torch.exp(-cfg.beta * advantage.detach()).clamp(max=cfg.max_weight)",
        "IQL's advantage weights favour the worse actions",
        _t("test_iql_losses_hand_computed"),
    ),
    Mutation(
        "iql_no_terminal_mask",
        "algos/iql.py",
        "q_target = reward + self.config.gamma * (1.0 - terminated) * next_v",
        "q_target = reward + self.config.gamma * next_v",
        "IQL's Q bootstraps terminal rows",
        _t("test_iql_losses_hand_computed"),
    ),
    # --- algos/cql.py -------------------------------------------------------------------
    Mutation(
        "cql_alpha_loss_sign",
        "algos/cql.py",
        "alpha_loss = -(log_alpha * (log_prob.detach() + self.target_entropy)).mean()",
        "alpha_loss = (log_alpha * (log_prob.detach() + self.target_entropy)).mean()",
        "CQL's temperature loss of the wrong sign",
        ("tests/test_cql.py", MATHS + "::test_cql_temperature_moves_toward_the_target_entropy"),
    ),
    Mutation(
        "cql_penalty_sign",
        "algos/cql.py",
        'losses = {"critic_loss": td_loss + penalty,',
        'losses = {"critic_loss": td_loss - penalty,',
        "CQL's conservative penalty raises out-of-distribution Q",
        ("tests/test_cql.py",),
    ),
    # --- algos/awac.py, td3_bc.py, rebrac.py, dqn.py -------------------------------------
    Mutation(
        "awac_weight_sign",
        "algos/awac.py",
        "weight = torch.exp(advantage / cfg.awac_lambda).clamp(max=cfg.exp_adv_max)",
        "weight = torch.exp(-advantage / cfg.awac_lambda).clamp(max=cfg.exp_adv_max)",
        "AWAC's advantage weights of the wrong sign",
        ("tests/test_rebrac_awac.py",),
    ),
    Mutation(
        "dqn_no_terminal_mask",
        "algos/dqn.py",
        "return reward + discount * (1.0 - terminated) * next_value",
        "return reward + discount * next_value",
        "DQN's target bootstraps terminal rows",
        ("tests/test_discrete.py -k dqn",),
    ),
    # --- pixels: rlcore/frames.py, envs/atari.py, the shared encoder ----------------------
    Mutation(
        "frames_next_obs_off_by_one",
        "rlcore/frames.py",
        "newest = counters.to(self.device) + 1  # next_obs's newest frame",
        "newest = counters.to(self.device)  # next_obs's newest frame",
        "the frame store rebuilds next_obs one frame early (obs's stack)",
        ("tests/test_frames.py",),
    ),
    Mutation(
        "atari_lost_life_as_reset",
        "envs/atari.py",
        "lives_down = lives < self.lives  # a lost life (a reset brings the lives back up)",
        "lives_down = lives < 0  # a lost life (a reset brings the lives back up)",
        "a lost life taken for a reset: ale-py's stale final_obs stored as next_obs",
        ("tests/test_atari.py",),
    ),
    Mutation(
        "ppo_value_loss_skips_encoder",
        "algos/ppo.py",
        "        new_value = self.critic(features).squeeze(-1)",
        "        new_value = self.critic(features.detach()).squeeze(-1)",
        "PPO's value loss stops training the shared image encoder",
        ("tests/test_parity_online.py -k ppo_atari",),
    ),
    # --- algos/drqv2.py, n-step returns (rlcore/buffers.py) -----------------------------
    Mutation(
        "drqv2_target_noise_unclipped",
        "algos/drqv2.py",
        "next_action = self.to_env(noisy_action(self.actor(next_features), std, cfg.std_clip))",
        "next_action = self.to_env(noisy_action(self.actor(next_features), std, None))",
        "DrQ-v2's target action takes unclipped noise",
        ("tests/test_drqv2.py",),
    ),
    Mutation(
        "drqv2_no_terminal_mask",
        "algos/drqv2.py",
        "target = batch.reward + discount * (1.0 - batch.terminated) * next_q",
        "target = batch.reward + discount * next_q",
        "DrQ-v2's target bootstraps terminal rows",
        ("tests/test_drqv2.py",),
    ),
    Mutation(
        "nstep_discount_not_compounded",
        "rlcore/buffers.py",
        "discount = torch.where(going, discount * self.gamma, discount)",
        "discount = torch.where(going, discount, discount)",
        "n-step returns discount every later reward by gamma only",
        ("tests/test_nstep.py",),
    ),
    Mutation(
        "nstep_window_crosses_episodes",
        "rlcore/buffers.py",
        "going = going & buffer.has_successor(last)",
        "going = going & (last >= 0)",
        "n-step windows run on into the env's next episode",
        ("tests/test_nstep.py",),
    ),
    Mutation(
        "sac_encoder_not_trained",
        "algos/sac.py",
        "critic_params += [*self.encoder.parameters()]",
        "critic_params += []",
        "SAC's image encoder is left out of the critic's optimiser (never trained)",
        ("tests/test_pixel_sac.py",),
    ),
    # --- algos/ppo.py -------------------------------------------------------------------
    Mutation(
        "ppo_entropy_bonus_sign",
        "algos/ppo.py",
        "loss = policy_loss - cfg.ent_coef * entropy + cfg.vf_coef * value_loss",
        "loss = policy_loss + cfg.ent_coef * entropy + cfg.vf_coef * value_loss",
        "PPO's entropy bonus becomes a penalty",
        _t("test_ppo_entropy_bonus_raises_the_std"),
    ),
    Mutation(
        "ppo_old_log_prob_sign",
        "algos/ppo.py",
        "log_prob - old_log_prob, advantage, cfg.clip_coef",
        "old_log_prob - log_prob, advantage, cfg.clip_coef",
        "PPO's importance ratio inverted",
        _t("test_ppo_update_direction"),
    ),
    # --- algos/dppo.py ------------------------------------------------------------------
    Mutation(
        "dppo_log_prob_clamp_removed",
        "algos/dppo.py",
        "return gaussian_log_density(x, mean, std).clamp(-5.0, 2.0).flatten(1).mean(-1)",
        "return gaussian_log_density(x, mean, std).flatten(1).mean(-1)",
        "DPPO's [-5, 2] log-density clamp removed",
        _t("test_dppo_step_log_prob_clamps_each_dim"),
    ),
    Mutation(
        "dppo_denoise_discount_order",
        "algos/dppo.py",
        "weight = cfg.denoise_discount ** torch.arange(tuned - 1, -1, -1, device=self.device)",
        "weight = cfg.denoise_discount ** torch.arange(tuned, device=self.device)",
        "DPPO's denoising discount weights the first step most",
        _t("test_dppo_update_hand_computed"),
    ),
    Mutation(
        "dppo_advantage_sign",
        "algos/dppo.py",
        "advantage = standardize(batch.advantage[row]) * weight[k]",
        "advantage = -standardize(batch.advantage[row]) * weight[k]",
        "DPPO ascends negative advantages",
        _t("test_dppo_update_direction", "test_dppo_update_hand_computed"),
    ),
    # --- algos/reinflow.py --------------------------------------------------------------
    Mutation(
        "reinflow_entropy_sign",
        "algos/reinflow.py",
        "loss = policy_loss - cfg.ent_coef * entropy + cfg.vf_coef * value_loss",
        "loss = policy_loss + cfg.ent_coef * entropy + cfg.vf_coef * value_loss",
        "ReinFlow's entropy bonus becomes a penalty",
        _t("test_reinflow_entropy_bonus_raises_the_noise"),
    ),
    Mutation(
        "reinflow_ratio_inverted",
        "algos/reinflow.py",
        "new - old, standardize(batch.advantage[idx]), cfg.clip_coef",
        "old - new, standardize(batch.advantage[idx]), cfg.clip_coef",
        "ReinFlow's importance ratio inverted",
        _t("test_reinflow_update_direction"),
    ),
    Mutation(
        "reinflow_euler_step_sign",
        "algos/reinflow.py",
        "mean = x + self.actor.velocity(obs, x, t) / self.config.denoising_steps",
        "mean = x - self.actor.velocity(obs, x, t) / self.config.denoising_steps",
        "ReinFlow's transition mean steps against the velocity",
        _t("test_reinflow_chain_log_prob_hand_computed"),
    ),
    # --- rlcore/generative.py -----------------------------------------------------------
    Mutation(
        "flow_target_reversed",
        "rlcore/generative.py",
        "return F.mse_loss(self.velocity(obs, xt, t), actions - x0)",
        "return F.mse_loss(self.velocity(obs, xt, t), x0 - actions)",
        "flow matching regresses the reversed velocity",
        _t("test_flow_loss_hand_computed"),
    ),
    Mutation(
        "ddpm_posterior_mean_coef",
        "rlcore/generative.py",
        "mean = self.coef_x0[t].view(per_row) * x0 + self.coef_xt[t].view(per_row) * x",
        "mean = self.coef_xt[t].view(per_row) * x0 + self.coef_x0[t].view(per_row) * x",
        "DDPM posterior mean with its coefficients swapped",
        ("tests/test_generative.py",),
    ),
    Mutation(
        "gaussian_log_density_sign",
        "rlcore/generative.py",
        "return -((x - mean).pow(2)) / (2 * std.pow(2)) - std.log() - 0.5 * math.log(2 * math.pi)",
        "return -((x - mean).pow(2)) / (2 * std.pow(2)) + std.log() - 0.5 * math.log(2 * math.pi)",
        "Gaussian log-density with +log std",
        ("tests/test_generative.py",),
    ),
    # --- algos/safe ---------------------------------------------------------------------
    Mutation(
        "sac_lag_cost_term_sign",
        "algos/safe/sac_lag.py",
        "return (sac_loss + lam * self.cost_critic(obs, action)[0]) / (1.0 + lam)",
        "return (sac_loss - lam * self.cost_critic(obs, action)[0]) / (1.0 + lam)",
        "SAC-Lagrangian's actor seeks cost",
        _t("test_sac_lag_actor_objective_hand_computed"),
    ),
    Mutation(
        "sac_lag_cost_no_terminal_mask",
        "algos/safe/sac_lag.py",
        "target = batch.cost + cfg.gamma * (1.0 - batch.terminated) * next_q",
        "target = batch.cost + cfg.gamma * next_q",
        "SAC-Lagrangian's cost critic bootstraps terminal rows",
        _t("test_sac_lag_cost_critic_terminal_rows"),
    ),
    Mutation(
        "fisor_cost_expectile_reversed",
        "algos/safe/fisor.py",
        "self.cost_value(obs_c).squeeze(-1) - q_h[c], cfg.cost_expectile",
        "q_h[c] - self.cost_value(obs_c).squeeze(-1), cfg.cost_expectile",
        "FISOR's cost value fitted to the other expectile",
        _t("test_fisor_value_losses_hand_computed"),
    ),
    Mutation(
        "fisor_reward_expectile_reversed",
        "algos/safe/fisor.py",
        "q[c] - self.value(obs_c).squeeze(-1), cfg.reward_expectile",
        "self.value(obs_c).squeeze(-1) - q[c], cfg.reward_expectile",
        "FISOR's reward value fitted to the other expectile",
        _t("test_fisor_value_losses_hand_computed"),
    ),
    Mutation(
        "fisor_feasibility_min",
        "algos/safe/fisor.py",
        "running = (1 - gamma) * h + gamma * torch.maximum(h, next_v_h)",
        "running = (1 - gamma) * h + gamma * torch.minimum(h, next_v_h)",
        "FISOR's feasibility backup takes the min",
        ("tests/test_fisor.py -k hand_computed",),
    ),
    Mutation(
        "fisor_cost_weight_sign",
        "algos/safe/fisor.py",
        "cost_weight = torch.exp(cfg.cost_temperature * (v_h - q_h))",
        "cost_weight = torch.exp(cfg.cost_temperature * (q_h - v_h))",
        "FISOR's infeasible-region weights favour costly actions",
        ("tests/test_fisor.py -k hand_computed",),
    ),
    Mutation(
        "lagrange_multiplier_sign",
        "rlcore/safe.py",
        "loss = -self.parameter * (float(episode_cost) - self.cost_limit)",
        "loss = self.parameter * (float(episode_cost) - self.cost_limit)",
        "Lagrange multiplier falls when the cost is above the limit",
        ("tests/test_safe_rl.py -k multiplier",),
    ),
    Mutation(
        "ppo_lag_cost_advantage_sign",
        "algos/safe/ppo_lag.py",
        "advantage = (reward_advantage - lam * cost_advantage) / (1.0 + lam)",
        "advantage = (reward_advantage + lam * cost_advantage) / (1.0 + lam)",
        "PPO-Lagrangian's actor seeks cost",
        ("tests/test_safe_rl.py -k ppo_lag",),
    ),
    Mutation(
        "cpo_constraint_sign",
        "algos/safe/cpo.py",
        "c = (episode_cost if math.isfinite(episode_cost) else cfg.cost_limit) - cfg.cost_limit",
        "c = cfg.cost_limit - (episode_cost if math.isfinite(episode_cost) else cfg.cost_limit)",
        "CPO's constraint value c = limit - J_c (feasible and infeasible swapped)",
        ("tests/test_safe_rl.py -k cpo",),
    ),
    Mutation(
        "cpo_line_search_cost_bound",
        "algos/safe/cpo.py",
        "and cost_rise <= max(-c, 0.0)",
        "and cost_rise <= max(c, 0.0)",
        "CPO's line search bounds the cost rise by the violation instead of the slack",
        (
            "tests/test_safe_rl.py -k cpo",
            MATHS + "::test_cpo_line_search_accepts_a_cost_rise_within_the_slack",
        ),
    ),
    # --- algos/resip.py -------------------------------------------------------------------
    Mutation(
        "resip_ratio_inverted",
        "algos/resip.py",
        "log_prob - batch.log_prob[idx], standardize(batch.advantage[idx]), cfg.clip_coef",
        "batch.log_prob[idx] - log_prob, standardize(batch.advantage[idx]), cfg.clip_coef",
        "ResiP's importance ratio inverted",
        ("tests/test_resip.py",),
    ),
    # --- issue 32's fixes: each would bring its bug back ---------------------------------
    Mutation(
        "online_reward_normalised_twice",
        "rlcore/build.py",
        '"normalize_reward": plan.env.normalize_reward,',
        '"normalize_reward": plan.env.normalize_reward or plan.data.normalize_reward_by_returns,',  # noqa: E501
        "the dataset's reward recipe also wraps the env in running-std reward scaling",
        ("tests/test_reward_transform.py",),
    ),
    Mutation(
        "minibatch_lone_row_kept",
        "rlcore/buffers.py",
        "if len(pieces) > 1 and len(pieces[-1]) < min_rows:",
        "if False:",
        "a one-row last minibatch (NaN standardised advantages)",
        (
            "tests/test_buffers.py",
            "tests/test_finetune.py::test_a_rollout_leaving_a_one_row_remainder_trains_without_nan",
        ),
    ),
    Mutation(
        "dataset_channels_dropped",
        "offline/datasets.py",
        "for name, values in self.channels.items():  # the agent's channels (action chunks...)",
        "for name, values in {}.items():  # the agent's channels (action chunks...)",
        "to_replay_buffer drops the agent's dataset channels",
        ("tests/test_o2o_core.py::test_dataset_to_buffer_keeps_every_channel",),
    ),
    Mutation(
        "wsrl_temperature_not_carried",
        "algos/wsrl.py",
        "online.log_alpha.copy_(offline.log_alpha)",
        "pass",
        "WSRL's online SAC restarts at alpha = 1",
        ("tests/test_o2o_agents.py", "tests/test_parity_wsrl.py"),
    ),
    Mutation(
        "iql_exploration_noise_unclipped",
        "algos/iql.py",
        "noise = noise.clamp(-cfg.noise_clip, cfg.noise_clip)",
        "noise = noise",
        "IQL fine-tuning's exploration noise not clipped (CORL clips at 0.5)",
        (
            "tests/test_o2o_agents.py::test_iql_deterministic_actor_explores_with_clipped_noise_and_evaluates_without",
        ),
    ),
    Mutation(
        "injected_noise_unclipped",
        "rlcore/generative.py",
        "return z if clip is None else z.clamp_(-clip, clip)",
        "return z",
        "DPPO's / ReinFlow's injected noise not clipped at 3 std",
        ("tests/test_generative.py::test_standard_normal_clip", "tests/test_finetune.py"),
    ),
    Mutation(
        "reinflow_log_prob_clamp_removed",
        "algos/reinflow.py",
        "new = log_prob.clamp(cfg.log_prob_min, cfg.log_prob_max)",
        "new = log_prob",
        "ReinFlow's new log-likelihood not clamped to [-1, 1] before the ratio",
        ("tests/test_finetune.py::test_reinflow_clamps_both_log_likelihoods_before_the_ratio",),
    ),
    Mutation(
        "c51_upper_weight_flipped",
        "rlcore/losses.py",
        "upper_weight = position - lower  # 0 when the atom is hit exactly",
        "upper_weight = 1.0 - (position - lower)",
        "C51 projection gives each neighbouring atom the other one's share of the mass",
        _t("test_categorical_projection_splits_mass_between_neighbouring_atoms"),
    ),
    Mutation(
        "c51_no_terminal_mask",
        "algos/fast_td3.py",
        "discount = cfg.gamma * (1.0 - batch.terminated)",
        "discount = cfg.gamma * torch.ones_like(batch.terminated)",
        "FastTD3's distributional target bootstraps terminal rows",
        ("tests/test_fast_td3.py::test_target_is_the_lower_valued_projection_for_both_critics",),
    ),
    Mutation(
        "fast_td3_cdq_picks_the_higher",
        "algos/fast_td3.py",
        "pick = last - values.flip(0).argmin(0)",
        "pick = last - values.flip(0).argmax(0)",
        "FastTD3's clipped double Q takes the higher-valued projection",
        ("tests/test_fast_td3.py::test_target_is_the_lower_valued_projection_for_both_critics",),
    ),
    Mutation(
        "fast_td3_actor_ascends_the_max",
        "algos/fast_td3.py",
        "q = q.min(0).values if self.config.use_cdq else q.mean(0)",
        "q = q.max(0).values if self.config.use_cdq else q.mean(0)",
        "FastTD3's actor maximises the higher critic's expected return",
        ("tests/test_fast_td3.py::test_actor_loss_is_minus_the_mean_of_the_lower_expected_q",),
    ),
    # --- issue 45: data paths (each passed the tests of its own module before) ----------
    Mutation(
        "obs_normaliser_variance_no_cross_term",
        "envs/make.py",
        "m2 = var * self.count + batch_var * n + delta**2 * self.count * n / total",
        "m2 = var * self.count + batch_var * n",
        "running variance (NormalizeObservation / NormalizeReward) without Chan's cross term",
        (
            "tests/test_envs.py::test_running_mean_std_update_hand_computed",
            "tests/test_envs.py::test_normalize_observation_standardises_with_every_observation_seen",
        ),
    ),
    Mutation(
        "replay_next_obs_is_the_reset_obs",
        "rlcore/loops.py",
        "rows = Transitions(self.obs, action, reward, final_next_obs(next_obs, info), terminated,",
        "rows = Transitions(self.obs, action, reward, next_obs, terminated,",
        "replay rows store the next episode's first observation as next_obs at a truncation",
        (
            "tests/test_loops.py::test_replay_rows_keep_the_final_observation_of_a_truncated_episode",
        ),
    ),
    Mutation(
        "offline_data_drop_kept",
        "rlcore/build.py",
        'if dataset is not None and schedule.offline_data == "keep":',
        'if dataset is not None and schedule.offline_data in ("keep", "drop"):',
        "offline_data=drop keeps the dataset's rows in the online buffer (as keep)",
        (
            "tests/test_o2o_core.py::test_dropped_offline_data_leaves_the_online_buffer_to_online_rows",
        ),
    ),
    Mutation(
        "actor_next_obs_is_the_reset_obs",
        "rlcore/distributed.py",
        "row = (self.obs, action, reward, final_next_obs(next_obs, info), terminated, truncated,",
        "row = (self.obs, action, reward, next_obs, terminated, truncated,",
        "a Ray actor's rows store the next episode's first observation at a truncation",
        ("tests/test_distributed.py::test_actor_rows_keep_the_final_observation_of_a_truncated_episode",),
    ),
    Mutation(
        "fast_td3_noise_range",
        "algos/fast_td3.py",
        "fresh = fresh * (cfg.std_max - cfg.std_min) + cfg.std_min",
        "fresh = fresh * cfg.std_max + cfg.std_min",
        "FastTD3's per-env noise std drawn from [std_min, std_min + std_max]",
        ("tests/test_fast_td3.py::test_noise_scales_hand_computed_from_the_seeded_draws",),
    ),
    Mutation(
        "cal_ql_mc_return_not_rescaled",
        "offline/datasets.py",
        "self.mc_return = self.mc_return * scale",
        "self.mc_return = self.mc_return",
        "returns-to-go (Cal-QL's bound) not rescaled with the rewards",
        ("tests/test_cql.py::test_cal_ql_mc_return_is_the_discounted_sum_of_the_scaled_rewards",),
    ),
    Mutation(
        "cal_ql_sparse_success_marked_failed",
        "offline/datasets.py",
        "failed = self.episode_id[last][self.reward[last] == failure_reward]",
        "failed = self.episode_id[last][self.reward[last] != failure_reward]",
        "Cal-QL's sparse-reward return-to-go given to the episodes that succeeded",
        ("tests/test_cql.py::test_cal_ql_sparse_reward_returns_match_corl",),
    ),
    Mutation(
        "her_future_from_episode_start",
        "rlcore/her.py",
        'low = index if strategy == "future" else torch.zeros_like(index)',
        "low = torch.zeros_like(index)",
        "HER 'future' draws goals from the whole episode, earlier steps included",
        ("tests/test_her.py::test_relabelled_goals_come_from_the_right_transitions",),
    ),
    Mutation(
        "her_reward_of_current_goal",
        "rlcore/her.py",
        'achieved = batch.next_obs["achieved_goal"][:relabelled]',
        'achieved = batch.obs["achieved_goal"][:relabelled]',
        "HER recomputes the reward from the goal achieved before the step, not after it",
        ("tests/test_her.py::test_relabelled_goals_come_from_the_right_transitions",),
    ),
    Mutation(
        "her_next_obs_keeps_old_goal",
        "rlcore/her.py",
        'batch.next_obs["desired_goal"][:relabelled] = goals',
        "pass",
        "HER relabels obs but leaves next_obs with the old goal (the TD target's)",
        ("tests/test_her.py::test_relabelled_goals_come_from_the_right_transitions",),
    ),
    Mutation(
        "episode_length_off_by_one",
        "rlcore/buffers.py",
        "length = step - int(self.episode_start[i]) + 1",
        "length = step - int(self.episode_start[i])",
        "the replay buffer's episode record one step short (HER's 'final' goal one early)",
        ("tests/test_her.py::test_episode_record_by_hand",),
    ),
    Mutation(
        "episode_success_from_reset_info",
        "envs/make.py",
        "    for source in (info, final):",
        "    for source in (final, info):",
        "an ended episode's success (and cost) read from the reset's info, not its last step's",
        ("tests/test_robot_tasks.py::test_episode_success_is_the_last_steps_flag_and_evaluate_averages_it",),
    ),
    # --- images: camera datasets, BC from images, resume with new games -----------------
    Mutation(
        "image_dataset_next_frame",
        "offline/datasets.py",
        "frame_rows = self.frame_index[idx] + int(next_obs)",
        "frame_rows = self.frame_index[idx]",
        "a camera dataset's next observation reads the row's own frame",
        ("tests/test_image_datasets.py::test_frames_are_stored_once_and_read_back_at_their_rows",),
    ),
    Mutation(
        "image_bc_encoder_not_averaged",
        "algos/generative_bc.py",
        "averaged.append((self.ema_encoder, self.encoder))",
        "pass",
        "image BC's EMA averages the head but not its encoder",
        ("tests/test_image_bc.py::test_the_encoder_is_saved_and_averaged_with_the_head",),
    ),
    Mutation(
        "cut_episodes_not_truncated",
        "rlcore/buffers.py",
        'self.data["truncated"][newest.to(self.device)] = 1.0',
        "pass",
        "a resume with new games leaves the interrupted episodes open in the replay buffer",
        ("tests/test_atari.py::test_cut_episodes_truncates_the_newest_rows_and_restarts_the_frame_stacks",),
    ),
    Mutation(
        "dppo_update_standardises_twice",
        "algos/dppo.py",
        "inputs = self.obs_normalizer(batch.obs)",
        "inputs = self.obs_normalizer(self.obs_normalizer(batch.obs))",
        "DPPO's update standardises the observations a second time",
        _t("test_dppo_update_hand_computed"),
    ),
    Mutation(
        "riql_value_target_min",
        "algos/riql.py",
        "target_q = torch.quantile(self.target_critic(obs, batch.action), cfg.quantile, dim=0)",
        "target_q = self.target_critic(obs, batch.action).min(0).values",
        "RIQL's value target is the critics' minimum (IQL's), not their quantile",
        ("tests/test_riql.py::test_one_update_by_hand",),
    ),
    Mutation(
        "riql_targets_unclipped",
        "algos/riql.py",
        "targets = targets.clamp(cfg.target_min, cfg.target_max)",
        "targets = targets",
        "RIQL's Q targets are not clipped to [-100, 1000]",
        ("tests/test_riql.py::test_one_update_by_hand",),
    ),
    # --- rlcore/dynamics.py (the model ensemble of model-based offline RL) ---------------
    Mutation(
        "dynamics_logvar_bounds_sign",
        "rlcore/dynamics.py",
        "bounds = logvar_coef * (self.max_logvar.sum() - self.min_logvar.sum())",
        "bounds = logvar_coef * (self.max_logvar.sum() + self.min_logvar.sum())",
        "the dynamics loss rewards widening the log-variance bounds",
        ("tests/test_dynamics.py::test_the_loss_of_a_zeroed_ensemble_by_hand",),
    ),
    Mutation(
        "dynamics_variance_not_weighting",
        "rlcore/dynamics.py",
        "nll = ((mean - targets).pow(2) * torch.exp(-logvar)).mean(dim=(1, 2)) + logvar.mean(",
        "nll = (mean - targets).pow(2).mean(dim=(1, 2)) + logvar.mean(",
        "the dynamics NLL drops the inverse variance",
        ("tests/test_dynamics.py::test_training_steps_match_offlinerl_kit",),
    ),
    # --- offline/corruption.py (RIQL's protocol) ----------------------------------------
    Mutation(
        "corruption_adversarial_reward_sign",
        "offline/corruption.py",
        "changed = original * -scale",
        "changed = original * scale",
        "adversarial reward corruption keeps the reward's sign",
        ("tests/test_corruption.py::test_rewards_random_are_replaced_and_adversarial_are_flipped_and_scaled",),
    ),
    Mutation(
        "corruption_attack_ascends_q",
        "offline/corruption.py",
        "q.mean().backward()",
        "(-q.mean()).backward()",
        "the adversarial attack raises the critic's Q instead of lowering it",
        ("tests/test_corruption.py::test_the_adversarial_attack_walks_each_value_down_the_critics_gradient",),
    ),
    # --- rlcore/model_based.py, algos/mopo.py (MOPO) ------------------------------------
    Mutation(
        "mopo_penalty_added",
        "rlcore/model_based.py",
        "reward = reward - recipe.penalty_coef * penalty",
        "reward = reward + recipe.penalty_coef * penalty",
        "MOPO rewards the model's uncertainty instead of penalising it",
        ("tests/test_mopo.py::test_a_rollout_by_hand_penalises_stops_and_continues_the_survivors",),
    ),
    Mutation(
        "mopo_rollouts_continue_terminated",
        "rlcore/model_based.py",
        "obs = next_obs[~done]",
        "obs = next_obs",
        "imagined rollouts go on from terminated states",
        ("tests/test_mopo.py::test_a_rollout_by_hand_penalises_stops_and_continues_the_survivors",),
    ),
    Mutation(
        "mopo_temperature_uncapped",
        "algos/mopo.py",
        "max_alpha: float | None = 1.0",
        "max_alpha: float | None = None",
        "MOPO's temperature is not capped at 1 (OfflineRL-Kit clamps it)",
        ("tests/test_mopo.py::test_updates_match_offlinerl_kit",),
    ),
    Mutation(
        "sac_log_alpha_loss_as_alpha",
        "algos/sac.py",
        'scale = log_alpha.exp() if self.config.temperature_loss == "alpha" else log_alpha',
        "scale = log_alpha.exp()",
        "temperature_loss=log_alpha (MOPO, OfflineRL-Kit) still scales the gap by alpha",
        ("tests/test_mopo.py::test_updates_match_offlinerl_kit",),
    ),
    Mutation(
        "clamped_log_std_squashed",
        "rlcore/nets.py",
        "return raw.clamp(self.log_std_min, self.log_std_max)",
        "return raw.clamp(self.log_std_min + 1.0, self.log_std_max)",
        "the clamped log-std (MOPO's policy) has the wrong lower bound",
        ("tests/test_mopo.py::test_updates_match_offlinerl_kit",),
    ),
    # --- rlcore/dynamics_reward.py, the filter in rlcore/model_based.py (MOREC) -----------
    Mutation(
        "morec_keeps_the_worst_candidate",
        "rlcore/model_based.py",
        "pick = score.argmax(0)",
        "pick = score.argmin(0)",
        "MOREC's filter keeps the candidate of lowest dynamics reward",
        ("tests/test_morec.py::test_the_filter_keeps_the_best_candidate_and_ends_rollouts_it_distrusts",),
    ),
    Mutation(
        "morec_threshold_inverted",
        "rlcore/model_based.py",
        "done = self.terminated(obs, action, next_obs) | (score < recipe.terminal_reward)",
        "done = self.terminated(obs, action, next_obs) | (score > recipe.terminal_reward)",
        "MOREC ends the rollouts it trusts instead of those it distrusts",
        ("tests/test_morec.py::test_the_filter_keeps_the_best_candidate_and_ends_rollouts_it_distrusts",),
    ),
    Mutation(
        "dynamics_reward_unscaled_logits",
        "rlcore/dynamics_reward.py",
        "scaled = (logits.clamp(low, high) - low) / (high - low + 1e-7) * 2.0 - 1.0",
        "scaled = logits",
        "the discriminators' logits are not clamped and rescaled by their expert / learner values",
        ("tests/test_morec.py::test_the_dynamics_reward_matches_the_authors_code",),
    ),
    Mutation(
        "dynamics_reward_next_state_not_delta",
        "rlcore/dynamics_reward.py",
        "return torch.cat([s, torch.zeros_like(s[..., :1]), a, s_next - s], -1)",
        "return torch.cat([s, torch.zeros_like(s[..., :1]), a, s_next], -1)",
        "the discriminators read s' instead of s' - s",
        ("tests/test_morec.py::test_the_dynamics_reward_matches_the_authors_code",),
    ),
    Mutation(
        "dynamics_reward_generator_labelled_real",
        "rlcore/dynamics_reward.py",
        "+ F.binary_cross_entropy_with_logits(fake_logit, torch.zeros_like(fake_logit))",
        "+ F.binary_cross_entropy_with_logits(fake_logit, torch.ones_like(fake_logit))",
        "the discriminator learns to call the generator's transitions data",
        ("tests/test_morec.py::test_the_learned_reward_scores_data_above_wrong_transitions",),
    ),
    # --- envs/neorl2.py, offline/neorl2_recipe.py (NeoRL-2's tasks and data) ------------
    Mutation(
        "neorl2_hopper_no_ctrl_cost",
        "envs/neorl2.py",
        "reward = (obs[0] - before[0]) / self.DT - self.CTRL_COST * float(np.sum(np.square(action)))",
        "reward = (obs[0] - before[0]) / self.DT",
        "RandomFrictionHopper's reward forgets the control cost",
        ("tests/test_neorl2.py::test_trajectories_match_the_reference_envs",),
    ),
    Mutation(
        "neorl2_cheetah_speed_limit_inclusive_of_slow",
        "envs/neorl2.py",
        "over = bool(velocity > self.SPEED_LIMIT)",
        "over = bool(velocity > -self.SPEED_LIMIT)",
        "SafetyHalfCheetah penalises every step above -3.2 m/s",
        ("tests/test_neorl2.py::test_safety_half_cheetah_penalises_speed",),
    ),
    Mutation(
        "neorl2_rollout_hopper_ignores_height",
        "rlcore/model_based.py",
        "healthy = (next_obs[:, 1] > 0.7) & (next_obs[:, 2] > -0.2) & (next_obs[:, 2] < 0.2)",
        "healthy = (next_obs[:, 2] > -0.2) & (next_obs[:, 2] < 0.2)",
        "model rollouts on RandomFrictionHopper never end on a fallen torso",
        ("tests/test_neorl2.py::test_model_rollouts_terminate_as_the_reference_envs",),
    ),
    Mutation(
        "neorl2_recipe_level_from_the_top",
        "offline/neorl2_recipe.py",
        "target = values.min() + level * (values.max() - values.min())",
        "target = values.max() - level * (values.max() - values.min())",
        "the data policies sit 75% of the way down from the best return, not up from the worst",
        ("tests/test_neorl2.py::test_the_sac_recipe_picks_the_snapshots_at_the_level",),
    ),
    Mutation(
        "neorl2_recipe_validation_policy_trains",
        "offline/neorl2_recipe.py",
        'chosen = [snapshots[0], *snapshots[2:]] if split == "train" else [snapshots[1]]',
        'chosen = list(snapshots[:3]) if split == "train" else [snapshots[3]]',
        "the validation split's policy records training data",
        ("tests/test_neorl2.py::test_the_sac_recipe_records_mean_actions_of_policies_1_3_4",),
    ),
    # --- envs/simglucose.py (NeoRL-2's Simglucose) ----------------------------------------
    Mutation(
        "simglucose_insulin_in_units",
        "envs/simglucose.py",
        'insulin = insulin * 6000 / p["BW"]  # U/min -> pmol/kg/min',
        'insulin = insulin * 6000  # U/min -> pmol/kg/min',
        "the model takes insulin in pmol/min, not per kg of body weight",
        ("tests/test_neorl2.py::test_simglucose_replays_the_authors_released_data",),
    ),
    Mutation(
        "simglucose_reward_unscaled",
        "envs/simglucose.py",
        "value = (risk(glucose) - risk(next_glucose) + 100) / 100",
        "value = risk(glucose) - risk(next_glucose)",
        "Simglucose's reward is the raw risk drop, not 1 + drop / 100",
        ("tests/test_neorl2.py::test_simglucose_by_hand",),
    ),
    Mutation(
        "simglucose_rollout_reads_the_wrong_column",
        "rlcore/model_based.py",
        "reading = next_obs[:, 0]",
        "reading = next_obs[:, 1]",
        "model rollouts end on a patient parameter instead of the glucose reading",
        ("tests/test_neorl2.py::test_model_rollouts_terminate_as_the_reference_envs",),
    ),
    # --- envs/rocketrecovery.py (NeoRL-2's RocketRecovery) -------------------------------
    Mutation(
        "rocketrecovery_side_engine_cost",
        "envs/rocketrecovery.py",
        "reward -= np.where(side > 0.5, np.clip(side, 0.5, 1.0), 0) * 0.03",
        "reward -= np.where(side > 0.5, np.clip(side, 0.5, 1.0), 0) * 0.3",
        "the side engines cost as much fuel as the main engine",
        ("tests/test_rocketrecovery.py::test_reward_and_landing_by_hand",),
    ),
    Mutation(
        "rocketrecovery_wind_on_the_wrong_axis",
        "envs/rocketrecovery.py",
        "lander.ApplyForceToCenter((wind, 0.0), True)",
        "lander.ApplyForceToCenter((0.0, wind), True)",
        "the crosswind pushes the rocket up and down instead of sideways",
        ("tests/test_rocketrecovery.py::test_the_authors_released_validation_data_replay_exactly",),
    ),
]


def _copy_tree(dest: Path) -> None:
    """The working tree's tracked and untracked-but-not-ignored files, as they are now."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, check=True, capture_output=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, files):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def apply(mutation: Mutation, root: Path) -> None:
    """Apply ``mutation`` under ``root``; raise if its original is not there exactly once."""
    path = root / mutation.file
    text = path.read_text()
    count = text.count(mutation.original)
    if count != 1:
        raise SystemExit(
            f"mutation {mutation.name}: its original text occurs {count} times in "
            f"{mutation.file} (must be exactly once; update the entry):\n  {mutation.original!r}"
        )
    path.write_text(text.replace(mutation.original, mutation.replacement))


def _invocations(tests: tuple[str, ...], tests_all: bool, extra: str = "") -> list[list[str]]:
    """pytest argument lists: plain paths / node ids together, each entry with options
    (``-k``...) on its own; slow tests deselected; ``extra`` appended to each."""
    if tests_all:
        return [["tests", "-m", "not slow", *shlex.split(extra)]]
    plain = [t for t in tests if len(shlex.split(t)) == 1]
    runs = [plain] if plain else []
    runs += [shlex.split(t) for t in tests if len(shlex.split(t)) > 1]
    return [[*run, "-m", "not slow", *shlex.split(extra)] for run in runs]


def run_tests(root: Path, runs: list[list[str]], timeout: float) -> tuple[str, str, float]:
    """Run the pytest invocations in ``root`` until one fails: (outcome: passed | failed |
    timeout | error, the first failing test or the error, seconds)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(root)}  # fmt: skip
    start = time.perf_counter()
    for args in runs:
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-rfE", "-p", "no:cacheprovider", *args]
        left = timeout - (time.perf_counter() - start)
        try:
            proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True,
                                  timeout=max(left, 1.0))  # fmt: skip
        except subprocess.TimeoutExpired:
            return "timeout", " ".join(args), time.perf_counter() - start
        out = proc.stdout + proc.stderr
        failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", out, re.M)
        if proc.returncode == 0:
            continue
        seconds = time.perf_counter() - start
        if failed and proc.returncode in (1, 2):  # tests failed / errors while collecting
            return "failed", failed[0], seconds
        tail = " | ".join(out.strip().splitlines()[-3:])
        return "error", f"pytest exit {proc.returncode}: {tail}", seconds
    return "passed", "", time.perf_counter() - start


def _run_one(mutation: Mutation | None, runs: list[list[str]], timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="mutation-") as tmp:
        root = Path(tmp)
        _copy_tree(root)
        if mutation is not None:
            apply(mutation, root)
        outcome, test, seconds = run_tests(root, runs, timeout)
    return {"outcome": outcome, "caught_by": test, "seconds": round(seconds, 1)}


def markdown(rows: list[dict]) -> str:
    """The table for a closing note / README: mutation, file, change, result, test."""
    lines = [
        "| mutation | file | what it breaks | result | caught by |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        result = (
            "caught"
            if r["caught"]
            else "**survived**"
            if r["outcome"] == "passed"
            else r["outcome"]
        )
        test = r["caught_by"].replace("tests/", "").replace("|", "/")
        what = r["description"].replace("|", "\\|")
        lines.append(f"| {r['name']} | {r['file']} | {what} | {result} | {test} |")
    caught = sum(r["caught"] for r in rows)
    return "\n".join([*lines, "", f"{caught} / {len(rows)} caught.", ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=[], help="mutation name (repeatable)")
    parser.add_argument("--skip", action="append", default=[], help="mutation name to leave out")
    parser.add_argument("--jobs", type=int, default=1, help="mutations run at once (default 1)")
    parser.add_argument(
        "--tests-all",
        action="store_true",
        help='run the whole fast suite (-m "not slow") for every mutation',
    )
    parser.add_argument(
        "--pytest-args", default="", help='extra pytest arguments, e.g. "-n 4" (pytest-xdist)'
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per test run")
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip the unmutated run of the tests (faster, less safe)",
    )
    parser.add_argument("--list", action="store_true", help="print the mutations and exit")
    parser.add_argument("--output", type=Path, default=RESULTS)
    opts = parser.parse_args(argv)

    names = [m.name for m in MUTATIONS]
    if len(set(names)) != len(names):
        raise SystemExit("duplicate mutation names")
    unknown = (set(opts.only) | set(opts.skip)) - set(names)
    if unknown:
        raise SystemExit(f"unknown mutation(s) {sorted(unknown)}; --list shows the names")
    chosen = [
        m for m in MUTATIONS if (not opts.only or m.name in opts.only) and m.name not in opts.skip
    ]
    with tempfile.TemporaryDirectory() as tmp:  # every original is found exactly once
        for m in chosen:
            (Path(tmp) / m.file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / m.file, Path(tmp) / m.file)
            apply(m, Path(tmp))
            shutil.copy2(REPO / m.file, Path(tmp) / m.file)
    if opts.list:
        for m in chosen:
            print(f"{m.name:34s} {m.file:24s} {m.description}")
        return 0

    if not opts.no_baseline:
        union = tuple(sorted({entry for m in chosen for entry in m.tests}))
        base = _run_one(None, _invocations(union, opts.tests_all, opts.pytest_args), opts.timeout)
        print(f"baseline (unmutated): {base['outcome']} in {base['seconds']} s "
              f"{base['caught_by']}", flush=True)  # fmt: skip
        if base["outcome"] != "passed":
            raise SystemExit(
                "the tests fail without any mutation: fix them first (a test "
                "file missing on this branch? --only the others)"
            )

    def job(m: Mutation) -> dict:
        row = _run_one(m, _invocations(m.tests, opts.tests_all, opts.pytest_args), opts.timeout)
        row = {**asdict(m), **row, "caught": row["outcome"] in ("failed", "timeout"),
               "tests_all": opts.tests_all}  # fmt: skip
        row["tests"] = list(m.tests)
        status = "CAUGHT  " if row["caught"] else row["outcome"].upper().ljust(8)
        print(f"{status} {m.name:34s} {row['seconds']:7.1f} s  {row['caught_by']}", flush=True)
        return row

    with ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        rows = list(pool.map(job, chosen))

    previous = {}
    if opts.output.exists():
        previous = {r["name"]: r for r in json.loads(opts.output.read_text())["mutations"]}
    merged = {**previous, **{r["name"]: r for r in rows}}
    ordered = [merged[n] for n in names if n in merged]
    opts.output.parent.mkdir(parents=True, exist_ok=True)
    summary = {"caught": sum(r["caught"] for r in ordered), "total": len(ordered)}
    opts.output.write_text(json.dumps({"summary": summary, "mutations": ordered}, indent=1) + "\n")

    opts.output.with_suffix(".md").write_text(markdown(ordered))
    print(f"\n{'mutation':34s} {'file':24s} {'result':9s} caught by")
    for r in ordered:
        result = (
            "caught" if r["caught"] else "SURVIVED" if r["outcome"] == "passed" else r["outcome"]
        )
        print(f"{r['name']:34s} {r['file']:24s} {result:9s} "
              f"{r['caught_by']}")  # fmt: skip
    print(f"\n{summary['caught']} / {summary['total']} caught; written to {opts.output}")
    return 0 if all(r["caught"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
