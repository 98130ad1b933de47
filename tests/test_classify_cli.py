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


# --- year and zone of a line's stamp (issue #11 part 2) ---------------------------------------

YEARLESS = (
    "INFO 06-28 12:00:00 [x.py:1] CUDA out of memory. Tried to allocate 2.00 GiB\n"  # vLLM
    "[E628 12:00:00.123456789 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600018 milliseconds "
    "before timing out.\n"  # c10d
    "Jun 28 12:00:00 node1 kernel: NVRM: Xid (PCI:0000:4e:00): 79, pid=1, GPU has fallen off the bus.\n"  # syslog
)


def _stamps(result) -> dict[int, set[str]]:
    assert result.exit_code == 0, result.output
    out: dict[int, set[str]] = {}
    for rec in parse(result)[0]:
        out.setdefault(rec["line_no"], set()).add(rec["ts"])
    return out


def _touch(path: Path, when: str) -> None:
    import os
    from datetime import datetime

    t = datetime.fromisoformat(when).timestamp()
    os.utime(path, (t, t))


def test_yearless_stamps_take_the_year_of_the_enclosing_capture_not_the_mtime(tmp_path):
    cap = tmp_path / "capture"
    (cap / "logs" / "ray").mkdir(parents=True)
    (cap / "capture.json").write_text(json.dumps({"job_id": "j", "cluster": "c", "scheduler": "slurm",
                                                  "captured_at": "2024-07-01T00:00:00Z"}))
    log = cap / "logs" / "ray" / "worker.log"
    log.write_text(YEARLESS)
    _touch(log, "2026-03-01T00:00:00+00:00")  # copied much later: the mtime is not the job's year
    assert _stamps(run([str(log)])) == {1: {"2024-06-28T12:00:00+00:00"}, 2: {"2024-06-28T12:00:00+00:00"},
                                        3: {"2024-06-28T12:00:00+00:00"}}


def test_yearless_stamps_outside_a_capture_take_the_year_of_the_mtime(tmp_path):
    log = tmp_path / "old.log"
    log.write_text(YEARLESS + "INFO 12-31 23:59:00 [x.py:1] CUDA out of memory. Tried to allocate 1.00 GiB\n")
    _touch(log, "2019-01-02T00:00:00+00:00")
    got = _stamps(run([str(log)]))
    assert got[1] == got[2] == got[3] == {"2019-06-28T12:00:00+00:00"}
    # a December stamp against a January mtime would lie a year ahead: it is the year before
    assert got[4] == {"2018-12-31T23:59:00+00:00"}
    _touch(log, "2023-08-01T00:00:00+00:00")
    assert _stamps(run([str(log)]))[1] == {"2023-06-28T12:00:00+00:00"}


def test_year_option_sets_the_year_of_yearless_stamps_only(tmp_path):
    log = tmp_path / "a.log"
    log.write_text(YEARLESS + "2026-06-28T12:00:00Z ERROR CUDA out of memory. Tried to allocate 1.00 GiB\n")
    _touch(log, "2019-08-01T00:00:00+00:00")
    got = _stamps(run(["--year", "2021", str(log)]))
    assert got[1] == got[2] == got[3] == {"2021-06-28T12:00:00+00:00"}
    assert got[4] == {"2026-06-28T12:00:00+00:00"}  # a stamp with its own year keeps it


def test_zoneless_stamps_are_utc_and_tz_shifts_them(tmp_path):
    log = tmp_path / "a.log"
    log.write_text(YEARLESS + "2026-06-28 12:00:00,123 ERROR CUDA out of memory. Tried to allocate 1.00 GiB\n"
                   "2026-06-28T12:00:00+02:00 ERROR CUDA out of memory. Tried to allocate 1.00 GiB\n")
    _touch(log, "2026-08-01T00:00:00+00:00")
    utc = _stamps(run([str(log)]))
    assert utc[1] == {"2026-06-28T12:00:00+00:00"} and utc[4] == {"2026-06-28T12:00:00.123000+00:00"}
    assert _stamps(run(["--tz", "UTC", str(log)])) == utc
    ist = _stamps(run(["--tz", "Asia/Kolkata", str(log)]))
    assert ist[1] == ist[2] == ist[3] == {"2026-06-28T06:30:00+00:00"}
    assert ist[4] == {"2026-06-28T06:30:00.123000+00:00"}
    assert ist[5] == utc[5] == {"2026-06-28T10:00:00+00:00"}  # a stamp with a zone ignores --tz
    west = _stamps(run(["--tz", "-05:00", str(log)]))
    assert west[1] == {"2026-06-28T17:00:00+00:00"}
    # an IANA zone follows daylight saving: Berlin is +02:00 in June, +01:00 in January
    berlin = _stamps(run(["--tz", "Europe/Berlin", "--year", "2026", str(log)]))
    assert berlin[1] == {"2026-06-28T10:00:00+00:00"}


def test_bad_tz_is_a_usage_error(tmp_path):
    log = tmp_path / "a.log"
    log.write_text(YEARLESS)
    for bad in ("Mars/Olympus", "+25:00", "nonsense"):
        res = run(["--tz", bad, str(log)])
        assert res.exit_code == 2, (bad, res.output)
