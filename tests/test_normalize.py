from datetime import UTC, datetime, timedelta, timezone

from rlhealth.agents.normalize import (
    Prefix,
    line_timestamp,
    normalize,
    peel_prefixes,
    split_records,
    strip_ansi,
)

REF = datetime(2026, 9, 10, 12, 0, tzinfo=UTC)


def test_strip_ansi():
    assert strip_ansi("\x1b[1;36m(APIServer pid=1032)\x1b[0;0m INFO") == "(APIServer pid=1032) INFO"
    assert strip_ansi("\x1b[36mray::X.y()\x1b[39m") == "ray::X.y()"
    assert strip_ansi("plain") == "plain"


def test_split_records_cr_crlf():
    assert split_records("a\r\nb\rc\nd\n") == ["a", "b", "c", "d"]
    assert split_records("a\n\nb") == ["a", "", "b"]
    assert split_records("") == []
    assert split_records("x\r\n") == ["x"]


def test_peel_nested_ray_vllm_with_ansi():
    line = ("\x1b[36m(WorkerDict pid=24410, ip=10.0.4.18)\x1b[0m \x1b[1;36m(EngineCore_DP0 pid=25011)"
            "\x1b[0;0m INFO 11-18 20:03:55 [loggers.py:118] hello")
    prefixes, rest = peel_prefixes(line)
    assert prefixes == (Prefix("WorkerDict", 24410, "10.0.4.18"), Prefix("EngineCore_DP0", 25011, None))
    assert rest == "INFO 11-18 20:03:55 [loggers.py:118] hello"


def test_peel_other_prefixes():
    assert peel_prefixes("(raylet, ip=10.0.4.18) x") == ((Prefix("raylet", None, "10.0.4.18"),), "x")
    assert peel_prefixes("(MyActor(index=2) pid=4) y") == ((Prefix("MyActor(index=2)", 4, None),), "y")
    assert peel_prefixes("[rank0]: Traceback (most recent call last):")[0] == (Prefix("rank0"),)
    p, rest = peel_prefixes("[rank3]:[E321 02:07:08.412230519 ProcessGroupNCCL.cpp:607] x")
    assert p == (Prefix("rank3"),) and rest.startswith("[E321")
    p, rest = peel_prefixes("[pod/iris-a-0/task] 2026-09-09T17:20:10.248440126Z (X pid=5, ip=1.2.3.4) INFO")
    assert p == (Prefix("pod/iris-a-0/task"), Prefix("X", 5, "1.2.3.4")) and rest == "INFO"
    assert peel_prefixes("(not a prefix) x") == ((), "(not a prefix) x")


def test_timestamps_each_flavour():
    cases = {
        "INFO 11-29 09:48:05 metrics.py:349] x": datetime(2026, 11, 29, 9, 48, 5, tzinfo=UTC),
        "(APIServer pid=1) INFO 08-20 14:03:19 [loggers.py:123] x": datetime(2026, 8, 20, 14, 3, 19, tzinfo=UTC),
        "[rank3]:[E321 02:07:08.412230519 ProcessGroupNCCL.cpp:607] x": datetime(2026, 3, 21, 2, 7, 8, tzinfo=UTC),
        "E628 17:56:14.245089597 ProcessGroupNCCL.cpp:1] x": datetime(2026, 6, 28, 17, 56, 14, tzinfo=UTC),
        "[rank1]:[E1128 02:07:08.412230519 P.cpp:1] x": datetime(2026, 11, 28, 2, 7, 8, tzinfo=UTC),
        "[rank1]:[E105 02:07:08.412230519 P.cpp:1] x": datetime(2026, 1, 5, 2, 7, 8, tzinfo=UTC),
        "W1223 05:17:58.996000 3304089 torch/api.py:908] x": datetime(2026, 12, 23, 5, 17, 58, 996000, tzinfo=UTC),
        "2026-06-28 16:34:15.420 | INFO     | m:f:1 - x": datetime(2026, 6, 28, 16, 34, 15, 420000, tzinfo=UTC),
        "2025-11-18 20:01:12,331\tINFO worker.py:1918 -- x": datetime(2025, 11, 18, 20, 1, 12, 331000, tzinfo=UTC),
        "[2026-06-28 16:34:15,420 I 42067 42067] core_worker.cc:1: x": datetime(2026, 6, 28, 16, 34, 15, 420000, tzinfo=UTC),
        "2026-05-12T08:01:39.331095044Z stdout F (APIServer pid=1) INFO 05-12 08:01:39 [x.py:1] y": datetime(2026, 5, 12, 8, 1, 39, 331095, tzinfo=UTC),
        "2026-05-12T10:01:39+02:00 x": datetime(2026, 5, 12, 8, 1, 39, tzinfo=UTC),
        "slurmstepd: error: *** JOB 1 ON n CANCELLED AT 2025-11-29T08:00:19 DUE TO TIME LIMIT ***": datetime(2025, 11, 29, 8, 0, 19, tzinfo=UTC),
        "[Fri Nov 29 10:14:31 2024] ray::WorkerDict invoked oom-killer": datetime(2024, 11, 29, 10, 14, 31, tzinfo=UTC),
        "\x1b[36m(skyrl_entrypoint pid=4)\x1b[0m 2026-02-12 14:33:10.502 | INFO | x": datetime(2026, 2, 12, 14, 33, 10, 502000, tzinfo=UTC),
    }
    for line, want in cases.items():
        got = line_timestamp(line, REF)
        assert got == want, (line, got)
        assert got.tzinfo is not None and got.utcoffset() == timedelta(0)
    assert line_timestamp("no timestamp here", REF) is None


def test_k8s_prefix_timestamp_preferred():
    line = "[pod/p-0/task] 2026-09-09T17:20:10.5Z (A pid=1, ip=1.1.1.1) INFO 09-09 17:20:11 [a.py:1] b"
    assert line_timestamp(line, REF) == datetime(2026, 9, 9, 17, 20, 10, 500000, tzinfo=UTC)


def test_yearless_rollover_and_tz():
    ref = datetime(2026, 1, 2, tzinfo=UTC)
    # Dec 31 would be ~12 months after ref in 2026: previous year
    assert line_timestamp("INFO 12-31 23:59:00 [a.py:1] x", ref).year == 2025
    assert line_timestamp("INFO 01-01 00:00:01 [a.py:1] x", ref).year == 2026
    # Mar 21 with ref Sep 10: same year; Mar 21 with ref Jan 2 (> 6 months after? no, 2.5): same
    assert line_timestamp("[E321 02:07:08.412230519 P.cpp:1] x", REF).year == 2026
    assert line_timestamp("INFO 07-20 00:00:00 [a.py:1] x", ref).year == 2025
    tz = timezone(timedelta(hours=2))
    assert line_timestamp("INFO 06-01 12:00:00 [a.py:1] x", REF, tz) == datetime(2026, 6, 1, 10, tzinfo=UTC)


def test_normalize():
    n = normalize("\x1b[36m(TaskRunner pid=23871)\x1b[0m step:1 - a:1", REF)
    assert n.text == "step:1 - a:1"
    assert n.prefixes == (Prefix("TaskRunner", 23871, None),)
    assert n.ts is None
    assert n.raw.startswith("\x1b[36m")


def test_bracketed_iso_stamps_of_sglang_and_megatron() -> None:
    from datetime import datetime

    from rlhealth.agents.normalize import line_timestamp

    ref = datetime(2026, 11, 29, tzinfo=UTC)
    assert line_timestamp("[2026-11-29 10:00:00 TP0] Decode batch. #running-req: 3", ref) == \
        datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    assert line_timestamp(" [2026-11-29 10:00:01] iteration        5/     10 |", ref) == \
        datetime(2026, 11, 29, 10, 0, 1, tzinfo=UTC)
