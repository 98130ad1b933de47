#!/bin/bash
# Slurm Epilog (slurm.conf: Epilog=/etc/slurm/epilog.d/rlhealth.sh): stops this job's shippers. systemd
# sends SIGTERM (KillSignal in the prolog), the shipper reads what the job wrote last, drains its spool
# and sends the "stopping" heartbeat, within TimeoutStopSec. Never fails the job (exit 0).
UNIT="rlhealth-ship-${SLURM_JOB_ID}"
systemctl stop "$UNIT-gpu" 2>/dev/null || true
systemctl stop "$UNIT" 2>/dev/null || true
exit 0
