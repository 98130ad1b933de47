import glob
import os
from pathlib import Path

import pytest

from rlhealth.agents.normalize import split_records
from rlhealth.agents.signatures import FAULT_KINDS, Classifier, hyperscan_available, to_ere
from rlhealth.rules import load_rules

RULES = load_rules(use_env=False)

FIXTURES = Path("/work/shared/reference/examples/logs")
SCENARIOS = Path("/work/shared/scenarios")


def fixture_lines(name: str) -> list[str]:
    """Records of a fixture with the '# ' annotation lines dropped (vocabulary §0)."""
    text = (FIXTURES / name).read_bytes().decode("utf-8", "replace")
    lines = split_records(text)
    if name == "vllm_prometheus_metrics.txt":
        return lines[1:]
    return [ln for ln in lines if not ln.startswith("# ")]


def all_fixture_names() -> list[str]:
    return sorted(p.name for p in FIXTURES.iterdir() if p.is_file())


def scenario_log_files() -> list[str]:
    return sorted(f for f in glob.glob(str(SCENARIOS / "*/capture/logs/**/*"), recursive=True)
                  if os.path.isfile(f))


def file_lines(path: str) -> list[str]:
    return split_records(Path(path).read_bytes().decode("utf-8", "replace"))


@pytest.fixture(scope="module")
def clf():
    return Classifier(RULES)


def by_signal(clf, lines, signal):
    return [m for m in clf.scan(lines) if m.rule.signal == signal]


def test_engine_is_hyperscan_when_importable(clf):
    assert clf.engine == ("hyperscan" if hyperscan_available() else "re2")


def test_vllm_v0_stats(clf):
    ms = by_signal(clf, fixture_lines("vllm_v0_0.6.3_stats.log"), "vllm_stats")
    assert len(ms) == 3
    assert ms[0].fields == {"engine": "", "prompt_tokens_per_s": 3410.7, "generation_tokens_per_s": 812.3,
                            "running": 128, "swapped": 0, "waiting": 372, "kv_cache_pct": 41.2,
                            "cpu_kv_cache_pct": 0.0}
    pc = by_signal(clf, fixture_lines("vllm_v0_0.6.3_stats.log"), "vllm_prefix_cache")
    assert pc[0].fields == {"gpu_pct": 61.04, "cpu_pct": 0.0}


def test_vllm_v1_stats_with_engine_and_ansi(clf):
    ms = by_signal(clf, fixture_lines("vllm_v1_0.10_serve_ansi.log"), "vllm_stats")
    assert [m.fields["generation_tokens_per_s"] for m in ms] == [401.7, 3912.0, 118.4]
    assert ms[0].fields == {"engine": "Engine 000", "prompt_tokens_per_s": 2873.4,
                            "generation_tokens_per_s": 401.7, "running": 64, "waiting": 0,
                            "kv_device": "GPU", "kv_cache_pct": 6.3, "prefix_cache_hit_pct": 12.5}
    assert "\x1b" not in ms[0].text


def test_vllm_v1_preemptions_dp(clf):
    ms = by_signal(clf, fixture_lines("vllm_v1_0.13_dp2_tp2_nocolor.log"), "vllm_stats")
    assert [m.fields["engine"] for m in ms] == ["Engine 000", "Engine 001"] * 2
    assert ms[2].fields["preemptions"] == 3 and ms[2].fields["waiting"] == 61
    assert "preemptions" not in ms[3].fields
    assert ms[3].fields["generation_tokens_per_s"] == 0.0 and ms[3].fields["running"] == 256


def test_vllm_v1_variants(clf):
    lines = [
        # 0.7.3: no engine label
        "INFO 03-01 10:00:00 [loggers.py:78] Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 4 reqs, GPU KV cache usage: 5.0%, Prefix cache hit rate: 6.0%",
        # 0.33: aggregated, Deferred, KV fetch, no prefix cache
        "(APIServer pid=1) INFO 11-10 09:00:00 [loggers.py:335] 4 Engines Aggregated: Avg prompt throughput: 10.5 tokens/s, Avg generation throughput: 20.5 tokens/s, Running: 30 reqs, Waiting: 40 reqs, Deferred: 2 reqs, KV fetch: 1 waiting to start, 0 in progress, 3 completed waiting, Preemptions: 7, XPU KV cache usage: 50.0%",
    ]
    a, b = by_signal(clf, lines, "vllm_stats")
    assert a.fields == {"engine": "", "prompt_tokens_per_s": 1.0, "generation_tokens_per_s": 2.0,
                        "running": 3, "waiting": 4, "kv_device": "GPU", "kv_cache_pct": 5.0,
                        "prefix_cache_hit_pct": 6.0}
    assert b.fields == {"engine": "4 Engines Aggregated", "prompt_tokens_per_s": 10.5,
                        "generation_tokens_per_s": 20.5, "running": 30, "waiting": 40, "deferred": 2,
                        "kv_fetch_waiting": 1, "kv_fetch_in_progress": 0, "kv_fetch_completed": 3,
                        "preemptions": 7, "kv_device": "XPU", "kv_cache_pct": 50.0}


def test_vllm_config_and_graphs(clf):
    lines = fixture_lines("vllm_v1_0.10_serve_ansi.log")
    ee = by_signal(clf, lines, "enforce_eager")
    assert [m.fields["value"] for m in ee] == [False]
    assert by_signal(clf, lines, "cuda_graph_capture")[0].fields == {"seconds": 8, "graph_gib": 0.52}
    vb = by_signal(clf, lines, "version_banner")
    assert {(m.fields["component"], m.fields["version"]) for m in vb} == {("vllm", "0.10.1.1")}
    misc = fixture_lines("vllm_misc_messages.log")
    assert [m.fields["value"] for m in by_signal(clf, misc, "enforce_eager")] == [True, True, True]
    assert by_signal(clf, misc, "rpc_timeout")[0].fields == {"method": "execute_model"}
    assert len(by_signal(clf, misc, "weight_sync_start")) == 1
    assert by_signal(clf, misc, "weight_sync_finish")[0].fields == {"seconds": 2.91}


def test_nccl_timeouts_all_versions(clf):
    want = {"torch_nccl_timeout_2.2.log": (4821, 600000, 600417),
            "torch_nccl_timeout_2.4.log": (1580, 600000, 600061),
            "torch_nccl_timeout_2.6plus.log": (2635, 1800000, 1800031)}
    for name, (seq, tmo, ran) in want.items():
        lines = fixture_lines(name)
        ms = by_signal(clf, lines, "nccl_watchdog_timeout")
        assert ms, name
        assert ms[0].fields["seq"] == seq and ms[0].fields["op_type"] == "ALLREDUCE"
        assert ms[0].fields["timeout_ms"] == tmo and ms[0].fields["ran_ms"] == ran
        assert by_signal(clf, lines, "dist_backend_error")
    assert by_signal(clf, fixture_lines("torch_nccl_timeout_2.6plus.log"), "fatal_abort")
    det = by_signal(clf, fixture_lines("torch_nccl_timeout_2.6plus.log"), "nccl_detected_by_watchdog")
    assert det[0].fields == {"work": 2635, "last_enqueued": 2635, "last_completed": 2634}
    assert len(by_signal(clf, fixture_lines("torch_nccl_timeout_2.4.log"), "nccl_detected_by_watchdog")) == 2
    stuck = by_signal(clf, fixture_lines("torch_nccl_watchdog_stuck.log"), "nccl_watchdog_stuck")
    assert sorted({m.fields["seconds"] for m in stuck}) == [480, 600]
    tcp = [m for m in clf.scan(fixture_lines("torch_tcpstore_broken_pipe.log"))]
    assert {m.rule.signal for m in tcp} == {"tcpstore_fallout"}
    assert all(m.rule.severity == "warning" for m in tcp)


def test_torchrun_and_oom(clf):
    lines = fixture_lines("torchrun_childfailed.log")
    kills = by_signal(clf, lines, "signal_kill")
    assert {m.fields.get("exitcode") for m in kills} >= {-6}
    assert any(m.fields.get("signame") == "SIGABRT" for m in kills)
    oom = by_signal(clf, fixture_lines("cuda_oom_variants.log"), "cuda_oom")
    assert [round(m.fields["tried_gib"], 4) for m in oom] == [
        round(20 / 1024, 4), 1.95, round(448 / 1024, 4), 2.0, round(60 / 1024, 4), 6.86]
    host = by_signal(clf, fixture_lines("host_oom_kernel.log"), "host_oom")
    killed = [m.fields for m in host if "pid" in m.fields]
    assert killed == [
        {"scope": "Memory cgroup out of memory", "pid": 88123, "comm": "ray::WorkerDict",
         "total_vm_kb": 412771244, "anon_rss_kb": 251660812},
        {"scope": "Out of memory", "pid": 90211, "comm": "python", "total_vm_kb": 301223412,
         "anon_rss_kb": 295112044}]


def test_ray_and_hardware(clf):
    lines = fixture_lines("ray_verl_driver_colorprefix0.log")
    died = by_signal(clf, lines, "ray_worker_died")
    assert died[0].fields == {"worker_pid": 24415, "exit_type": "SYSTEM_ERROR"}
    assert by_signal(clf, lines, "ray_actor_died")
    assert [m.fields["step"] for m in by_signal(clf, lines, "trainer_step")] == [1, 2]
    assert by_signal(clf, fixture_lines("ray_driver_default_ansi.log"), "ray_memory_kill")[0].fields == {"killed": 1}
    xid = by_signal(clf, fixture_lines("nvidia_xid_dmesg.log"), "xid")
    assert [(m.fields["xid"], m.fields["pci"]) for m in xid][:2] == [(79, "0000:4e:00"), (48, "0000:18:00")]
    smi = fixture_lines("nvidia_smi_query.txt")
    assert by_signal(clf, smi, "gpu_handle_error")[0].fields == {"index": 3, "bus": "0000:5F:00.0", "error": "Unknown Error"}
    assert by_signal(clf, smi, "no_devices")


def test_skyrl_and_trainers(clf):
    lines = fixture_lines("skyrl_driver_stdout.log")
    starts = [m.fields["name"] for m in by_signal(clf, lines, "timer_start")]
    assert starts[:3] == ["sync_weights", "step", "generate"]
    fin = by_signal(clf, lines, "timer_finish")
    assert fin[0].fields == {"name": "sync_weights", "seconds": 4.22}
    assert [m.fields for m in by_signal(clf, lines, "weight_sync_finish")] == [{"seconds": 4.22}, {"seconds": 4.37}]
    assert by_signal(clf, lines, "trainer_step")[0].fields["step"] == 1
    orl = fixture_lines("openrlhf_trainer.log")
    assert [m.fields["step"] for m in by_signal(clf, orl, "trainer_step")] == [12, 13]
    wb = fixture_lines("wandb_stderr.log")
    assert {m.rule.signal for m in clf.scan(wb)} >= {"benign_wandb_retry", "version_banner", "wandb_run"}


def test_scenario_signals(clf):
    files = scenario_log_files()
    seen: dict[str, list] = {}
    for f in files:
        for m in clf.scan(file_lines(f)):
            seen.setdefault(m.rule.signal, []).append(m)
    for sig in ["vllm_stats", "vllm_stats_summary", "timer_start", "timer_finish", "trainer_metrics",
                "generator_init", "batch_complete", "exception_breakdown", "reward_summary",
                "weight_sync_start", "weight_sync_finish", "nccl_watchdog_stuck", "tcpstore_fallout",
                "fatal_abort", "ray_worker_died", "cuda_oom", "verification_not_completed",
                "benign_shm_wait", "benign_unknown_env", "benign_context_length", "benign_agent_timeout",
                "benign_prob_diff", "benign_opcount_dead", "cuda_graph_capture", "enforce_eager"]:
        assert sig in seen, sig
    bc = seen["batch_complete"][0].fields
    assert set(bc) >= {"successful", "total", "failed"}
    s = seen["vllm_stats_summary"][0].fields
    assert set(s) >= {"step", "engines", "running_peak", "waiting_peak", "gen_tp_med"}
    gi = seen["generator_init"][0].fields
    assert isinstance(gi["concurrent_trials"], int)
    tm = [m for m in seen["trainer_metrics"] if m.rule.id == "skyrl.wandb_mirror"][0]
    assert tm.fields["metrics"].startswith("{") and isinstance(tm.fields["step"], int)
    eb = seen["exception_breakdown"][0].fields["breakdown"]
    assert eb.startswith("{'")


def test_opcount_dead_is_not_engine_dead(clf):
    lines = ["host:1:2 [0] NCCL INFO Broadcast: opCount dead sendbuff 0x7f recvbuff 0x7f count 1",
             "NCCL INFO AllReduce: opCount 0xdead sendbuff 0x1"]
    ms = clf.scan(lines)
    assert {m.rule.signal for m in ms} == {"benign_opcount_dead"}


def _all_corpus_lines():
    for name in all_fixture_names():
        yield name, fixture_lines(name)
    for f in scenario_log_files():
        yield f, file_lines(f)


def test_benign_never_with_fault_kind(clf):
    n_benign = 0
    for name, lines in _all_corpus_lines():
        per_line: dict[int, list] = {}
        for m in clf.scan(lines):
            per_line.setdefault(m.index, []).append(m)
        for idx, ms in per_line.items():
            if any(m.rule.kind == "benign" for m in ms):
                n_benign += 1
                faults = [m.rule.id for m in ms if m.rule.kind in FAULT_KINDS]
                assert not faults, (name, idx, faults, ms[0].text[:200])
    assert n_benign > 500


def test_benign_suppression_drops_fault_kinds(clf):
    line = ("Trajectory TrajectoryID(instance_id='a', repetition_id=0) failed with Harbor exception: "
            "(type=ContextLengthExceededError, exclude_from_baseline=True)")
    assert {m.rule.signal for m in clf.scan([line])} == {"benign_context_length"}
    raw = {RULES.rules[r].signal for _, r in clf.raw_hits([line])}
    assert "trial_exception" in raw


@pytest.mark.skipif(not hyperscan_available(), reason="hyperscan not importable")
def test_hyperscan_and_re2_identical():
    hs = Classifier(RULES, engine="hyperscan")
    r2 = Classifier(RULES, engine="re2")
    total = 0
    for name, lines in _all_corpus_lines():
        for i in range(0, len(lines), 500):
            batch = lines[i:i + 500]
            a = [(m.index, m.rule.id, m.fields) for m in hs.scan(batch)]
            b = [(m.index, m.rule.id, m.fields) for m in r2.scan(batch)]
            assert a == b, name
            total += len(a)
    assert total > 10000


def test_block_hit_batches_split_the_block_hits_alike_on_both_engines():
    from rlhealth.agents.bytescan import split_hits_py, strip_ansi_bytes

    engines = [Classifier(RULES, engine="hyperscan"), Classifier(RULES, engine="re2")]
    total = 0
    for name, lines in _all_corpus_lines():
        block = strip_ansi_bytes("\n".join(ln.replace("\n", " ") for ln in lines).encode("utf-8", "surrogatepass"))
        hits = engines[0].block_hits(block)
        assert hits == engines[1].block_hits(block), name
        for size in (1, 7, 500):
            want = split_hits_py(hits, size)
            for c in engines:
                assert c.block_hit_batches(block, size) == want, (name, c.engine, size)
        total += len(hits)
    assert total > 10000
    assert engines[0].block_hit_batches(b"", 5) == [] == engines[1].block_hit_batches(b"", 5)


@pytest.mark.parametrize("pattern,cut", [
    ("a+", "a"), ("x|y+", "x|y"), ("(?:ab)+", "(?:ab)"), ("[]a]+", "[]a]"), ("[^\\]]+", "[^\\]]"), ("a{2,}", "a{2}"),
    ("a{2,5}", "a{2}"), ("\\d+", "\\d"), ("\\\\+", "\\\\"),
    # left alone: an escaped '+', a class holding it, a repeat that may be empty or not at the end, a group's inside
    ("a\\+", "a\\+"), ("[+]", "[+]"), ("a{0,3}", "a{0,3}"), ("a{3}", "a{3}"), ("ab*", "ab*"), ("a+$", "a+$"),
    ("x+|y", "x+|y"), ("(a|b+)", "(a|b+)"), ("a+(?:b)", "a+(?:b)"),
])
def test_one_match_tail_cuts_only_a_trailing_repeat(pattern: str, cut: str) -> None:
    from rlhealth.agents.signatures import one_match_tail

    assert one_match_tail(pattern) == cut


def test_one_match_tail_keeps_every_rule_s_lines():
    # the cut pattern matches a line iff the rule's does (the hits stay the rule's), on every corpus line
    import re

    from rlhealth.agents.signatures import one_match_tail

    cut = [(re.compile(r.pattern), re.compile(one_match_tail(r.pattern))) for r in RULES.rules
           if one_match_tail(r.pattern) != r.pattern]
    assert len(cut) >= 10  # the rules ending in a number
    seen = 0
    for _, lines in _all_corpus_lines():
        for line in lines:
            for whole, one in cut:
                hit = whole.search(line) is not None
                assert hit == (one.search(line) is not None), (whole.pattern, line)
                seen += hit
    assert seen > 50


def test_scan_empty_and_order(clf):
    assert clf.scan([]) == []
    ms = clf.scan(["x", "Fatal Python error: Aborted", "y", "TimeoutError: RPC call to execute_model timed out."])
    assert [m.index for m in ms] == sorted(m.index for m in ms)
    assert ms[0].index == 1


def test_to_ere_translation():
    assert to_ere(r"(?:a|b)\d+ \(x\) [^|]*") == "(a|b)[0-9]+ \\(x\\) [^|]*"
    with pytest.raises(ValueError):
        to_ere(r"a(?=b)")


def _reference_fields(rule, text: str) -> dict:
    """A matched line's fields as the rule declares them, one line and one field at a time: the
    semantics `Classifier.scan`'s batched extraction must keep."""
    import re

    from rlhealth.agents.signatures import EXTRACT_BEFORE_CHARS, convert_value

    out: dict = {}
    if rule.extract and rule.fields:
        rx = re.compile(rule.extract)
        m = rx.search(text)
        if m is not None:
            found = {k: v for k, v in m.groupdict().items()}
            if rule.extract_before:
                b = re.compile(f"(?:{rule.extract_before})\\Z").search(text, max(0, m.start() - EXTRACT_BEFORE_CHARS),
                                                                        m.start())
                if b is not None:
                    found = {**b.groupdict(), **found}
            for name in rule.fields:
                if found.get(name) is not None:
                    out[name] = convert_value(name, found[name], rule.text_fields)
    for k, v in rule.defaults:
        out.setdefault(k, v)
    return out


def test_batched_extraction_equals_the_per_line_reference(clf):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    try:
        from probe import DenseGen
    finally:
        sys.path.pop(0)
    from datetime import UTC, datetime

    lines = [x for r in RULES.rules for x in r.match]
    g = DenseGen(5)
    for k in range(30):
        t = datetime(2026, 10, 14, 12, 0, k, tzinfo=UTC)
        g.engine_tick(t, lines)
        g.trainer_tick(t, lines)
    for name in all_fixture_names():
        lines += fixture_lines(name)
    matches = clf.scan(lines)
    assert len({m.rule.id for m in matches}) > 60
    assert sum(len(m.fields) > 5 for m in matches) > 500  # the many-field stats lines are in
    for m in matches:
        want = _reference_fields(m.rule, m.text)
        assert m.fields == want and list(m.fields) == list(want), (m.rule.id, m.text)
        assert [type(v) for v in m.fields.values()] == [type(v) for v in want.values()]
