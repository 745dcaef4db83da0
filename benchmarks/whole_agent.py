"""A whole checkpoint that ``init_from=`` can continue from, rebuilt from an agent-only
snapshot (benchmarks/assets/*.pt: networks only, no target networks or optimisers).

    python -m rlcore.benchmarks.whole_agent <agent .pt> <template run dir> <out .pt>

The template is a short run of the algorithm on the env to continue on (e.g.
``python -m rlcore.train algo=sac env=antgoalsymmetric total_steps=2000
algo.learning_starts=1000 run_dir=<dir>``): its checkpoint gives the whole agent's layout
and the run's config. The snapshot's networks replace the template's; each target network
starts equal to its network (``target_critic`` = ``critic``); the optimisers start fresh
(no Adam moments), as at step 0; the replay buffer and loop state are left out, so the
continued run starts with an empty buffer. The commands that used it: docs/robots.md
(the AntMaze goal-reaching policy).
"""

from __future__ import annotations

import argparse
import copy
from typing import Any

import torch

from rlcore.checkpoint import load_checkpoint, save_checkpoint

TARGET_PREFIX = "target_"


def whole_agent(snapshot: dict[str, Any], template: dict[str, Any]) -> dict[str, Any]:
    """``template`` (a whole checkpoint) with the agent of ``snapshot`` (an agent-only one)
    as described in the module docstring. Refuses snapshots of another algorithm or with
    parts the template's agent lacks."""
    if snapshot.get("algo") != template.get("algo"):
        raise ValueError(
            f"the snapshot holds a {snapshot.get('algo')} agent, the template a "
            f"{template.get('algo')} one"
        )
    ours, theirs = template["agent"], snapshot["agent"]
    unknown = sorted(set(theirs) - set(ours))
    if unknown:
        raise ValueError(f"the snapshot's agent has parts {unknown} the template's lacks")
    agent: dict[str, Any] = {}
    for name, value in ours.items():
        source = name.removeprefix(TARGET_PREFIX) if name.startswith(TARGET_PREFIX) else name
        if name in theirs:
            agent[name] = copy.deepcopy(theirs[name])
        elif source in theirs:  # a target network: its network's weights
            agent[name] = copy.deepcopy(theirs[source])
        elif isinstance(value, dict) and "state" in value and "param_groups" in value:
            agent[name] = {"state": {}, "param_groups": copy.deepcopy(value["param_groups"])}
        else:
            raise ValueError(f"the snapshot gives nothing for the agent's part '{name}'")
    out = {key: value for key, value in template.items() if key != "loop"}
    out["agent"] = agent
    out["obs_normalizer"] = snapshot.get("obs_normalizer")
    out["source"] = {"snapshot": snapshot.get("source"), "rebuilt_by": __name__}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("snapshot", help="an agent-only .pt (benchmarks/assets)")
    parser.add_argument("template", help="a run (or .pt) of the same algorithm on the new env")
    parser.add_argument("out", help="where to write the whole checkpoint (.pt)")
    args = parser.parse_args()
    state = whole_agent(load_checkpoint(args.snapshot), load_checkpoint(args.template))
    path = save_checkpoint(state, args.out)
    print(f"whole checkpoint: {path} (agent parts {sorted(state['agent'])})")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
