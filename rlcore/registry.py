"""Algorithm registry: a plain dict from names to where their config, agent and loop live.

Entries are import paths resolved lazily, so rlcore never imports algos/ at import
time (imports point down; only rlcore.train wires things together).
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Any


class UnknownAlgorithmError(ValueError):
    """Raised for an algorithm name that is not registered."""


@dataclass(frozen=True)
class AlgoSpec:
    """Where an algorithm lives and which loop trains it."""

    name: str
    module: str
    agent: str
    config: str
    loop: str  # "off_policy" | "on_policy" | "offline"
    action_spaces: tuple[str, ...] = ("box",)  # kinds it acts in (rlcore.spaces.action_kind)

    @property
    def agent_class(self) -> type:
        return getattr(importlib.import_module(self.module), self.agent)

    @property
    def config_class(self) -> type:
        return getattr(importlib.import_module(self.module), self.config)

    def config_from_dict(self, values: dict[str, Any]) -> Any:
        """Typed config from a plain dict; unknown keys raise a clear error."""
        cls = self.config_class
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in values.items() if k != "name"}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(
                f"unknown {self.name} option(s) {unknown}; valid options: {sorted(names)}"
            )
        converted = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
        return cls(**converted)


ALGORITHMS: dict[str, AlgoSpec] = {
    "sac": AlgoSpec("sac", "algos.sac", "SAC", "SACConfig", "off_policy"),
    "td3": AlgoSpec("td3", "algos.td3", "TD3", "TD3Config", "off_policy"),
    "ppo": AlgoSpec("ppo", "algos.ppo", "PPO", "PPOConfig", "on_policy", ("box", "discrete")),
    "dqn": AlgoSpec("dqn", "algos.dqn", "DQN", "DQNConfig", "off_policy", ("discrete",)),
    "iql": AlgoSpec("iql", "algos.iql", "IQL", "IQLConfig", "offline"),
    "td3_bc": AlgoSpec("td3_bc", "algos.td3_bc", "TD3BC", "TD3BCConfig", "offline"),
    "rebrac": AlgoSpec("rebrac", "algos.rebrac", "ReBRAC", "ReBRACConfig", "offline"),
    "awac": AlgoSpec("awac", "algos.awac", "AWAC", "AWACConfig", "offline"),
    "cql": AlgoSpec("cql", "algos.cql", "CQL", "CQLConfig", "offline"),
    "cal_ql": AlgoSpec("cal_ql", "algos.cal_ql", "CalQL", "CalQLConfig", "offline"),
}


def get(name: str) -> AlgoSpec:
    """The spec registered under ``name`` (case-insensitive)."""
    key = name.lower()
    if key not in ALGORITHMS:
        raise UnknownAlgorithmError(
            f"unknown algorithm '{name}'. Available: {', '.join(sorted(ALGORITHMS))}"
        )
    return ALGORITHMS[key]
