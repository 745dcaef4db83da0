"""The one open-loop chunk executor (rlcore.envs.chunks.ChunkQueue), by hand-computed
cases: what ActionChunks, evaluation and ResiP's base each rely on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlcore.envs.chunks import ChunkQueue


def chunks_of(first: list[float], kind: str) -> np.ndarray | torch.Tensor:
    """(N, 3, 1): env i's chunk is first[i], first[i] + 1, first[i] + 2."""
    rows = np.asarray(first, np.float32)[:, None, None] + np.arange(3, dtype=np.float32)[:, None]
    return torch.as_tensor(rows) if kind == "torch" else rows


def flat(action: np.ndarray | torch.Tensor) -> list[float]:
    return [float(a) for a in np.asarray(action).reshape(-1)]


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_a_chunk_of_three_runs_open_loop_then_asks_again(kind):
    queue = ChunkQueue()
    obs = chunks_of([0.0, 0.0], kind)[:, 0]  # any (N, ...) array of the right kind
    assert flat(queue.needs(obs)) == [1.0, 1.0] and not queue.holds(2)
    queue.fill(chunks_of([10.0, 20.0], kind), queue.needs(obs))
    assert queue.holds(2) and flat(queue.needs(obs)) == [0.0, 0.0]
    assert [flat(queue.pop()) for _ in range(3)] == [[10, 20], [11, 21], [12, 22]]
    assert flat(queue.needs(obs)) == [1.0, 1.0]  # both chunks used up
    queue.fill(chunks_of([30.0, 40.0], kind), queue.needs(obs))
    assert flat(queue.peek()) == [30, 40] and flat(queue.pop()) == [30, 40]  # peek keeps it


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_an_episode_ending_mid_chunk_restarts_only_that_env(kind):
    queue = ChunkQueue()
    obs = chunks_of([0.0, 0.0, 0.0], kind)[:, 0]
    queue.fill(chunks_of([10.0, 20.0, 30.0], kind), queue.needs(obs))
    assert flat(queue.pop()) == [10, 20, 30]
    queue.restart(np.array([False, True, False]))  # env 1's episode ended after 1 step
    need = queue.needs(obs)
    assert flat(need) == [0.0, 1.0, 0.0]
    queue.fill(chunks_of([50.0], kind), need)  # one chunk, for env 1 only
    assert [flat(queue.pop()) for _ in range(2)] == [[11, 50, 31], [12, 51, 32]]
    assert flat(queue.needs(obs)) == [1.0, 0.0, 1.0]  # env 1 still has its last action
    queue.fill(chunks_of([60.0, 70.0], kind), queue.needs(obs))
    assert flat(queue.pop()) == [60, 52, 70]


def test_next_asks_only_for_the_envs_that_need_a_chunk():
    """``next`` (ResiP's base): ``make_chunk`` sees the rows of the envs in need only, and
    a torch mask (a device back end's) restarts as a numpy one does."""
    seen = []

    def make_chunk(obs: torch.Tensor) -> torch.Tensor:
        seen.append(flat(obs))
        return chunks_of(flat(obs), "torch")

    queue = ChunkQueue()
    assert flat(queue.next(torch.tensor([1.0, 2.0]), make_chunk)) == [1, 2]
    assert flat(queue.next(torch.tensor([7.0, 8.0]), make_chunk)) == [2, 3]
    queue.restart(torch.tensor([True, False]))
    assert flat(queue.next(torch.tensor([5.0, 9.0]), make_chunk)) == [5, 4]
    assert seen == [[1.0, 2.0], [5.0]]
    # another number of envs (a batch that is not these envs): a fresh plan for all
    assert flat(queue.next(torch.tensor([0.0, 1.0, 2.0]), make_chunk)) == [0, 1, 2]
    assert seen[-1] == [0.0, 1.0, 2.0]


def test_the_plan_is_a_copy_and_round_trips_through_state_dict():
    chunks = chunks_of([10.0, 20.0], "numpy")
    queue = ChunkQueue()
    queue.fill(chunks, np.ones(2, bool))
    chunks[:] = -1.0  # the caller's array is not the plan
    queue.pop()
    other = ChunkQueue()
    other.load_state_dict(queue.state_dict())
    assert flat(other.pop()) == [11, 21]
