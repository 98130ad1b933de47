import json
from datetime import UTC, datetime
from pathlib import Path

from rlhealth.agents.normalize import split_records
from rlhealth.agents.tracebacks import TracebackAssembler, fingerprint

FIX = Path("/work/shared/reference/examples/logs")
FINELOG = Path("/work/shared/scenarios/same_crash_every_restart/capture/logs/finelog.log")


def lines_of(path: Path, drop_annotations: bool = True) -> list[str]:
    lines = split_records(path.read_bytes().decode("utf-8", "replace"))
    return [ln for ln in lines if not (drop_annotations and ln.startswith("# "))]


def assemble(lines, asm=None):
    asm = asm or TracebackAssembler()
    out = []
    for i, ln in enumerate(lines):
        out += asm.feed(i, ln, None)
    return out + asm.flush()


def test_chained_traceback_is_one_record():
    tbs = assemble(lines_of(FIX / "python_tracebacks.log"))
    plain = [t for t in tbs if t.stream == ""][0]
    assert plain.exc_type == "KeyError" and plain.message == "'missing'"
    assert plain.chain == ("KeyError", "RuntimeError", "KeyError")
    assert plain.first_index == 0 and plain.frames[-1] == "chain.py:main"
    ranked = [t for t in tbs if t.stream.startswith("rank0")][0]
    assert ranked.chain == plain.chain
    assert ranked.fingerprint == plain.fingerprint  # the [rank0]: prefix does not change identity


def test_vllm_crlf_repeated_header_and_ansi():
    tbs = assemble(lines_of(FIX / "vllm_v1_0.11_fatal_crlf_ansi.log"))
    assert [t.exc_type for t in tbs] == ["torch.OutOfMemoryError", "vllm.v1.engine.exceptions.EngineDeadError"]
    oom = tbs[0]
    assert oom.stream == "EngineCore_DP0:4417"
    assert "core.py:run_engine_core" in oom.frames[0] or oom.frames
    assert "\x1b" not in oom.text and "ERROR 10-07" not in oom.text
    assert len(oom.text) <= 4096


def test_ray_task_error_wrapper():
    tbs = assemble(lines_of(FIX / "ray_verl_driver_colorprefix0.log"))
    assert len(tbs) == 1
    t = tbs[0]
    assert t.chain[0] == "ray.exceptions.RayTaskError(ActorDiedError)"
    assert t.exc_type == "ray.exceptions.ActorDiedError"
    assert "base.py:__call__" in t.frames


def test_same_failure_same_fingerprint_across_attempts():
    tbs = [t for t in assemble(lines_of(FINELOG, False)) if "OutOfMemoryError" in t.exc_type]
    assert len(tbs) >= 2
    assert len({t.fingerprint for t in tbs}) == 1
    assert "Tried to allocate 7.52 GiB" in tbs[0].message


def test_fingerprint_ignores_numbers_paths_hex():
    a = fingerprint("torch.OutOfMemoryError", "CUDA out of memory. Tried to allocate 7.52 GiB. GPU 3 has a total capacity of 79.11 GiB")
    b = fingerprint("torch.cuda.OutOfMemoryError", "CUDA out of memory. Tried to allocate 6.10 GiB. GPU 0 has a total capacity of 79.19 GiB")
    c = fingerprint("KeyError", "CUDA out of memory. Tried to allocate 6.10 GiB.")
    assert a == b != c
    assert fingerprint("X", "at 0x7f3a2a1b4d87 pid=123 /opt/a/b.py") == fingerprint("X", "at 0x11 pid=9 /x/y.py")


def test_state_roundtrip_midstream():
    lines = lines_of(FIX / "python_tracebacks.log")
    asm = TracebackAssembler()
    out = []
    for i, ln in enumerate(lines[:10]):
        out += asm.feed(i, ln, datetime(2026, 1, 1, tzinfo=UTC))
    state = json.loads(json.dumps(asm.to_dict()))
    asm2 = TracebackAssembler.from_dict(state)
    for i, ln in enumerate(lines[10:], start=10):
        out += asm2.feed(i, ln, None)
    out += asm2.flush()
    ref = assemble(lines)
    assert [(t.fingerprint, t.first_index, t.last_index) for t in out] == \
           [(t.fingerprint, t.first_index, t.last_index) for t in ref]
    assert out[0].ts == datetime(2026, 1, 1, tzinfo=UTC)


def test_bounded_state_and_text():
    asm = TracebackAssembler(max_lines=50)
    lines = ["Traceback (most recent call last):"]
    for i in range(5000):
        lines += [f'  File "/x/mod{i}.py", line {i}, in f{i}', "    " + "y" * 200]
    lines.append("RuntimeError: boom")
    out = []
    for i, ln in enumerate(lines):
        out += asm.feed(i, ln, None)
        for ob in asm.to_dict()["open"]:
            assert len(ob["head"]) + len(ob["tail"]) <= 50
            assert len(ob["frames"]) <= 32
    out += asm.flush()
    assert len(out) == 1 and out[0].exc_type == "RuntimeError"
    assert len(out[0].text) <= 4096 and len(out[0].frames) <= 8
    assert out[0].last_index == len(lines) - 1


def test_interleaved_writers():
    lines = [
        "(A pid=1) Traceback (most recent call last):",
        "(B pid=2) INFO something else",
        '(A pid=1)   File "/w/a.py", line 3, in go',
        "(B pid=2) Traceback (most recent call last):",
        '(B pid=2)   File "/w/b.py", line 9, in run',
        "(A pid=1) ValueError: bad a",
        "(B pid=2) KeyError: 'b'",
        "(A pid=1) next line",
        "(B pid=2) next line",
    ]
    tbs = assemble(lines)
    assert sorted((t.stream, t.exc_type, t.frames) for t in tbs) == [
        ("A:1", "ValueError", ("a.py:go",)), ("B:2", "KeyError", ("b.py:run",))]


EXCEPTION_GROUP = """\
2026-10-14 10:00:00 ERROR something failed
  + Exception Group Traceback (most recent call last):
  |   File "/app/main.py", line 10, in <module>
  |     asyncio.run(main())
  |   File "/usr/lib/python3.11/asyncio/runners.py", line 190, in run
  |     return runner.run(main)
  | ExceptionGroup: unhandled errors in a TaskGroup (2 sub-exceptions)
  +-+---------------- 1 ----------------
    | Traceback (most recent call last):
    |   File "/app/main.py", line 5, in worker
    |     raise ValueError("bad value 17")
    | ValueError: bad value 17
    +---------------- 2 ----------------
    | Traceback (most recent call last):
    |   File "/app/main.py", line 7, in other
    |     raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    | torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB
    +------------------------------------
2026-10-14 10:00:01 INFO next"""


def test_exception_group_is_one_record_naming_its_sub_exceptions():
    tbs = assemble(EXCEPTION_GROUP.splitlines())
    assert len(tbs) == 1
    tb = tbs[0]
    assert tb.exc_type == "ExceptionGroup"
    assert tb.chain == ("ExceptionGroup", "ValueError", "torch.OutOfMemoryError")
    assert "ValueError: bad value 17" in tb.message and "CUDA out of memory" in tb.message
    assert (tb.first_index, tb.last_index) == (1, 16)
    assert tb.frames[-2:] == ("main.py:worker", "main.py:other")
    # the same group with other numbers is the same failure
    again = assemble(EXCEPTION_GROUP.replace("17", "99").replace("2.00 GiB", "3.50 GiB").splitlines())[0]
    assert again.fingerprint == tb.fingerprint
