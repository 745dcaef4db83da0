"""What the offline parity harnesses and tests/test_parity_offline.py share.

A golden file (tests/golden/<algo>.json) holds a reference implementation's losses and
final parameters after a few updates from initial weights, batches and sampling noise
that are all drawn here with numpy's ``default_rng`` (PCG64: the same numbers on every
machine), so the reference run (benchmarks/parity/<algo>_reference.py,
in a side environment with the reference's own framework) and ours (the test) start
from identical numbers without either importing the other. numpy does not promise
``Generator`` streams across its versions: each golden case stores the SHA-256 of the
inputs it was made from (``inputs_digest``), and the test checks that first, so changed
inputs read as "regenerate the goldens", not as a wrong update.

Parameters travel in one layout: ``{"<net>.<layer>.w": (in, out), "<net>.<layer>.b":
(out,), "<net>.<layer>.ln_scale" / ".ln_bias": (width,), "<name>": other tensors}``.
Only numpy is imported here: the harnesses run under CORL's PyTorch scripts or ReBRAC's
JAX one, the test under rlcore.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import numpy as np

OBS_DIM, ACT_DIM, HIDDEN, BATCH = 3, 2, 16, 32  # small enough for <= 300 KB goldens
CORL_REPO = "github.com/tinkoff-ai/CORL"
CORL_COMMIT = "6afec90484bbf47dee05fdf525e26a3ebe028e9b"  # master, 2023-08-01
GOLDEN_DIR = Path(__file__).resolve().parents[2] / "tests" / "golden"

Params = dict[str, np.ndarray]


def load_script(repo: Path, relative: str, name: str) -> types.ModuleType:
    """A reference's single-file script ``relative`` (e.g. algorithms/offline/iql.py in a
    CORL checkout) imported by path as ``name``, after stubbing the modules it imports only
    for its training loop (d4rl, gym, wandb, tqdm): for the harnesses, never the tests."""
    for stub in ("d4rl", "gym", "wandb", "tqdm", "tqdm.auto"):
        module = sys.modules.setdefault(stub, types.ModuleType(stub))
        module.__spec__ = importlib.machinery.ModuleSpec(stub, None)  # torch looks for it
        module.trange = range  # tqdm's, used by the scripts' loops only
    sys.modules["gym"].Env = object  # an annotation in the scripts' env wrappers
    spec = importlib.util.spec_from_file_location(name, repo / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mlp_params(
    rng: np.random.Generator, net: str, dims: list[int], layer_norm: bool = False
) -> Params:
    """Weights and biases U(+-1/sqrt(fan_in)) of an MLP with layer sizes ``dims``; with
    ``layer_norm``, LayerNorm affine parameters after each hidden layer drawn near 1 / 0
    (not exactly 1 / 0, so a swapped scale and bias shows)."""
    params: Params = {}
    for i, (fan_in, fan_out) in enumerate(zip(dims[:-1], dims[1:])):
        bound = 1.0 / np.sqrt(fan_in)
        params[f"{net}.{i}.w"] = rng.uniform(-bound, bound, (fan_in, fan_out)).astype(np.float32)
        params[f"{net}.{i}.b"] = rng.uniform(-bound, bound, fan_out).astype(np.float32)
        if layer_norm and i < len(dims) - 2:
            params[f"{net}.{i}.ln_scale"] = (1 + 0.1 * rng.standard_normal(fan_out)).astype(
                np.float32
            )
            params[f"{net}.{i}.ln_bias"] = (0.1 * rng.standard_normal(fan_out)).astype(np.float32)
    return params


def layers(params: Params, net: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """[(w (in, out), b), ...] of ``net`` in layer order."""
    count = sum(1 for name in params if name.startswith(f"{net}.") and name.endswith(".w"))
    return [(params[f"{net}.{i}.w"], params[f"{net}.{i}.b"]) for i in range(count)]


def copy_net(params: Params, source: str, target: str) -> Params:
    """``params`` plus a copy of network ``source`` under the name ``target``."""
    extra = {
        target + name[len(source) :]: value.copy()
        for name, value in params.items()
        if name.startswith(f"{source}.")
    }
    return {**params, **extra}


def make_batches(
    seed: int,
    count: int,
    batch: int = BATCH,
    obs_dim: int = OBS_DIM,
    act_dim: int = ACT_DIM,
) -> list[dict[str, np.ndarray]]:
    """``count`` batches of float32 arrays: obs, action (in (-0.9, 0.9), so log-densities
    of tanh policies stay finite), reward, next_obs, terminated (about a quarter of the
    rows, row 0 always, so a dropped terminal mask changes every update), mc_return
    (Cal-QL's return-to-go, N(0, 1): about half the policy-action values start below it),
    next_action and has_next_action (ReBRAC; 0 exactly on terminal rows)."""
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(count):
        terminated = rng.random(batch) < 0.25
        terminated[0] = True
        batches.append(
            {
                "obs": rng.standard_normal((batch, obs_dim)),
                "action": rng.uniform(-0.9, 0.9, (batch, act_dim)),
                "reward": rng.standard_normal(batch),
                "next_obs": rng.standard_normal((batch, obs_dim)),
                "terminated": terminated.astype(np.float64),
                "mc_return": rng.standard_normal(batch),
                "next_action": rng.uniform(-0.9, 0.9, (batch, act_dim)),
                "has_next_action": 1.0 - terminated,
            }
        )
    return [{k: v.astype(np.float32) for k, v in b.items()} for b in batches]


# ---- initial weights per algorithm (critics' targets start as equal copies)


def sparse_shifted_rewards(batches: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """The batches with AntMaze's sparse rewards after the antmaze recipes' r - 1: 0 where
    the drawn N(0, 1) reward exceeds 0.85 (about 20 % of rows, a goal reached), else -1."""
    return [{**b, "reward": np.where(b["reward"] > 0.85, 0.0, -1.0)} for b in batches]


def iql_initial(deterministic: bool) -> Params:
    """IQL: actor, two critics, V; a Gaussian actor's log-std drawn in [-1, 0.5] (not
    CORL's 0, so its gradient and the clamp's pass-through both matter)."""
    rng = np.random.default_rng(0)
    params = {
        **mlp_params(rng, "actor", [OBS_DIM, HIDDEN, HIDDEN, ACT_DIM]),
        **mlp_params(rng, "critic0", [OBS_DIM + ACT_DIM, HIDDEN, HIDDEN, 1]),
        **mlp_params(rng, "critic1", [OBS_DIM + ACT_DIM, HIDDEN, HIDDEN, 1]),
        **mlp_params(rng, "value", [OBS_DIM, HIDDEN, HIDDEN, 1]),
    }
    if not deterministic:
        params["actor.log_std"] = rng.uniform(-1.0, 0.5, ACT_DIM).astype(np.float32)
    params = copy_net(params, "critic0", "target_critic0")
    return copy_net(params, "critic1", "target_critic1")


def riql_initial(num_critics: int) -> Params:
    """RIQL: deterministic actor, ``num_critics`` critics (their targets equal copies), V."""
    rng = np.random.default_rng(0)
    params = {
        **mlp_params(rng, "actor", [OBS_DIM, HIDDEN, HIDDEN, ACT_DIM]),
        **mlp_params(rng, "value", [OBS_DIM, HIDDEN, HIDDEN, 1]),
    }
    for k in range(num_critics):
        params.update(mlp_params(rng, f"critic{k}", [OBS_DIM + ACT_DIM, HIDDEN, HIDDEN, 1]))
        params = copy_net(params, f"critic{k}", f"target_critic{k}")
    return params


def td3_bc_initial() -> Params:
    """TD3+BC: deterministic actor and two critics, with target copies of all three."""
    rng = np.random.default_rng(0)
    params = {
        **mlp_params(rng, "actor", [OBS_DIM, HIDDEN, HIDDEN, ACT_DIM]),
        **mlp_params(rng, "critic0", [OBS_DIM + ACT_DIM, HIDDEN, HIDDEN, 1]),
        **mlp_params(rng, "critic1", [OBS_DIM + ACT_DIM, HIDDEN, HIDDEN, 1]),
    }
    for net in ("actor", "critic0", "critic1"):
        params = copy_net(params, net, f"target_{net}")
    return params


def awac_initial() -> Params:
    """AWAC: Gaussian actor (3 hidden layers, log-std drawn in [-1, 0.5]) and two critics
    (3 hidden layers) with target copies."""
    rng = np.random.default_rng(0)
    params = {
        **mlp_params(rng, "actor", [OBS_DIM, HIDDEN, HIDDEN, HIDDEN, ACT_DIM]),
        **mlp_params(rng, "critic0", [OBS_DIM + ACT_DIM, HIDDEN, HIDDEN, HIDDEN, 1]),
        **mlp_params(rng, "critic1", [OBS_DIM + ACT_DIM, HIDDEN, HIDDEN, HIDDEN, 1]),
    }
    params["actor.log_std"] = rng.uniform(-1.0, 0.5, ACT_DIM).astype(np.float32)
    params = copy_net(params, "critic0", "target_critic0")
    return copy_net(params, "critic1", "target_critic1")


def cql_initial(critic_hidden_layers: int) -> Params:
    """CQL / Cal-QL: tanh-Gaussian actor (3 hidden layers, output 2 |A|: means then raw
    log-stds), two critics with ``critic_hidden_layers`` hidden layers and target copies;
    log-std multiplier / offset 1 / -1, log alpha 0 and log alpha' 1, CORL's initial values.
    """
    rng = np.random.default_rng(0)
    critic_dims = [OBS_DIM + ACT_DIM, *[HIDDEN] * critic_hidden_layers, 1]
    params = {
        **mlp_params(rng, "actor", [OBS_DIM, HIDDEN, HIDDEN, HIDDEN, 2 * ACT_DIM]),
        **mlp_params(rng, "critic0", critic_dims),
        **mlp_params(rng, "critic1", critic_dims),
        "actor.log_std_multiplier": np.array(1.0, np.float32),
        "actor.log_std_offset": np.array(-1.0, np.float32),
        "log_alpha": np.array(0.0, np.float32),
        "log_alpha_prime": np.array(1.0, np.float32),
    }
    params = copy_net(params, "critic0", "target_critic0")
    return copy_net(params, "critic1", "target_critic1")


def cql_noise_shapes(n_actions: int, max_target_backup: bool) -> dict[str, tuple[int, ...]]:
    """One CQL update's draws, in CORL's order: a ~ pi(s) (policy and temperature losses);
    a' ~ pi(s') for the TD target (``n_actions`` of them with the max-target backup);
    uniform actions U[0, 1) (mapped to the box); N actions ~ pi(s); N actions ~ pi(s')."""
    backup = (BATCH, n_actions, ACT_DIM) if max_target_backup else (BATCH, ACT_DIM)
    many = (BATCH, n_actions, ACT_DIM)
    return {
        "pi": (BATCH, ACT_DIM),
        "backup": backup,
        "uniform": many,
        "current": many,
        "next": many,
    }


def rebrac_initial(actor_layer_norm: bool) -> Params:
    """ReBRAC: deterministic actor (3 hidden layers, LayerNorm after each activation if
    ``actor_layer_norm``) and two critics (3 hidden layers with LayerNorm), with target
    copies of all three."""
    rng = np.random.default_rng(0)
    critic_dims = [OBS_DIM + ACT_DIM, HIDDEN, HIDDEN, HIDDEN, 1]
    params = {
        **mlp_params(rng, "actor", [OBS_DIM, HIDDEN, HIDDEN, HIDDEN, ACT_DIM], actor_layer_norm),
        **mlp_params(rng, "critic0", critic_dims, layer_norm=True),
        **mlp_params(rng, "critic1", critic_dims, layer_norm=True),
    }
    for net in ("actor", "critic0", "critic1"):
        params = copy_net(params, net, f"target_{net}")
    return params


def noise_draws(seed: int, count: int, shapes: dict[str, tuple[int, ...]]) -> list[dict]:
    """Per update, one array per name in ``shapes``: standard normal, except names that
    start with ``uniform`` (U[0, 1)). Both sides feed these to the update in place of their
    framework's random draws."""
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(count):
        draw = {}
        for name, shape in shapes.items():
            value = rng.random(shape) if name.startswith("uniform") else rng.standard_normal(shape)
            draw[name] = value.astype(np.float32)
        draws.append(draw)
    return draws


class Script:
    """A queue of arrays handed out in order; each ``pop`` checks the requested shape, so
    a reordered or resized draw fails loudly instead of silently taking the wrong noise."""

    def __init__(self, arrays: Iterator[np.ndarray] | list[np.ndarray]) -> None:
        self.arrays = list(arrays)
        self.used = 0

    def pop(self, shape: tuple[int, ...]) -> np.ndarray:
        if self.used >= len(self.arrays):
            raise AssertionError(f"noise script exhausted at a draw of shape {tuple(shape)}")
        value = self.arrays[self.used]
        if tuple(value.shape) != tuple(shape):
            raise AssertionError(
                f"noise draw {self.used} has shape {tuple(shape)}, the script {value.shape}"
            )
        self.used += 1
        return value

    def done(self) -> bool:
        return self.used == len(self.arrays)


def _encode(value: np.ndarray) -> dict:
    flat = np.asarray(value, dtype=np.float64).ravel()
    return {"shape": list(np.shape(value)), "values": [float(f"{x:.9g}") for x in flat]}


def inputs_digest(params: Params, batches: list[dict], draws: list[dict]) -> str:
    """SHA-256 of a case's inputs: initial parameters, batches and noise draws (float32)."""
    digest = hashlib.sha256()
    for group in (params, *batches, *draws):
        for name in sorted(group):
            digest.update(name.encode())
            digest.update(np.ascontiguousarray(group[name], dtype=np.float32).tobytes())
    return digest.hexdigest()


def encode_case(
    settings: dict, inputs: str, losses: dict[str, list[float | None]], params: Params
) -> dict:
    """One case of a golden file: its ``settings``, the ``inputs_digest`` of what it was
    made from, per-update ``losses`` (name -> one value per update, None where that update
    had no such loss) and the final ``params`` (9 significant digits: float32 exactly)."""
    return {
        "settings": settings,
        "inputs_sha256": inputs,
        "losses": {
            name: [None if v is None else float(f"{v:.9g}") for v in values]
            for name, values in losses.items()
        },
        "params": {name: _encode(value) for name, value in sorted(params.items())},
    }


def save_golden(path: Path, meta: dict, cases: dict[str, dict]) -> None:
    """Write a golden file: ``meta`` (reference repo, commit, command) and ``cases`` (name ->
    ``encode_case(...)``)."""

    def line(value: object) -> str:
        return json.dumps(value, separators=(",", ":"))

    parts = []
    for name, case in cases.items():  # one line per setting block, loss and tensor
        fields = [
            f'   "settings": {line(case["settings"])}',
            f'   "inputs_sha256": {line(case["inputs_sha256"])}',
        ]
        losses = ",\n".join(f"    {line(k)}: {line(v)}" for k, v in case["losses"].items())
        params = ",\n".join(f"    {line(k)}: {line(v)}" for k, v in case["params"].items())
        fields += [f'   "losses": {{\n{losses}\n   }}', f'   "params": {{\n{params}\n   }}']
        parts.append(f"  {line(name)}: {{\n" + ",\n".join(fields) + "\n  }")
    text = f'{{\n "meta": {json.dumps(meta, indent=2)},\n "cases": {{\n' + ",\n".join(parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n }\n}\n")


def load_golden(path: Path) -> tuple[dict, dict[str, dict]]:
    """(meta, cases) of a golden file; each case's params decoded to float64 arrays."""
    document = json.loads(path.read_text())
    for case in document["cases"].values():
        case["params"] = {
            name: np.asarray(entry["values"], dtype=np.float64).reshape(entry["shape"])
            for name, entry in case["params"].items()
        }
    return document["meta"], document["cases"]
