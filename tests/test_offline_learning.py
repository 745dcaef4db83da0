"""Offline learning test (slow): on a dataset recorded by a mediocre, noisy policy on
InvertedPendulum-v5, IQL and TD3+BC end above the behaviour policy's average return."""

import pytest

from rlcore.logging import read_csv
from rlcore.offline.datasets import load_dataset
from rlcore.offline.recording import collect
from rlcore.train import train
from tests.conftest import make_config


@pytest.fixture(scope="module")
def mediocre_dataset(tmp_path_factory):
    import os

    root = tmp_path_factory.mktemp("offline_learning")
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root / "minari")
    run = root / "behaviour"
    # a short SAC run gives a mediocre policy (eval return ~70-120 of 1000)
    train(
        make_config(
            "algo=sac",
            "env=InvertedPendulum",
            "total_steps=6000",
            "logger=quiet",
            "eval_every=3000",
            "checkpoint_every=100000",
        ),
        run,
    )
    collect(
        "InvertedPendulum",
        str(run),
        "local/invertedpendulum/mediocre-v0",
        steps=10_000,
        seed=1,
        noise=0.5,
    )
    yield "local/invertedpendulum/mediocre-v0"
    if old is None:
        os.environ.pop("MINARI_DATASETS_PATH", None)
    else:
        os.environ["MINARI_DATASETS_PATH"] = old


# Gradient steps per algorithm, measured on this dataset (behaviour mean 50.6): IQL run for
# 3,000 steps (its cosine schedule over 3,000) ends at 1000 on seeds 0, 1 and 2; TD3+BC
# evaluated every 1,000 steps of 5,000 reads 53 / 51 / 49 / 54 / 444 (seed 0): it needs
# its 5,000.
STEPS = {"iql": 3000, "td3_bc": 5000}


@pytest.mark.slow
@pytest.mark.parametrize("algo", list(STEPS))
def test_offline_beats_behaviour_policy(algo, mediocre_dataset, tmp_path):
    behaviour = float(load_dataset(mediocre_dataset).episode_returns().mean())
    cfg = make_config(
        f"algo={algo}",
        "env=InvertedPendulum",
        f"dataset={mediocre_dataset}",
        f"total_steps={STEPS[algo]}",
        f"eval_every={STEPS[algo]}",
        "logger=quiet",
        "checkpoint_every=100000",
    )
    train(cfg, tmp_path)
    final = read_csv(tmp_path / "eval.csv")[-1]["eval/return"]
    assert final > behaviour, f"{algo}: {final:.1f} <= behaviour {behaviour:.1f}"
