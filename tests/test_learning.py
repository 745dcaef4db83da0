"""Learning tests (slow): the shipped configs solve InvertedPendulum-v5 quickly."""

import pytest

from rlcore.logging import read_csv
from rlcore.train import train
from tests.conftest import make_config

# (algo, env steps allowed). Threshold: mean eval return over 10 episodes >= 900; the
# run stops at the first evaluation that reaches it (stop_at_return).
# SAC's opt-in bfloat16 mode must learn as the float32 default does.
BUDGETS = [
    ("sac", 15_000, ()),
    ("sac", 15_000, ("algo.precision=bf16",)),
    ("td3", 15_000, ()),
    ("ppo", 100_000, ()),
]


@pytest.mark.slow
@pytest.mark.parametrize("algo,steps,extra", BUDGETS)
def test_reaches_900_on_inverted_pendulum(algo, steps, extra, tmp_path):
    cfg = make_config(
        f"algo={algo}",
        "env=InvertedPendulum",
        f"total_steps={steps}",
        "logger=quiet",
        "checkpoint_every=1000000",
        "stop_at_return=900",
        *extra,
    )
    train(cfg, tmp_path)
    evals = read_csv(tmp_path / "eval.csv")
    assert all(row["step"] <= steps for row in evals)
    best = max(row["eval/return"] for row in evals)
    assert best >= 900, f"{algo}: best eval return {best:.1f} within {steps} steps: {evals}"
