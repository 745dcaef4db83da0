"""ResiP parity: the reference's residual PPO update on a fixed rollout batch, written to
``tests/golden/resip.json`` (``tests/test_resip.py`` checks that ours reproduces it).

Reference: github.com/ankile/robust-rearrangement @ 41c99a05829a309a4feb81402f792cac7f8311e2
(``src/models/residual.py`` ``ResidualPolicy``: the actor and critic MLPs and the
Gaussian; ``src/train/residual_ppo.py``: optimisers, schedulers and the update).

Run it in a side environment, outside this repository, with the reference's sources:

    python3 -m venv /work/side/resip/venv
    /work/side/resip/venv/bin/pip install torch==2.13.0 numpy diffusers
    git --git-dir=<fetched mirror> show HEAD:<file> for every file under src/ into
        /work/side/resip/src (the reference repository's root)
    /work/side/resip/venv/bin/python benchmarks/parity/resip_reference.py \\
        --reference /work/side/resip/src --out tests/golden/resip.json

``ResidualPolicy`` is imported from the reference unchanged (its unused ``ipdb`` import is
stubbed, and ``src/models/__init__.py``, which pulls in the vision encoders, is skipped). Its update lives inside ``main()`` of ``residual_ppo.py`` (Hydra, Isaac Gym,
wandb), so the minibatch loop of lines 492-593 is restated below line by line (each line
cites the reference's); the optimisers are built as at lines 222-249 and the learning-rate
schedules are diffusers' ``get_scheduler`` itself. ``np.random.shuffle(b_inds)`` (line 497)
is replaced by a ``torch.randperm`` per epoch drawn after ``torch.manual_seed(PERM_SEED)``,
the permutation ``rlcore.buffers.minibatch_indices`` draws in our update under the same seed.

``scenario`` (torch only, also imported by the test) builds the shared initial weights and
the rollout batch; it must not change, or the golden file must be rebuilt.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

import torch

REFERENCE = "github.com/ankile/robust-rearrangement"
COMMIT = "41c99a05829a309a4feb81402f792cac7f8311e2"
STATE_DIM, ACTION_DIM, HIDDEN, ROWS = 5, 3, 16, 64
PERM_SEED = 7
# the reference's hyper-parameters (base_residual_rl.yaml:43-66, residual_diffusion.yaml:6-19)
ACTOR_LR, CRITIC_LR, WARMUP, ITERATIONS = 3e-4, 5e-3, 5, 20
CASES = {  # name: (iteration index k, minibatches, epochs, target_kl)
    "no_stop": (7, 4, 2, 0.1),
    "kl_stop": (7, 4, 3, 2e-4),
}


def scenario(seed: int = 0) -> dict[str, torch.Tensor]:
    """Initial weights (names of both implementations' nn.Sequential: 0, 2, 4 are the
    Linear layers) and a rollout batch: inputs [state, base action], residual samples,
    their log-probabilities under the initial policy (log-std -1), advantages, returns."""
    g = torch.Generator().manual_seed(seed)
    in_dim = STATE_DIM + ACTION_DIM

    def layers(out_dim: int) -> dict[str, torch.Tensor]:
        shapes = [(HIDDEN, in_dim), (HIDDEN, HIDDEN), (out_dim, HIDDEN)]
        out = {}
        for index, (rows, cols) in zip((0, 2, 4), shapes):
            out[f"{index}.weight"] = torch.randn(rows, cols, generator=g) * (1.5 / cols**0.5)
            out[f"{index}.bias"] = torch.randn(rows, generator=g) * 0.1
        return out

    actor, critic = layers(ACTION_DIM), layers(1)
    del actor["4.bias"]  # the residual's output layer has no bias
    state = torch.randn(ROWS, STATE_DIM, generator=g)
    base = torch.rand(ROWS, ACTION_DIM, generator=g) * 2 - 1
    inputs = torch.cat([state, base], -1)
    with torch.no_grad():
        mean = _mlp(actor, inputs)
    std = torch.full_like(mean, float(torch.tensor(-1.0).exp()))
    residual = mean + std * torch.randn(ROWS, ACTION_DIM, generator=g)
    log_prob = torch.distributions.Normal(mean, std).log_prob(residual).sum(-1)
    return {
        **{f"actor.{k}": v for k, v in actor.items()},
        **{f"critic.{k}": v for k, v in critic.items()},
        "state": state, "base_action": base, "residual": residual, "log_prob": log_prob,
        "advantage": torch.randn(ROWS, generator=g) * 2.0 + 0.3,
        "returns": torch.randn(ROWS, generator=g) * 3.0 + 1.0,
    }  # fmt: skip


def _mlp(params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    for index in (0, 2):
        x = torch.relu(x @ params[f"{index}.weight"].T + params[f"{index}.bias"])
    out = x @ params["4.weight"].T
    return out + params["4.bias"] if "4.bias" in params else out


def _reference_update(src: Path, case: str) -> dict:
    """The reference's modules, optimisers and schedulers; its update loop, restated."""
    sys.modules.setdefault("ipdb", types.SimpleNamespace(set_trace=lambda: None))
    sys.path.insert(0, str(src))
    # src/models/__init__.py imports the vision encoders, U-Net and transformer (timm, ...):
    # register the package without running it, so only residual.py and what it imports load
    models = types.ModuleType("src.models")
    models.__path__ = [str(src / "src" / "models")]
    sys.modules.setdefault("src.models", models)
    from diffusers.optimization import get_scheduler
    from src.models.residual import ResidualPolicy  # type: ignore[import-not-found]

    k, num_minibatches, update_epochs, target_kl = CASES[case]
    data = scenario()
    # residual_diffusion.yaml:7-19 and base_residual_rl.yaml:36-40
    torch.manual_seed(0)  # the reference's own initialisation (reported under "init")
    policy = ResidualPolicy(
        obs_shape=(STATE_DIM,), action_shape=(ACTION_DIM,), init_logstd=-1.0, learn_std=False,
        action_head_std=0.0, action_scale=0.1, actor_hidden_size=HIDDEN, actor_num_layers=2,
        critic_hidden_size=HIDDEN, critic_num_layers=2, actor_activation="ReLU",
        critic_activation="ReLU", critic_last_layer_bias_const=0.25, critic_last_layer_std=0.25,
    )  # fmt: skip
    init = {  # the reference's own initialisation, before the shared weights go in
        "actor_last_weight_abs_max": policy.actor_mean[4].weight.abs().max().item(),
        "actor_last_has_bias": policy.actor_mean[4].bias is not None,
        "critic_last_bias": policy.critic[4].bias.item(),
        "critic_last_weight_norm": policy.critic[4].weight.norm().item(),
        "actor_logstd": policy.actor_logstd.flatten().tolist(),
        "actor_logstd_trained": policy.actor_logstd.requires_grad,
    }
    with torch.no_grad():
        for net in ("actor_mean", "critic"):
            prefix = "actor." if net == "actor_mean" else "critic."
            for name, p in getattr(policy, net).named_parameters():
                p.copy_(data[prefix + name])
    # residual_diffusion.py:258-266: actor = everything but the critic (logstd included)
    actor_params = [p for n, p in policy.named_parameters() if "critic" not in n]
    critic_params = [p for n, p in policy.named_parameters() if "critic" in n]
    # residual_ppo.py:222-249
    optimizer_actor = torch.optim.AdamW(actor_params, lr=ACTOR_LR, betas=(0.9, 0.999), eps=1e-5,
                                        weight_decay=1e-6)  # fmt: skip
    lr_scheduler_actor = get_scheduler(name="cosine", optimizer=optimizer_actor,
                                       num_warmup_steps=WARMUP, num_training_steps=ITERATIONS)  # fmt: skip
    optimizer_critic = torch.optim.AdamW(critic_params, lr=CRITIC_LR, eps=1e-5, weight_decay=1e-6)
    lr_scheduler_critic = get_scheduler(name="cosine", optimizer=optimizer_critic,
                                        num_warmup_steps=0, num_training_steps=ITERATIONS)  # fmt: skip
    for _ in range(k):  # residual_ppo.py:641-642, once per training iteration
        optimizer_actor.step(), optimizer_critic.step()  # no grads: only silences a warning
        lr_scheduler_actor.step(), lr_scheduler_critic.step()

    b_obs = torch.cat([data["state"], data["base_action"]], -1)
    b_actions, b_logprobs = data["residual"], data["log_prob"]
    b_advantages, b_returns = data["advantage"], data["returns"]
    batch_size = len(b_obs)
    minibatch_size = batch_size // num_minibatches  # base_residual_rl.yaml:75
    clip_coef, vf_coef, max_grad_norm, ent_coef = 0.2, 1.0, 1.0, 0.0  # yaml:62-66
    torch.manual_seed(PERM_SEED)
    rows = []
    for _epoch in range(update_epochs):  # residual_ppo.py:494
        early_stop = False
        b_inds = torch.randperm(batch_size)  # in place of np.random.shuffle (:497)
        for start in range(0, batch_size, minibatch_size):  # :498-500
            mb_inds = b_inds[start : start + minibatch_size]
            mb_obs, mb_actions = b_obs[mb_inds], b_actions[mb_inds]
            mb_logprobs, mb_advantages = b_logprobs[mb_inds], b_advantages[mb_inds]
            mb_returns = b_returns[mb_inds]
            _, newlogprob, entropy, newvalue, action_mean = policy.get_action_and_value(
                mb_obs, mb_actions
            )  # :511-513
            logratio = newlogprob - mb_logprobs  # :514-515
            ratio = logratio.exp()
            with torch.no_grad():  # :517-523
                approx_kl = ((ratio - 1) - logratio).mean()
                clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean().item()
            mb_advantages = (mb_advantages - mb_advantages.mean()) / (
                mb_advantages.std() + 1e-8
            )  # :525-528 (norm_adv: true)
            pg_loss1 = -mb_advantages * ratio  # :533-537
            pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
            pg_loss = torch.max(pg_loss1, pg_loss2).mean()
            newvalue = newvalue.view(-1)  # :540, :552 (clip_vloss: false)
            v_loss = 0.5 * ((newvalue - mb_returns) ** 2).mean()
            entropy_loss = entropy.mean() * ent_coef  # :555-557
            policy_loss = pg_loss - entropy_loss  # :564-569 (residual_l1 = l2 = 0)
            loss = policy_loss + v_loss * vf_coef  # :572
            optimizer_actor.zero_grad()  # :574-583
            optimizer_critic.zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
            optimizer_actor.step()
            optimizer_critic.step()
            rows.append({"policy_loss": pg_loss.item(), "value_loss": v_loss.item(),
                         "approx_kl": approx_kl.item(), "clip_fraction": clipfrac,
                         "grad_norm": grad_norm.item()})  # fmt: skip
            if target_kl is not None and approx_kl > target_kl:  # :585-593
                early_stop = True
                break
        if early_stop:
            break
    params = {f"actor.{n}": _floats(p) for n, p in policy.actor_mean.named_parameters()}
    params.update({f"critic.{n}": _floats(p) for n, p in policy.critic.named_parameters()})
    return {
        "iteration": k, "num_minibatches": num_minibatches, "update_epochs": update_epochs,
        "target_kl": target_kl, "actor_lr": optimizer_actor.param_groups[0]["lr"],
        "critic_lr": optimizer_critic.param_groups[0]["lr"], "init": init,
        "minibatches": rows, "params": params,
    }  # fmt: skip


def _floats(tensor: torch.Tensor) -> list[float]:
    """A float32 tensor's values, 9 significant digits (enough to round-trip float32)."""
    return [float(f"{x:.9g}") for x in tensor.detach().flatten().tolist()]


def _schedules() -> dict[str, list[float]]:
    """diffusers' cosine schedule factors per iteration (actor: warm-up 5, critic: 0)."""
    from diffusers.optimization import get_scheduler

    out = {}
    for name, warmup in (("actor", WARMUP), ("critic", 0)):
        opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
        sched = get_scheduler(name="cosine", optimizer=opt, num_warmup_steps=warmup,
                              num_training_steps=ITERATIONS)  # fmt: skip
        factors = []
        for _ in range(ITERATIONS):
            factors.append(opt.param_groups[0]["lr"])
            opt.step(), sched.step()
        out[name] = factors
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reference", type=Path, required=True, help="reference repo root")
    parser.add_argument("--out", type=Path, default=Path("tests/golden/resip.json"))
    args = parser.parse_args()
    golden = {
        "reference": REFERENCE, "commit": COMMIT,
        "command": "/work/side/resip/venv/bin/python benchmarks/parity/resip_reference.py "
                   "--reference /work/side/resip/src --out tests/golden/resip.json",
        "torch": torch.__version__, "perm_seed": PERM_SEED, "iterations": ITERATIONS,
        "warmup_iterations": WARMUP, "schedules": _schedules(),
        "cases": {case: _reference_update(args.reference, case) for case in CASES},
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
