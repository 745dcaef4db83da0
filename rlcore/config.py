"""The config layer: the values a run's config holds, typed and checked.

``config_from_dict`` turns a plain ``algo`` node into its config dataclass, refusing
unknown keys, values of the wrong type and out-of-range sizes or rates with one
``ConfigError`` that names the key and the fix; ``coerce`` / ``check_value`` are the rules
it applies (also to the run's own settings, rlcore.settings). Nothing here knows an
algorithm: the catalog (rlcore.catalog) hands over the config class.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable
from typing import Any, Union


class UnknownAlgorithmError(ValueError):
    """Raised for an algorithm name that is not in the catalog."""


class ConfigError(ValueError):
    """A config value of the wrong type or out of range; the message names the fix."""


def config_from_dict(
    cls: type,
    name: str,
    values: dict[str, Any],
    prefix: str = "algo.",
    defaults: Callable[[], tuple[str, dict[str, Any]]] | None = None,
) -> Any:
    """The config dataclass ``cls`` (algorithm ``name``'s) from a plain dict. Unknown keys, values of the wrong type and
    out-of-range sizes/rates raise ``ConfigError`` naming the key and the fix.

    The message of a bad value names the value to go back to: the config dataclass's
    default, or, with ``defaults``, what its call returns: ``(where, values)``, the
    values the run's own config files give (e.g. ``configs/algo_env/dqn_cartpole.yaml``
    sets DQN's ``lr`` to 2.3e-3 on CartPole) and the words naming them, e.g.
    ``"for dqn on CartPole-v1"``. It is called only to write such a message."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    values = {k: v for k, v in values.items() if k != "name"}
    unknown = sorted(set(values) - set(fields))
    for key in unknown:
        renamed = RENAMED_OPTIONS.get(key)
        if renamed is not None and renamed[0] in fields:
            raise ConfigError(
                f"{prefix}{key} is now {prefix}{renamed[0]} for {name} ({renamed[1]})"
            )
    if unknown:
        raise ConfigError(f"unknown {name} option(s) {unknown}; valid options: {sorted(fields)}")
    converted = {}
    for key, value in values.items():
        try:
            converted[key] = check_value(key, coerce(value, hints[key]))
        except (TypeError, ValueError) as error:
            example = _default_example(fields[key], prefix, defaults)
            raise ConfigError(f"{prefix}{key}={value!r}: {error}{example}") from None
    try:
        return cls(**converted)
    except ValueError as error:  # the config's own checks across options (__post_init__)
        raise ConfigError(f"{prefix.rstrip('.')}={name}: {error}") from None


def sized_for(
    cls: type, name: str, values: dict[str, Any], device: str
) -> tuple[dict[str, Any], list[str]]:
    """The ``algo`` node ``values`` of algorithm ``name`` (config dataclass ``cls``) with the sizes left null set for ``device``, as the
    run records them, and the note to log when they are not the dataclass defaults (a
    CPU's sizes); an algorithm without device-dependent sizes
    (``rlcore.capabilities.DeviceSized``) gets ``values`` back unchanged."""
    import torch

    from rlcore.capabilities import DeviceSized

    config = cls()
    if not isinstance(config, DeviceSized):
        return values, []
    sizes = config.device_sizes(torch.device(device))
    unset = {name: plain(value) for name, value in sizes.items() if values.get(name) is None}
    defaults = {f.name: plain(f.default) for f in dataclasses.fields(config)}
    if all(defaults[name] == value for name, value in unset.items()):
        return {**values, **unset}, []
    chosen = " ".join(f"algo.{name}={override_text(v)}" for name, v in unset.items())
    theirs = " ".join(f"algo.{name}={override_text(defaults[name])}" for name in unset)
    note = (
        f"{name} on device={device}: {chosen} (sized for this device; the defaults "
        f"are {theirs}). Set any of them to override."
    )
    return {**values, **unset}, [note]


# Options renamed so that one name has one meaning: old name -> (new name, why).
RENAMED_OPTIONS = {
    "normalize_reward": (
        "normalize_reward_by_returns",
        "dataset and online rewards x 1000 / (max - min dataset episode return); "
        "normalize_reward is the online algorithms' running-std env reward scaling",
    ),
}


def override_text(value: Any) -> str:
    """``value`` as a Hydra override writes it (``[256,256,256]``, ``4``, ``relu``, ``null``)."""
    if value is None:
        return "null"
    if isinstance(value, list | tuple):
        return "[" + ",".join(override_text(v) for v in value) + "]"
    return str(value)


def _has_default(field: dataclasses.Field) -> bool:
    return field.default is not dataclasses.MISSING


def _default_example(
    field: dataclasses.Field,
    prefix: str,
    defaults: Callable[[], tuple[str, dict[str, Any]]] | None,
) -> str:
    """`` (default <prefix><key>=<value>)`` for a bad value's message: the run's own
    default (``defaults``, see ``AlgoSpec.config_from_dict``) where it gives one, else the
    config dataclass's; empty when neither has one."""
    if defaults is not None:
        try:
            where, values = defaults()
        except Exception:  # noqa: BLE001 - the message falls back to the dataclass default
            where, values = "", {}
        if field.name in values:
            return f" (default {where}: {prefix}{field.name}={values[field.name]})"
    return f" (default {prefix}{field.name}={field.default})" if _has_default(field) else ""


def _type_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def plain(value: Any) -> Any:
    """``value`` as a config node (Hydra / OmegaConf) holds it: tuples become lists
    (recursively)."""
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def coerce(value: Any, hint: Any) -> Any:
    """``value`` converted to the annotated type ``hint`` (ints may be given as integral
    floats such as ``1e5``, floats as ints; lists become tuples), else ``TypeError``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or isinstance(hint, typing.TypeVar):
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for option in args:
            if option is type(None):
                continue
            try:
                return coerce(value, option)
            except TypeError:
                continue
        names = " or ".join("null" if a is type(None) else _type_name(a) for a in args)
        raise TypeError(f"expected {names}")
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise TypeError("expected true or false")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise TypeError("expected an integer")
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise TypeError("expected a number")
    if hint is str:
        if isinstance(value, str):
            return value
        raise TypeError("expected a string")
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise TypeError("expected a list, e.g. [256,256]")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(coerce(v, args[0]) for v in value)
        if len(args) != len(value):
            raise TypeError(f"expected a list of {len(args)} values")
        return tuple(coerce(v, a) for v, a in zip(value, args))
    return value


# Name rules for ranges, shared by every algorithm's config (no per-algorithm tables):
# sizes, counts and learning rates must be positive; discounts and averaging rates lie
# in (0, 1]; warm-up lengths, coefficients and noise scales are non-negative.
_POSITIVE_NAMES = {
    "total_steps",
    "rollout_steps",
    "updates_per_step",
    "updates_per_vector_step",
    "cql_n_actions",
}
_POSITIVE_SUFFIXES = ("_lr", "_size", "_frequency", "_epochs", "_minibatches")
_UNIT_NAMES = {"gamma", "tau", "gae_lambda"}
_NONNEGATIVE_NAMES = {
    "learning_starts",
    "warmup_vector_steps",
    "bc_steps",
    "noise_clip",
    "max_grad_norm",
}
_NONNEGATIVE_SUFFIXES = ("_coef", "_noise")


PRECISIONS = ("float32", "bf16")  # an algorithm's ``precision`` (rlcore.utils.mixed_precision)


def check_value(key: str, value: Any) -> Any:
    """``value`` itself when it is in the range ``key``'s name implies, else ``ValueError``."""
    if isinstance(value, bool) or value is None:
        return value
    if key == "precision" and value not in PRECISIONS:
        raise ValueError(f"choose from {', '.join(PRECISIONS)}")
    if key in ("hidden", "critic_hidden") and isinstance(value, tuple):
        if any(width <= 0 for width in value):  # [] is a linear head (DQN after an encoder)
            raise ValueError("layer widths must be positive integers, e.g. [256,256]")
        return value
    if not isinstance(value, int | float):
        return value
    if isinstance(value, float) and math.isnan(value):
        raise ValueError("must be a number, not nan")
    positive = (
        key in _POSITIVE_NAMES
        or key == "lr"
        or key.startswith("num_")
        or key.endswith(_POSITIVE_SUFFIXES)
    )
    if positive and not value > 0:
        raise ValueError("must be > 0")
    if key in _UNIT_NAMES and not 0 < value <= 1:
        raise ValueError("must lie in (0, 1]")
    if (key in _NONNEGATIVE_NAMES or key.endswith(_NONNEGATIVE_SUFFIXES)) and value < 0:
        raise ValueError("must be >= 0")
    return value
