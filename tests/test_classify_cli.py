import json
from pathlib import Path

from click.testing import CliRunner

from rlhealth.cli.classify import classify, rules

FIX = Path("/work/shared/reference/examples/logs")


def run(args):
    return CliRunner(mix_stderr=False).invoke(classify, args) if "mix_stderr" in CliRunner.__init__.__code__.co_varnames \
        else CliRunner().invoke(classify, args)


def parse(result):
    recs = [json.loads(x) for x in result.stdout.splitlines() if x.strip()]
    summary = [x for x in result.stderr.splitlines() if x.startswith("summary ")]
    return recs, json.loads(summary[-1][len("summary "):])


def test_bad_input_file(tmp_path):
    p = tmp_path / "bad.log"
    big = b"y" * (10 * 1024 * 1024)
    p.write_bytes(b"ok line\n"
                  b"INFO 03-04 05:06:07 [x.py:1] \xff\xfe CUDA out of memory. Tried to allocate 2.00 GiB\n"
                  b"nul\x00 here RPC call to execute_model timed out\n"
                  + big + b" Fatal Python error: Aborted\n"
                  b"after: Fatal Python error: Aborted\n"
                  b"tqdm\rTraining Step Progress:   3%|x| 7/200 [1:02]\r\n"
                  b"NVRM: Xid (PCI:0000:4e:00): 79, GPU has fallen off the bus.")
    res = run([str(p)])
    assert res.exit_code == 0, res.output
    recs, summary = parse(res)
    assert summary["lines"] == 7 and summary["invalid_utf8"] == 1 and summary["nul_lines"] == 1
    assert summary["truncated"] == 1
    by = {r["signal"]: r for r in recs}
    assert by["cuda_oom"]["line_no"] == 2 and by["cuda_oom"]["offset"] == 8
    assert by["cuda_oom"]["fields"] == {"tried_gib": 2.0}
    assert by["cuda_oom"]["ts"].endswith("03-04T05:06:07+00:00")
    assert by["rpc_timeout"]["line_no"] == 3
    assert by["fatal_abort"]["line_no"] == 5  # the 10 MB line was truncated before its match
    assert by["trainer_step"]["line_no"] == 6 and by["trainer_step"]["fields"] == {"step": 7, "total": 200}
    assert by["xid"]["fields"]["xid"] == 79
    off = by["trainer_step"]["offset"]
    assert p.read_bytes()[off:off + 22] == b"Training Step Progress"


def test_empty_and_missing_file(tmp_path):
    e = tmp_path / "empty.log"
    e.write_bytes(b"")
    res = run([str(e)])
    assert res.exit_code == 0
    recs, summary = parse(res)
    assert recs == [] and summary["lines"] == 0 and summary["files"] == 1
    res = run([str(tmp_path / "nope.log")])
    assert res.exit_code == 2


def test_fixture_jsonl_and_text(tmp_path):
    res = run([str(FIX / "vllm_v1_0.13_dp2_tp2_nocolor.log")])
    recs, summary = parse(res)
    stats = [r for r in recs if r["signal"] == "vllm_stats"]
    assert len(stats) == 4 and stats[2]["fields"]["preemptions"] == 3
    assert {"file", "line_no", "offset", "rule_id", "kind", "signal", "fields", "ts"} <= set(stats[0])
    res = run(["--format", "text", str(FIX / "vllm_v1_0.13_dp2_tp2_nocolor.log")])
    assert "metric/vllm_stats [vllm.v1_stats]" in res.stdout


def test_re2_engine_same_output(tmp_path):
    f = str(FIX / "torch_nccl_timeout_2.6plus.log")
    a = run([f])
    b = run(["--engine", "re2", f])
    assert a.stdout == b.stdout and a.stdout


def test_rules_list_and_check(tmp_path):
    r = CliRunner().invoke(rules, ["list", "--format", "json"])
    assert r.exit_code == 0
    doc = json.loads(r.output)
    assert len(doc["rules"]) > 100 and "vllm" in doc["versions"]
    r = CliRunner().invoke(rules, ["check"])
    assert r.exit_code == 0
    bad = tmp_path / "p"
    bad.mkdir()
    (bad / "x.toml").write_text('[pack]\nid="x"\n[[rule]]\nid="x.y"\nkind="infra"\nseverity="error"\n'
                                'signal="s"\npattern="abc"\nmatch=["zzz"]\nno_match=["abc"]\nmeaning="m"\n')
    r = CliRunner().invoke(rules, ["check", str(bad)])
    assert r.exit_code == 1
    assert "match example does not match" in r.output


def test_tracebacks_flag_groups_each_traceback_into_one_record():
    res = run(["--tracebacks", str(FIX / "python_tracebacks.log")])
    assert res.exit_code == 0, res.output
    recs, summary = parse(res)
    tbs = [r for r in recs if "traceback" in r]
    assert summary["tracebacks"] == len(tbs) == 3
    group = [r for r in tbs if r["traceback"]["exc_type"] == "ExceptionGroup"]
    assert len(group) == 1 and len(group[0]["traceback"]["chain"]) >= 3
    chained = [r["traceback"] for r in tbs if r["traceback"]["exc_type"] == "KeyError"]
    assert chained and all(t["chain"] == ["KeyError", "RuntimeError", "KeyError"] for t in chained)
    assert len({t["fingerprint"] for t in chained}) == 1  # the same failure twice
    assert all(r["line_no"] <= r["last_line_no"] for r in tbs)
    # without the flag the output holds matches only
    plain, summary2 = parse(run([str(FIX / "python_tracebacks.log")]))
    assert summary2["tracebacks"] == 0 and all("traceback" not in r for r in plain)
    assert len(plain) == len(recs) - len(tbs)
