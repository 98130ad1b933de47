"""The per-job health core: pure functions over per-job state.

"agents" here follows the project layout; these are not faust agents (those live in
rlhealth.streams) and not the RL agents the watched jobs train.

Rules of this package, enforced by an import-linter contract (tests/test_architecture.py):
no I/O, no Kafka, faust, DuckDB, Prometheus or Kubernetes imports, no clock reads. Time is
always an argument. Rule packs and throughput tables are loaded by rlhealth.rules and
passed in already parsed.

Public surface:
    HealthCore(rules, throughput, catalog)   compiled once per process (catalog: signals.toml etc.)
    core.new_state(job_id) -> JobHealth
    core.step(state, event, now) -> (JobHealth, list[Finding])
    core.judge(state, now) -> Verdict
    core.metrics(state, now) -> JobMetrics
    JobHealth.to_bytes() / JobHealth.from_bytes(b)
"""
