"""rlcore PPO checkpoint -> CleanRL ``ppo_atari_envpool.Agent`` state dict (same layers, same
order). Run with rlcore's venv: ``python extract.py <run>/checkpoints/latest.pt s1.pt``."""

import sys

import torch

state = torch.load(sys.argv[1], weights_only=False, map_location="cpu")["agent"]
encoder, actor, critic = state["encoder"], state["actor"], state["critic"]
out = {}
for index in (0, 2, 4):  # the three convolutions sit at the same Sequential indices
    for part in ("weight", "bias"):
        out[f"network.{index}.{part}"] = encoder[f"images.obs.convs.{index}.{part}"]
for part in ("weight", "bias"):
    out[f"network.7.{part}"] = encoder[f"images.obs.head.0.{part}"]
    out[f"actor.{part}"] = actor[f"logits.0.{part}"]
    out[f"critic.{part}"] = critic[f"0.{part}"]
torch.save({key: value.clone() for key, value in out.items()}, sys.argv[2])
