#!/bin/bash
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/prolog.d/rlhealth.sh, PrologFlags=Alloc): starts rlhealth
# shippers for every job outside the job's cgroup, as a transient systemd unit the epilog stops.
#   the first node of the allocation (the batch host): the job's log folder + its SLURM state (sacct)
#   every node: GPU polls through NVML (nvidia-smi as the fallback)
# The prolog must return quickly: systemd-run starts the shipper and returns. A failure to start a
# shipper never fails the job (exit 0).
# Site settings: /etc/rlhealth/ship.env holds RLHEALTH_KAFKA_BOOTSTRAP=... (and the Kafka security
# options); RLJOBS_DIR is where jobs write logs/ and trace_jobs/ (one folder per job id).
RLJOBS_DIR="${RLJOBS_DIR:-/shared/rljobs}"
STATE=/var/lib/rlhealth-ship
JOB_ID="${SLURM_JOB_ID}"
UNIT="rlhealth-ship-${SLURM_JOB_ID}"
first_node="$(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null | head -n 1)"
common=(--uid=rlhealth --property=EnvironmentFile=/etc/rlhealth/ship.env --property=KillSignal=SIGTERM
        --property=TimeoutStopSec=90 --collect)

if [ "$(hostname -s)" = "${first_node%%.*}" ]; then
    mkdir -p "$RLJOBS_DIR/$SLURM_JOB_ID/logs"
    systemd-run --unit="$UNIT" "${common[@]}" \
        rlhealth ship "$RLJOBS_DIR/$SLURM_JOB_ID" --job-id "$JOB_ID" --slurm-job-id "$SLURM_JOB_ID" \
        --shipper-id "$(hostname -s)-batch" --state-dir "$STATE/$SLURM_JOB_ID" --interval 15 \
        || logger -t rlhealth "could not start the shipper of job $SLURM_JOB_ID"
fi
mkdir -p "$STATE/$SLURM_JOB_ID-gpu/empty"
systemd-run --unit="$UNIT-gpu" "${common[@]}" \
    rlhealth ship "$STATE/$SLURM_JOB_ID-gpu/empty" --job-id "$JOB_ID" --gpu auto --gpu-host "$(hostname -s)" \
    --shipper-id "$(hostname -s)-gpu" --state-dir "$STATE/$SLURM_JOB_ID-gpu" --interval 15 \
    || logger -t rlhealth "could not start the GPU shipper of job $SLURM_JOB_ID"
exit 0
