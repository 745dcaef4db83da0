"""Environments: vectorised gymnasium/MuJoCo back ends and environment-side wrappers."""

from rlcore.envs.make import (
    SHORT_NAMES,
    UnknownEnvError,
    get_vec_env_state,
    make_vec_env,
    resolve_env_id,
    set_vec_env_state,
)

__all__ = [
    "SHORT_NAMES",
    "UnknownEnvError",
    "get_vec_env_state",
    "make_vec_env",
    "resolve_env_id",
    "set_vec_env_state",
]
