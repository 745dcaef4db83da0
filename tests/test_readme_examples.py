"""The library-use page's loops run as written (with shorter run lengths): the SAC
off-policy loop and the PPO on-policy loop of docs/library.md, the offline page's RIQL (on
a corrupted dataset) and MOPO loops, and the README's quick-start SAC loop, which is also
run at its own length (a slow test: it prints its progress lines and learns)."""

import math
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
LIBRARY_PAGE = REPO / "docs" / "library.md"
OFFLINE_PAGE = REPO / "docs" / "offline.md"
SECTION = "## Use an algorithm in your own code"
# the line ending in "# run length..." holds every loop length of an example
# (PPO: 2 x 128 steps per env pass Pendulum's 200-step time limit, so the truncation
# bootstrap runs)
SHORT = {
    "total_steps": 300,
    "learning_starts": 200,
    "num_envs": 2,
    "num_steps": 128,
    "iterations": 2,
    "fit_epochs": 2,
}


def training_blocks(markdown: str) -> list[str]:
    """The python blocks of ``markdown`` that train (call ``agent.update``)."""
    blocks = re.findall(r"```python\n(.*?)```", markdown, flags=re.S)
    return [block for block in blocks if "agent.update(" in block]


def section_examples() -> list[str]:
    """The training loops of the library-use page."""
    return training_blocks(LIBRARY_PAGE.read_text())


def readme_example() -> str:
    """The one training loop of the README's quick start ("Use an algorithm ...")."""
    text = README.read_text()
    start = text.index(SECTION) + len(SECTION)
    (block,) = training_blocks(text[start : text.index("\n## ", start)])
    return block


def shortened(code: str) -> str:
    """``code`` with its run-length line replaced by the SHORT values."""
    pattern = re.compile(r"^([\w, ]+?) = ([^#\n]+?)  # run length.*$", flags=re.M)
    match = pattern.search(code)
    assert match, "each loop example keeps its loop lengths on one '# run length' line"
    names = [n.strip() for n in match.group(1).split(",")]
    assert set(names) <= set(SHORT), names
    values = ", ".join(str(SHORT[n]) for n in names)
    return code[: match.start()] + f"{', '.join(names)} = {values}" + code[match.end() :]


def test_section_has_the_sac_and_ppo_loops():
    examples = section_examples()
    assert len(examples) == 2
    assert "SAC(" in examples[0] and "ReplayBuffer(" in examples[0]
    assert "PPO(" in examples[1] and "RolloutBuffer(" in examples[1]
    for name in ("agent.explore(", "agent.value(", "rollout.compute(", "progress="):
        assert name in examples[1]


def run_example(code: str, name: str) -> dict:
    """Runs ``code`` shortened (seeded) and returns its namespace."""
    import torch

    torch.manual_seed(0)
    namespace: dict = {}
    exec(compile(shortened(code), name, "exec"), namespace)
    return namespace


def test_readme_example_is_the_library_pages_sac_loop():
    """One text: the library page's SAC loop is the README's (plus its state_dict line),
    and both set the command line's threads before any torch work."""
    assert readme_example() in section_examples()[0]
    for code in (readme_example(), *section_examples()):
        assert 'apply_threads("auto")' in code


def test_readme_quick_start_loop_runs():
    """The README's SAC loop trains (shortened): finite SAC metrics, a full buffer."""
    namespace = run_example(readme_example(), "README example")
    metrics = namespace["metrics"]
    assert "critic_loss" in metrics and all(math.isfinite(v) for v in metrics.values())
    assert len(namespace["buffer"]) == SHORT["total_steps"]


@pytest.mark.parametrize("index", [0, 1], ids=["sac", "ppo"])
def test_readme_loop_example_runs(index):
    namespace = run_example(section_examples()[index], f"docs/library.md example {index}")
    metrics = namespace["metrics"]  # the last update's metrics
    assert metrics and all(math.isfinite(v) for v in metrics.values()), metrics
    agent = namespace["agent"]
    if index == 0:
        assert "critic_loss" in metrics and len(namespace["buffer"]) == SHORT["total_steps"]
        assert set(namespace["state"]) >= {"actor", "critic"}
    else:
        assert "policy_loss" in metrics and agent.updates == SHORT["iterations"]
        rollout = namespace["rollout"]
        assert rollout.step == SHORT["num_steps"]
        truncated = rollout.truncated > 0  # the time limit at env step 200: row 200 - 128 - 1
        assert truncated.any(dim=1).nonzero().flatten().tolist() == [200 - SHORT["num_steps"] - 1]
        assert (rollout.bootstrap_value[truncated] != 0).all()
        assert (rollout.bootstrap_value[~truncated] == 0).all()


@pytest.mark.slow
def test_readme_example_as_written_prints_progress_and_learns(capsys):
    """The README's loop at its own length (5,000 steps): a progress line every 1,000 steps
    and a policy far above random (10 deterministic episodes; random: about -1,300;
    torch seeds 0-2 gave -184 to -215)."""
    import numpy as np
    import torch

    torch.manual_seed(0)
    namespace: dict = {}
    exec(compile(readme_example(), "README example", "exec"), namespace)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [f"step {n}" for n in range(1000, 5001, 1000)]
    assert all("episode return" in line and "critic loss" in line for line in lines)
    agent, env = namespace["agent"], namespace["env"]
    returns = []
    for episode in range(10):
        obs, _ = env.reset(seed=100 + episode)
        done, total = False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(agent.act(obs, deterministic=True))
            total, done = total + reward, terminated or truncated
        returns.append(total)
    assert np.mean(returns) > -600, returns


def test_offline_page_loops_run(tmp_path, monkeypatch):
    """docs/offline.md's RIQL loop on a corrupted dataset and its MOPO loop (shortened) on
    the random Hopper dataset their text records: the corruption is recorded, RIQL's
    statistics come from the data, the ensemble is fitted once and rolled out in."""
    import torch

    from rlcore.offline.recording import collect

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    collect("Hopper", "random", "local/hopper/random-v0", steps=1000, seed=0)
    riql, mopo = training_blocks(OFFLINE_PAGE.read_text())
    namespace = run_example(riql, "docs/offline.md RIQL example")
    data, agent = namespace["data"], namespace["agent"]
    assert data.corruption[0]["kind"] == "obs" and data.corruption[0]["rows"] > 200
    both = torch.cat([data.obs, data.next_obs])
    torch.testing.assert_close(agent.obs_normalizer.mean, both.mean(0), rtol=1e-5, atol=1e-5)
    assert agent.updates == SHORT["total_steps"]
    assert all(math.isfinite(v) for v in namespace["metrics"].values())
    namespace = run_example(mopo, "docs/offline.md MOPO example")
    rollouts, metrics = namespace["rollouts"], namespace["metrics"]
    assert rollouts.fit_result is not None and rollouts.fit_result.epochs <= SHORT["fit_epochs"]
    assert rollouts.last_rollout["rollout_transitions"] > 0
    assert "critic_loss" in metrics and all(math.isfinite(v) for v in metrics.values())
