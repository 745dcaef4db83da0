"""Deploy a trained policy as one file: ``python -m rlcore.export <run dir or checkpoint>
--format onnx|torchscript [--out FILE] [--noise input|zero] [--batch B]``.

The file maps RAW observations to the actions the env receives, with everything the run
did around the agent baked in: the env-side observation normalisation (the checkpoint's
statistics, clipped as in training), the observation history (input ``(B, T, obs_dim)``
when the policy is conditioned on the last T observations, oldest first; a new episode
repeats its first observation, as ``rlcore.envs.make.ObservationHistory`` does), the
agent's own observation normaliser and action scaling, and the clip to the action space's
bounds (discrete actions: the index shifted by the space's ``start``, int64). It is the
agent's deterministic action, ``load_policy(path)`` followed by the env's clip.

Dict observations (a run on a Dict observation space, rlcore.observations): the file
takes one input per part, named after it, in the spec's part order (goal-conditioned
tasks: ``observation``, ``achieved_goal``, ``desired_goal``), each (B, *part shape)
float32, and concatenates them inside the graph as the agent does. Image observations
(agents with an image encoder: DQN's ``algo.encoder``) take uint8 inputs, ``(B, S * C, H,
W)`` as the env gives them (one input ``obs``, or one per part beside float32 vector
parts); the pixel scaling is the encoder's own, inside the graph.

Diffusion and flow policies (diffusion_bc, flow_bc, ...) sample: the file holds their
fixed-step sampling chain (K denoising / Euler steps, the evaluation sampler of
``act(deterministic=True)``). With ``--noise input`` (default) it takes a second input
``noise`` (B, N) of standard normal draws, consumed in the order the chain draws them
(x_K / x_0 first, then each step's noise); draws of ``numpy.random.standard_normal`` give
the policy's own action distribution. With ``--noise zero`` every draw is 0 (the chain's
mean path: one fixed action per observation). A sampling policy's file is traced at a
fixed batch size (``--batch``, default 1); other policies take any batch size. The
choices are written into the file's metadata (ONNX ``metadata_props`` / TorchScript
extra file ``rlcore.json``, key ``noise``).

Export traces the agent's deterministic act path (``torch.jit.trace``; ONNX through
PyTorch's TorchScript-based exporter, opset 17), so agents whose act is a torch function
of the observation export without per-algorithm code.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlcore.agent_state import part_modules
from rlcore.checkpoint import CheckpointReadError, load_checkpoint
from rlcore.observations import ObsSpec, PartNormalizer
from rlcore.policies import load_agent
from rlcore.settings import EnvSettings
from rlcore.spaces import action_space_from
from rlcore.threads import AUTO, apply_threads, check_threads

FORMATS = ("onnx", "torchscript")
NOISE_MODES = ("input", "zero")
ONNX_OPSET = 17
METADATA_FILE = "rlcore.json"
# random ops in a traced graph: a draw the noise input does not replace
RANDOM_OPS = re.compile(r"aten::(rand\w*|normal\w*|bernoulli\w*|multinomial|uniform\w*|poisson)")

Draw = Callable[[tuple[int, ...]], torch.Tensor]


class ExportError(ValueError):
    """A policy that cannot be exported as asked (the message names why)."""


def _shape(size: tuple[Any, ...]) -> tuple[int, ...]:
    """torch.randn's ``*size`` as one tuple (``randn(2, 3)`` and ``randn((2, 3))``)."""
    if len(size) == 1 and isinstance(size[0], tuple | list | torch.Size):
        size = tuple(size[0])
    return tuple(int(s) for s in size)


@contextmanager
def drawing(draw: Draw) -> Iterator[None]:
    """Inside the block, ``torch.randn`` / ``torch.randn_like`` return ``draw(shape)``:
    how an export replaces a sampling chain's draws by its noise input (or zeros), and
    how a test records the draws a policy made."""
    randn, randn_like = torch.randn, torch.randn_like

    def patched_randn(*size: Any, **_: Any) -> torch.Tensor:
        return draw(_shape(size))

    def patched_randn_like(tensor: torch.Tensor, **_: Any) -> torch.Tensor:
        return draw(tuple(tensor.shape))

    torch.randn, torch.randn_like = patched_randn, patched_randn_like
    try:
        yield
    finally:
        torch.randn, torch.randn_like = randn, randn_like


def record_draws(policy: Callable[[], Any]) -> tuple[Any, np.ndarray]:
    """(``policy()``'s result, the standard normal draws it made as (B, N) float32 in draw
    order): the noise input under which a ``--noise input`` export reproduces that call."""
    randn = torch.randn
    draws: list[torch.Tensor] = []

    def draw(shape: tuple[int, ...]) -> torch.Tensor:
        z = randn(shape)
        draws.append(z.reshape(shape[0], -1).clone())  # before any in-place clamp
        return z

    with drawing(draw):
        result = policy()
    noise = torch.cat(draws, 1) if draws else torch.zeros(0, 0)
    return result, noise.numpy().astype(np.float32)


class DeployedPolicy(nn.Module):
    """Raw observations -> env actions: the run's observation pipeline, the agent's
    deterministic act (``act.__wrapped__`` of ``rlcore.agent_state.numpy_act``: the torch
    function inside it), the action space's clip or index shift. ``forward(obs)``, or
    ``forward(obs, noise)`` for a sampling policy exported with a noise input."""

    def __init__(
        self,
        agent: Any,
        action_space: gym.Space,
        obs_normalizer: dict[str, np.ndarray] | None = None,
        clip_obs: float = EnvSettings.clip_obs,  # the one default (rlcore.settings)
        noise: str = "input",
    ) -> None:
        super().__init__()
        act = agent.act  # a bound method: the agent's own, or its networks' (safe agents)
        func = act.__func__ if inspect.ismethod(act) else act
        self._act = inspect.unwrap(func)  # numpy_act's functools.wraps: the torch function
        self._owner = act.__self__ if inspect.ismethod(act) else None
        if self._act is func or self._owner is None:
            raise ExportError(
                f"{type(agent).__name__}.act is not a torch function of the observation "
                "(rlcore.agent_state.numpy_act): it cannot be traced for export"
            )
        if noise not in NOISE_MODES:
            raise ExportError(f"unknown noise mode '{noise}', choose from {list(NOISE_MODES)}")
        self.noise_mode = noise
        self.nets = nn.ModuleList(part_modules(agent.parts))  # traced as parameters, not constants
        self.nets.requires_grad_(False)
        self.normalise = obs_normalizer is not None
        mean = obs_normalizer["mean"] if obs_normalizer is not None else np.zeros(1)
        var = obs_normalizer["var"] if obs_normalizer is not None else np.ones(1)
        # float64 as rlcore.checkpoint.obs_transform computes it
        self.register_buffer("obs_mean", torch.as_tensor(np.asarray(mean, np.float64)))
        self.register_buffer(
            "obs_std", torch.as_tensor(np.sqrt(np.asarray(var, np.float64) + 1e-8))
        )
        self.clip_obs = float(clip_obs)
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if self.discrete:
            self.action_start = int(action_space.start)
            low, high = np.zeros(1), np.zeros(1)
        else:
            low, high = action_space.low, action_space.high
        self.register_buffer("low", torch.as_tensor(np.asarray(low, np.float32)))
        self.register_buffer("high", torch.as_tensor(np.asarray(high, np.float32)))
        self._noise: torch.Tensor | None = None
        self._offset = 0

    def _draw(self, shape: tuple[int, ...]) -> torch.Tensor:
        """The next draws of the chain: the noise input's next columns, or zeros."""
        if self.noise_mode == "zero" or self._noise is None:
            return torch.zeros(shape)
        k = math.prod(shape[1:])
        z = self._noise[:, self._offset : self._offset + k]
        self._offset += k
        return z.reshape((-1, *shape[1:])).clone()  # clone: the chain may clamp in place

    input_names: tuple[str, ...] = ("obs",)

    def example_inputs(self, batch: int, obs_shape: Sequence[int]) -> tuple[torch.Tensor, ...]:
        """Zero observations to trace with: one (batch, *obs_shape) tensor."""
        return (torch.zeros((batch, *obs_shape)),)

    def features(self, *obs: torch.Tensor) -> torch.Tensor:
        """The agent's float32 (B, obs_dim) input from the file's observation input(s)."""
        x = obs[0].reshape(obs[0].shape[0], -1)
        if self.normalise:
            x = ((x.double() - self.obs_mean) / self.obs_std).clamp(-self.clip_obs, self.clip_obs)
        return x.float()

    def forward(self, obs: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        return self.action(self.features(obs), noise)

    def action(self, x: torch.Tensor, noise: torch.Tensor | None) -> torch.Tensor:
        """The env action of the agent's input ``x`` (the chain's draws from ``noise``)."""
        self._noise, self._offset = noise, 0
        try:
            with drawing(self._draw):
                action = self._act(self._owner, x, True)
        finally:
            self._noise = None
        if self.discrete:
            return action.long() + self.action_start
        return torch.maximum(torch.minimum(action, self.high), self.low)

    def draws_per_row(self, *obs: torch.Tensor) -> int:
        """How many standard normal draws one action takes (0: a deterministic policy)."""
        count = 0

        def draw(shape: tuple[int, ...]) -> torch.Tensor:
            nonlocal count
            count += math.prod(shape[1:])
            return torch.zeros(shape)

        with torch.no_grad(), drawing(draw):
            self._act(self._owner, self.features(*obs), True)
        return count


def _part_normalizer(
    spec: ObsSpec, obs_normalizer: dict[str, Any] | None, clip_obs: float
) -> PartNormalizer | None:
    """The run's env-side statistics of a dict observation (``{"parts": ...}``) as the
    standardisation a deployed graph applies, part by part; None when it had none."""
    if obs_normalizer is None:
        return None
    normalizer = PartNormalizer(spec, clip_obs)
    normalizer.load_state_dict(obs_normalizer["parts"])
    return normalizer


class DeployedDictPolicy(DeployedPolicy):
    """A ``DeployedPolicy`` of dict observations of vectors: ``forward(*parts[, noise])``
    takes one (B, *shape) input per part of ``spec``, in its order, and concatenates them
    as the agent's plumbing does (``ObsSpec.concat``), standardised part by part with the
    run's env-side statistics when it had them (``obs_normalizer``: ``{"parts": ...}``)."""

    def __init__(
        self,
        agent: Any,
        action_space: gym.Space,
        spec: ObsSpec,
        noise: str = "input",
        obs_normalizer: dict[str, Any] | None = None,
        clip_obs: float = EnvSettings.clip_obs,
    ):
        super().__init__(agent, action_space, None, noise=noise)
        if spec.images:
            raise ExportError(_IMAGES_NOT_EXPORTABLE)
        self.spec = spec
        self.input_names = spec.names
        self.part_normalizer = _part_normalizer(spec, obs_normalizer, clip_obs)

    def example_inputs(self, batch: int, obs_shape: Sequence[int] = ()) -> tuple[torch.Tensor, ...]:
        """Zero observations to trace with: one (batch, *shape) tensor per part."""
        return tuple(torch.zeros((batch, *part.shape)) for part in self.spec.parts)

    def features(self, *obs: torch.Tensor) -> torch.Tensor:
        flat = self.spec.concat(dict(zip(self.spec.names, obs)))
        if self.part_normalizer is not None:
            flat = self.part_normalizer.standardize_flat(flat)
        return flat

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        parts = len(self.spec.parts)
        noise = inputs[parts] if len(inputs) > parts else None
        return self.action(self.features(*inputs[:parts]), noise)


class DeployedImagePolicy(DeployedPolicy):
    """A ``DeployedPolicy`` of image observations: ``forward(*parts)`` takes the parts of
    ``spec`` in its order, images uint8 ``(B, S * C, H, W)``, vectors float32, and hands
    them to the agent's networks as its plumbing does (one tensor for an image alone, a
    dict of parts otherwise); images are never standardised (the encoder scales them).
    The run's env-side statistics (PPO beside images: ``obs_normalizer`` ``{"parts":
    ...}``) standardise the vector parts, as ``load_policy`` does."""

    def __init__(
        self,
        agent: Any,
        action_space: gym.Space,
        spec: ObsSpec,
        noise: str = "input",
        obs_normalizer: dict[str, Any] | None = None,
        clip_obs: float = EnvSettings.clip_obs,
    ):
        super().__init__(agent, action_space, None, noise=noise)
        if obs_normalizer is not None and not spec.keyed:
            raise ExportError("an image observation alone is never standardised")
        self.spec = spec
        self.input_names = spec.names
        self.part_normalizer = _part_normalizer(spec, obs_normalizer, clip_obs)

    def example_inputs(self, batch: int, obs_shape: Sequence[int] = ()) -> tuple[torch.Tensor, ...]:
        """Zero observations to trace with: one (batch, *shape) tensor per part, images
        uint8."""
        return tuple(
            torch.zeros((batch, *part.shape), dtype=part.torch_dtype) for part in self.spec.parts
        )

    def features(self, *obs: torch.Tensor) -> Any:  # type: ignore[override]
        if not self.spec.keyed:
            return obs[0]
        parts = dict(zip(self.spec.names, obs))
        if self.part_normalizer is not None:
            parts = self.part_normalizer.normalize(parts)
        return parts

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        parts = len(self.spec.parts)
        noise = inputs[parts] if len(inputs) > parts else None
        return self.action(self.features(*inputs[:parts]), noise)


_IMAGES_NOT_EXPORTABLE = (
    "DeployedDictPolicy takes vector parts; images go through DeployedImagePolicy"
)


def policy_from_checkpoint(
    path: str | Path, noise: str = "input"
) -> tuple[DeployedPolicy, dict[str, Any]]:
    """(the deployable policy of a run directory or checkpoint, facts for the file's
    metadata: algorithm, env, observation history, input shape, action space)."""
    from rlcore import catalog
    from rlcore.settings import recorded_env

    state = load_checkpoint(path)
    spec = ObsSpec.from_record(state["spaces"])
    if spec.images and not catalog.get(state["algo"]).images:  # no agent to rebuild
        raise ExportError(
            f"algo={state['algo']} has no image encoder, so this checkpoint's image "
            "observations cannot be read"
        )
    agent = load_agent(path)
    config = catalog.get(state["algo"]).config_from_dict(state["config"]["algo"])
    history = int(config.plan().env.obs_history)
    env_settings = recorded_env(state["config"])
    action_space = action_space_from(state["spaces"])
    obs_shape: list[int] | dict[str, list[int]]
    if spec.images:  # uint8 inputs, the agent's encoder inside the graph
        policy: DeployedPolicy = DeployedImagePolicy(
            agent, action_space, spec, noise, state.get("obs_normalizer"), env_settings.clip_obs
        )
        obs_shape = {part.name: list(part.shape) for part in spec.parts}
        if not spec.keyed:
            obs_shape = list(spec.parts[0].shape)
    elif spec.keyed:  # one input per part
        policy = DeployedDictPolicy(
            agent, action_space, spec, noise, state.get("obs_normalizer"), env_settings.clip_obs
        )
        obs_shape = {part.name: list(part.shape) for part in spec.parts}
    else:
        policy = DeployedPolicy(
            agent, action_space, state.get("obs_normalizer"),
            env_settings.clip_obs, noise,
        )  # fmt: skip
        obs_dim = int(np.prod(state["spaces"]["obs_shape"]))
        obs_shape = [history, obs_dim // history] if history > 1 else [obs_dim]
    info = {
        "algo": str(state["algo"]),
        "env": env_settings.id or env_settings.name,
        "step": int(state.get("loop", {}).get("counters", {}).get("step", 0)),
        "obs_history": history,
        "obs_shape": obs_shape,
        "obs_normalisation": state.get("obs_normalizer") is not None,
    }
    return policy, info


def export_policy(
    policy: DeployedPolicy,
    out: str | Path,
    fmt: str,
    obs_shape: Sequence[int],
    batch: int = 1,
    info: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Trace ``policy`` on a batch of zero observations of ``obs_shape`` (a dict policy:
    of its parts' shapes) and write it to ``out`` as ONNX or TorchScript; returns the
    metadata written into the file."""
    if fmt not in FORMATS:
        raise ExportError(f"unknown format '{fmt}', choose from {list(FORMATS)}")
    if batch < 1:
        raise ExportError(f"--batch must be >= 1, got {batch}")
    examples = policy.example_inputs(batch, obs_shape)
    draws = policy.draws_per_row(*examples)
    noise_input = draws > 0 and policy.noise_mode == "input"
    inputs = (*examples, torch.zeros(batch, draws)) if noise_input else examples
    names = [*policy.input_names, "noise"] if noise_input else list(policy.input_names)
    if draws == 0:
        noise_text = "none (a deterministic policy)"
    elif noise_input:
        noise_text = (
            f"input: noise (B, {draws}) standard normal draws in the sampling chain's "
            "order (x_K / x_0 first, then each step's); zeros give the mean path"
        )
    else:
        noise_text = "zero: every draw of the sampling chain is 0 (the mean path)"
    metadata = {
        **(info or {}),
        "inputs": names,
        "output": "action (int64 env actions)"
        if policy.discrete
        else "action (float32, clipped to the action bounds)",
        "batch": "any" if draws == 0 else batch,
        "noise": noise_text,
        "noise_draws": draws if noise_input else 0,
        "action_low": policy.low.tolist() if not policy.discrete else None,
        "action_high": policy.high.tolist() if not policy.discrete else None,
    }
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    policy.eval()
    with torch.no_grad(), warnings.catch_warnings():
        # the trace fixes a sampling chain's batch size and step count, as documented
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript-based exporter
        traced = torch.jit.trace(policy, inputs, check_trace=False)
        hidden = sorted({f"aten::{op}" for op in RANDOM_OPS.findall(str(traced.inlined_graph))})
        if hidden:  # a draw that is not the chain's torch.randn would be baked in as random
            raise ExportError(
                f"the {info['algo'] if info else 'policy'}'s deterministic action draws "
                f"random numbers outside torch.randn ({', '.join(hidden)}): not exportable"
            )
        if fmt == "torchscript":
            torch.jit.save(traced, str(out), _extra_files={METADATA_FILE: json.dumps(metadata)})
        else:
            _export_onnx(policy, inputs, names, draws == 0, out, metadata)
    return metadata


def _export_onnx(
    policy: DeployedPolicy,
    inputs: tuple[torch.Tensor, ...],
    names: list[str],
    any_batch: bool,
    out: Path,
    metadata: dict[str, Any],
) -> None:
    """ONNX through PyTorch's TorchScript-based exporter (the dynamo exporter needs the
    onnxscript package), then the metadata as ``metadata_props``."""
    try:
        import onnx
    except ImportError as error:
        raise ExportError(
            "--format onnx needs the onnx package: pip install 'rlcore[export]'"
        ) from error
    dynamic = {name: {0: "batch"} for name in [*names, "action"]} if any_batch else None
    torch.onnx.export(
        policy, inputs, str(out), input_names=names, output_names=["action"],
        dynamic_axes=dynamic, opset_version=ONNX_OPSET, dynamo=False,
    )  # fmt: skip
    model = onnx.load(str(out))
    onnx.helper.set_model_props(model, {k: json.dumps(v) for k, v in metadata.items()})
    model.doc_string = __doc__.split("\n\n")[1]
    onnx.save(model, str(out))


def default_out(path: Path, fmt: str) -> Path:
    """``<run dir>/policy.onnx`` (``policy.ts`` for TorchScript), or beside a checkpoint
    file ``<name>.policy.onnx``."""
    suffix = ".onnx" if fmt == "onnx" else ".ts"
    return path / f"policy{suffix}" if path.is_dir() else path.with_suffix(f".policy{suffix}")


def _threads_arg(value: str) -> int | str | None:
    """``--threads`` as a ``threads`` setting (argparse reports the ValueError's text)."""
    try:
        return check_threads(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


class _OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one ``error:`` line naming ``--help`` (exit 2),
    not the usage text followed by the error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (python -m rlcore.export --help shows the usage)\n")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rlcore.export <run dir or checkpoint> --format onnx|torchscript``."""
    parser = _OneLineParser(
        prog="python -m rlcore.export",
        description="Write a trained policy as one ONNX or TorchScript file: raw "
        "observations in, env actions out.",
    )
    parser.add_argument("path", help="run directory or checkpoint (.pt)")
    parser.add_argument("--format", required=True, choices=FORMATS, dest="fmt")
    parser.add_argument(
        "--out", default=None, help="file to write (default: <run dir>/policy.onnx | policy.ts)"
    )
    parser.add_argument("--noise", default="input", choices=NOISE_MODES,
                        help="diffusion / flow policies: a noise input, or zero noise")  # fmt: skip
    parser.add_argument("--batch", type=int, default=1,
                        help="batch size of a sampling policy's file (others take any)")  # fmt: skip
    parser.add_argument("--threads", default=AUTO, type=_threads_arg,
                        help="torch threads: auto (1), N, or null (torch's default)")  # fmt: skip
    args = parser.parse_args(argv)
    apply_threads(args.threads)
    path = Path(args.path)
    try:
        policy, info = policy_from_checkpoint(path, args.noise)
        out = Path(args.out) if args.out else default_out(path, args.fmt)
        metadata = export_policy(policy, out, args.fmt, info["obs_shape"], args.batch, info)
    except (FileNotFoundError, CheckpointReadError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except ExportError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    batch = "B" if metadata["batch"] == "any" else metadata["batch"]
    shapes = info["obs_shape"]
    obs = (
        ", ".join(f"{name} {[batch, *shape]}" for name, shape in shapes.items())
        if isinstance(shapes, dict)
        else f"obs {[batch, *shapes]}"
    )
    print(f"wrote {out} ({args.fmt}): {obs} -> {metadata['output']}")
    print(f"noise: {metadata['noise']}")
    return 0


def cli() -> None:
    """Console-script entry (``rlcore-export``)."""
    raise SystemExit(main())


if __name__ == "__main__":
    cli()
