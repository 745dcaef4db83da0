"""Speed modes never make a run slower: bf16 only where it is native (else float32 with one
warning), compile only with a C++ compiler (else eager with one warning), compile="auto"
only for long runs. CPU classes are simulated by patching torch's capability checks."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from rlcore import catalog
from rlcore.algos.awac import AWAC, AWACConfig
from rlcore.algos.cal_ql import CalQL, CalQLConfig
from rlcore.algos.cql import CQL, CQLConfig
from rlcore.algos.iql import IQL, IQLConfig
from rlcore.algos.ppo import PPO, PPOConfig
from rlcore.algos.rebrac import ReBRAC, ReBRACConfig
from rlcore.algos.sac import SAC, SACConfig
from rlcore.algos.td3_bc import TD3BC, TD3BCConfig
from rlcore.speed import (
    ALLOW_EMULATED_BF16,
    AUTO_COMPILE_ABOVE_STEPS,
    SpeedModeWarning,
    bf16_native,
    resolve_compile,
    resolve_precision,
    resolve_speed_modes,
    speed_report,
)
from tests.conftest import make_config
from tests.test_algos_contract import ACT, OBS, random_batch

# (ATen CPU capability, has avx512_bf16, has AMX) of the machines this project runs on
AVX2_EPYC = ("AVX2", False, False)
AVX512_NO_BF16 = ("AVX512", False, False)
AVX512_BF16_EPYC = ("AVX512", True, False)
AMX_XEON = ("AVX512", True, True)

PRECISION_AGENTS = [  # every agent with a precision option, at small sizes
    (SAC, SACConfig, {"hidden": (32, 32), "policy_frequency": 1}),
    (IQL, IQLConfig, {"hidden": (32, 32)}),
    (TD3BC, TD3BCConfig, {"hidden": (32, 32)}),
    (ReBRAC, ReBRACConfig, {"hidden": (32, 32)}),
    (AWAC, AWACConfig, {"hidden": (32, 32)}),
    (CQL, CQLConfig, {"hidden": (32, 32), "cql_n_actions": 2}),
    (CalQL, CalQLConfig, {"hidden": (32, 32), "critic_hidden": (32, 32), "cql_n_actions": 2}),
]
AGENT_IDS = [cls.__name__ for cls, _, _ in PRECISION_AGENTS]


@pytest.fixture
def cpu(monkeypatch):
    """``cpu(capability, avx512_bf16, amx)`` makes torch report that CPU; the environment
    variables that change the answer are cleared first."""
    for name in (
        ALLOW_EMULATED_BF16,
        "ATEN_CPU_CAPABILITY",
        "ONEDNN_MAX_CPU_ISA",
        "DNNL_MAX_CPU_ISA",
    ):
        monkeypatch.delenv(name, raising=False)

    def simulate(capability: str, avx512_bf16: bool, amx: bool) -> None:
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)

    return simulate


@pytest.fixture
def compiler(monkeypatch):
    """``compiler(present)``: whether rlcore finds a C++ compiler ($CXX cleared)."""
    monkeypatch.delenv("CXX", raising=False)

    def simulate(present: bool) -> None:
        path = "/usr/bin/g++" if present else None
        monkeypatch.setattr("rlcore.compiled.shutil.which", lambda name: path)

    return simulate


def speed_warnings(build):
    """(what ``build()`` returned, the SpeedModeWarnings it raised), every one recorded."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = build()
    return out, [str(w.message) for w in caught if issubclass(w.category, SpeedModeWarning)]


@pytest.mark.parametrize(
    "machine,native,reason",
    [
        (AVX2_EPYC, False, "avx512_bf16/amx_bf16 not found (CPU capability AVX2)"),
        (AVX512_NO_BF16, False, "avx512_bf16/amx_bf16 not found (CPU capability AVX512)"),
        (AVX512_BF16_EPYC, True, "avx512_bf16 (CPU capability AVX512)"),
        (AMX_XEON, True, "avx512_bf16/amx_bf16 (CPU capability AVX512)"),
        # AVX512-BF16 hardware whose ATen kernels are held at AVX2 (ATEN_CPU_CAPABILITY=avx2)
        (("AVX2", True, False), False, "avx512_bf16 present but unused (CPU capability AVX2)"),
    ],
    ids=["avx2-epyc", "avx512-no-bf16", "avx512-bf16-epyc", "amx-xeon", "bf16-held-at-avx2"],
)
def test_cpu_bf16_detection(cpu, machine, native, reason):
    cpu(*machine)
    assert bf16_native("cpu") == (native, reason)


def test_env_vars_that_hold_cpu_kernels_below_bf16_count_as_emulated(cpu, monkeypatch):
    """ATEN_CPU_CAPABILITY (read by torch itself) and ONEDNN_MAX_CPU_ISA both simulate
    the AVX2-only EPYC on a bf16 machine: detection must call that emulated."""
    cpu(*AMX_XEON)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert bf16_native("cpu") == (
        False,
        "avx512_bf16/amx_bf16 present but unused (ONEDNN_MAX_CPU_ISA=AVX2)",
    )
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX")
    assert bf16_native("cpu")[0]
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    cpu("AVX2", True, True)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    native, reason = bf16_native("cpu")
    assert not native and reason.endswith("(CPU capability AVX2, set by ATEN_CPU_CAPABILITY=avx2)")


@pytest.mark.parametrize("supported", [True, False])
def test_cuda_bf16_detection_does_not_count_emulation(monkeypatch, supported):
    calls = []

    def is_bf16_supported(including_emulation: bool = True) -> bool:
        calls.append(including_emulation)
        return supported or including_emulation  # torch counts emulation as support

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    native, reason = bf16_native("cuda:0")
    assert calls == [False] and native is supported
    assert reason == (
        "the CUDA device supports bf16"
        if supported
        else "the CUDA device has no native bf16 (compute capability below 8.0)"
    )


@pytest.mark.parametrize("agent_cls,config_cls,small", PRECISION_AGENTS, ids=AGENT_IDS)
def test_emulated_bf16_falls_back_to_float32_with_one_warning(cpu, agent_cls, config_cls, small):
    """On the AVX2-only EPYC, precision=bf16 builds a float32 agent (one warning naming the
    missing feature) whose updates equal a float32 agent's bit for bit."""
    cpu(*AVX2_EPYC)
    asked, messages = speed_warnings(
        lambda: agent_cls(OBS, ACT, config_cls(**small, precision="bf16"))
    )
    assert len(messages) == 1, messages
    assert messages[0].startswith(
        "precision=bf16 -> float32: avx512_bf16/amx_bf16 not found (CPU capability AVX2), "
        "so bf16 would be emulated and ~13x slower than float32."
    )
    assert ALLOW_EMULATED_BF16 in messages[0]
    assert asked.config.precision == "float32"  # the effective precision is visible
    plain = agent_cls(OBS, ACT, config_cls(**small))
    plain.load_state_dict(copy.deepcopy(asked.state_dict()))
    for seed in range(2):
        batch = random_batch(n=32, seed=seed)
        torch.manual_seed(seed)
        m_asked = asked.update(batch)
        torch.manual_seed(seed)
        assert plain.update(batch) == m_asked  # float32 maths exactly


@pytest.mark.parametrize("agent_cls,config_cls,small", PRECISION_AGENTS, ids=AGENT_IDS)
@pytest.mark.parametrize("machine", [AVX512_BF16_EPYC, AMX_XEON], ids=["avx512-bf16", "amx"])
def test_native_bf16_is_kept_without_a_warning(cpu, machine, agent_cls, config_cls, small):
    cpu(*machine)
    agent, messages = speed_warnings(
        lambda: agent_cls(OBS, ACT, config_cls(**small, precision="bf16"))
    )
    assert messages == [] and agent.config.precision == "bf16"


def test_escape_hatch_keeps_emulated_bf16(cpu, monkeypatch):
    cpu(*AVX2_EPYC)
    monkeypatch.setenv(ALLOW_EMULATED_BF16, "1")
    agent, messages = speed_warnings(lambda: SAC(OBS, ACT, SACConfig(precision="bf16")))
    assert messages == [] and agent.config.precision == "bf16"
    assert resolve_precision("float32") == "float32"
    with pytest.raises(ValueError, match="unknown precision 'fp8'"):
        resolve_precision("fp8")


def test_compile_true_without_a_compiler_runs_eager_with_one_warning(compiler):
    compiler(False)
    sac, messages = speed_warnings(lambda: SAC(OBS, ACT, SACConfig(compile=True)))
    assert len(messages) == 1 and messages[0].startswith(
        "compile=true needs a C++ compiler for torch.compile (none of $CXX, g++, c++, "
        "clang++ found): running eager"
    )
    assert sac.config.compile is False and sac._update_graph is None
    ppo, messages = speed_warnings(lambda: PPO(OBS, ACT, PPOConfig(compile=True)))
    assert len(messages) == 1  # one warning, though PPO compiles two graphs
    assert ppo._compiled_step is None and ppo._explore_graph is None
    ppo.update(_rollout(ppo))  # the eager path trains


def _rollout(agent: PPO):
    from tests.test_speed_options import rollout

    return rollout(agent, seed=0)


def test_compile_auto_compiles_only_long_runs(compiler):
    compiler(True)
    assert AUTO_COMPILE_ABOVE_STEPS == 100_000
    assert resolve_compile("auto", 100_000) is False  # the suite's longest run stays eager
    assert resolve_compile("auto", 100_001) is True
    assert resolve_compile("auto", None) is False
    assert resolve_compile(True, 10) is True and resolve_compile(False, 10**7) is False
    # a short agent is eager; a long one holds a compiled graph (built lazily, on first use)
    short, messages = speed_warnings(
        lambda: SAC(OBS, ACT, SACConfig(compile="auto", total_steps=20_000))
    )
    assert messages == [] and short.config.compile is False and short._update_graph is None
    long = SAC(OBS, ACT, SACConfig(compile="auto", total_steps=1_000_000))
    assert long.config.compile is True and long._update_graph is not None
    ppo = PPO(OBS, ACT, PPOConfig(compile="auto", total_steps=1_000_000))
    assert ppo._compiled_step is not None and ppo._explore_graph is not None
    with pytest.raises(ValueError, match="unknown compile='yes', choose from true, false, auto"):
        resolve_compile("yes", 10)


def test_compile_auto_reads_the_planned_run_length(compiler):
    """compile=auto decides on the run the config plans (offline plus online steps), not
    on one field: IQL's 60k offline steps alone stay eager, with 60k online ones they
    compile."""
    compiler(True)
    offline = IQLConfig(compile="auto", total_steps=60_000)
    assert resolve_speed_modes(offline).compile is False
    both = IQLConfig(compile="auto", total_steps=60_000, online_steps=60_000)
    assert resolve_speed_modes(both).compile is True
    assert resolve_speed_modes(CQLConfig(compile="auto")).compile is True  # 1M offline steps


def test_compile_auto_without_a_compiler_notes_it_only_for_long_runs(compiler):
    compiler(False)
    _, messages = speed_warnings(lambda: resolve_compile("auto", 20_000))
    assert messages == []  # a short run would not have compiled anyway
    compiled, messages = speed_warnings(lambda: resolve_compile("auto", 1_000_000))
    assert compiled is False and len(messages) == 1
    assert messages[0].startswith("compile=auto (a run of 1000000 > 100000 steps) needs a C++")


@pytest.mark.parametrize("algo", ["sac", "ppo"])
def test_command_line_default_is_auto(algo, compiler):
    """The shipped configs say compile=auto: the CLI's long runs compile, short ones
    (every run of the suite) stay eager."""
    from omegaconf import OmegaConf

    compiler(True)
    spec = catalog.get(algo)
    for steps, expected in ((300, False), (1_000_000, True)):
        cfg = make_config(f"algo={algo}", f"total_steps={steps}")
        algo_cfg = OmegaConf.to_container(cfg.algo, resolve=True)
        algo_cfg["total_steps"] = cfg.total_steps  # as rlcore.train sets it
        assert algo_cfg["compile"] == "auto"
        config = spec.config_from_dict(algo_cfg)
        assert resolve_compile(config.compile, config.total_steps) is expected


def test_speed_report_names_what_is_native(cpu, compiler):
    cpu(*AVX2_EPYC)
    compiler(False)
    assert speed_report("cpu") == {
        "device": "cpu",
        "cpu_capability": "AVX2",
        "bf16_native": False,
        "bf16_reason": "avx512_bf16/amx_bf16 not found (CPU capability AVX2)",
        "cxx_compiler": None,
        "emulated_bf16_allowed": False,
    }


def test_throughput_skips_emulated_bf16_and_missing_compiler(cpu, compiler):
    """On the AVX2-only EPYC without a compiler the ensemble section times fp32 eager only:
    bf16 and compiled contenders are skipped with a note, not timed (an emulated bf16
    column once ran the sac_update section past 25 minutes)."""
    from argparse import Namespace

    from rlcore.benchmarks.throughput.common import machine_info, mode_skips
    from rlcore.benchmarks.throughput.ensemble import section_ensemble
    from rlcore.benchmarks.throughput.training_runs import _run_modes

    cpu(*AVX2_EPYC)
    compiler(False)
    skips = mode_skips()
    assert skips["bf16"].startswith(
        "bf16 would be emulated here (avx512_bf16/amx_bf16 not found (CPU capability AVX2))"
    )
    assert skips["compile"].startswith("no C++ compiler")
    assert machine_info(1)["speed_modes"]["bf16_native"] is False
    section = section_ensemble(Namespace(updates=3, seed=0, rounds=1))
    timed = {k for k, v in section["updates_per_s"].items() if v is not None}
    assert timed == {"qensemble_fp32", "loop_fp32"}
    assert section["notes"] == [skips["bf16"], skips["compile"]]
    assert section["ratios"]["qensemble_fp32/loop_fp32"] > 0
    assert section["ratios"]["qensemble_bf16/loop_fp32"] is None
    assert _run_modes(["algo.compile=false"]) == []
    assert _run_modes(["algo.precision=bf16", "algo.compile=true"]) == ["bf16", "compile"]
    cpu(*AMX_XEON)
    compiler(True)
    assert mode_skips() == {"bf16": None, "compile": None}


def test_compile_section_times_each_agent_eager_and_skips_what_is_missing(cpu, compiler):
    """The compile section's rows: SAC, CQL and IQL eager, with the compiled (and bf16)
    contenders skipped, not timed, where this machine lacks them."""
    from argparse import Namespace

    from rlcore.benchmarks.throughput.o2o import section_compile

    cpu(*AVX2_EPYC)
    compiler(False)
    section = section_compile(Namespace(updates=10, seed=0, rounds=1))
    timed = {k for k, v in section["updates_per_s"].items() if v is not None}
    assert timed == {"sac_fp32", "cql_fp32", "iql_fp32"}
    assert set(section["ratios"]) == {
        f"{agent}_{p}_compile/{agent}_{p}"
        for agent in ("sac", "cql", "iql")
        for p in ("fp32", "bf16")
    }
    assert all(value is None for value in section["ratios"].values())
    assert "| SAC, fp32 |" in section["table"]


def test_bf16_parity_benchmark_refuses_to_compare_float32_with_itself(cpu, monkeypatch):
    from rlcore.benchmarks.bf16_parity import check_bf16_native

    cpu(*AVX2_EPYC)
    with pytest.raises(SystemExit, match="bf16 is not native on this machine \\(avx512_bf16"):
        check_bf16_native(speed_report("cpu"))
    monkeypatch.setenv(ALLOW_EMULATED_BF16, "1")
    check_bf16_native(speed_report("cpu"))  # asked for: runs emulated
    monkeypatch.delenv(ALLOW_EMULATED_BF16)
    cpu(*AVX512_BF16_EPYC)
    check_bf16_native(speed_report("cpu"))
