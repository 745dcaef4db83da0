"""The catalog: every algorithm rlcore trains, by name, with plain imports.

It sits above the core, beside the composition root (rlcore.train) and the tools that
rebuild agents from checkpoints (rlcore.policies): the core never imports an algorithm,
it receives what it needs (a config class, an agent class, a loaded head) from here.
Each entry's loader imports its algorithm module when the entry is first used, so a run
imports only the algorithm it trains; the imports are plain ``from ... import`` lines that
tests/test_layering.py reads.

Adding an algorithm is one loader and one line of ``ALGORITHMS`` (docs/contributing.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlcore.config import UnknownAlgorithmError, config_from_dict, sized_for

Classes = tuple[type, type]  # (agent class, config class)


@dataclass(frozen=True)
class Algorithm:
    """One algorithm: its name, where its classes come from, what it acts in.
    ``family`` only groups listings (``--help``, the docs); what a run does is its
    config's plan (rlcore.plan.RunPlan)."""

    name: str
    load: Callable[[], Classes] = field(repr=False)
    family: str
    action_spaces: tuple[str, ...] = ("box",)  # kinds it acts in (rlcore.spaces.action_kind)
    # the kind of head ("ddpm" | "flow") its ``algo.pretrained`` holds: a fine-tuner whose
    # unset head settings are read from that checkpoint (rlcore.generative.resolve_head)
    pretrained_head: str | None = None
    # reads image observations through an rlcore.nets encoder it builds (``algo.encoder``)
    images: bool = False
    # learns from images only (DrQ-v2): a task without an image part is refused
    images_only: bool = False

    @property
    def agent_class(self) -> type:
        return _classes(self.load)[0]

    @property
    def config_class(self) -> type:
        return _classes(self.load)[1]

    def config_from_dict(
        self,
        values: dict[str, Any],
        prefix: str = "algo.",
        defaults: Callable[[], tuple[str, dict[str, Any]]] | None = None,
    ) -> Any:
        """The typed config of an ``algo`` node (rlcore.config.config_from_dict)."""
        return config_from_dict(self.config_class, self.name, values, prefix, defaults)

    def sized_for(self, values: dict[str, Any], device: str) -> tuple[dict[str, Any], list[str]]:
        """The ``algo`` node with its device-dependent sizes set (rlcore.config.sized_for)."""
        return sized_for(self.config_class, self.name, values, device)


@functools.cache
def _classes(load: Callable[[], Classes]) -> Classes:
    return load()


# One loader per algorithm module: the import runs when an entry is first used.
def _sac() -> Classes:
    from rlcore.algos.sac import SAC, SACConfig

    return SAC, SACConfig


def _td3() -> Classes:
    from rlcore.algos.td3 import TD3, TD3Config

    return TD3, TD3Config


def _fast_td3() -> Classes:
    from rlcore.algos.fast_td3 import FastTD3, FastTD3Config

    return FastTD3, FastTD3Config


def _ppo() -> Classes:
    from rlcore.algos.ppo import PPO, PPOConfig

    return PPO, PPOConfig


def _dqn() -> Classes:
    from rlcore.algos.dqn import DQN, DQNConfig

    return DQN, DQNConfig


def _iql() -> Classes:
    from rlcore.algos.iql import IQL, IQLConfig

    return IQL, IQLConfig


def _riql() -> Classes:
    from rlcore.algos.riql import RIQL, RIQLConfig

    return RIQL, RIQLConfig


def _td3_bc() -> Classes:
    from rlcore.algos.td3_bc import TD3BC, TD3BCConfig

    return TD3BC, TD3BCConfig


def _rebrac() -> Classes:
    from rlcore.algos.rebrac import ReBRAC, ReBRACConfig

    return ReBRAC, ReBRACConfig


def _awac() -> Classes:
    from rlcore.algos.awac import AWAC, AWACConfig

    return AWAC, AWACConfig


def _cql() -> Classes:
    from rlcore.algos.cql import CQL, CQLConfig

    return CQL, CQLConfig


def _cal_ql() -> Classes:
    from rlcore.algos.cal_ql import CalQL, CalQLConfig

    return CalQL, CalQLConfig


def _famo2o() -> Classes:
    from rlcore.algos.famo2o import FamO2O, FamO2OConfig

    return FamO2O, FamO2OConfig


def _rlpd() -> Classes:
    from rlcore.algos.rlpd import RLPD, RLPDConfig

    return RLPD, RLPDConfig


def _wsrl() -> Classes:
    from rlcore.algos.wsrl import WSRL, WSRLConfig

    return WSRL, WSRLConfig


def _diffusion_bc() -> Classes:
    from rlcore.algos.generative_bc import DiffusionBCConfig, GenerativeBC

    return GenerativeBC, DiffusionBCConfig


def _flow_bc() -> Classes:
    from rlcore.algos.generative_bc import FlowBCConfig, GenerativeBC

    return GenerativeBC, FlowBCConfig


def _dppo() -> Classes:
    from rlcore.algos.dppo import DPPO, DPPOConfig

    return DPPO, DPPOConfig


def _reinflow() -> Classes:
    from rlcore.algos.reinflow import ReinFlow, ReinFlowConfig

    return ReinFlow, ReinFlowConfig


def _resip() -> Classes:
    from rlcore.algos.resip import ResiP, ResiPConfig

    return ResiP, ResiPConfig


def _ppo_lag() -> Classes:
    from rlcore.algos.safe.ppo_lag import PPOLag, PPOLagConfig

    return PPOLag, PPOLagConfig


def _mopo() -> Classes:
    from rlcore.algos.mopo import MOPO, MOPOConfig

    return MOPO, MOPOConfig


def _morec() -> Classes:
    from rlcore.algos.morec import MOREC, MORECConfig

    return MOREC, MORECConfig


def _sac_lag() -> Classes:
    from rlcore.algos.safe.sac_lag import SACLag, SACLagConfig

    return SACLag, SACLagConfig


def _cpo() -> Classes:
    from rlcore.algos.safe.cpo import CPO, CPOConfig

    return CPO, CPOConfig


def _drqv2() -> Classes:
    from rlcore.algos.drqv2 import DrQV2, DrQV2Config

    return DrQV2, DrQV2Config


def _fisor() -> Classes:
    from rlcore.algos.safe.fisor import FISOR, FISORConfig

    return FISOR, FISORConfig


_ONLINE, _OFFLINE, _O2O = "online", "offline", "offline-to-online"
_GENERATIVE, _SAFE = "diffusion / flow", "safe"
ALGORITHMS: dict[str, Algorithm] = {
    entry.name: entry
    for entry in (
        Algorithm("sac", _sac, _ONLINE, images=True),
        Algorithm("td3", _td3, _ONLINE),
        Algorithm("fast_td3", _fast_td3, _ONLINE),
        Algorithm("ppo", _ppo, _ONLINE, ("box", "discrete"), images=True),
        Algorithm("dqn", _dqn, _ONLINE, ("discrete",), images=True),
        Algorithm("drqv2", _drqv2, _ONLINE, images=True, images_only=True),
        Algorithm("iql", _iql, _OFFLINE),
        Algorithm("riql", _riql, _OFFLINE),
        Algorithm("td3_bc", _td3_bc, _OFFLINE),
        Algorithm("rebrac", _rebrac, _OFFLINE),
        Algorithm("awac", _awac, _OFFLINE),
        Algorithm("cql", _cql, _OFFLINE),
        Algorithm("cal_ql", _cal_ql, _OFFLINE),
        Algorithm("mopo", _mopo, _OFFLINE),
        Algorithm("morec", _morec, _OFFLINE),
        Algorithm("famo2o", _famo2o, _O2O),
        Algorithm("rlpd", _rlpd, _O2O, images=True),
        Algorithm("wsrl", _wsrl, _O2O),
        Algorithm("diffusion_bc", _diffusion_bc, _GENERATIVE, images=True),
        Algorithm("flow_bc", _flow_bc, _GENERATIVE, images=True),
        Algorithm("dppo", _dppo, _GENERATIVE, pretrained_head="ddpm", images=True),
        Algorithm("reinflow", _reinflow, _GENERATIVE, pretrained_head="flow"),
        Algorithm("resip", _resip, _GENERATIVE, pretrained_head="ddpm"),
        # constrained (safe) RL: tasks that report info["cost"] (envs/safety.py)
        Algorithm("ppo_lag", _ppo_lag, _SAFE),
        Algorithm("sac_lag", _sac_lag, _SAFE),
        Algorithm("cpo", _cpo, _SAFE),
        Algorithm("fisor", _fisor, _SAFE),
    )
}


def get(name: str) -> Algorithm:
    """The algorithm called ``name`` (case-insensitive)."""
    key = name.lower()
    if key not in ALGORITHMS:
        raise UnknownAlgorithmError(
            f"unknown algorithm '{name}'. Available: {', '.join(sorted(ALGORITHMS))}"
        )
    return ALGORITHMS[key]
