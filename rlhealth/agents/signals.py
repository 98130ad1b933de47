"""What each signal means to the gates, as data: role, evidence family, effect (rules/signals.toml).

The gates never name rule signals: they ask the catalogue for "every signal whose effect is
hang" and so on, so a rule pack adds a signal by declaring it, not by editing a gate. The
verdict counts independent evidence by *family*, so one cause restated in ten lines is one
piece of evidence, however loud.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

ROLES = frozenset({"trainer", "engine", "rollout", "ray", "node", "scheduler", "sandbox", "verifier", "other"})

# Independent sources of evidence. Families that only log lines feed end in `_log`; the rest
# are derived by the gates from other event kinds (they appear in reasons, not in signals.toml).
LOG_FAMILIES = frozenset({
    "fatal_log", "hang_log", "hardware_log", "oom_log", "infra_log", "fallout_log", "progress_log",
    "engine_throughput", "config_log", "weight_sync_log", "benign_log", "trial_log",
})
DERIVED_FAMILIES = frozenset({
    "progress_stall",     # a role silent beyond its cadence (absence of lines, not their content)
    "gpu_poll",           # nvidia-smi readings
    "scheduler_state",    # state polls: pods, restarts, CrashLoopBackOff, OOMKilled
    "trial_outcomes",     # Harbor result.json rewards and exceptions
    "agent_output",       # what the agent wrote: turns, coherence of the samples
    "training_dynamics",  # loss / grad norm / entropy values
    "engine_queue",       # Waiting vs Running from the engine stats
    "restart_history",    # the same failure on every burned attempt
})
FAMILIES = LOG_FAMILIES | DERIVED_FAMILIES

# Effect -> the part of the core that consumes it. `rules check` fails for an effect not here.
CONSUMERS: dict[str, str] = {
    "progress": "ingest: trainer progress and cadence (Gate A freshness)",
    "activity": "ingest: the role's freshness (Gate A)",
    "engine_stats": "ingest: per-engine throughput buckets (Gate B)",
    "engine_pressure": "Gate B: starvation corroboration",
    "engine_up": "Gate B: engines resident but not generating",
    "engine_warmup": "Gate B: engine GPUs resident at 0 % while their engine still warms up are its bring-up",
    "config": "ingest: enforce_eager / CUDA graphs (Gate B floor)",
    "engine_wait": "ingest: an EngineCore's run of waits on its workers (Gate B: read against its requests in flight)",
    "weight_sync": "ingest: weight-sync window (idle GPUs exempt)",
    "benign": "classifier: drops fault matches on the line; Gate A notes",
    "death": "Gate A: the failing tail; root cause; restart-burn",
    "fallout": "root cause: consequences skipped when naming the cause; Gate A: a trainer crash after the last step",
    "hang": "Gate A: wedge",
    "oom": "Gate B: training-stage OOM; Gate A: a crash after the last step",
    "hardware": "Gate B: GPU hardware fault; Gate A: a crash after the last step",
    "infra": "Gate A root cause / Gate C infrastructure corroboration",
    "trial_summary": "Gate C: rollout batch summaries",
    "verifier": "Gate C: verifier failures",
}
REQUIRED_KEYS = ("role", "family", "effect", "label")

# The gates that consume each effect: a rule's own `gates` field must name at least one of them, so the
# packs' documentation of where a line counts stays true to the core (benign lines may name none).
EFFECT_GATES: dict[str, frozenset[str]] = {
    "progress": frozenset("A"), "activity": frozenset("A"), "engine_stats": frozenset("B"),
    "engine_pressure": frozenset("B"), "engine_up": frozenset("B"), "engine_warmup": frozenset("B"),
    "config": frozenset("B"),
    "engine_wait": frozenset("B"), "weight_sync": frozenset("B"), "death": frozenset("A"), "hang": frozenset("A"),
    "fallout": frozenset("A"), "oom": frozenset("B"), "hardware": frozenset("B"), "infra": frozenset("AC"),
    "trial_summary": frozenset("C"), "verifier": frozenset("C"), "benign": frozenset(),
}


@dataclass(frozen=True, slots=True)
class SignalDecl:
    name: str
    role: str
    family: str
    effect: str
    label: str
    cause: str | None = None


@dataclass(frozen=True, slots=True)
class XidEntry:
    code: int
    blame: str  # hardware | application | driver
    meaning: str


@dataclass(frozen=True)
class Catalog:
    """Signal declarations, remediations per cause, and the Xid table: the core's knowledge as data."""

    signals: Mapping[str, SignalDecl] = field(default_factory=dict)
    remediations: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    generic_remediation: tuple[str, ...] = ()
    xid: Mapping[int, XidEntry] = field(default_factory=dict)
    # effect -> names: the gates ask for the same few effects at every judgement of every job.
    _names: dict[str, tuple[str, ...]] = field(default_factory=dict, init=False, repr=False, compare=False)
    _name_sets: dict[str, frozenset[str]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def names(self, effect: str) -> tuple[str, ...]:
        """Every declared signal with this effect, in a stable order."""
        got = self._names.get(effect)
        if got is None:
            got = self._names[effect] = tuple(sorted(n for n, d in self.signals.items() if d.effect == effect))
        return got

    def name_set(self, effect: str) -> frozenset[str]:
        """`names(effect)` as a set, for membership tests."""
        got = self._name_sets.get(effect)
        if got is None:
            got = self._name_sets[effect] = frozenset(self.names(effect))
        return got

    def decl(self, name: str) -> SignalDecl | None:
        return self.signals.get(name)

    def label(self, name: str) -> str:
        d = self.signals.get(name)
        return d.label if d else name

    def family(self, name: str) -> str:
        d = self.signals.get(name)
        return d.family if d else "fatal_log"

    def steps_for(self, cause: str | None) -> tuple[str, ...] | None:
        return self.remediations.get(cause) if cause else None


def parse_signal_table(data: Mapping[str, object], source: str = "<memory>") -> dict[str, SignalDecl]:
    """Parse `[signal.NAME]` tables; raise ValueError naming the first incomplete declaration."""
    table = data.get("signal")
    if not isinstance(table, dict):
        raise ValueError(f"{source}: no [signal.*] tables")
    out: dict[str, SignalDecl] = {}
    for name, raw in table.items():
        if not isinstance(raw, dict):
            raise ValueError(f"{source}: signal {name} is not a table")
        missing = [k for k in REQUIRED_KEYS if not isinstance(raw.get(k), str) or not raw[k]]
        if missing:
            raise ValueError(f"{source}: signal {name} lacks {', '.join(missing)}")
        out[name] = SignalDecl(name=name, role=raw["role"], family=raw["family"], effect=raw["effect"],
                               label=raw["label"], cause=raw.get("cause") or None)
    return out


def check_catalog(catalog: Catalog, emitted: Iterable[tuple[str, str, tuple[str, ...] | None]]) -> list[str]:
    """Problems: undeclared signals, unknown role/family/effect, causes without steps, and rules whose
    `gates` (None: not checked) name none of the gates that consume their signal's effect.

    `emitted` holds (rule id, signal, rule gates) for every rule."""
    problems: list[str] = []
    for rule_id, signal, gates in emitted:
        decl = catalog.signals.get(signal)
        if decl is None:
            problems.append(f"{rule_id}: signal {signal!r} is not declared in signals.toml")
            continue
        wanted = EFFECT_GATES.get(decl.effect)
        if gates is not None and wanted and not wanted & set(gates):
            problems.append(f"{rule_id}: gates {list(gates)} name none of {sorted(wanted)}, where the core "
                            f"consumes effect {decl.effect!r}")
    for d in catalog.signals.values():
        if d.role not in ROLES:
            problems.append(f"signal {d.name}: unknown role {d.role!r}")
        if d.family not in LOG_FAMILIES:
            problems.append(f"signal {d.name}: unknown log family {d.family!r}")
        if d.effect not in CONSUMERS:
            problems.append(f"signal {d.name}: effect {d.effect!r} has no consumer (unconsumed signal)")
        if d.cause and d.cause not in catalog.remediations:
            problems.append(f"signal {d.name}: cause {d.cause!r} has no remediation steps")
    return problems
