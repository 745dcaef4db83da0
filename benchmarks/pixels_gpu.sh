#!/usr/bin/env bash
# The pixel rows of one GPU machine's call (issue 47), within SECONDS_BUDGET (540):
#   DRQV2=<unpacked drqv2@c0c650b> bash benchmarks/pixels_gpu.sh
# 1. DrQ-v2 updates/s at the reference's sizes (84 x 84 x 9, batch 256, 1,024 units) on
#    the GPU, rlcore's DrQV2 next to drqv2's own DrQV2Agent, 3 alternating rounds
#    (rlcore.benchmarks.pixel_updates): $OUT/pixel_updates_cuda.json. Skipped without
#    DRQV2 (the reference is not part of this repository: unpack it into an ignored
#    folder and pass its path).
# 2. One Atari learning run: PPO on ALE/Breakout-v5 (CleanRL's ppo_atari_envpool settings,
#    configs/algo_env/ppo_atari.yaml), device=cuda, 8 envs, compiled, until the budget
#    ends (stop_after_s), seed 0; its eval.csv / time.csv in $OUT/ppo_breakout_cuda/.
# Needs torch, gymnasium, hydra-core, ale-py; where they do not import, wheels in .whl/
# are installed first (a machine without package registries).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-runs/pixels_gpu}
mkdir -p "$out"
budget=${SECONDS_BUDGET:-540}
device=${DEVICE:-cuda}
if ! python3 -c "import ale_py, gymnasium, hydra" 2>/dev/null \
    && compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || echo "carried wheels: installation failed"
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
lscpu | grep -E "Model name|^CPU\(s\)|Flags" | cut -c1-400
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
left() { echo $(( budget - SECONDS )); }

if [ -n "${DRQV2:-}" ]; then
  timeout -k 10 "$(( $(left) / 3 ))" python3 -m rlcore.benchmarks.pixel_updates \
    --drqv2 "$DRQV2" --device "$device" --updates "${UPDATES:-50}" --rounds 3 \
    --out "$out/pixel_updates_$device.json" > "$out/pixel_updates.log" 2>&1
  tail -n 6 "$out/pixel_updates.log"
else
  echo "DRQV2 not set: pixel_updates skipped"
fi

# stop_after_s counts training after the compilation (76 s on an H200), so leave room for it
# and the final evaluation: with 60 s alone the timeout ended the run before its last evaluation
run_s=$(( $(left) - 150 ))
timeout -k 10 "$(left)" python3 -m rlcore.train algo=ppo env=ALE/Breakout-v5 device="$device" \
  algo.compile=true stop_after_s="$run_s" eval_every=500000 eval_episodes=5 seed=0 \
  run_dir="$out/ppo_breakout_$device" ${PPO_ARGS:-} > "$out/ppo_breakout.log" 2>&1
tail -n 4 "$out/ppo_breakout.log"
rm -rf "$out/ppo_breakout_$device/checkpoints"  # the curves come back, not the agent
