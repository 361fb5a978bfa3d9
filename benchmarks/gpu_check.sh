#!/usr/bin/env bash
# The GPU device check (issue 29): a probe of the learner's compile and the actors' forward pass
# (benchmarks/gpu_probe.py), the main job as a user types it and with more envs and actor threads, then Anakin on
# gymnax, on one GPU. Writes log.txt (versions, devices, each stage's output, exit code and wall time), probe.json,
# smi.csv (GPU memory and load every 2 s) and runs.tar.gz (the runs' progress.csv / summary.json) to $OUT. STAGES
# picks stages (default: the five below, in order).
# Each is bounded: HTS by its own --time_limit, Anakin by SIGTERM (it keeps the finished chunks), then SIGABRT, whose
# Python traceback (-X faulthandler) shows where a stage that ignored SIGTERM was (XLA cannot stop mid-program).
# XLA_PYTHON_CLIENT_PREALLOCATE=false so that smi.csv shows what a run uses, not JAX's default 75% reservation.
# Where the machine cannot reach a package index, the dependencies travel in .site.tar.gz (benchmarks/gpu_site.sh
# builds it; the device call carries it), unpacked here into a temporary folder on PYTHONPATH; elsewhere
# `pip install -e ".[cuda12,gymnax]"` does the same, and CLEANRL_SITE names a folder built like the archive's
# site-cleanrl/. Results: benchmarks/results/gpu_first_run.md.
# Default stages, about 9 minutes: envpool_raw (EnvPool's own Breakout SPS on the box's cores: the ceiling),
# hts_breakout (the default command: on an accelerator the layout rule gives it 128 envs x 8 steps in 4 actor
# threads), cleanrl_jax (CleanRL's ppo_atari_envpool_xla_jax_scan.py with its own defaults: benchmarks/cleanrl_jax.py),
# Anakin's two rows (as typed: on an accelerator the layout rule gives CartPole 128 envs x 4 steps and MinAtar
# 128 x 64). On request: probe, hts_breakout_preset (--layout=preset: the CPU preset's 8 x 128, one thread),
# hts_breakout_half_chunks (the rule's accelerator layout, given as flags, with HTS's own forward-pass default, half
# the envs a chunk, beside the rule's chunk of all of them), hts_breakout_per_actor (the default command with
# --env_pools=per_actor: each of the 4 actor threads receives from a pool of its own 32 envs), hts_breakout_pinned
# (the default command with EnvPool on all but four cores, pinned after the first four), host_path
# (benchmarks/host_path.py: the actors' host path without a policy beside raw EnvPool, on the box's cores, with one
# shared pool and with a pool per actor thread; about two minutes), host_path_pinned (the same with EnvPool's threads
# pinned to the cores after the first four, beside the scheduler's placement; about a minute), the hand-sized
# layouts. After the default stages, `STAGES="host_path hts_breakout_per_actor" HTS_SECONDS=90` fits a second
# call of the same session, and `STAGES="hts_breakout_half_chunks host_path_pinned" HTS_SECONDS=60` a third if
# time is left (`hts_breakout_pinned` where host_path_pinned favoured pinning).
# DRY=1 runs every default stage for a few seconds on whatever machine this is (a CPU), CleanRL's at a small rollout,
# to check the script end to end before spending device time (`PY=3.11 bash benchmarks/gpu_site.sh` first, for a
# CPU with Python 3.11); its figures mean nothing.
set -u
DRY=${DRY:-0}
if [[ $DRY == 1 ]]; then
  HTS_SECONDS=${HTS_SECONDS:-20} WIDE_SECONDS=${WIDE_SECONDS:-20} PROBE_SECONDS=${PROBE_SECONDS:-120}
  MINATAR_SECONDS=${MINATAR_SECONDS:-120} RAW_SECONDS=${RAW_SECONDS:-3} MINATAR_STEPS=${MINATAR_STEPS:-16384}
  CLEANRL_SECONDS=${CLEANRL_SECONDS:-120}
  CLEANRL_ARGS=${CLEANRL_ARGS:-"--num-steps 16 --num-minibatches 1 --update-epochs 1 --total-timesteps 1280"}
  CARTPOLE_STEPS=${CARTPOLE_STEPS:-16384} PROBE_ARGS=${PROBE_ARGS:-"--rounds=2x32 --batches=8"}
  OUT=${OUT:-/tmp/gpu_check_dry}
  rm -rf "$OUT"
fi
OUT=${OUT:-/tmp/gpu_first_run}
HTS_SECONDS=${HTS_SECONDS:-120}
STAGES=${STAGES:-"envpool_raw hts_breakout cleanrl_jax anakin_cartpole_64 anakin_minatar_8"}
PROBE_SECONDS=${PROBE_SECONDS:-90}
WIDE_SECONDS=${WIDE_SECONDS:-180}
MINATAR_SECONDS=${MINATAR_SECONDS:-90}
RAW_SECONDS=${RAW_SECONDS:-10}
CLEANRL_SECONDS=${CLEANRL_SECONDS:-120}
CLEANRL_ARGS=${CLEANRL_ARGS:-}
CARTPOLE_STEPS=${CARTPOLE_STEPS:-500000}
PROBE_ARGS=${PROBE_ARGS:-}
RUNS=${RUNS:-runs/gpu}
[[ $DRY == 1 ]] && RUNS=$OUT/runs
mkdir -p "$OUT"
SITE=""
PEER_SITE=${CLEANRL_SITE:-}
if [[ -f .site.tar.gz ]]; then
  unpacked=$(mktemp -d)
  trap 'rm -rf "$unpacked"' EXIT
  tar xzf .site.tar.gz -C "$unpacked"
  SITE=$unpacked/site PEER_SITE=$unpacked/site-cleanrl
fi
export PYTHONPATH="${SITE:+$SITE:}$PWD" PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
log="$OUT/log.txt"
{
  date -u; nproc; free -g | head -2; nvidia-smi
  python3 -c "import sys, jax, jaxlib, flax, optax, chex, envpool; print(sys.version); \
print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, 'flax', flax.__version__, 'optax', optax.__version__, \
'chex', chex.__version__, 'envpool', envpool.__version__); print(jax.devices())"
} >> "$log" 2>&1
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv -l 2 > "$OUT/smi.csv" 2>&1 &
smi=$!
stage() {  # stage NAME SECONDS COMMAND...: run COMMAND; SIGTERM after SECONDS, SIGABRT 15 s later; log rc and wall
  local name=$1 limit=$2 start pid
  shift 2
  [[ " $STAGES " == *" $name "* ]] || return 0
  start=$(date +%s)
  echo "== $name start $start" >> "$log"
  python3 -X faulthandler "$@" >> "$log" 2>&1 &
  pid=$!
  ( sleep "$limit"; kill -TERM $pid 2> /dev/null; sleep 15; kill -ABRT $pid 2> /dev/null ) &
  wait $pid
  echo "== $name rc=$? wall=$(( $(date +%s) - start ))s" >> "$log"
}
stage envpool_raw $((RAW_SECONDS * 8 + 60)) -m benchmarks.envpool_raw --envs=128 --seconds="$RAW_SECONDS" \
  --out="$OUT/envpool_raw.json"
# shellcheck disable=SC2086  # PROBE_ARGS holds several flags
stage probe "$PROBE_SECONDS" -m benchmarks.gpu_probe --out="$OUT/probe.json" $PROBE_ARGS
stage hts_breakout $((HTS_SECONDS + 60)) -m launch.hts --game=Breakout --time_limit="$HTS_SECONDS" \
  --logdir=$RUNS/hts_breakout
stage hts_breakout_per_actor $((HTS_SECONDS + 60)) -m launch.hts --game=Breakout --env_pools=per_actor \
  --time_limit="$HTS_SECONDS" --logdir=$RUNS/hts_breakout_per_actor
stage hts_breakout_pinned $((HTS_SECONDS + 60)) -m launch.hts --game=Breakout \
  --env_threads="$(( $(nproc) > 5 ? $(nproc) - 4 : 1 ))" --env_thread_affinity=4 --time_limit="$HTS_SECONDS" \
  --logdir=$RUNS/hts_breakout_pinned
stage hts_breakout_half_chunks $((HTS_SECONDS + 60)) -m launch.hts --game=Breakout --num_envs=128 --num_actors=4 \
  --sync_interval=8 --inference_batch=64 --time_limit="$HTS_SECONDS" --logdir=$RUNS/hts_breakout_half_chunks
# The host path at the forward chunk the rule gives, with EnvPool's threads on every core and on all but the four the
# actor threads, the receiver and the learner would take, and with one pool shared through the receiver thread or a
# pool per actor thread: which thread count and which layout feed the actors better.
stage host_path $((RAW_SECONDS * 6 + 120)) -m benchmarks.host_path --repeats=1 --seconds="$RAW_SECONDS" \
  --inference_batches=128 --threads="$(nproc),$(( $(nproc) > 5 ? $(nproc) - 4 : 1 ))" --pools=shared,per_actor \
  --out="$OUT/host_path.json"
# EnvPool's threads pinned to the cores after the first four (left to the actor threads, the receiver and the
# learner) against the scheduler's placement, at the same thread count and the shared pool.
stage host_path_pinned $((RAW_SECONDS * 4 + 100)) -m benchmarks.host_path --repeats=1 --seconds="$RAW_SECONDS" \
  --inference_batches=128 --threads="$(( $(nproc) > 5 ? $(nproc) - 4 : 1 ))" --affinity_offsets=-1,4 \
  --out="$OUT/host_path_pinned.json"
stage hts_breakout_preset $((HTS_SECONDS + 60)) -m launch.hts --game=Breakout --layout=preset \
  --time_limit="$HTS_SECONDS" --logdir=$RUNS/hts_breakout_preset
stage hts_breakout_32x4 $((HTS_SECONDS + 60)) -m launch.hts --game=Breakout --num_envs=32 --num_actors=4 \
  --time_limit="$HTS_SECONDS" --logdir=$RUNS/hts_breakout_32x4
stage hts_breakout_64x2 $((WIDE_SECONDS + 60)) -m launch.hts --game=Breakout --num_envs=64 --num_actors=2 \
  --time_limit="$WIDE_SECONDS" --logdir=$RUNS/hts_breakout_64x2
# The learning comparison at equal env steps: the widest setting against the default's run 5 (same seed), evaluated
# twice as often so that both curves have points at 0.5, 1.0 and 1.25M steps.
stage hts_breakout_128x4 $((WIDE_SECONDS + 60)) -m launch.hts --game=Breakout --num_envs=128 --num_actors=4 \
  --eval_every=250000 --time_limit="$WIDE_SECONDS" --logdir=$RUNS/hts_breakout_128x4
# CleanRL's JAX PPO beside it, on the same box: its own script, its own defaults, its EnvPool and gym first on its path.
if [[ -n $PEER_SITE ]]; then
  # shellcheck disable=SC2086  # CLEANRL_ARGS holds several flags
  stage cleanrl_jax $((CLEANRL_SECONDS + 30)) -m benchmarks.cleanrl_jax \
    --script="$PEER_SITE/ppo_atari_envpool_xla_jax_scan_compat.py" --peer_path="$PEER_SITE${SITE:+:$SITE}" \
    --seconds="$CLEANRL_SECONDS" --out="$OUT/cleanrl_jax.json" $CLEANRL_ARGS
elif [[ " $STAGES " == *" cleanrl_jax "* ]]; then
  echo "== cleanrl_jax skipped: no .site.tar.gz and no CLEANRL_SITE (benchmarks/gpu_site.sh builds them)" >> "$log"
fi
stage anakin_cartpole_64 100 -m launch.anakin --env=gymnax/CartPole-v1 --num_seeds=64 --total_steps="$CARTPOLE_STEPS" \
  --logdir=$RUNS/anakin_cartpole_64
stage anakin_minatar_8 "$MINATAR_SECONDS" -m launch.anakin --env=gymnax/Breakout-MinAtar --num_seeds=8 \
  --total_steps="${MINATAR_STEPS:-3000000}" --logdir=$RUNS/anakin_minatar_8
kill "$smi" 2> /dev/null
tar czf "$OUT/runs.tar.gz" --exclude=checkpoints --exclude=tb "$RUNS" 2>> "$log"
