"""Golden numbers of CORL's Cal-QL update (tests/golden/cal_ql.json), for
tests/test_parity_offline.py.

Run in a side environment with CORL's own dependencies, outside the repository:

    python3 -m venv /work/side/venv && /work/side/venv/bin/pip install torch==2.13.0 numpy pyrallis
    git clone https://github.com/tinkoff-ai/CORL /work/side/CORL   # commit in offline_common
    /work/side/venv/bin/python benchmarks/parity/cal_ql_reference.py --corl /work/side/CORL

Imports CORL's ``algorithms/finetune/cal_ql.py`` by path and runs its offline update
(``CalQL.train``, calibration on, batches with Monte-Carlo returns-to-go) exactly as
cql_reference.py runs CQL's: width 16, ``offline_common``'s initial weights, 20 batches,
every random draw scripted. Cases: "default" (CORL's Cal-QL TrainConfig: critics 2x,
cql_alpha 10, importance sampling, policy lr 3e-5) and "antmaze" (CORL's antmaze recipe:
Lagrange with action gap 0.8, max-target backup, cql_alpha 5, diff clipped below at -200,
policy lr 1e-4, 5-layer critics).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from corl_harness import load_corl, narrow
from cql_reference import COMMON, run_case
from offline_common import CORL_COMMIT, CORL_REPO, GOLDEN_DIR, HIDDEN, save_golden

BASE = {
    **COMMON,
    "critic_hidden_layers": 2,
    "policy_lr": 3e-5,
    "cql_alpha": 10.0,
    "cql_importance_sample": True,
    "cql_lagrange": False,
    "cql_target_action_gap": -1.0,
    "cql_temp": 1.0,
    "cql_max_target_backup": False,
    "backup_entropy": False,
}
CASES = {
    "default": BASE,
    "antmaze": {
        **BASE,
        "critic_hidden_layers": 5,
        "policy_lr": 1e-4,
        "cql_alpha": 5.0,
        "cql_lagrange": True,
        "cql_target_action_gap": 0.8,
        "cql_max_target_backup": True,
        "cql_clip_diff_min": -200.0,
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corl", type=Path, required=True, help="a CORL checkout")
    parser.add_argument("--out", type=Path, default=GOLDEN_DIR / "cal_ql.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cal_ql = load_corl(args.corl, "algorithms/finetune/cal_ql.py", "corl_cal_ql")
    narrow(cal_ql, HIDDEN)
    cases = {
        name: run_case(cal_ql, cal_ql.CalQL, settings, calibrated=True)
        for name, settings in CASES.items()
    }
    meta = {
        "reference": f"{CORL_REPO}@{CORL_COMMIT} algorithms/finetune/cal_ql.py",
        "command": "python " + " ".join(["benchmarks/parity/cal_ql_reference.py", *sys.argv[1:]]),
        "torch": torch.__version__,
        "data": "offline_common: cql_initial, make_batches seed 1 (with mc_return), "
        "noise_draws seed 2",
    }
    save_golden(args.out, meta, cases)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
