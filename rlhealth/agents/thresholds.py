"""Every time limit and ratio the gates use, in one named table.

Seconds end in `_s`, ratios in `_ratio`, percentages in `_pct`, watts in `_w`. The values are the
deep probe's own numbers where it gives them (the 1800 s NCCL watchdog, "materially stale beyond
cadence", "0 % util across several polls") and conservative defaults elsewhere: a longer limit
only delays a KILL, a shorter one risks killing a healthy bring-up.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Thresholds:
    # --- monitor blindness
    stale_view_s: float = 1800.0             # no event of any kind (state polls included): we are blind
    shipper_silent_intervals: float = 3.0    # a shipper missing this many heartbeats is silent ...
    shipper_silent_min_s: float = 90.0       # ... and at least this long
    # --- trainer cadence and staleness
    stale_cadence_factor: float = 2.0        # stale = silent > max(2 x cadence, cadence + 900 s, 1200 s)
    stale_cadence_margin_s: float = 900.0
    stale_min_s: float = 1200.0
    stale_unknown_cadence_s: float = 3600.0  # no cadence learned or declared
    late_cadence_factor: float = 1.5         # late = silent > max(1.5 x cadence, cadence + 300 s): escalate,
    late_cadence_margin_s: float = 300.0     # and with a hang line after the last step, a wedge
    phase_overrun_factor: float = 3.0        # an open phase beyond 3 x its longest finished run ...
    phase_overrun_margin_s: float = 900.0    # ... and this much more is stale even inside a long step
    fatal_progress_grace_s: float = 30.0     # progress this soon after a fatal traceback does not count
    fatal_silence_s: float = 300.0           # a fatal traceback, then no restart or progress for this long
    hang_before_progress_s: float = 60.0     # a hang line this long before the last progress is recovered
    lent_progress_window_s: float = 300.0    # a progress time lent from a later stamp this near a stuck
    #                                          collective's watchdog line is no proof of a step (progress_time.py)
    logs_not_fresh_s: float = 1800.0         # no progress format and nothing logged for this long
    # --- the failing tail (a fatal/hang line followed by silence from that role)
    tail_default_silence_s: float = 900.0    # silence after the line when the role has no learned cadence
    tail_cadence_factor: float = 2.0         # ... or this many cadences when it has one
    # --- crash loops
    crash_loop_window_s: float = 3600.0
    crash_loop_min_restarts: int = 3
    # --- engines
    engine_ghost_s: float = 600.0            # an engine silent this long behind the newest is a respawned ghost
    engine_window_s: float = 1800.0          # engine buckets judged
    engine_generating_s: float = 600.0       # stats newer than this count as generating
    engine_quiet_s: float = 900.0            # no stats at all for this long: idle or hung
    # A 0 tok/s line with Running > 0, then this much silence: vLLM's own limit for one model step
    # (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, 300 s since vllm-project/vllm#18558), after which it deems the workers
    # broken and kills the EngineCore.
    engine_hung_silent_s: float = 300.0
    engine_hung_behind_s: float = 120.0      # ... the log flowing: another engine logged this much later, or
    engine_stall_waits: int = 2              # ... its own EngineCore printed this many 60-s waits on its workers
    # ... and hung (not an engine idle with a stale Running count after aborts, vllm-project/vllm#22545) when its own
    # GPUs read at least spin_util_pct on this many polls since its last stats line: a stuck step spins them, an
    # idle engine leaves them at 0 %. Two, so one poll caught in a burst of other work on the host does not decide.
    engine_hung_pinned_polls: int = 2
    # Hung on its EngineCore's waits alone (no stats, no timeout line): vLLM's own 300 s limit ends a stuck step
    # with 'RPC call ... timed out' / EngineDeadError, which Gate A reads as a death; waits past that mean the
    # limit was raised or absent, and such waits have ended by themselves after up to 15 min
    # (MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks#128) or held requests through a weight update run in the
    # EngineCore (NVIDIA-NeMo/RL#3839): so KILL only past the longest recovery seen.
    engine_core_wait_hung_s: float = 1200.0
    engine_stall_silent_s: float = 300.0     # an engine that said it is stuck (a watchdog's stated stall) and
    #                                          from which no engine generated since: this long silent is hung
    starving_share_ratio: float = 0.7        # share of buckets with Waiting >> Running
    starving_span_s: float = 900.0
    floored_span_s: float = 600.0
    flat_rise_ratio: float = 1.25            # late/early median above this is rising, not flat
    # --- GPU hardware
    hardware_trained_through_s: float = 300.0  # steps this long after a hardware fault: the run survived it
    # --- GPU polls
    gpu_poll_fresh_s: float = 1800.0
    gpu_idle_util_pct: float = 5.0           # "0 %" with decode burstiness allowed for
    gpu_engine_idle_util_pct: float = 1.0
    # An engine's warm-up line (weight shards loading, kernels JIT-compiling, CUDA graphs capturing) this recent
    # explains its GPUs resident at 0 %: those phases print a bar line every few seconds to minutes
    engine_warmup_fresh_s: float = 600.0
    gpu_resident_mem_ratio: float = 0.1      # memory held: more than 10 % of the card
    gpu_idle_polls: int = 3                  # "across several polls"
    spin_util_pct: float = 90.0              # collectives spinning: util pinned high ...
    spin_power_ratio: float = 0.3            # ... at under 30 % of the card's power limit ...
    spin_power_w: float = 200.0              # ... (or under 200 W when the limit is unknown) ...
    spin_min_s: float = 600.0                # ... across polls spanning at least this long, no step since
    # --- fail-slow and training dynamics
    slow_ratio: float = 0.75                 # 25 % down against the job's own median
    grad_explosion_ratio: float = 10.0
    entropy_collapse_ratio: float = 0.1
    nonfinite_min_lines: int = 3
    # --- rollouts
    default_episode_s: float = 1800.0
    overdue_episode_factor: float = 1.5
    overdue_margin_s: float = 900.0
    completion_rate_window_s: float = 3600.0
    infra_share_ratio: float = 0.8
    infra_min_trials: int = 4
    zero_reward_min_trials: int = 8
    incoherent_share_ratio: float = 0.5
    verifier_share_ratio: float = 0.5
    broken_loop_turns: float = 1.2
    agent_timeout_share_ratio: float = 0.5
    batch_zero_min_trials: int = 16


DEFAULT = Thresholds()
