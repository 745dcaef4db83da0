"""Section ``ensemble``: 10 critics as one batched QEnsemble vs a Python loop of MLPs."""

from __future__ import annotations

import argparse
import time
from typing import Any

from rlcore.benchmarks.throughput.common import (
    Measure,
    alternate,
    fmt,
    markdown_table,
    median_of,
    mode_names,
    ratio,
    skip_mode,
)

ENS_MEMBERS, ENS_OBS, ENS_ACT, ENS_BATCH = 10, 17, 6, 256


def _ensemble_measure(
    batched: bool, bf16: bool, updates: int, seed: int, compiled: bool = False
) -> Measure:
    """Update steps/s of 10 256x256 LayerNorm critics regressed (MSE) onto a target;
    ``compiled``: the whole step as one graph (``rlcore.compiled.CompiledAdamStep``)."""
    import torch

    from rlcore.compiled import CompiledAdamStep
    from rlcore.losses import ensemble_mse
    from rlcore.nets import MLP, QEnsemble
    from rlcore.utils import adam

    torch.manual_seed(seed)
    if batched:
        net: torch.nn.Module = QEnsemble(ENS_OBS, ENS_ACT, ENS_MEMBERS, (256, 256), layer_norm=True)

        def forward(obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
            return net(obs, act)
    else:
        net = torch.nn.ModuleList(
            MLP(ENS_OBS + ENS_ACT, 1, (256, 256), layer_norm=True) for _ in range(ENS_MEMBERS)
        )

        def forward(obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
            x = torch.cat([obs, act], dim=-1)
            return torch.stack([critic(x).squeeze(-1) for critic in net])

    optimizer = adam(net.parameters(), 3e-4, fused=True)
    gen = torch.Generator().manual_seed(seed)
    batches = [
        (
            torch.randn(ENS_BATCH, ENS_OBS, generator=gen),
            torch.rand(ENS_BATCH, ENS_ACT, generator=gen) * 2 - 1,
            torch.randn(ENS_BATCH, generator=gen),
        )
        for _ in range(8)
    ]

    def losses(obs: torch.Tensor, act: torch.Tensor, target: torch.Tensor) -> tuple:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            q = forward(obs, act)
        return (ensemble_mse(q.float(), target),)

    step = CompiledAdamStep({"net": net}, losses, optimizer) if compiled else None

    def run(n: int) -> float:
        start = time.perf_counter()
        for i in range(n):
            if step is not None:
                step(*batches[i % len(batches)])
                continue
            (loss,) = losses(*batches[i % len(batches)])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        return n / (time.perf_counter() - start)

    run(max(5, updates // 10))  # warm-up
    return lambda: run(updates)


def section_ensemble(args: argparse.Namespace) -> dict[str, Any]:
    """10-critic ensemble update steps/s: QEnsemble vs loop of MLPs, fp32 and bf16."""
    names = {  # name: (batched, bf16, compiled)
        "qensemble_fp32": (True, False, False),
        "loop_fp32": (False, False, False),
        "qensemble_bf16": (True, True, False),
        "loop_bf16": (False, True, False),
        "qensemble_fp32_compile": (True, False, True),
        "qensemble_bf16_compile": (True, True, True),
    }
    notes: list[str] = []
    measures: dict[str, Measure | None] = {
        k: None
        if skip_mode(mode_names(p, c), notes)
        else _ensemble_measure(b, p, args.updates, args.seed, c)
        for k, (b, p, c) in names.items()
    }
    result = alternate(measures, args.rounds)
    med = {k: median_of(v) for k, v in result.items()}
    ratios = {
        "qensemble_fp32/loop_fp32": ratio(med["qensemble_fp32"], med["loop_fp32"]),
        "qensemble_bf16/loop_bf16": ratio(med["qensemble_bf16"], med["loop_bf16"]),
        "qensemble_bf16/loop_fp32": ratio(med["qensemble_bf16"], med["loop_fp32"]),
        "qensemble_fp32_compile/loop_fp32": ratio(med["qensemble_fp32_compile"], med["loop_fp32"]),
        "qensemble_bf16_compile/loop_fp32": ratio(med["qensemble_bf16_compile"], med["loop_fp32"]),
    }
    table = markdown_table(
        ["precision", "QEnsemble", "loop of 10 MLPs", "ratio", "QEnsemble / loop fp32"],
        [
            [
                "fp32",
                fmt(med["qensemble_fp32"]),
                fmt(med["loop_fp32"]),
                fmt(ratios["qensemble_fp32/loop_fp32"], True),
                fmt(ratios["qensemble_fp32/loop_fp32"], True),
            ],
            [
                "bf16 autocast",
                fmt(med["qensemble_bf16"]),
                fmt(med["loop_bf16"]),
                fmt(ratios["qensemble_bf16/loop_bf16"], True),
                fmt(ratios["qensemble_bf16/loop_fp32"], True),
            ],
            *(
                [
                    f"{precision} compiled step",
                    fmt(med[f"qensemble_{precision}_compile"]),
                    "",
                    "",
                    fmt(ratios[f"qensemble_{precision}_compile/loop_fp32"], True),
                ]
                for precision in ("fp32", "bf16")
            ),
        ],
    )
    return {
        "title": f"10-critic ensemble update steps/s ({args.updates} per measurement; obs 17, "
        "act 6, 256x256 + LayerNorm, batch 256, MSE to a target, fused Adam on both sides; "
        "compiled step = loss, gradients and Adam as one torch.compile graph)",
        "unit": "updates/s",
        "updates_per_s": result,
        "ratios": ratios,
        "notes": notes,
        "table": table,
    }
