"""The run's own settings, typed: every top-level option of ``python -m rlcore.train``
(seeds, budgets, evaluation, checkpoints, threads, the env, the dataset, distributed
actors, snapshot reset, the logger) as a dataclass field with its default, its rule and
its help, stated once. The algorithm's options are its config dataclass (rlcore.catalog).

The defaults reach Hydra through its ConfigStore (``register_run_defaults``: the
``run_defaults`` node configs/config.yaml starts from, ``env/env_defaults`` and
``logger/logger_defaults`` that each env and logger file starts from), as the algorithms'
do; ``run_settings`` turns the composed config
into ``RunSettings``, refusing unknown keys and values of the wrong type or out of range
with one ``ConfigError`` that names the key and the rule. Only this layer reads a config
by key: everything past it reads typed fields.
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from rlcore.config import ConfigError, coerce
from rlcore.envs.make import BACKENDS
from rlcore.threads import AUTO
from rlcore.threads import RULE as THREADS_RULE

Rule = tuple[Callable[[Any], bool], str]  # (check, what it asks in words)


def option(default: Any = dataclasses.MISSING, help: str = "", rule: Rule | None = None,
           **kwargs: Any) -> Any:  # fmt: skip
    """A settings field: its default, its ``--help`` line and its rule."""
    metadata = {"help": help, "rule": rule}
    if isinstance(default, dict | list):
        return field(default_factory=lambda: type(default)(default), metadata=metadata, **kwargs)
    return field(default=default, metadata=metadata, **kwargs)


def _torch_device(name: str) -> bool:
    try:
        torch.device(name)
    except RuntimeError:
        return False
    return True


AT_LEAST_1: Rule = (lambda v: v >= 1, ">= 1")
POSITIVE: Rule = (lambda v: v > 0, "> 0")
NON_NEGATIVE: Rule = (lambda v: v >= 0, ">= 0")


@dataclass(frozen=True)
class EnvSettings:
    """``env.*``: the task and how it is simulated (configs/env/<name>.yaml name it)."""

    name: str = option(help="the run folder's name for the env (lower case)")
    id: str = option(help="the gymnasium id")
    num_envs: int = option(1, "parallel sub-environments", AT_LEAST_1)
    backend: str = option("auto", "auto: native where available (sync for rendered, or "
                          "flattened robot-task, observations), else sync | native | sync | "
                          "async | mjx (JAX; device=cuda for GPUs)",
                          (lambda v: v in BACKENDS, f"one of {', '.join(BACKENDS)}"))  # fmt: skip
    mjx_impl: str = option("jax", "backend=mjx: jax | warp (MuJoCo Warp; rlcore[warp])",
                           (lambda v: v in ("jax", "warp"), "jax or warp"))  # fmt: skip
    max_episode_steps: int | None = option(
        None, "null: the environment's own time limit",
        (lambda v: v is None or v >= 1, ">= 1 or null"),
    )  # fmt: skip
    clip_obs: float = option(10.0, "clip of normalised observations (when the algo normalises)",
                             POSITIVE)  # fmt: skip
    clip_reward: float = option(10.0, "clip of normalised rewards (when the algo normalises)",
                                POSITIVE)  # fmt: skip
    kwargs: dict[str, Any] = option({}, "extra gymnasium.make keyword arguments")
    flatten_obs: bool = option(False, "flatten Dict/Tuple observations (goal-conditioned "
                               "tasks) into one vector")  # fmt: skip
    obs: str = option("state", "state | pixels | state+pixels: a MuJoCo task's camera image "
                      "(envs/pixels.py; sync / async / native back ends)",
                      (lambda v: v in ("state", "pixels", "state+pixels"),
                       "state, pixels or state+pixels"))  # fmt: skip
    camera: str | None = option(None, "obs=pixels: the model's camera (null: track, or the "
                                "free camera)")  # fmt: skip
    image_size: int = option(84, "obs=pixels: the rendered image's side in pixels", AT_LEAST_1)
    frame_stack: int = option(1, "obs=pixels: images stacked in each observation", AT_LEAST_1)


@dataclass(frozen=True)
class LoggerSettings:
    """``logger.*`` (configs/logger/: default, quiet)."""

    tensorboard: bool = option(True, "TensorBoard events under <run dir>/tb")
    csv: bool = option(True, "train.csv, eval.csv, time.csv in the run dir")
    console: bool = option(True, "progress line on stdout")
    progress_interval_s: float = option(10.0, "seconds between progress lines (0: every step)",
                                        NON_NEGATIVE)  # fmt: skip


@dataclass(frozen=True)
class DistributedSettings:
    """``distributed.*``: actor-learner on Ray (pip install "rlcore[ray]"; docs/distributed.md)."""

    actors: int = option(0, "actors stepping their own envs (env.num_envs each; PPO: "
                         "synchronous rollout workers); 0: one process",
                         (lambda v: v >= 0, ">= 0 (0: one process)"))  # fmt: skip
    publish_every: int = option(1, "learner updates between the weights it publishes",
                                AT_LEAST_1)  # fmt: skip
    batch_steps: int = option(16, "vector steps an actor collects per batch it sends",
                              AT_LEAST_1)  # fmt: skip
    address: str | None = option(None, "null: local Ray bound to 127.0.0.1 (no dashboard); "
                                 "auto: the Ray cluster of this node")  # fmt: skip
    resources: dict[str, float] = option({}, "custom Ray resources each actor needs, e.g. "
                                         "{robot: 1} places it on the robot's node")  # fmt: skip
    outbox: int = option(0, "0: actors step when the learner asks; N: act continuously at the "
                         "env's rate, keep up to N vector steps, drop the oldest beyond",
                         (lambda v: v >= 0, ">= 0 (0: lockstep actors)"))  # fmt: skip

    @classmethod
    def from_config(cls, node: dict[str, Any] | None) -> DistributedSettings:
        """From a ``distributed`` node (absent: single process)."""
        return typed(cls, dict(node or {}), "distributed.")


@dataclass(frozen=True)
class CorruptionSettings:
    """``corruption.*``: RIQL's corruption of the offline dataset (rlcore/offline/
    corruption.py), off while kind is null; recorded in the run's meta.json."""

    kind: str | None = option(None, "obs | action | reward | dynamics (next observations); "
                              "null: the dataset as recorded",
                              (lambda v: v in (None, "obs", "action", "reward", "dynamics"),
                               "null or one of obs, action, reward, dynamics"))  # fmt: skip
    mode: str = option("random", "random | adversarial (obs / action / dynamics: against "
                       "corruption.critic)", (lambda v: v in ("random", "adversarial"),
                                              "random or adversarial"))  # fmt: skip
    rate: float = option(0.3, "fraction of rows corrupted",
                         (lambda v: 0 <= v <= 1, "in [0, 1]"))  # fmt: skip
    scale: float = option(1.0, "RIQL's corruption range (in stds of each column; rewards: "
                          "U(-30 scale, 30 scale) random, r * -scale adversarial)",
                          NON_NEGATIVE)  # fmt: skip
    seed: int = option(0, "draws the rows and the noise", NON_NEGATIVE)
    critic: str | None = option(None, "adversarial: a run dir / .pt of an agent trained on the "
                                "clean data whose critic is attacked (algo=iql)")  # fmt: skip


@dataclass(frozen=True)
class SnapshotOptions:
    """``snapshot.*``: S3RL snapshot reset (envs/snapshot.py), off while teacher is null."""

    teacher: str | None = option(None, "rlcore run dir / checkpoint (rolled out here) or a "
                                 "snapshots .npz file")  # fmt: skip
    episodes: int = option(10, "teacher episodes (a stochastic teacher samples)", AT_LEAST_1)
    every: int = option(10, "env steps between snapshots", AT_LEAST_1)
    keep_best: int | None = option(None, "keep only the snapshots of this many best teacher "
                                   "episodes")  # fmt: skip
    selection: str = option("kmeans", "kmeans: a cluster uniformly, then a snapshot in it | "
                            "uniform (ablation)")  # fmt: skip
    clusters: int | None = option(None, "k of the k-means on value labels; null: sac 4, "
                                  "td3 / ppo 6 (paper), else 4")  # fmt: skip
    truncate_after: int | None = option(100, "snapshot episodes are truncated after this many "
                                        "steps; null: never (ablation)")  # fmt: skip
    switch_after: int = option(100_000, "env steps (all sub-envs) with snapshot resets, then "
                               "ordinary resets", NON_NEGATIVE)  # fmt: skip


@dataclass(frozen=True)
class HerSettings:
    """``her=none | future | final | episode``: hindsight relabelling of goals (rlcore.her)."""

    strategy: str = option("none", "none | future | final | episode: where a relabelled "
                           "goal comes from in its episode",
                           (lambda v: v in ("none", "future", "final", "episode"),
                            "one of none, future, final, episode"))  # fmt: skip
    k: int = option(4, "relabelled goals per real one (4: 80% of a batch)", AT_LEAST_1)


@dataclass(frozen=True)
class RunSettings:
    """The top-level options of a run (``algo`` is the algorithm's own config)."""

    algo: dict[str, Any] = option(help="the algorithm's options (algo=<name>: its config)")
    env: EnvSettings = option(help="the environment (env=<name>)")
    total_steps: int = option(help="env steps (summed over sub-envs; offline: gradient steps); "
                              "the algorithm's total_steps", rule=POSITIVE)  # fmt: skip
    run_dir: str = option(help="where the run is written")
    logger: LoggerSettings = option(LoggerSettings(), "logger=default | quiet")
    her: HerSettings = option(HerSettings(), "her=none | future | final | episode "
                              "(goal-conditioned tasks, replay runs)")  # fmt: skip
    seed: int = option(0, "seeds python, numpy, torch, the envs and the buffer sampler",
                       NON_NEGATIVE)  # fmt: skip
    device: str = option("cpu", "cpu | cuda | cuda:0 ...",
                         (_torch_device, "a torch device: cpu, cuda, cuda:N"))  # fmt: skip
    threads: int | str | None = option(
        AUTO, "torch threads: auto = 1 (fair on a busy machine; docs/cli.md) | N | null "
        "(torch's default: all cores)",
        (lambda v: v in (None, AUTO) or isinstance(v, int) and v >= 1, THREADS_RULE),
    )  # fmt: skip
    eval_every: int = option(10_000, "env steps between deterministic evaluations",
                             (lambda v: v >= 0, ">= 0 (0: evaluate at the end only)"))  # fmt: skip
    eval_episodes: int = option(10, "episodes per evaluation", AT_LEAST_1)
    eval_envs: int = option(5, "parallel envs used for evaluation", AT_LEAST_1)
    eval_video_every: int = option(
        0, "record one evaluation episode (MP4 in <run>/videos, GIF in TensorBoard) every K "
        "evaluations; 0: never (pip install rlcore[video])",
        (lambda v: v >= 0, ">= 0 (0: no evaluation videos)"),
    )  # fmt: skip
    checkpoint_every: int = option(50_000, "env steps between checkpoints (always one at the "
                                   "end)", (lambda v: v >= 0, ">= 0 (0: by time and at the "
                                            "end only)"))  # fmt: skip
    checkpoint_every_s: float = option(300.0, "also checkpoint after this many seconds (the "
                                       "first after at most 60 s; 0: by steps only); "
                                       "Ctrl-C/SIGTERM save too",
                                       (lambda v: v >= 0, ">= 0 (0: by steps only)"))  # fmt: skip
    keep_agent_snapshots: bool = option(True, "also keep an agent-only file (no optimiser "
                                        "states) per checkpoint")  # fmt: skip
    log_every: int = option(1_000, "env steps between train-metric rows (episode returns: "
                            "every episode)", POSITIVE)  # fmt: skip
    stop_at_return: float | None = option(None, "stop once an evaluation's mean return "
                                          "reaches this")  # fmt: skip
    stop_at_success: float | None = option(
        None, "stop once an evaluation's success rate reaches this (tasks that report "
        "info['is_success'])", (lambda v: v is None or 0 < v <= 1, "in (0, 1] or null"),
    )  # fmt: skip
    stop_after_s: float | None = option(
        None, "stop (evaluate, checkpoint) after this many seconds of training (evaluations, "
        "checkpoints, compilation not counted; summed over resumes)",
        (lambda v: v is None or v > 0, "> 0 (seconds) or null"),
    )  # fmt: skip
    dataset: str | None = option(None, "offline / offline-to-online algorithms: Minari id, "
                                 "D4RL .hdf5 path or Minari folder")  # fmt: skip
    resume: str | None = option(None, "a run dir (or .pt) to continue from its latest "
                                "checkpoint")  # fmt: skip
    init_from: str | None = option(None, "a finished run dir (or .pt) whose agent starts this "
                                   "run: skips offline pre-training")  # fmt: skip
    distributed: DistributedSettings = option(DistributedSettings(), "actor-learner on Ray")
    snapshot: SnapshotOptions = option(SnapshotOptions(), "S3RL snapshot reset")
    corruption: CorruptionSettings = option(CorruptionSettings(), "RIQL's dataset corruption")


# The defaults that are interpolations of other keys (Hydra resolves them when composing)
INTERPOLATED = {
    "total_steps": "${algo.total_steps}",
    "run_dir": "runs/${algo.name}/${env.name}/${now:%Y-%m-%d_%H-%M-%S}",
}
# Config keys that change tensor shapes or the meaning of saved state: a resumed run must
# match the checkpoint on these.
SHAPE_FIELDS = (
    "algo.name", "env.id", "env.num_envs", "seed", "algo.hidden", "algo.actor_hidden",
    "algo.critic_hidden", "algo.num_critics", "algo.num_atoms", "algo.layer_norm",
    "algo.activation", "algo.buffer_size", "algo.rollout_steps", "algo.normalize_obs",
    "algo.normalize_reward", "algo.normalize_reward_by_returns", "algo.normalize_states",
    "algo.deterministic_actor", "algo.dueling", "algo.offline_data", "dataset", "init_from",
    "her.strategy",
)  # fmt: skip


def typed(cls: type, node: dict[str, Any], prefix: str = "") -> Any:
    """The settings dataclass ``cls`` from a config node: unknown keys, values of the
    wrong type and values against a field's rule raise one ``ConfigError`` naming the
    dotted key; absent keys take the field's default; nested settings are typed alike."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(node) - set(fields))
    if unknown:
        where = f"{prefix.rstrip('.')} " if prefix else ""
        raise ConfigError(
            f"unknown {where}option(s) {[prefix + k for k in unknown]}; the {where or 'top-level '}"
            f"options are {sorted(prefix + k for k in fields)}"
        )
    values = {}
    for name, value in node.items():
        hint, key = hints[name], f"{prefix}{name}"
        if dataclasses.is_dataclass(hint):
            values[name] = value if isinstance(value, hint) else typed(hint, dict(value or {}),
                                                                         f"{key}.")  # fmt: skip
            continue
        rule = fields[name].metadata.get("rule")
        try:
            converted = coerce(value, hint)
        except TypeError as error:  # the rule says which values the option takes
            allowed = f" ({rule[1]})" if rule else ""
            raise ConfigError(f"{key}={value!r}: {error}{allowed}") from None
        bad_float = isinstance(converted, float) and converted != converted
        if bad_float or (rule is not None and converted is not None and not rule[0](converted)):
            raise ConfigError(f"{key}={value!r}: must be {rule[1] if rule else 'a number'}")
        if rule is not None and converted is None and not rule[0](converted):
            raise ConfigError(f"{key}={value!r}: must be {rule[1]}")
        values[name] = converted
    try:
        return cls(**values)
    except TypeError as error:  # a required field the config lacks
        raise ConfigError(f"{prefix or 'the config '}{error}") from None


def algorithm_name(cfg_dict: dict[str, Any]) -> str:
    """The name of the algorithm a composed config trains (``algo.name``)."""
    try:
        return str(cfg_dict["algo"]["name"])
    except (KeyError, TypeError):
        raise ConfigError("the config names no algorithm: pass algo=<name>") from None


def recorded_env(record: dict[str, Any]) -> EnvSettings:
    """The env settings a saved run recorded (its config.yaml / a checkpoint's ``config``);
    options an older run did not record take their defaults."""
    node = {"name": "", "id": "", **dict(record.get("env") or {})}
    known = {item.name for item in dataclasses.fields(EnvSettings)}
    return typed(EnvSettings, {k: v for k, v in node.items() if k in known}, "env.")


def run_settings(cfg_dict: dict[str, Any]) -> RunSettings:
    """The composed config's ``RunSettings`` (``algo`` kept as its plain node)."""
    return typed(RunSettings, cfg_dict)


def defaults_node(cls: type) -> dict[str, Any]:
    """The config node of a settings dataclass's defaults (nested ones nested; a field
    without a default left out, or its interpolation when it has one)."""
    node: dict[str, Any] = {}
    for item in dataclasses.fields(cls):
        if item.name in INTERPOLATED and cls is RunSettings:
            node[item.name] = INTERPOLATED[item.name]
        elif item.default is not dataclasses.MISSING:
            value = item.default
            node[item.name] = (
                defaults_node(type(value)) if dataclasses.is_dataclass(value) else value
            )
        elif item.default_factory is not dataclasses.MISSING:
            node[item.name] = item.default_factory()
    return node


def register_run_defaults() -> None:
    """Store ``run_defaults`` (the top-level options; configs/config.yaml starts from it)
    and ``env/env_defaults`` (what an env file does not set) in Hydra's ConfigStore."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    top = {
        k: v for k, v in defaults_node(RunSettings).items() if k not in ("env", "logger", "her")
    }
    store.store(name="run_defaults", node=top)
    store.store(group="env", name="env_defaults", node=defaults_node(EnvSettings))
    store.store(group="logger", name="logger_defaults", node=defaults_node(LoggerSettings))
    store.store(group="her", name="her_defaults", node=defaults_node(HerSettings))


def help_lines(cls: type = RunSettings, prefix: str = "") -> list[str]:
    """``key: default  # help`` of every option (nested settings indented), for --help."""
    lines = []
    for item in dataclasses.fields(cls):
        if item.name in ("algo", "env", "logger", "her") and cls is RunSettings:
            continue
        default = INTERPOLATED.get(item.name) if cls is RunSettings else None
        if default is None and item.default is not dataclasses.MISSING:
            default = item.default
        elif default is None and item.default_factory is not dataclasses.MISSING:
            default = item.default_factory()
        if dataclasses.is_dataclass(default):
            lines.append(f"  {prefix}{item.name}:  # {item.metadata.get('help', '')}")
            lines += help_lines(type(default), prefix + "  ")
            continue
        shown = (
            "null"
            if default is None
            else str(default).lower()
            if isinstance(default, bool)
            else default
        )
        lines.append(f"  {prefix}{item.name}: {shown}  # {item.metadata.get('help', '')}")
    return lines


class ResumeMismatchError(ValueError):
    """The resumed checkpoint was trained with a different shape-changing setting."""


# SHAPE_FIELDS that runs of older versions did not record, with the value they ran with
RECORDED_SINCE = {"her.strategy": "none"}


def check_resume_compatible(saved: dict[str, Any], current: dict[str, Any]) -> None:
    """Raise ResumeMismatchError naming the first of ``SHAPE_FIELDS`` that differs between
    the checkpoint's recorded config and this run's."""
    for name in SHAPE_FIELDS:
        old, new = _select(saved, name), _select(current, name)
        if old is None and name in RECORDED_SINCE:  # a run from before the option existed
            old = RECORDED_SINCE[name]
        if isinstance(old, tuple | list) and isinstance(new, tuple | list):
            old, new = list(old), list(new)
        if old != new:
            raise ResumeMismatchError(
                f"cannot resume: '{name}' is {new!r} now but the checkpoint was trained with "
                f"{old!r}. Pass {name}={old!r} (or start a new run without resume=)."
            )


def _select(cfg: dict[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


@dataclass(frozen=True)
class SettledRun:
    """A composed config made ready to run: ``record`` is what the run writes (config.yaml,
    every checkpoint; plain values), ``settings`` its typed options, ``algo`` the
    algorithm's typed config (compile settled), ``notes`` what the settling chose."""

    record: dict[str, Any]
    settings: RunSettings
    algo: Any
    notes: tuple[str, ...]


def settle(
    cfg_dict: dict[str, Any],
    config_class: type,
    pretrained_head: str | None = None,
    defaults: Callable[[], tuple[str, dict[str, Any]]] | None = None,
) -> SettledRun:
    """The run a composed config (a plain dict) describes, for the algorithm whose config
    dataclass is ``config_class`` (the catalog's): the run's options typed and checked;
    ``total_steps``, the run's one budget, set as the algorithm's; a fine-tuner's unset
    head settings read from its pre-trained checkpoint (``pretrained_head``); the sizes
    that depend on the device set for it; the env id resolved; ``compile=auto`` decided
    on the steps the run really takes (``init_from`` skips pre-training). ``defaults``
    names the config files' values in a bad value's message (rlcore.config)."""
    from rlcore.config import config_from_dict, sized_for
    from rlcore.envs.make import resolve_env_id
    from rlcore.envs.robots import native_task
    from rlcore.generative import resolve_head
    from rlcore.speed import settle_compile

    settings = run_settings(cfg_dict)
    # the record holds the checked values (``total_steps=1e5`` recorded as 100000)
    record = {**copy.deepcopy(cfg_dict), **dataclasses.asdict(settings)}
    name, algo = algorithm_name(cfg_dict), dict(settings.algo)
    if "total_steps" in algo:  # the one budget (IQL anneals its actor lr over it)
        algo["total_steps"] = settings.total_steps
    if pretrained_head is not None:  # the head the run records is the checkpoint's
        algo = resolve_head(pretrained_head, config_class, algo)
    algo, notes = sized_for(config_class, name, algo, settings.device)
    env_id = resolve_env_id(settings.env.id)
    if settings.her.strategy != "none" and settings.env.obs != "state" and not native_task(env_id):
        notes = [  # rlcore's robot tasks leave their goal markers out (envs/pixels.py)
            *notes,
            f"her={settings.her.strategy} with env.obs={settings.env.obs}: relabelling "
            "changes desired_goal, not the image, which may show the episode's own goal",
        ]
    record["algo"], record["env"]["id"] = algo, env_id
    settings = dataclasses.replace(
        settings, algo=algo, env=dataclasses.replace(settings.env, id=env_id)
    )
    config = config_from_dict(config_class, name, algo, defaults=defaults)
    run_steps = sum(config.plan().phase_lengths(bool(settings.init_from)))
    return SettledRun(record, settings, settle_compile(config, run_steps), tuple(notes))


def with_dataset(run: SettledRun, dataset: str) -> SettledRun:
    """``run`` training on ``dataset`` (an ``init_from`` run's, when none was given)."""
    record = {**run.record, "dataset": dataset}
    settings = dataclasses.replace(run.settings, dataset=dataset)
    return dataclasses.replace(run, record=record, settings=settings)
