"""Atari 2600 games (``ALE/<Game>-v5``) on ale-py's vector env, preprocessed as CleanRL's
envpool scripts (``dqn_atari_jax.py``, ``ppo_atari_envpool.py``) use them.

    make_vec_env("ALE/Pong-v5", 8)                    # training preprocessing
    make_vec_env("ALE/Pong-v5", 8, evaluation=True)   # raw game scores, whole games

``AtariVectorBackend`` wraps ``ale_py.vector_env.AtariVectorEnv`` (its C++ threads step
the emulators; ``pip install "rlcore[atari]"``, the ROMs ship in the wheel). The
preprocessing is ale-py's own (the envpool conventions): no-op starts (up to 30), frame
skip 4 with max-pooling of the last two frames, 84 x 84 grey, 4 stacked frames (uint8,
``(4, 84, 84)``, oldest first; a reset stack is padded with zero frames), FIRE at reset
where the game needs it, sticky actions off (``repeat_action_probability`` 0: envpool's
default and CleanRL's), 108,000 frames (27,000 steps) an episode at most. Then, as
CleanRL's envpool scripts:

* training (``TRAINING``): a lost life ends the episode for the learner (``terminated``)
  while the game goes on, and rewards are clipped to [-1, 1] (their sign: Atari rewards
  are whole numbers);
* evaluation (``EVALUATION``): whole games, raw scores.

Both forms report each ended game's raw score in ``info["game_return"]`` (NaN in the envs
whose game goes on), so a training run logs ``train/game_return``, the number CleanRL's
scripts log as ``charts/episodic_return`` (envpool's whole-game, unclipped return), beside
its per-life, clipped ``train/episode_return``. The clipping is done here, not by ale-py
(which would hide the raw rewards), with ale-py's own rule (``reward_clipping``: clamp to
[-1, 1]).

Measured with ale-py 0.12.1 (tests/test_atari.py): its ``episodic_life=True`` resets the
whole game at every lost life (the lives never go down), which is not envpool's
``episodic_life``; its ``life_loss_info=True`` is (``terminated`` at each lost life, the
game continuing with one life fewer). ``TRAINING`` uses the latter.

FIRE after a lost life: envpool's fire reset presses FIRE at every episode start, lost
lives included (its episodic life resets the episode there); ale-py's presses it only
when a game is reset. So, where the game has FIRE and ``use_fire_reset`` is on, the step
after a lost life sends FIRE in place of the agent's action (both forms). Without it a
greedy policy that never learned to launch the ball waits out the 108,000 frames
(measured: PPO on Breakout at 100k steps, evaluation episodes of 27,000 steps).

``render_mode="rgb_array"`` (evaluation videos) renders what the agent sees, the newest
84 x 84 grey frame of each env's stack, scaled 4 x (336 x 336 RGB): ale-py's vector env
renders nothing else.

The back end runs with same-step autoreset: where a game was reset, ``info["final_obs"]``
holds the ended game's last observation and ``info["_final_obs"]`` marks the envs, as
gymnasium's vector envs do. At a lost life the game goes on and the observation returned
is the true next one; ale-py still fills ``final_obs`` there, with a stale stack (measured:
not a shift of the last observation), so ``_final_obs`` leaves those envs out: a lost life
is a termination whose lives went down (after a reset the lives go back up). ale-py's vector env exposes no emulator states, so an Atari run's checkpoint
cannot restore the games themselves: ``get_states`` records that, and a resume refuses it
(``set_states``) rather than continue from different games.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import VectorEnv

ATARI_PREFIX = "ALE/"
# ale-py's AtariVectorEnv settings of CleanRL's envpool scripts (envpool's defaults)
COMMON: dict[str, Any] = {
    "img_height": 84,
    "img_width": 84,
    "grayscale": True,
    "stack_num": 4,
    "frameskip": 4,
    "maxpool": True,
    "noop_max": 30,
    "use_fire_reset": True,
    "repeat_action_probability": 0.0,
    "max_num_frames_per_episode": 108_000,
}
TRAINING: dict[str, Any] = {"life_loss_info": True, "reward_clipping": True}
EVALUATION: dict[str, Any] = {"life_loss_info": False, "reward_clipping": False}
OPTIONS = (*COMMON, *TRAINING, "full_action_space")  # what env.kwargs may set


def is_atari(env_id: str) -> bool:
    """Whether ``env_id`` names an Atari game (``ALE/<Game>-v5``)."""
    return env_id.startswith(ATARI_PREFIX)


def atari_game(env_id: str) -> str:
    """ale-py's ROM name of an ``ALE/<Game>-v5`` id (``ALE/SpaceInvaders-v5`` ->
    ``space_invaders``), read from gymnasium's registry entry ale-py makes."""
    try:
        import ale_py
    except ImportError as error:
        raise ImportError(
            f"{env_id} needs ale-py: pip install 'rlcore[atari]' (the ROMs ship with it)"
        ) from error
    gym.register_envs(ale_py)
    if env_id not in gym.registry:
        raise ValueError(f"unknown Atari game {env_id!r} (ale-py registers ALE/<Game>-v5 ids)")
    return str(gym.spec(env_id).kwargs["game"])


class AtariVectorBackend(VectorEnv):
    """``num_envs`` Atari games of ``env_id`` on ale-py's vector env (see the module
    docstring): uint8 ``(stack_num, 84, 84)`` observations, ``Discrete`` actions, float32
    rewards, same-step autoreset. ``evaluation`` picks ``EVALUATION`` over ``TRAINING``;
    ``options`` override any of ``OPTIONS`` (``max_episode_steps`` counts agent steps:
    ``frameskip`` frames each)."""

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        evaluation: bool = False,
        num_threads: int | None = None,
        max_episode_steps: int | None = None,
        render_mode: str | None = None,
        **options: Any,
    ) -> None:
        from ale_py.vector_env import AtariVectorEnv

        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ValueError(f"unknown Atari option(s) {unknown}; the options are {list(OPTIONS)}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(
                f"Atari renders rgb_array frames (the agent's view), not {render_mode}"
            )
        self.render_mode = render_mode
        self.last_obs: np.ndarray | None = None  # what render() shows
        settings = {**COMMON, **(EVALUATION if evaluation else TRAINING), **options}
        if max_episode_steps is not None:
            settings["max_num_frames_per_episode"] = int(max_episode_steps) * settings["frameskip"]
        self.settings = settings
        self.clip_rewards = bool(settings["reward_clipping"])  # done in step(), see above
        self.env_id, self.evaluation = env_id, evaluation
        self.num_envs = int(num_envs)
        self.device: torch.device | None = None  # numpy arrays on the host
        self.ale = AtariVectorEnv(
            atari_game(env_id), self.num_envs, num_threads=num_threads or 0,
            autoreset_mode="SameStep", **{**settings, "reward_clipping": False},
        )  # fmt: skip
        self.single_observation_space = self.ale.single_observation_space
        self.single_action_space = self.ale.single_action_space
        self.observation_space = self.ale.observation_space
        self.action_space = self.ale.action_space
        self.metadata = {**self.ale.metadata, "autoreset_mode": "SameStep"}
        self.frame_stack = int(settings["stack_num"])
        self.lives = np.zeros(self.num_envs, np.int64)  # each game's lives after the last step
        names = [str(action).rsplit(".", 1)[-1] for action in self.ale.ale.get_action_set()]
        fires = settings["use_fire_reset"] and "FIRE" in names
        self.fire_action = names.index("FIRE") if fires else None  # pressed after a lost life
        self.fire_next = np.zeros(self.num_envs, bool)
        self.game_returns = np.zeros(self.num_envs, np.float64)  # raw score of each game so far

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """New games in every env (env ``i`` seeded ``seed + i`` by ale-py)."""
        if options and options.get("reset_mask") is not None:
            raise ValueError("ale-py's vector env resets all its games at once (no reset_mask)")
        obs, info = self.ale.reset(seed=seed)
        self.lives = np.asarray(info["lives"], np.int64).copy()
        self.fire_next[:] = False
        self.game_returns[:] = 0.0
        self.last_obs = obs
        return obs, info

    def step(self, actions: Any):
        actions = np.asarray(actions, dtype=np.int64).reshape(self.num_envs)
        if self.fire_action is not None:
            actions = np.where(self.fire_next, self.fire_action, actions)
        obs, reward, terminated, truncated, info = self.ale.step(actions)
        lives = np.asarray(info["lives"], np.int64)
        lives_down = lives < self.lives  # a lost life (a reset brings the lives back up)
        lost_life = np.asarray(terminated, bool) & lives_down  # the game goes on
        reset = (np.asarray(terminated, bool) | np.asarray(truncated, bool)) & ~lost_life
        self.fire_next = lives_down & ~np.asarray(truncated, bool)
        self.lives = lives.copy()
        self.last_obs = obs
        if "final_obs" in info:
            info["_final_obs"] = reset
        raw = np.asarray(reward, np.float64)
        self.game_returns += raw
        info["game_return"] = np.where(reset, self.game_returns, np.nan)
        self.game_returns[reset] = 0.0
        if self.clip_rewards:
            raw = np.clip(raw, -1.0, 1.0)
        return obs, raw.astype(np.float32), terminated, truncated, info

    def render(self) -> list[np.ndarray] | None:
        """Each env's newest frame as a (336, 336, 3) uint8 image (``render_mode``
        ``rgb_array``; None otherwise or before a reset)."""
        if self.render_mode != "rgb_array" or self.last_obs is None:
            return None
        newest = self.last_obs[:, -1]  # (N, 84, 84) grey (stack_num frames, oldest first)
        big = newest.repeat(4, axis=1).repeat(4, axis=2)
        return list(np.repeat(big[..., None], 3, axis=-1))

    def close_extras(self, **kwargs: Any) -> None:
        self.ale.close()

    # --- rlcore.envs.backend.SimulatorBackend: no emulator states to save or restore
    def get_states(self, env_ids: Sequence[int] | None = None) -> list[dict[str, Any]]:
        ids = range(self.num_envs) if env_ids is None else env_ids
        why = "ale-py's vector env exposes no emulator states"
        return [{"atari": self.env_id, "restorable": False, "why": why} for _ in ids]

    def set_states(self, states: Sequence[Any], env_ids: Sequence[int] | None = None) -> None:
        raise NotImplementedError(
            f"{self.env_id}: ale-py's vector env exposes no emulator states, so an Atari run "
            "cannot continue its games from a checkpoint (a resumed run starts new games: "
            "rlcore.envs.make.set_vec_env_state returns False for these states)"
        )

    def state_table(self, states: Sequence[Any]) -> Any:
        raise NotImplementedError(f"{self.env_id}: no emulator states (see set_states)")

    def restart(self, mask: Any, obs: Any, table: Any = None, rows: Any = None):
        raise NotImplementedError(
            f"{self.env_id}: ale-py's vector env resets all its games at once (no partial "
            "restarts, so no snapshot resets)"
        )
