"""Agent conversations for the Harbor trials of make_scenarios.py: coherent attempts, hard-task attempts, token salad."""

from __future__ import annotations

import random

from _lib import pytest_stdout, raw_json_turn

H = "root@{h}:/app# "


def _obs(h: str, cmd: str, out: str) -> str:
    body = f"{H.format(h=h)}{cmd.rstrip()}\n" + (out + "\n" if out else "") + H.format(h=h) + "\n"
    return "New Terminal Output:\n\n" + body


# (task prefix, instruction, coherent turns [(analysis, plan, cmd, output)])
EASY = [
    ("csv-dedupe", "Remove duplicate rows (by the `email` column, keep the first) from /app/users.csv and write the result to /app/users_clean.csv.",
     [("Inspect the CSV header and size.", "Print the head and count lines.", "head -3 /app/users.csv; wc -l /app/users.csv",
       "id,name,email\n1,Ann,ann@example.org\n2,Bo,bo@example.org\n2001 /app/users.csv"),
      ("Use pandas to drop duplicates on email.", "Write a one-liner with pandas.",
       "python3 -c \"import pandas as pd; d=pd.read_csv('/app/users.csv'); d.drop_duplicates('email').to_csv('/app/users_clean.csv', index=False)\"", ""),
      ("Verify the row count.", "Count lines in the output.", "wc -l /app/users_clean.csv", "1874 /app/users_clean.csv")]),
    ("log-parse", "Parse /app/access.log and write a JSON object mapping each HTTP status code to its count to /app/status.json.",
     [("Look at the log layout.", "Print a few lines.", "head -2 /app/access.log",
       "10.0.0.7 - - [12/Oct/2026:10:01:02 +0000] \"GET /api HTTP/1.1\" 200 512\n10.0.0.9 - - [12/Oct/2026:10:01:03 +0000] \"POST /login HTTP/1.1\" 302 0"),
      ("Status code is field 9.", "Count with awk and format JSON with python.",
       "awk '{print $9}' /app/access.log | sort | uniq -c | python3 -c \"import sys,json; print(json.dumps({l.split()[1]: int(l.split()[0]) for l in sys.stdin}))\" > /app/status.json", ""),
      ("Check the result.", "Print the JSON.", "cat /app/status.json", "{\"200\": 1841, \"302\": 77, \"404\": 12, \"500\": 3}")]),
    ("nl2bash", "Find all files under /app/data larger than 10 MB that were modified in the last 7 days and write their paths, one per line, to /app/big_recent.txt.",
     [("Use find with -size and -mtime.", "Run find and redirect.", "find /app/data -type f -size +10M -mtime -7 > /app/big_recent.txt", ""),
      ("Check output.", "Print the file.", "cat /app/big_recent.txt", "/app/data/raw/2026-10-11.bin\n/app/data/raw/2026-10-13.bin")]),
    ("pymethods2test", "Implement `Stack.peek` and `Stack.is_empty` in /app/stack.py so the docstring contracts hold.",
     [("Read the file first.", "cat stack.py.", "cat /app/stack.py",
       "class Stack:\n    def __init__(self):\n        self._items = []\n    def push(self, x):\n        self._items.append(x)\n    def peek(self):\n        \"\"\"Return the top item without removing it; raise IndexError if empty.\"\"\"\n        raise NotImplementedError\n    def is_empty(self):\n        raise NotImplementedError"),
      ("Implement both methods.", "Use sed-free python rewrite.",
       "python3 - <<'EOF'\nimport re\ns=open('/app/stack.py').read()\ns=s.replace('        raise NotImplementedError\\n    def is_empty','        if not self._items:\\n            raise IndexError(\"peek from empty stack\")\\n        return self._items[-1]\\n    def is_empty')\ns=s.rstrip().rsplit('raise NotImplementedError',1)[0]+'return not self._items\\n'\nopen('/app/stack.py','w').write(s)\nEOF", ""),
      ("Quick self-test.", "Import and exercise.", "python3 -c \"from stack import Stack; s=Stack(); print(s.is_empty()); s.push(3); print(s.peek())\"", "True\n3")]),
]

HARD = [
    ("kv-store-crash-recovery", "The append-only key-value store in /app/kvstore loses the last committed write after a crash during compaction. Fix the recovery path so `pytest /app/tests` passes, including test_crash_during_compaction.",
     ["ls /app/kvstore && sed -n 1,80p /app/kvstore/log.py", "grep -n 'def recover' -A40 /app/kvstore/store.py",
      "python3 -m pytest -x -q /app/tests/test_recovery.py 2>&1 | tail -15", "grep -n 'fsync\\|rename' /app/kvstore/*.py",
      "python3 - <<'EOF'\nimport re,io\np='/app/kvstore/compact.py'\ns=open(p).read()\ns=s.replace('os.rename(tmp, seg)','os.fsync(f.fileno())\\n        os.rename(tmp, seg)')\nopen(p,'w').write(s)\nEOF",
      "python3 -m pytest -q /app/tests 2>&1 | tail -6", "sed -n 40,95p /app/kvstore/store.py",
      "python3 -m pytest -q /app/tests/test_recovery.py::test_crash_during_compaction 2>&1 | tail -12"],
     [("test_crash_during_compaction", "AssertionError: expected value b'v1023' for key b'k1023', got None"),
      ("test_torn_tail_record", "AssertionError: recovered 1022 records, expected 1023")]),
    ("regex-engine-backrefs", "Extend the toy regex engine in /app/rx to support backreferences (\\1..\\9) with the same semantics as Python's `re`, without exponential blowup on the provided adversarial inputs (each under 2 s).",
     ["ls /app/rx && wc -l /app/rx/*.py", "sed -n 1,120p /app/rx/compile.py", "python3 -m pytest -q /app/tests 2>&1 | tail -8",
      "grep -n 'class Match\\|def _match' /app/rx/engine.py", "python3 - <<'EOF'\nprint(open('/app/rx/engine.py').read()[:2000])\nEOF",
      "python3 -m pytest -q /app/tests -k backref 2>&1 | tail -10", "timeout 10 python3 /app/tests/bench_adversarial.py"],
     [("test_backref_nested_groups", "AssertionError: assert None == <re.Match object; span=(0, 6), match='abcabc'>"),
      ("test_adversarial_timing", "Failed: Timeout >2.0s")]),
    ("mpi-stencil-deadlock", "The halo exchange in /app/stencil/halo.c deadlocks with 4 ranks on non-square grids. Fix it and make `make test` pass under `mpirun -np 4`.",
     ["cd /app/stencil && make 2>&1 | tail -3", "sed -n 1,90p halo.c", "mpirun --allow-run-as-root -np 4 ./stencil 64 48 10 & sleep 5; kill %1",
      "grep -n 'MPI_Send\\|MPI_Recv' halo.c", "sed -i 's/MPI_Send(\\(.*\\));/MPI_Isend(\\1, \\&reqs[nreq++]);/' halo.c && make 2>&1 | tail -3",
      "make test 2>&1 | tail -12", "sed -n 60,110p halo.c"],
     [("test_nonsquare_4ranks", "AssertionError: checksum mismatch: 1.8823e+04 != 1.8821e+04"),
      ("test_deadlock_free", "Failed: Timeout >30.0s")]),
]


def coherent_turns(rng: random.Random, host: str, task: tuple, complete: bool) -> list[tuple[str, str]]:
    _, _, steps = task
    out = []
    for i, (a, p, cmd, res) in enumerate(steps):
        last = i == len(steps) - 1
        out.append((raw_json_turn(a, p, [cmd + "\n"], complete and last), _obs(host, cmd, res)))
    if complete:
        out.append((raw_json_turn("The output matches the task requirements.", "Mark the task complete.", [], True),
                     "Are you sure you want to mark the task as complete? ..."))
    return out


def hard_turns(rng: random.Random, host: str, task: tuple, n_turns: int) -> list[tuple[str, str]]:
    _, _, cmds, fails = task
    analyses = [
        "Start by reading the code involved and running the failing test to see the exact assertion.",
        "The failure comes from the recovery path; I need to see how segments are replayed.",
        "One test still fails; the fix addressed only part of the problem.",
        "Let me look at the ordering of writes versus the rename; durability may not be guaranteed.",
        "Re-run the specific failing test with more output to narrow it down.",
        "The change compiles and most tests pass; check the remaining failing case.",
        "My previous hypothesis was incomplete; inspect the surrounding code again.",
    ]
    out = []
    for i in range(n_turns):
        cmd = cmds[i % len(cmds)]
        test, err = fails[i % len(fails)]
        res = (f"F.......F..                                                      [100%]\nFAILED tests/test_{task[0].split('-')[0]}.py::{test} - {err}\n2 failed, 9 passed in 3.{rng.randint(10, 99)}s"
               if "pytest" in cmd or "make test" in cmd else "...")
        out.append((raw_json_turn(analyses[i % len(analyses)], "Run the next diagnostic step.", [cmd + "\n"]), _obs(host, cmd, res)))
    return out


def hard_verifier(task: tuple, rng: random.Random) -> str:
    fails = task[3]
    return pytest_stdout(rng.randint(7, 10), list(fails), 3 + rng.random() * 20)


SALAD_FRAGMENTS = [
    "the the the )]} ,,\u0120analysis\u0120\u0120 plan plan plan",
    "\u7684\u7684\u7684 assistant assistant<|im_start|>assistant \u0443\u0441\u0442\u0430\u043d\u043e\u0432",
    "keystrokes keystrokes\": \"\": \"\": {{{{ ls ls ls ls ls ls ls ls",
    "ERROR ERROR /app/app/app/app/app/app/app/app/app/app",
    "\u0120\u0120\u0120\u010a\u010a json json\u0120json]]]]] duration duration 0.1 0.1 0.1 0.1 0.1",
    "\u00e4\u00b8\u0143\u00e6\u0138\u0129 cd cd cd cd /. /. /. /.\ttask_complete task_complete task",
    "I will I will I will I will I will I will I will I will I will I will I will",
    "\u0432\u043e\u0442 \u0432\u043e\u0442 \u0432\u043e\u0442 -- -- -- ---- <think><think><think>",
]


def salad_text(rng: random.Random, n_frag: int) -> str:
    parts = [rng.choice(SALAD_FRAGMENTS) for _ in range(n_frag)]
    if rng.random() < 0.5:
        rep = rng.choice(["ls ls ls ", "the the ", "0.1 0.1 ", "}}}} ", "\u7684"])
        parts.append(rep * rng.randint(40, 120))
    return " ".join(parts)


PARSE_ERR = ("Previous response had parsing errors:\nERROR: No valid JSON found in response\n\n"
             "Please fix these issues and provide a proper JSON response.")


def salad_turns(rng: random.Random, n_turns: int) -> list[tuple[str, str]]:
    return [(salad_text(rng, rng.randint(2, 6)), PARSE_ERR) for _ in range(n_turns)]
