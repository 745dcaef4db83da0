"""Throughput suite: rlcore side by side with its anchors, in one process.

    python -m rlcore.benchmarks.throughput                          # every section (~25 min, 2 idle cores)
    python -m rlcore.benchmarks.throughput --quick                  # smoke run, ~2 min
    python -m rlcore.benchmarks.throughput --sections env memory --rounds 5

Sections (``--sections``, default all):

* ``env``: env steps/s (all envs counted) of rlcore's native back end vs gymnasium's
  SyncVectorEnv and AsyncVectorEnv, envpool (when importable) and the raw MuJoCo
  ceiling (``mujoco.batch.Batch`` stepping the same model, frame_skip and thread count,
  no task code), for Hopper, HalfCheetah and Ant with 1, 16 and 64 envs.
* ``sac_update``: SAC gradient updates/s (batch 256, 256x256, Hopper shapes, actor +
  critic + temperature every update) of rlcore's ``SAC.update`` vs SB3's ``SAC.train``;
  a bf16 column (``SACConfig(precision="bf16")``).
* ``ensemble``: update steps/s of 10 LayerNorm critics (RLPD/WSRL shape) as one batched
  ``rlcore.nets.QEnsemble`` vs a Python loop over 10 ``rlcore.nets.MLP``; fp32 and
  bf16 (``torch.autocast``).
* ``o2o``: offline-to-online updates/s at Hopper shapes, eager vs ``compile=true``, fp32
  and bf16: CQL (Cal-QL's update is CQL's plus one max), IQL, RLPD (``rlcore.algos.rlpd`` when
  present: 10 LayerNorm critics, UTD 20). Then RLPD's critic step in critic steps/s:
  rlcore's pieces eager and as one compiled graph called 20 times, vs the same maths in
  JAX as one ``jax.jit`` call of a 20-step ``lax.scan`` (``pip install -e .[bench]``);
  ``--torch-threads`` also limits XLA's CPU threads.
* ``compile``: SAC, CQL and IQL updates/s with their default configs at Hopper shapes,
  eager vs ``compile=true`` (fp32, bf16): the measurement that keeps a compiled path
  only where it gains >= 1.2x (run it with ``--torch-threads 1 --rounds 5 --updates 200``).
* ``sac_run``: whole-run env-steps/s of SAC on Hopper (UTD 1), rlcore vs SB3, same
  hyper-parameters; also the post-warm-up part.
* ``ppo_run``: whole-run env-steps/s of PPO on Hopper with 8 envs, rlcore vs SB3 (SB3's
  default hyper-parameters on both sides).
* ``memory``: peak RSS increase of a filled 1M-transition Hopper ``ReplayBuffer`` vs its
  raw float32 data size, each buffer in a fresh subprocess (SB3's buffer beside it).

Every measurement alternates the contenders (A B A B ..., ``--rounds``) and reports
per-contender medians and the ratio of medians. Baselines that are not installed are
skipped with a note and ``null`` in the JSON. So are speed modes this machine lacks
(``rlcore.speed``): bf16 columns where bf16 would be emulated (an AVX2-only CPU: ~13x
slower, not a speed mode; ``RLCORE_ALLOW_EMULATED_BF16=1`` times them anyway) and compile
columns without a C++ compiler. The JSON (``--out``; default
``benchmarks/results/throughput.json``, ``throughput_quick.json`` with ``--quick``) is
rewritten after every section and holds the machine description (with
``speed_modes``: CPU capability, bf16 native or not and why, the C++ compiler), every
sample, the medians, the ratios and the target checks.
"""
