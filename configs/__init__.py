"""rlcore's Hydra configs (``pkg://rlcore.configs``).

The algorithms' defaults have one source: their config dataclasses.
``register_algorithm_defaults`` stores each one composed in Hydra's ConfigStore as
``algo/<name>_defaults`` (every field at its
dataclass default, plus ``name``; a fine-tuner's head settings null: its pre-trained
checkpoint's; sizes that depend on the device null: the run's device's,
``rlcore.capabilities.DeviceSized``); ``algo/<name>.yaml`` starts from that node and
holds only what the command line runs differently (long runs compile: ``compile: auto``).
Per-env and per-dataset settings live in ``algo_env/`` and ``experiment/``. The composed
``algo`` node is validated into the dataclass by ``rlcore.catalog.Algorithm.config_from_dict``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from importlib import resources
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from rlcore.config import plain  # noqa: F401 - re-exported: configs.plain
from rlcore.settings import register_run_defaults


def algorithm_defaults(name: str) -> dict[str, Any]:
    """The ``algo`` node of algorithm ``name`` at its dataclass defaults, except a
    fine-tuner's head settings: null, "the pre-trained checkpoint's" (``algo.pretrained``;
    rlcore.generative.resolve_head fills them in), so that any value there was set
    explicitly and is checked against the checkpoint; and sizes that depend on the device
    (``DeviceSized``): null, "the run's device's" (rlcore.catalog.Algorithm.sized_for
    fills in those still null), so that any value there was set explicitly."""
    import torch

    from rlcore import catalog
    from rlcore.capabilities import DeviceSized
    from rlcore.generative import declared_head_fields

    spec = catalog.get(name)
    config = spec.config_class()
    fields = {f.name: plain(getattr(config, f.name)) for f in dataclasses.fields(config)}
    if spec.pretrained_head is not None:
        fields.update(dict.fromkeys(declared_head_fields(spec.config_class)))
    if isinstance(config, DeviceSized):  # the same fields on every device
        fields.update(dict.fromkeys(config.device_sizes(torch.device("cpu"))))
    return {"name": name, **fields}


_REGISTERED: set[str] = set()


def register_algorithm_defaults(names: Iterable[str] | None = None) -> None:
    """Store ``algo/<name>_defaults`` for the algorithms ``names`` (every one in the
    catalog when None), once each. Importing an algorithm's config class imports its
    module, so the command line registers only the algorithms it composes
    (``rlcore.train.normalize_overrides``; Hydra's launchers carry the ConfigStore to their
    jobs); code that composes the configs with Hydra's API itself calls this first."""
    from rlcore import catalog

    store = ConfigStore.instance()
    for name in catalog.ALGORITHMS if names is None else names:
        key = catalog.get(name).name
        if key in _REGISTERED:
            continue
        node = algorithm_defaults(key)
        store.store(group="algo", name=f"{key}_defaults", node=node)
        if not resources.files(__name__).joinpath("algo", f"{key}.yaml").is_file():
            # an algorithm without a configs/algo/<name>.yaml runs its defaults as they are
            store.store(group="algo", name=key, node=node)
        _REGISTERED.add(key)
# configs/env/gym.yaml: a gymnasium id's run folder in lower case, as the short names'
# (runs/ppo_lag/safetyhoppervelocity-v1/, not .../SafetyHopperVelocity-v1/)
OmegaConf.register_new_resolver("lower", lambda text: str(text).lower(), replace=True)
# configs/env/atari.yaml: ALE/Pong-v5 -> ale_pong-v5 (one folder, not ALE/ and Pong-v5/)
OmegaConf.register_new_resolver(
    "folder", lambda text: str(text).lower().replace("/", "_"), replace=True
)


register_run_defaults()  # the run's own options (rlcore.settings): no algorithm imported
