"""The ``key=value`` command lines of offline's tools (``rlcore.offline.collect``,
``rlcore.offline.recipe``, ``rlcore.offline.safe_recipe``): one parser, one usage error."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class UsageError(ValueError):
    """A bad command line or setting: the message says what is wrong (a command line shows
    its usage after it)."""


def parse_args(argv: Sequence[str], keys: set[str], required: Sequence[str]) -> dict[str, str]:
    """``key=value`` tokens -> dict; unknown, repeated or missing keys raise UsageError."""
    args: dict[str, str] = {}
    for token in argv:
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise UsageError(f"expected key=value, got '{token}'")
        if key not in keys:
            raise UsageError(f"unknown key '{key}'; valid keys: {', '.join(sorted(keys))}")
        if key in args:
            raise UsageError(f"'{key}' given twice")
        args[key] = value
    missing = [k for k in required if k not in args]
    if missing:
        raise UsageError(f"missing {', '.join(missing)}")
    return args


def number_arg(args: dict[str, str], key: str, kind: type, default: Any = None) -> Any:
    """``args[key]`` as ``kind`` (int or float), ``default`` when absent; else a UsageError."""
    if key not in args:
        return default
    try:
        return kind(args[key])
    except ValueError:
        raise UsageError(f"{key} must be a{'n integer' if kind is int else ' number'}") from None


def seed_arg(args: dict[str, str]) -> int:
    """``seed=`` (default 0): an integer >= 0, as numpy's and gymnasium's seeding take."""
    seed = number_arg(args, "seed", int, 0)
    if seed < 0:
        raise UsageError(f"seed={seed}: must be >= 0")
    return seed


def bool_arg(args: dict[str, str], key: str, default: bool) -> bool:
    """``true/false`` (also 1/0, yes/no) -> bool; anything else is a UsageError."""
    if key not in args:
        return default
    value = args[key].strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise UsageError(f"{key} must be true or false, got '{args[key]}'")
