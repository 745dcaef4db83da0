"""The command line of ``python -m rlcore.train`` before Hydra runs it: every override is
composed once here, so a bad one (an unknown key, a malformed value, a missing config
file, a sweep without ``-m``) is refused with one ``error:`` line naming the fix and exit
code 2, instead of Hydra's multi-line report and exit code 1 (docs/cli.md, "Exit codes").
``train_help`` is the ``--help`` text: the algorithms, environments and options that
``algo=`` / ``env=`` / ``key=value`` accept, read from the catalog and the packaged
configs (Hydra's own help lists the config dataclasses' ``*_defaults`` entries too,
which are not choices; ``--hydra-help`` still shows Hydra's).
"""

from __future__ import annotations

import difflib
import re
from importlib import resources
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlcore import catalog
from rlcore.config import ConfigError
from rlcore.envs.atari import is_atari
from rlcore.envs.make import SHORT_NAMES, resolve_env_id

CONFIG_MODULE = "rlcore.configs"
# the command line's flags that take the next token as their value
_FLAGS_WITH_VALUE = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp",
                     "--config-name", "-cn", "--config-dir", "-cd", "--experimental-rerun"}  # fmt: skip


def override_tokens(args: list[str]) -> list[str]:
    """The ``key=value`` overrides of a command line (its flags and their values left out)."""
    tokens, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg.startswith("-"):
            skip = arg in _FLAGS_WITH_VALUE
        else:
            tokens.append(arg)
    return tokens


def _first_of_sweeps(tokens: list[str], multirun: bool) -> list[str]:
    """The overrides of a sweep's first job (``seed=0,1,2`` -> ``seed=0``), which is the
    one composed here; a single run's tokens unchanged (Hydra refuses its sweeps itself)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(tokens)
    if not multirun:
        return tokens
    first = []
    for override in parsed:
        if not override.is_sweep_override():
            first.append(override.input_line)
            continue
        try:
            value = next(iter(override.sweep_string_iterator()))
        except Exception:  # noqa: BLE001 - glob(): needs Hydra's config loader; Hydra checks it
            continue
        first.append(f"{override.get_key_element()}={value}")
    return first


def _keys(node: Any, prefix: str = "") -> list[str]:
    """Every dotted key of a config (lists and values are leaves)."""
    if not isinstance(node, dict):
        return []
    out = []
    for key, value in node.items():
        dotted = f"{prefix}{key}"
        out.append(dotted)
        out += _keys(value, f"{dotted}.")
    return out


def _suggestion(key: str, known: list[str]) -> str:
    """`` (did you mean algo.batch_size?)`` for the closest known key, by whole key or by
    its last part (``learning_starts`` -> ``algo.learning_starts``); empty when none."""
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
    if not close:
        last = key.rpartition(".")[2]
        by_last = {k.rpartition(".")[2]: k for k in known}
        match = difflib.get_close_matches(last, list(by_last), n=1, cutoff=0.75)
        close = [by_last[match[0]]] if match else []
    return f" (did you mean {close[0]}?)" if close else ""


def _compose(overrides: list[str]) -> DictConfig:
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=True)


def _compose_registering(overrides: list[str]) -> DictConfig:
    """``_compose``, registering an algorithm's ``algo/<name>_defaults`` that a config
    from a searchpath of the user's (an experiment) asks for and the command line did not
    name (rlcore.configs.register_algorithm_defaults), then composing again."""
    from hydra.errors import MissingConfigException

    from rlcore.configs import register_algorithm_defaults

    for _ in range(len(catalog.ALGORITHMS)):
        try:
            return _compose(overrides)
        except MissingConfigException as error:
            match = re.fullmatch(r"algo/(\w+)_defaults", str(error.missing_cfg_file))
            if match is None or match.group(1) not in catalog.ALGORITHMS:
                raise
            register_algorithm_defaults([match.group(1)])
    return _compose(overrides)


def _algo_of(tokens: list[str]) -> str:
    for token in tokens:
        key, _, value = token.partition("=")
        if key == "algo" and value:
            return value.split(",")[0]
    return "sac"


# dict options whose keys are the user's (a task's constructor arguments, Ray resources):
# ``env.kwargs.frame_skip=2`` and ``distributed.resources={robot: 1}`` are passed to Hydra
# as ``++...`` (add or override), as a name the env's config does not list needs
OPEN_DICTS = ("env.kwargs", "distributed.resources")


def _in_open_dict(key: str) -> bool:
    """``key`` (no leading +) is an open dict or one of its entries."""
    return any(key == name or key.startswith(name + ".") for name in OPEN_DICTS)


def _unknown_key_message(key: str, value: str, tokens: list[str]) -> str:
    """One line for an override of a key the config does not have."""
    algo = _algo_of(tokens)
    rest = [t for t in tokens if t.split("=", 1)[0] in ("algo", "env")]
    try:
        known = _keys(OmegaConf.to_container(_compose(rest)))  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - the suggestion is a courtesy
        known = []
    where = "an algo option" if key.startswith("algo.") else "an option"
    return (
        f"{key}={value}: not {where} of this run{_suggestion(key, known)}; "
        f"`python -m rlcore.train algo={algo} --cfg job` lists every option"
    )


def _parse_error_message(token: str, text: str) -> str:
    """One line for an override Hydra's grammar cannot read."""
    lines = [line for line in text.splitlines() if line and not line.startswith("See https")]
    detail = next((line for line in lines if not line.startswith("Error parsing")), "")
    detail = re.sub(r" expecting \{.*\}", "", detail)  # the grammar's token list
    return (
        f"malformed override '{token}'{f': {detail}' if detail else ''}; write key=value "
        "(one '=', lists as [a,b], strings with spaces in quotes)"
    )


def check_overrides(args: list[str], multirun: bool) -> None:
    """Compose the config ``args`` ask for (a sweep's first job) and raise ``ConfigError``
    with one line naming the fix when Hydra cannot: unknown keys, malformed overrides, a
    config-group option that does not exist, a sweep without ``-m``."""
    from hydra.errors import (
        ConfigCompositionException,
        MissingConfigException,
        OverrideParseException,
    )
    from omegaconf.errors import OmegaConfBaseException

    tokens = override_tokens(args)
    try:
        _compose_registering(_first_of_sweeps(tokens, multirun))
    except OverrideParseException as error:
        token = next((t for t in tokens if t in str(error)), None)
        if token is None:  # Hydra's message does not quote it: find it by parsing alone
            token = next((t for t in tokens if _unparsable(t)), " ".join(tokens))
        raise ConfigError(_parse_error_message(token, str(error))) from None
    except MissingConfigException as error:
        group, _, name = str(error.missing_cfg_file).rpartition("/")
        # the *_defaults nodes (rlcore.configs, rlcore.settings) are bases, not choices
        options = ", ".join(o for o in error.options or [] if not o.endswith("_defaults"))
        raise ConfigError(
            f"{group}={name}: there is no {group} config '{name}'"
            + (f"; available: {options}" if options else "")
        ) from None
    except ConfigCompositionException as error:
        text = str(error)
        match = re.match(r"Could not override '([^']+)'", text)
        if match:
            key = match.group(1)
            value = next((t.split("=", 1)[1] for t in tokens if t.split("=", 1)[0] == key), "")
            raise ConfigError(_unknown_key_message(key, value, tokens)) from None
        match = re.match(r"Ambiguous value for argument '([^']+)'", text)
        if match:
            token = match.group(1)
            key, _, value = token.partition("=")
            raise ConfigError(
                f"{token}: a comma-separated value is a sweep: add -m (python -m "
                f"rlcore.train -m {token}); a list is {key}=[{value}], a string "
                f"{key}='{value}'"
            ) from None
        raise ConfigError(" ".join(text.split())) from None
    except OmegaConfBaseException as error:
        raise ConfigError(" ".join(str(error).split())) from None


def _unparsable(token: str) -> bool:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        OverridesParser.create().parse_overrides([token])
    except OverrideParseException:
        return True
    return False


def train_help() -> str:
    """The ``--help`` text of ``python -m rlcore.train``: usage, algorithms, environments,
    config groups and the top-level options with their defaults."""
    from rlcore.settings import help_lines

    experiments = sorted(
        p.name.removesuffix(".yaml")
        for p in resources.files(CONFIG_MODULE).joinpath("experiment").iterdir()
        if p.name.endswith(".yaml")
    )
    loggers = sorted(
        p.name.removesuffix(".yaml")
        for p in resources.files(CONFIG_MODULE).joinpath("logger").iterdir()
        if p.name.endswith(".yaml")
    )
    by_family: dict[str, list[str]] = {}
    for name, entry in catalog.ALGORITHMS.items():  # families in the catalog's order
        by_family.setdefault(entry.family, []).append(name)
    return "\n".join([
        "usage: python -m rlcore.train [algo=NAME] [env=NAME] [key=value ...]",
        "       python -m rlcore.train -m key=a,b ...     (a sweep: one run per value)",
        "       python -m rlcore.train resume=<run dir> [total_steps=N]",
        "",
        "Trains one algorithm on one environment; a run writes runs/<algo>/<env>/<time>/.",
        "",
        "algo= (every option of one: python -m rlcore.train algo=NAME --cfg job)",
        *(f"  {family}: {', '.join(sorted(names))}" for family, names in by_family.items()),
        "env= a short name or any registered gymnasium id (env=Pusher-v5):",
        f"  {', '.join(sorted(SHORT_NAMES))}",
        f"+experiment= (a paper recipe): {', '.join(experiments)}",
        f"logger= {', '.join(loggers)}",
        "her= none, future, final, episode (hindsight relabelling; her.k=4 relabelled goals "
        "per real one)",
        "",
        "options (key=value; defaults shown; env.* and logger.* too: --cfg job shows them):",
        *help_lines(),
        "",
        "flags: --cfg job (print the composed config), -m (sweep), --hydra-help (Hydra's",
        "own help). Exit codes: 0 done, 1 failed, 2 bad command or config, 3 missing input",
        "file, 130/143 stopped by Ctrl-C / SIGTERM (checkpoint saved). docs/cli.md has more.",
    ])  # fmt: skip


def _env_config_name(value: str) -> list[str]:
    """Override tokens for ``env=<value>``: a config file name, or the generic gym config."""
    key = value.lower().replace("-", "").replace("_", "")
    if key in SHORT_NAMES or key == "gym":  # gym: the generic config, with env.id=<id>
        return [f"env={key}"]
    env_id = resolve_env_id(value)  # raises UnknownEnvError
    if is_atari(env_id):
        return ["env=atari", f"env.id={env_id}"]
    for short, full in SHORT_NAMES.items():
        if full == env_id:
            return [f"env={short}"]
    return ["env=gym", f"env.id={env_id}"]


def normalize_overrides(args: list[str]) -> list[str]:
    """Map friendly names (``env=Hopper``, ``env=Pusher-v5``, ``algo=SAC``) onto config
    files and fail early, with one clear message, on unknown algorithms or envs."""
    from rlcore.configs import register_algorithm_defaults

    out: list[str] = []
    algorithms = [default_algorithm()]
    seen: set[str] = set()
    for arg in args:
        key, sep, value = arg.partition("=")
        seen.add(key)
        if sep and key == "algo":
            names = value.split(",")
            algorithms = [catalog.get(name).name for name in names]  # UnknownAlgorithmError
            out.append("algo=" + ",".join(n.lower() for n in names))
        elif sep and key.lstrip("+") == "experiment":  # a recipe's own algorithm
            recipes = [a for v in value.split(",") if (a := experiment_algorithm(v))]
            algorithms = recipes + (algorithms if "algo" in seen else [])
            out.append(arg)
        elif sep and _in_open_dict(key.lstrip("+")):  # listed in the config or not
            out.append(f"++{key.lstrip('+')}={value}")
        elif sep and key == "hydra.run.dir":  # rlcore places the run dir itself
            out.append(f"run_dir={value}")
        elif sep and key == "env":
            tokens = [_env_config_name(v) for v in value.split(",")]
            if len(tokens) == 1:
                out.extend(tokens[0])
            elif all(len(t) == 1 for t in tokens):
                out.append("env=" + ",".join(t[0].split("=", 1)[1] for t in tokens))
            else:
                raise ConfigError("sweeps over gymnasium ids go through env=gym env.id=A,B")
        else:
            out.append(arg)
    register_algorithm_defaults(algorithms)  # only these: a run imports one algorithm
    return out


def experiment_algorithm(name: str) -> str | None:
    """The algorithm a packaged ``configs/experiment/<name>.yaml`` selects, if any."""
    path = resources.files("rlcore.configs").joinpath("experiment", f"{name}.yaml")
    if not path.is_file():
        return None
    for entry in OmegaConf.create(path.read_text()).get("defaults", []):
        if isinstance(entry, DictConfig) and "override /algo" in entry:
            return str(entry["override /algo"])
    return None


def default_algorithm() -> str:
    """The algorithm the packaged config.yaml trains when ``algo=`` is not given."""
    text = resources.files("rlcore.configs").joinpath("config.yaml").read_text()
    for entry in OmegaConf.create(text).defaults:
        if isinstance(entry, DictConfig) and "algo" in entry:
            return str(entry.algo)
    raise ConfigError("configs/config.yaml names no default algo")


def config_file_defaults(cfg_dict: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The ``algo`` values this run's config files give (the algorithm's file, its
    ``algo_env`` file for this env, an ``+experiment=``), command-line overrides left
    out, and the words naming them (``"for dqn on CartPole-v1"``): what a bad value's
    message offers as its default (DQN's ``lr`` is 2.5e-4, but 2.3e-3 on CartPole)."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    algo, env_id = cfg_dict["algo"]["name"], resolve_env_id(cfg_dict["env"]["id"])
    groups, where = [f"algo={algo}", *_env_config_name(env_id)], f"for {algo} on {env_id}"
    if HydraConfig.initialized():  # the CLI: the groups it chose, experiments included
        choices = HydraConfig.get().runtime.choices
        groups = [f"algo={choices['algo']}", f"env={choices['env']}"]
        groups += [f"env.id={env_id}"] if choices["env"] in ("gym", "atari") else []
        if choices.get("experiment"):
            groups.append(f"+experiment={choices['experiment']}")
            where += f" (+experiment={choices['experiment']})"
    if GlobalHydra.instance().is_initialized():  # inside the CLI's hydra.main
        cfg = compose("config", overrides=groups)
    else:
        with initialize_config_module(config_module="rlcore.configs", version_base="1.3"):
            cfg = compose("config", overrides=groups)
    return where, OmegaConf.to_container(cfg.algo, resolve=True)  # type: ignore[return-value]
