#!/usr/bin/env bash
# The robot-task rows of one GPU machine's call (issue 46), within SECONDS_BUDGET (540):
#   bash benchmarks/robots_gpu.sh
# 1. PandaPegInsertion: DPPO, ReinFlow and ResiP fine-tuning from the committed BC
#    snapshots (benchmarks/assets/pandapeginsertion_{diffusion,flow}_bc.pt), 3 seeds,
#    PEG_ENV_STEPS simulator steps each, one CPU thread per run, all nine at once
#    (rlcore.benchmarks.finetune): $OUT/finetune_peg_{diffusion,flow}.json.
# 2. PandaPush: SAC + HER (her=future) and SAC without HER, both with the in-agent
#    observation normaliser (algo.normalize_obs=true), 3 seeds each, on the GPU
#    (device=cuda), 4 envs, half an update per env step, until the budget ends; the
#    evaluation curves (eval.csv of each run) in $OUT/her_push_runs.tgz.
# Needs torch, mujoco>=4.0, gymnasium, hydra-core, minari; where they do not import,
# wheels in .whl/ are installed first (a machine without package registries).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-runs/robots_gpu}
mkdir -p "$out"
budget=${SECONDS_BUDGET:-540}
if ! python3 -c "import mujoco, gymnasium, hydra, minari" 2>/dev/null \
    && compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || echo "carried wheels: installation failed"
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
lscpu | grep -E "Model name|^CPU\(s\)|Flags" | cut -c1-400
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c "import torch, mujoco, gymnasium; print('torch', torch.__version__, torch.cuda.is_available(), '| mujoco', mujoco.__version__, '| gymnasium', gymnasium.__version__)"
left() { echo $(( budget - SECONDS )); }

runs=/tmp/robots_gpu_runs
peg="python3 -m rlcore.benchmarks.finetune --env PandaPegInsertion --flatten-obs
  --dataset local/pandapeginsertion/mixed-v0 --env-steps ${PEG_ENV_STEPS:-120000} --envs 10
  --rollout-env-steps 1000 --eval-every-env-steps 40000 --eval-episodes 20
  --bc-eval-episodes 50 --seeds 0 1 2 --run-dir $runs/peg"
timeout -k 10 "$(left)" $peg --methods dppo resip --jobs 6 --out "$out/finetune_peg_diffusion.json" \
  > "$out/peg_diffusion.log" 2>&1 &
timeout -k 10 "$(left)" $peg --methods reinflow --jobs 3 --out "$out/finetune_peg_flow.json" \
  > "$out/peg_flow.log" 2>&1 &

her_args=(algo=sac env=PandaPush her.k=4 algo.normalize_obs=true "device=${HER_DEVICE:-cuda}"
  env.num_envs=4 algo.updates_per_step=0.5 total_steps=2000000 algo.actor_lr=1e-3
  algo.critic_lr=1e-3 algo.alpha_lr=1e-3 algo.policy_frequency=1 algo.batch_size=256
  "algo.hidden=[256,256]" algo.tau=0.05 algo.gamma=0.95 algo.learning_starts=1000
  eval_every=25000 eval_episodes=20 eval_envs=5 logger=quiet threads=1)
mkdir -p "$runs/her_push"
for seed in 0 1 2; do
  for her in future none; do
    timeout -k 10 "$(( $(left) - 25 ))" python3 -m rlcore.train "${her_args[@]}" "her=$her" \
      "seed=$seed" "run_dir=$runs/her_push/sac_her_${her}_seed$seed" \
      > "$runs/her_push_${her}_$seed.log" 2>&1 &
  done
done
wait
tail -n 25 "$out"/peg_*.log
for f in "$runs"/her_push/*/eval.csv; do echo "$f"; cut -d, -f1 "$f" | tail -n 1; done
tar czf "$out/her_push_runs.tgz" --exclude=checkpoints --exclude=tb -C "$runs" her_push
tar czf "$out/peg_runs.tgz" --exclude=checkpoints --exclude=tb -C "$runs" peg
cat "$runs"/her_push_*_0.log | tail -n 8
