#!/bin/bash
# An sbatch script that ships its own job to rlhealth: the batch host runs one shipper for the job's
# log folder and its SLURM state (sacct every interval, squeue when accounting is down), and one GPU
# shipper per node polls the GPUs through NVML (nvidia-smi when NVML cannot start).
#   sbatch deploy/slurm/sbatch-rlhealth.sh
# Needs: `rlhealth` on PATH on every node, RLHEALTH_KAFKA_BOOTSTRAP set (or --bootstrap), a job folder
# on shared storage. The training command is an example; keep the rest.
#SBATCH --job-name=grpo-7b
#SBATCH --nodes=2
#SBATCH --gpus-per-node=8
#SBATCH --time=24:00:00
#SBATCH --signal=B:TERM@120
set -euo pipefail

: "${RLHEALTH_KAFKA_BOOTSTRAP:?set the Kafka bootstrap servers}"
JOB_ID="${SLURM_JOB_NAME}-${SLURM_JOB_ID}"
JOB_DIR="${RLJOBS_DIR:-/shared/rljobs}/${SLURM_JOB_ID}"
STATE="${XDG_STATE_HOME:-$HOME/.local/state}/rlhealth/ship"
mkdir -p "$JOB_DIR/logs" "$JOB_DIR/trace_jobs"

# the batch host: logs, Harbor trials and the scheduler's view of this job
rlhealth ship "$JOB_DIR" --job-id "$JOB_ID" --slurm-job-id "$SLURM_JOB_ID" \
    --shipper-id "$(hostname)-batch" --state-dir "$STATE/$SLURM_JOB_ID" --interval 15 &
SHIP_PID=$!

# every node: GPU polls (one task per node, sharing the allocation with the training step); the
# folder argument is an empty dir, this shipper sends GPU polls and heartbeats only
srun --overlap --ntasks-per-node=1 --ntasks="$SLURM_JOB_NUM_NODES" --kill-on-bad-exit=0 \
    bash -c 'd="${TMPDIR:-/tmp}/rlhealth-gpu-$SLURM_JOB_ID" && mkdir -p "$d" && exec rlhealth ship "$d" \
        --job-id "$0" --gpu auto --gpu-host "$(hostname)" --shipper-id "$(hostname)-gpu" \
        --state-dir "$1/$SLURM_JOB_ID-gpu-$(hostname)" --interval 15' "$JOB_ID" "$STATE" &
GPU_PID=$!

# On the way out (the training ended, or SLURM sent TERM 120 s before the time limit): stop the
# shippers with SIGTERM, which drains what was written and sends the "stopping" heartbeat.
stop_shippers() {
    kill -TERM "$GPU_PID" "$SHIP_PID" 2>/dev/null || true
    wait "$GPU_PID" "$SHIP_PID" 2>/dev/null || true
}
trap stop_shippers EXIT

srun --output="$JOB_DIR/logs/%x-%j-rank%t.log" \
    python -m skyrl_train.entrypoints.main_base trainer.run_name="$JOB_ID" generator.trials_dir="$JOB_DIR/trace_jobs"
