import subprocess
import textwrap

import pytest

from rlhealth.agents.signatures import GATES, KINDS, SEVERITIES, Classifier, to_ere
from rlhealth.rules import check_rules, load_rules

RULES = load_rules(use_env=False)

REQUIRED = {
    "vllm_stats", "vllm_stats_summary", "timer_start", "timer_finish", "trainer_step",
    "trainer_metrics", "generator_init", "batch_complete", "exception_breakdown", "reward_summary",
    "weight_sync_start", "weight_sync_finish", "nccl_watchdog_timeout", "nccl_watchdog_stuck",
    "nccl_heartbeat", "nccl_flight_recorder", "nccl_dump", "nccl_detected_by_watchdog",
    "dist_backend_error", "tcpstore_fallout", "rpc_timeout", "engine_dead", "fatal_abort",
    "signal_kill", "ray_worker_died", "ray_actor_died", "raylet_died", "python_exception",
    "cuda_oom", "host_oom", "oom_killed", "xid", "gpu_handle_error", "no_devices",
    "image_pull_error", "crash_loop", "auth_error", "verification_not_completed",
    "verifier_timeout", "enforce_eager", "cuda_graph_capture", "version_banner",
    "benign_shm_wait", "benign_unknown_env", "benign_context_length", "benign_agent_timeout",
    "benign_prob_diff", "benign_opcount_dead", "benign_image_pull_eof", "benign_wandb_retry",
}


def test_shipped_packs_check_clean():
    assert check_rules(RULES) == []


def test_required_signals_present():
    assert {r.signal for r in RULES.rules} >= REQUIRED


def test_pack_metadata_and_rule_fields():
    assert len(RULES.versions) >= 10
    for r in RULES.rules:
        assert r.kind in KINDS and r.severity in SEVERITIES
        assert set(r.gates) <= set(GATES)
        assert r.match and r.no_match and r.meaning
    assert {r.kind for r in RULES.rules if r.signal == "tcpstore_fallout"} == {"nccl"}
    assert {r.severity for r in RULES.rules if r.signal == "tcpstore_fallout"} == {"warning"}


def test_every_pattern_has_an_ere_form():
    for r in RULES.rules:
        to_ere(r.pattern)


def test_match_examples_through_grep():
    """The ERE form must agree with the engine on every example (grep oracle)."""
    for r in RULES.rules:
        ere = to_ere(r.pattern)
        for ex, want in [(e, True) for e in r.match] + [(e, False) for e in r.no_match]:
            p = subprocess.run(["grep", "-E", "-c", "-e", ere], input=(ex + "\n").encode(),
                               capture_output=True, env={"LC_ALL": "C"})
            assert (p.stdout.strip() == b"1") == want, (r.id, ex)


def test_extra_dir_and_problems(tmp_path):
    (tmp_path / "bad.toml").write_text(textwrap.dedent('''
        [pack]
        id = "site"
        version = "1"
        [[rule]]
        id = "vllm.v1_stats"
        kind = "infra"
        severity = "error"
        gates = ["A"]
        signal = "vllm_stats"
        pattern = 'hello\\s+world'
        fields = []
        meaning = "dup id, signal kind conflict, \\\\s"
        match = ["hello world"]
        no_match = ["bye"]
    '''))
    rs = load_rules([tmp_path], use_env=False)
    assert rs.versions["site"] == "1"
    problems = check_rules(rs)
    text = "\n".join(problems)
    assert "duplicate rule id" in text and "signal 'vllm_stats'" in text and "\\s" in text


def test_env_dirs(tmp_path, monkeypatch):
    (tmp_path / "x.toml").write_text(textwrap.dedent('''
        [pack]
        id = "site2"
        version = "7"
        [[rule]]
        id = "site2.thing"
        kind = "infra"
        severity = "error"
        gates = ["A"]
        signal = "site_thing"
        pattern = 'QUOTA EXCEEDED for [a-z]+'
        fields = []
        meaning = "site specific"
        match = ["QUOTA EXCEEDED for alice"]
        no_match = ["quota ok"]
    '''))
    monkeypatch.setenv("RLHEALTH_RULES_DIRS", str(tmp_path))
    rs = load_rules()
    assert rs.versions["site2"] == "7"
    assert check_rules(rs) == []
    assert [m.rule.id for m in Classifier(rs).scan(["QUOTA EXCEEDED for bob"])] == ["site2.thing"]


def test_bad_kind_rejected(tmp_path):
    (tmp_path / "x.toml").write_text('[pack]\nid="a"\n[[rule]]\nid="a.b"\nkind="nope"\nseverity="info"\nsignal="s"\npattern="x"\n')
    with pytest.raises(ValueError, match="unknown kind"):
        load_rules([tmp_path], use_env=False)
