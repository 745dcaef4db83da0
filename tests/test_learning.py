"""Learning tests (slow): the shipped configs solve InvertedPendulum-v5 quickly."""

import pytest

from rlcore.logging import read_csv
from rlcore.speed import bf16_native
from rlcore.train import train
from tests.conftest import make_config

# SAC's opt-in bfloat16 mode must learn as the float32 default does, where bf16 is native;
# elsewhere it would run float32 (rlcore.speed), or ~13x slower if forced: skipped, its maths
# are tested on every CPU in tests/test_precision.py.
BF16_NATIVE, BF16_REASON = bf16_native("cpu")

# (algo, env steps allowed). Threshold: mean eval return over 10 episodes >= 900; the
# run stops at the first evaluation that reaches it (stop_at_return).
BUDGETS = [
    ("sac", 15_000, ()),
    pytest.param(
        "sac",
        15_000,
        ("algo.precision=bf16",),
        marks=pytest.mark.skipif(not BF16_NATIVE, reason=f"bf16 is not native: {BF16_REASON}"),
    ),
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
