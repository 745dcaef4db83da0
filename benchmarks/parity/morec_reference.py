"""Golden numbers of MOREC's transition filter (tests/golden/morec.json), for
tests/test_morec.py.

Run in a side environment with torch and numpy, outside the repository, on a snapshot of
polixir/morec (``COMMIT``, the authors' OfflineRL-Kit with the filter)::

    /work/side/parity-online/venv/bin/python benchmarks/parity/morec_reference.py \\
        --morec <folder of the morec snapshot> --kit <folder holding offlinerlkit/>

(its OfflineRL-Kit copy lacks ``policy/model_free``, so its ``MOPOPolicy`` runs on
OfflineRL-Kit@e3ce697's ``SACPolicy``, whose ``select_action`` is all the rollout reads)

The reference's discriminators are a download (and their training code is unreleased),
so this builds its ``DiscriminatorEnsemble`` around 3 discriminators with the weights of
``discriminators`` below: its ``EnsembleEncoderVanilla`` ([s, z, a, s' - s] -> 128 ReLU ->
256 ReLU) and ``EnsembleGAILDiscrNet`` (256 ReLU -> 1), its ``DataLoader`` min-max
scaling (ranges below), each discriminator's expert / learner logit. Two cases:

* ``score``: ``historical_transition_reward_multi_batch`` ("prob_mean_clip", clip 1) of
  16 transitions;
* ``rollout``: its ``MOPOPolicy.rollout`` (3 steps from 8 states, state clip 25) with its
  ``EnsembleDynamics`` set as MOREC-MOPO runs it (``select_elite``, 2 draws per elite,
  terminal dynamics reward 0.6, penalty 0.7) on the MOPO golden file's weights
  (benchmarks/parity/mopo_reference.py), every random draw recorded for our side.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mopo_reference import (  # noqa: E402
    ACT,
    OBS,
    PENALTY,
    ROLLOUT_LENGTH,
    initial,
    kit_actor,
    kit_model,
    recorded_normals,
    rollout_starts,
    terminal_fn,
)

COMMIT = "be8a641"
OUT = Path(__file__).resolve().parents[2] / "tests" / "golden" / "morec.json"
DISCRIMINATORS, ENCODER_HIDDEN, EMBEDDING, HEAD_HIDDEN = 3, 128, 256, 256
DRAWS, TERMINAL_REWARD, STATE_CLIP = 2, 0.6, 25.0


def discriminators() -> dict[str, np.ndarray]:
    """Weights (K, in, out) / biases (K, 1, out) of the 4 layers, each discriminator's
    expert / learner logit, the observation and action ranges."""
    rng = np.random.default_rng(5)
    dims = [2 * OBS + 1 + ACT, ENCODER_HIDDEN, EMBEDDING, HEAD_HIDDEN, 1]
    params = {}
    for i, (a, b) in enumerate(zip(dims, dims[1:])):
        bound = 1 / np.sqrt(a)
        params[f"{i}.w"] = rng.uniform(-bound, bound, (DISCRIMINATORS, a, b)).astype(np.float32)
        params[f"{i}.b"] = rng.uniform(-bound, bound, (DISCRIMINATORS, 1, b)).astype(np.float32)
    params["3.w"] *= 20  # logits of order 1, so the clamps act
    params["expert_value"] = np.array([0.4, 0.6, 0.3], np.float32)
    params["learner_value"] = np.array([-0.5, -0.2, -0.4], np.float32)
    params["obs_low"] = (-2.0 - rng.random(OBS)).astype(np.float32)
    params["obs_high"] = (2.0 + rng.random(OBS)).astype(np.float32)
    params["action_low"] = np.full(ACT, -1.0, np.float32)
    params["action_high"] = np.full(ACT, 1.0, np.float32)
    return params


def score_rows() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(6)
    return {
        "obs": rng.standard_normal((16, OBS)).astype(np.float32),
        "action": rng.uniform(-1, 1, (16, ACT)).astype(np.float32),
        "next_obs": rng.standard_normal((16, OBS)).astype(np.float32),
    }


def build_ensemble(morec: dict, params: dict[str, np.ndarray]):
    """The reference's DiscriminatorEnsemble around ``params`` (its loader needs the
    unreleased parameter files, so its attributes are set here as the loader sets them)."""
    encoder = morec["EnsembleEncoderVanilla"](OBS + 1 + ACT, OBS, DISCRIMINATORS, EMBEDDING,
                                              [ENCODER_HIDDEN], ["relu", "relu"])  # fmt: skip
    head = morec["EnsembleGAILDiscrNet"](
        EMBEDDING, DISCRIMINATORS, [HEAD_HIDDEN], ["relu", "linear"]
    )
    layers = [*encoder.encoder.model.layer_list, *head.model.model.layer_list]
    with torch.no_grad():
        for i, layer in enumerate(layers):
            layer.weight.copy_(torch.from_numpy(params[f"{i}.w"]))
            layer.bias.copy_(torch.from_numpy(params[f"{i}.b"]))
    data = morec["DataLoader"].__new__(morec["DataLoader"])
    data.obs_min, data.obs_max = params["obs_low"], params["obs_high"]
    data.act_min, data.act_max = params["action_low"], params["action_high"]
    data.obs_min_tensor, data.obs_max_tensor = map(torch.from_numpy, (data.obs_min, data.obs_max))
    data.act_min_tensor, data.act_max_tensor = map(torch.from_numpy, (data.act_min, data.act_max))
    data.min_post_normal_value, data.max_post_normal_value = -0.8, 0.8
    data.min_post_normal_value_act, data.max_post_normal_value_act = -1.0, 1.0
    ensemble = morec["DiscriminatorEnsemble"].__new__(morec["DiscriminatorEnsemble"])
    ensemble.discriminator_restrain = types.SimpleNamespace(expert_data=data, delta_input=True)
    ensemble.encoder, ensemble.discriminator = encoder, head
    ensemble.mask_tensor = torch.arange(DISCRIMINATORS)
    ensemble.expert_value_tensor = torch.from_numpy(params["expert_value"])
    ensemble.learner_value_tensor = torch.from_numpy(params["learner_value"])
    ensemble.max_expert_value, ensemble.minimum_learner_value = 1.0, 0.0  # load_min_max False
    ensemble.expert_data, ensemble.device = data, torch.device("cpu")
    return ensemble


def score_case(morec: dict, ensemble) -> dict:
    rows = score_rows()
    data = ensemble.expert_data
    obs = torch.from_numpy(data.normalize_obs(rows["obs"]))
    action = torch.from_numpy(data.normalize_act(rows["action"]))
    next_obs = torch.from_numpy(data.normalize_obs(rows["next_obs"]))
    z = torch.zeros(len(obs), 1)
    reward = morec["historical_transition_reward_multi_batch"](
        ensemble, obs, z, action, next_obs, batch_num=4, clip_value=1.0
    )
    return {"reward": reward[:, 0].numpy().round(9).tolist()}


def rollout_case(morec: dict, ensemble) -> dict:
    from offlinerlkit.modules import ActorProb, TanhDiagGaussian  # noqa: PLC0415
    from offlinerlkit.modules.dynamics_module import EnsembleDynamicsModel  # noqa: PLC0415
    from offlinerlkit.nets import MLP  # noqa: PLC0415
    from offlinerlkit.utils.scaler import StandardScaler  # noqa: PLC0415

    kit = dict(MLP=MLP, ActorProb=ActorProb, TanhDiagGaussian=TanhDiagGaussian,
               EnsembleDynamicsModel=EnsembleDynamicsModel, StandardScaler=StandardScaler)  # fmt: skip
    params = initial()
    actor = kit_actor(kit, params)
    model, scaler = kit_model(kit, params)
    dynamics = morec["EnsembleDynamics"](
        model, torch.optim.Adam(model.parameters()), scaler, terminal_fn, penalty_coef=PENALTY,
        dynamics_rewards=ensemble, reward_use_type="select_elite",
        resample_num_in_transition=DRAWS, d_clip=1.0, reward_infer_batch_num=4,
        terminal_dynamics_reward=TERMINAL_REWARD,
    )  # fmt: skip
    critic = torch.nn.Linear(1, 1)  # the rollout never reads the critics
    optim = torch.optim.Adam(critic.parameters())
    policy = morec["MOPOPolicy"](dynamics, actor, critic, critic, optim, optim, optim,
                        state_clip=STATE_CLIP)  # fmt: skip
    rng = np.random.default_rng(7)
    record: dict[str, list] = {"policy": [], "model": []}
    from torch.distributions import normal as normal_module  # noqa: PLC0415

    standard_normal, model_normal = recorded_normals(rng, record)

    normal_module._standard_normal = standard_normal
    np.random.normal = model_normal
    transitions, _ = policy.rollout(rollout_starts(), ROLLOUT_LENGTH)
    return {
        "draws": {k: [v.tolist() for v in values] for k, values in record.items()},
        "transitions": {
            k: np.asarray(v, dtype=np.float64).round(9).tolist() for k, v in transitions.items()
        },
    }


def load(path: Path, name: str) -> types.ModuleType:
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--morec", type=Path, required=True)
    parser.add_argument("--kit", type=Path, required=True, help="OfflineRL-Kit (its SACPolicy)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    names = ("gym", "gym.envs", "gym.envs.mujoco", "gym.logger", "d4rl", "d4rl.gym_mujoco",
             "mujoco_py", "smart_logger", "smart_logger.parameter",
             "smart_logger.parameter.ParameterTemplate2", "psutil", "neorl")  # fmt: skip
    for name in names:  # imported for training and logging only
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["gym.envs.mujoco"].mujoco_env = types.SimpleNamespace(MujocoEnv=object)
    sys.modules["gym"].Env = object
    sys.modules["gym"].spaces = types.SimpleNamespace(Space=object, Box=object)
    sys.modules["smart_logger"].Logger = object
    sys.modules["smart_logger.parameter.ParameterTemplate2"].ParameterTemplate = object
    sys.path.insert(0, str(args.morec.resolve()))
    from models import discriminator_ensemble_loader as loader  # noqa: PLC0415
    from models.DataLoader import DataLoader  # noqa: PLC0415
    from models.ensemble_discriminator_net import EnsembleGAILDiscrNet  # noqa: PLC0415
    from models.ensemble_encoder import EnsembleEncoderVanilla  # noqa: PLC0415
    from offlinerlkit.dynamics.ensemble_dynamics import EnsembleDynamics  # noqa: PLC0415

    # its offlinerlkit lacks policy/model_free (SACPolicy): the package's __init__ cannot
    # run, so its MOPOPolicy is loaded by path on OfflineRL-Kit's SACPolicy (``--kit``)
    policy_package = types.ModuleType("offlinerlkit.policy")
    policy_package.__path__ = [str(args.morec / "offlinerlkit" / "policy")]
    sys.modules["offlinerlkit.policy"] = policy_package
    from offlinerlkit.policy.base_policy import BasePolicy  # noqa: PLC0415

    policy_package.BasePolicy = BasePolicy
    sac = load(args.kit / "offlinerlkit" / "policy" / "model_free" / "sac.py", "kit_sac")
    policy_package.SACPolicy = sac.SACPolicy
    mopo = load(args.morec / "offlinerlkit" / "policy" / "model_based" / "mopo.py", "morec_mopo")
    morec = dict(MOPOPolicy=mopo.MOPOPolicy, DiscriminatorEnsemble=loader.DiscriminatorEnsemble, DataLoader=DataLoader,
                 EnsembleGAILDiscrNet=EnsembleGAILDiscrNet,
                 EnsembleEncoderVanilla=EnsembleEncoderVanilla, EnsembleDynamics=EnsembleDynamics,
                 historical_transition_reward_multi_batch=loader.historical_transition_reward_multi_batch)  # fmt: skip
    torch.set_num_threads(1)
    ensemble = build_ensemble(morec, discriminators())
    golden = {
        "reference": f"github.com/polixir/morec@{COMMIT} EnsembleDynamics.step (select_elite)",
        "torch": torch.__version__,
        "cases": {"score": score_case(morec, ensemble), "rollout": rollout_case(morec, ensemble)},
    }
    args.out.write_text(json.dumps(golden, separators=(",", ":")) + "\n")
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e3:.0f} KB)")


if __name__ == "__main__":
    main()
