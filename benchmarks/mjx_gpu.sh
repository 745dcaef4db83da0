#!/usr/bin/env bash
# The MJX numbers of record on a GPU machine (benchmarks/README.md, "mjx"):
#   bash benchmarks/mjx_gpu.sh ppo         # PPO Hopper, 1024 MJX envs, to return 2,500
#   bash benchmarks/mjx_gpu.sh throughput  # env steps/s, Hopper and Ant, 1..16384 envs
#   TP_SECONDS=200 PPO_MINUTES=6 bash benchmarks/mjx_gpu.sh all   # both within one budget
#   bash benchmarks/mjx_gpu.sh record      # every GPU row of record (issue 36) within
#       RECORD_SECONDS (510, counted from this script's start) into $OUT/gpu_record.json
#       and $OUT/gpu_record.log (benchmarks/gpu_record.py); RECORD_DRY=1: tiny, JAX's CPU;
#       RECORD_SKIP="updates fast_td3" skips rows; FAST_TD3_TARGET, FAST_TD3_OVERRIDES
# PPO's baseline is the same experiment on the native back end on 2 cores (taskset), for
# BASELINE_MINUTES (2: the device time is short; the table says how far it got).
# Needs torch with CUDA, JAX with CUDA, mujoco>=4.0, mujoco-mjx, gymnasium, hydra-core.
# Where those do not import, wheels in .whl/ (a machine without package registries) are
# installed first.
# Results: JSON under ${OUT:-benchmarks/results} and the printed tables.
set -uo pipefail
started=$(date +%s)  # record's budget includes the installation below
cd "$(dirname "$0")/.."
out=${OUT:-benchmarks/results}
if ! python3 -c "import mujoco.mjx, gymnasium, hydra, stable_baselines3" 2>/dev/null \
    && compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || echo "carried wheels: installation failed"
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1 RLCORE_JAX_CACHE=${RLCORE_JAX_CACHE:-/tmp/jax_cache} \
  XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 - <<'PY'
import jax, torch, mujoco
from mujoco import mjx  # noqa: F401
print("jax", jax.__version__, jax.devices(), "| torch", torch.__version__, torch.cuda.is_available(),
      "| mujoco", mujoco.__version__)
PY
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
lscpu | grep -E "Model name|^CPU\(s\)" || true
case "${1:-all}" in
  record)  # hard stop 15 s after the budget; the JSON is rewritten after every row
    seconds=${RECORD_SECONDS:-510}
    timeout -k 10 "$(( started + ${seconds%.*} + 15 - $(date +%s) ))" python3 -m rlcore.benchmarks.gpu_record \
      --out "${OUT:-benchmarks/results/gpu_record}" --started "$started" --seconds "$seconds" ;;
  ppo) python3 -m rlcore.benchmarks.throughput --sections mjx_ppo --out "$out/mjx_ppo.json" \
         --mjx-ppo-minutes "${PPO_MINUTES:-10}" --mjx-ppo-baseline-minutes "${BASELINE_MINUTES:-2}" ;;
  throughput) python3 -m rlcore.benchmarks.throughput --sections mjx --rounds "${ROUNDS:-2}" \
         --out "$out/mjx_throughput.json" ;;
  all)  # one device call: throughput (capped; largest batches first), then PPO
    timeout "${TP_SECONDS:-200}" python3 -m rlcore.benchmarks.throughput --sections mjx --rounds 1 \
      --mjx-num-envs 4096 16384 1024 1 --mjx-max-steps 50 --out "$out/mjx_throughput.json"
    python3 -m rlcore.benchmarks.throughput --sections mjx_ppo --out "$out/mjx_ppo.json" \
      --mjx-ppo-minutes "${PPO_MINUTES:-10}" --mjx-ppo-baseline-minutes "${BASELINE_MINUTES:-2}" ;;
esac
