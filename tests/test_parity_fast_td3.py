"""Golden parity: rlcore's FastTD3 against the reference implementation
(younggyoseo/FastTD3, the one algos/fast_td3.py names).

tests/golden/fast_td3.json holds what the reference's own code computed (written by
benchmarks/parity/fast_td3_reference.py, which says how to run it): on its initial
weights and first batch, the C51 critics' logits and each target critic's projected
distribution and value; then 8 updates (2 per vector step, the actor on every 2nd) with
the recorded target-smoothing noise: every loss and every parameter afterwards. The
tests load the same weights into rlcore's FastTD3 and check its numbers to ``ATOL`` (+
``RTOL`` of the value)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from rlcore.algos.fast_td3 import FastTD3, FastTD3Config
from rlcore.losses import categorical_projection
from tests.test_parity_online import (
    batch,
    close,
    compare,
    ensemble_state,
    feed_noise,
    golden,
    linear,
    load,
    mlp_state,
    t,
)

OBS = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
ACTIONS = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)  # the reference acts in [-1, 1]


def actor_state(ref: dict, prefix: str) -> dict:
    """Our DeterministicActor's state from the reference's ``Actor`` (net, fc_head, fc_mu)."""
    layers = [linear(ref, f"{prefix}.{n}") for n in ("net.0", "net.2", "fc_head.0", "fc_mu.0")]
    return {f"net.{k}": v for k, v in mlp_state(layers).items()}


def critic_state(ref: dict, prefix: str) -> dict:
    """Our CategoricalQEnsemble's state from the reference's ``Critic`` (qnet1, qnet2)."""
    names = ("net.0", "net.2", "fc_head.0", "fc_head.2")
    return ensemble_state(
        [[linear(ref, f"{prefix}.{q}.{n}") for n in names] for q in ("qnet1", "qnet2")]
    )


def agent_from_golden(data: dict) -> FastTD3:
    s, init = data["settings"], data["inputs"]["init"]
    config = FastTD3Config(
        gamma=s["gamma"], tau=s["tau"], actor_lr=s["actor_lr"], critic_lr=s["critic_lr"],
        weight_decay=s["weight_decay"],
        actor_hidden=(s["actor_hidden_dim"], s["actor_hidden_dim"] // 2,
                      s["actor_hidden_dim"] // 4),
        critic_hidden=(s["critic_hidden_dim"], s["critic_hidden_dim"] // 2,
                       s["critic_hidden_dim"] // 4),
        num_atoms=s["num_atoms"], v_min=s["v_min"], v_max=s["v_max"],
        policy_noise=s["policy_noise"], noise_clip=s["noise_clip"],
        policy_frequency=s["policy_frequency"], use_cdq=s["use_cdq"],
    )  # fmt: skip
    agent = FastTD3(OBS, ACTIONS, config)
    load(agent.actor, actor_state(init, "actor"))
    load(agent.critic, critic_state(init, "qnet"))
    load(agent.target_critic, critic_state(init, "qnet"))
    return agent


def test_c51_critic_and_projection_match_the_reference():
    """The critics' logits, and each target critic's projection of r + gamma (1 - term) z
    (mass split, edges clipped, terminal rows collapsed) with its value, on one batch."""
    data = golden("fast_td3")
    agent, pieces, s = agent_from_golden(data), data["pieces"], data["settings"]
    b = batch(data["inputs"]["batches"][0])
    with torch.no_grad():
        close("logits", agent.critic(b.obs, b.action), t(pieces["logits"]))
        noise = (t(pieces["smoothing_noise"]) * s["policy_noise"]).clamp(-0.5, 0.5)
        next_action = (agent.actor(b.next_obs) + noise).clamp(-1.0, 1.0)
        probs = torch.softmax(agent.target_critic(b.next_obs, next_action), -1)
        discount = s["gamma"] * (1.0 - b.terminated)
        projected = categorical_projection(probs, b.reward, discount, agent.critic.support)
    close("projected", projected, t(pieces["projected"]))
    close("projected value", agent.critic.value(projected), t(pieces["projected_value"]))
    assert (projected[:, :, 0] > 0).any() and (projected[:, :, -1] > 0).any(), "edges hit"


def test_fast_td3_updates_match_the_reference(monkeypatch):
    """8 updates: clipped double-Q target (the lower-valued projection for both critics),
    summed cross-entropies, actor on min E[Z] every 2nd update, AdamW with weight decay,
    Polyak targets after each update; losses and all parameters equal the reference's."""
    data = golden("fast_td3")
    agent = agent_from_golden(data)
    feed_noise(monkeypatch, [t(n) for n in data["inputs"]["noise"]])
    for u, b in enumerate(data["inputs"]["batches"]):
        ours, ref = agent.update(batch(b)), data["updates"][u]
        close(f"update {u} critic_loss", ours["critic_loss"], ref["critic_loss"])
        assert ("actor_loss" in ours) == ("actor_loss" in ref)
        if "actor_loss" in ref:
            close(f"update {u} actor_loss", ours["actor_loss"], ref["actor_loss"])
    final = data["final"]
    compare(agent.actor, actor_state(final, "actor"), "actor")
    compare(agent.critic, critic_state(final, "qnet"), "critic")
    compare(agent.target_critic, critic_state(final, "qnet_target"), "target_critic")
