"""Redaction: fake secrets are masked, ordinary lines are untouched, and it is fast."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from rlhealth.sources.capture import open_capture
from rlhealth.sources.redact import MASK, might_contain_secret, redact, redact_lines

SHARED = Path(os.environ.get("RLHEALTH_SHARED_DIR") or Path(__file__).resolve().parents[1].parent / "shared")
SCEN = SHARED / "scenarios"
needs_shared = pytest.mark.skipif(not SCEN.is_dir(), reason="shared scenarios not available")

CASES = [
    ("HF_TOKEN=hf_82013224c91143fd83fa4ae7a45ed81761", "HF_TOKEN=" + MASK),
    ("WANDB_API_KEY=wandb_v1_30d4e58e353e56710496a7f23167fe3b27a951e5", "WANDB_API_KEY=" + MASK),
    ("export DAYTONA_API_KEY=abcdef0123456789abcdef", "export DAYTONA_API_KEY=" + MASK),
    ('curl -H "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abc.def" http://x',
     'curl -H "Authorization: Bearer ' + MASK + '" http://x'),
    ("openai.AuthenticationError: Incorrect API key provided: sk-proj-abcdefghijklmnopqrstuvwx",
     "openai.AuthenticationError: Incorrect API key provided: sk-proj-" + MASK),
    ('{"api_key": "sk-abcdefghijklmnop1234", "token": "abcd1234efgh"}',
     '{"api_key": "' + MASK + '", "token": "' + MASK + '"}'),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_access_key = " + MASK),
    ("using AKIAIOSFODNN7EXAMPLE now", "using AKIAIOSF" + MASK + " now"),
    ("postgres://admin:s3cretPass@db.internal:5432/x", "postgres://admin:" + MASK + "@db.internal:5432/x"),
    ("git clone https://ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/x",
     "git clone https://ghp_" + MASK + "@github.com/x"),
    ("vllm serve m --api-key abc123def --port 8000", "vllm serve m --api-key " + MASK + " --port 8000"),
    ("password: hunter2!", "password: " + MASK),
    # a number is a count, except as a password (a PIN); anything else after a credential word is masked
    ("db_password=12345678", "db_password=" + MASK),
    ('{"pwd": "4096"}', '{"pwd": "' + MASK + '"}'),
    ("#token: 29301abc, x", "#token: " + MASK + ", x"),
    ("token: 12.5e3", "token: " + MASK),
]

UNTOUCHED = [
    "INFO 10-14 16:19:43 [loggers.py:127] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 615.9 tokens/s",
    "max_tokens=4096 tokenizer='Qwen/Qwen3-8B', tokenizer_revision=None",
    "daytona.DaytonaError: Failed to create sandbox: Bearer token is invalid",
    "the token is 0 and the key is fine",
    "wandb: View run at https://wandb.ai/ot-agent/marin-rl/runs/93e8b88d",
    # SGLang decode-batch stats: "#token:" is a count of tokens, not a credential
    "[2026-10-14 16:19:43 TP3] Decode batch. #running-req: 37, #token: 29301, token usage: 0.45, "
    "gen throughput (token/s): 1234.56, #queue-req: 2",
    "[2026-10-14 16:19:43 TP3] Prefill batch. #new-seq: 1, #new-token: 8192, #cached-token: 0, token usage: 0.01",
    "generated token: 512 of 4096; secret: 1.25",
]


@pytest.mark.parametrize("line,expected", CASES)
def test_masks_secret(line: str, expected: str) -> None:
    assert redact(line) == expected
    batch = ["plain line", line, "another"]
    assert redact_lines(batch) == 1
    assert batch == ["plain line", expected, "another"]


@pytest.mark.parametrize("line", UNTOUCHED)
def test_leaves_ordinary_lines(line: str) -> None:
    assert redact(line) == line
    assert redact_lines([line]) == 0


def test_precheck_says_no_for_plain_lines() -> None:
    assert not might_contain_secret("2026-10-14 13:36:32,650\tINFO worker.py:1694 -- Connecting to Ray")
    assert might_contain_secret("HF_TOKEN=hf_x")


def test_speed_per_line() -> None:
    plain = ["2026-10-14 13:36:32,650\tINFO worker.py:1694 -- Connecting to existing Ray cluster at 10.0.2.179:6379"] * 5000
    stats = [UNTOUCHED[0]] * 5000
    for lines in (plain, stats):
        t = time.perf_counter()
        for i in range(0, len(lines), 500):
            redact_lines(lines[i:i + 500])
        us = (time.perf_counter() - t) / len(lines) * 1e6
        assert us < 60, us  # generous: shared CI machines; typically 1-6 us/line


_SECRET_RE = re.compile(r"(?:HF_TOKEN|WANDB_API_KEY|[A-Z_]*API_KEY|[A-Z_]*TOKEN)=(\S{8,})")


@needs_shared
def test_scenario_secrets_never_reach_events() -> None:
    secrets: set[str] = set()
    for cap_dir in sorted(SCEN.glob("*/capture")):
        for f in (cap_dir / "logs").rglob("*"):
            if f.is_file():
                secrets.update(_SECRET_RE.findall(f.read_text(errors="replace")))
    assert len(secrets) >= 10  # the scenarios plant fake HF and W&B keys in every pod log
    for cap_dir in sorted(SCEN.glob("*/capture")):
        cap = open_capture(cap_dir)
        for ev in cap.events():
            if ev.kind == "log_batch":
                text = "\n".join(ev.lines)
                for s in secrets:
                    assert s not in text, (cap_dir, s)


# -- block marker scan (Redactor): no looser than the substitutions, same lines on every engine --

from rlhealth.sources.redact import Redactor, _redact_one  # noqa: E402

FREE_TEXT = [
    ("pushed with gho_abcdefghijklmnopqrstuvwxyz0123 ok", "pushed with gho_" + MASK + " ok"),
    ("ghu_abcdefghijklmnopqrstuvwxyz0123", "ghu_" + MASK),
    ("server said ghs_abcdefghijklmnop1234 was revoked", "server said ghs_" + MASK + " was revoked"),
    ("refresh ghr_abcdefghijklmnop1234", "refresh ghr_" + MASK),
    ("temporary creds ASIAIOSFODNN7EXAMPLE expired", "temporary creds ASIAIOSF" + MASK + " expired"),
    ("slack hook xoxb-123456789012-abcdefABCDEF failed", "slack hook xoxb-" + MASK + " failed"),
    ("posting with xoxp-123456789012-abcdefABCDEF", "posting with xoxp-" + MASK),
    ("sk-ant-api03-abcdefghijklmnopqrstuvwxyz", "sk-ant-api03-" + MASK),
    ("api_key\u00a0= abcdef123456", "api_key\u00a0= " + MASK),  # NBSP is \s for the substitution
    ("API_\u212aEY=abcdef123456", "API_\u212aEY=" + MASK),  # Kelvin sign folds to k under (?i)
    ("--passw\u0131rd x", "--passw\u0131rd x"),  # not a credential flag: stays (but is checked)
]


@pytest.mark.parametrize("line,expected", FREE_TEXT)
def test_free_text_token_shapes(line: str, expected: str) -> None:
    assert redact(line) == expected
    batch = ["plain", line, "plain"]
    redact_lines(batch)
    assert batch == ["plain", expected, "plain"]


_FRAGMENTS = [
    "token", "TOKEN", "Token", "api_key", "apiKey", "api-key", "secret", "password", "passwd", "pwd", "credentials",
    "access_key_id", "private-key", "authorization", "Authorisation", "bearer", "Bearer", "--api-key", "--token",
    "--password", "=", ":", ": ", " = ", '"', "'", " ", "\t", "\u00a0", "\u2003", "\u3000", "\x1c", "\r",
    "sk-", "sk-proj-", "sk-ant-api03-", "hf_", "ghp_", "gho_", "ghs_", "github_pat_", "xoxb-", "xoxa-", "dtn_",
    "wandb_v1_", "AKIA", "ASIA", "https://", "postgres://", "user", "@", "/", "abcdefghijkl", "ABCDEFGH12345678",
    "29301", "0.45", "#token: ", "4096", ".", ",",
    "0123456789ab", "x", "é", "\u212a", "\u017f", "\u0130", "\u0131", "٠٣", "[REDACTED]", "tokens/s", "max_tokens=",
]


def _fuzz_lines(n: int, seed: int = 3) -> list[str]:
    import random

    rnd = random.Random(seed)
    return ["".join(rnd.choice(_FRAGMENTS) for _ in range(rnd.randint(1, 9))) for _ in range(n)]


def test_markers_never_miss_a_substitution() -> None:
    lines = _fuzz_lines(20_000) + [c[0] for c in CASES + FREE_TEXT] + UNTOUCHED
    changed = [i for i, s in enumerate(lines) if _redact_one(s) != s]
    assert len(changed) > 3000  # the fuzz does exercise the substitutions
    for engine in ("hyperscan", "re2", "re"):
        r = Redactor(engine)
        work = list(lines)
        for i in range(0, len(work), 500):
            batch = work[i:i + 500]
            r.redact_lines(batch)
            work[i:i + 500] = batch
        assert work == [_redact_one(s) for s in lines], engine


def test_engines_give_the_same_lines() -> None:
    lines = _fuzz_lines(5_000, seed=11) + [c[0] for c in CASES + FREE_TEXT] + UNTOUCHED
    block = "\n".join(lines).encode("utf-8")
    got = {e: Redactor(e).hit_lines(block) for e in ("hyperscan", "re2", "re")}
    assert got["hyperscan"] == got["re2"] == got["re"]
    assert 0 < len(got["hyperscan"]) < len(lines)


def test_plain_lines_have_no_marker() -> None:
    r = Redactor()
    plain = UNTOUCHED + ["2026-10-14 13:36:32,650\tINFO worker.py:1694 -- Connecting to Ray",
                         "Processed prompts:  45%|████▌     | 230/512 [00:10<00:12, 22.1it/s]"]
    assert r.hit_lines("\n".join(plain).encode()) == []


def test_redact_block_extra_lines_take_the_exact_path() -> None:
    r = Redactor()
    lines = ["a", "token=\ufffdabcdef", "b"]  # decoded text differs from the raw bytes given
    assert r.redact_block(b"a\nxx\nb", lines, [1]) == 1
    assert lines[1] == "token=" + MASK


def test_lines_holding_newlines_fall_back_to_per_line() -> None:
    lines = ["x\nHF_TOKEN=hf_82013224c91143fd83fa4ae7a45ed81761", "plain"]
    assert redact_lines(lines) == 1
    assert lines[0] == "x\nHF_TOKEN=" + MASK


def test_state_errors_and_pod_messages_are_redacted() -> None:
    from rlhealth.schemas import Source
    from rlhealth.sources.capture import parse_state_line
    from rlhealth.sources.kubectl import pod_statuses_from_json

    token = "sk-" + "A1b2C3d4" * 5
    line = ('{"ts": "2026-11-29T10:00:00Z", "state": "failed", "attempts": [{"attempt": 0, "terminal_state": '
            '"failed", "error": "openai.AuthenticationError: Incorrect API key provided: %s"}]}' % token)
    poll = parse_state_line(line, job_id="j", source=Source(), scheduler="kubernetes")
    assert token not in poll.attempts[0].error and "AuthenticationError" in poll.attempts[0].error
    pods = {"items": [{"metadata": {"name": "p-0"}, "status": {"phase": "Failed", "message": f"Authorization: Bearer {token}"}}]}
    statuses = pod_statuses_from_json(pods)
    assert all(token not in (s.message or "") for s in statuses)


# -- the guards in front of the substitutions: they only skip what would change nothing ----------------

_GUARD_FRAGMENTS = [*_FRAGMENTS, "\x1b[0m", "\x1b[1m", "\x1b[36m", "key", "KEY", "Key", "_id", "-id", "id", "pid=",
                    "ip=", "passw", "ord", "PWD", "Credential", "authorization", "AUTHORIZATION", "--key", "--aws-",
                    "_", "-", "--", "sk-proj-", "gho_", "AKIA", "ftp://", "x:y@", "\u00a0", "\n"]


def _unguarded(line: str) -> str:
    from rlhealth.sources import redact as r

    text = r._ANSI_RE.sub("", line) if "\x1b" in line else line
    new = text
    for pattern, repl in r._SUBS:
        new = pattern.sub(repl, new)
    return line if new == text else new


def test_guards_skip_only_lines_the_substitutions_leave_alone() -> None:
    import random

    from rlhealth.sources.redact import _may_change

    rnd = random.Random(17)
    lines = ["".join(rnd.choice(_GUARD_FRAGMENTS) for _ in range(rnd.randint(1, 12))) for _ in range(30_000)]
    lines += [c[0] for c in CASES + FREE_TEXT] + UNTOUCHED
    skipped = changed = 0
    for line in lines:
        want = _unguarded(line)
        assert _redact_one(line) == want, line
        changed += want != line
        skipped += not _may_change(line)
    assert changed > 5_000 and skipped > 3_000  # both sides exercised


def test_guard_passes_prose_a_marker_flags() -> None:
    """A loguru line whose message ends in "token" before a colour reset carries a marker but nothing
    to mask: the guard lets it through without the substitutions; a coloured key name does not."""
    from rlhealth.sources.redact import _may_change

    prose = ("\x1b[36m(skyrl_entrypoint pid=7760, ip=10.0.2.179)\x1b[0m \x1b[32m2026-10-12 12:56:59.168\x1b[0m | "
             "\x1b[1mINFO    \x1b[0m | \x1b[36mskyrl_train.generators.base\x1b[0m:\x1b[36mgenerate\x1b[0m:\x1b[36m58"
             "\x1b[0m - \x1b[1mpolicy cache sync token\x1b[0m")
    assert Redactor().hit_lines(prose.encode()) == [0]
    assert not _may_change(_stripped(prose)) and _redact_one(prose) == prose
    coloured = "\x1b[1mWANDB_API_KEY\x1b[0m=0123456789abcdef0123"
    assert _may_change(_stripped(coloured)) and _redact_one(coloured) == "WANDB_API_KEY=" + MASK


def _stripped(line: str) -> str:
    from rlhealth.sources.redact import _ANSI_RE

    return _ANSI_RE.sub("", line)


def test_site_names_have_guards_too() -> None:
    import os
    import subprocess
    import sys

    code = ("import random\n"
            "from tests.test_sources_redact import _unguarded, _GUARD_FRAGMENTS\n"
            "from rlhealth.sources.redact import _redact_one\n"
            "rnd = random.Random(3)\n"
            "frags = _GUARD_FRAGMENTS + ['sas', 'SAS', 'conn_str', 'Conn_Str', '--conn_str', 'azure_']\n"
            "lines = [''.join(rnd.choice(frags) for _ in range(rnd.randint(1, 10))) for _ in range(20000)]\n"
            "bad = [x for x in lines if _redact_one(x) != _unguarded(x)]\n"
            "assert not bad, bad[:3]\n"
            "assert _redact_one('AZURE_SAS = abcdef') == 'AZURE_SAS = [REDACTED]'\n")
    env = dict(os.environ, RLHEALTH_REDACT_NAMES="sas,conn_str")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_hit_lines_from_known_line_starts_equal_counted_ones() -> None:
    from rlhealth.agents.bytescan import line_starts

    r = Redactor()
    lines = _fuzz_lines(4_000, seed=23) + ["", "plain", "x" * 300 + "HF_TOKEN=hf_" + "a" * 30]
    for i in range(0, len(lines), 700):
        block = "\n".join(lines[i:i + 700]).encode("utf-8")
        for base in (0, 12_345):
            starts, _ = line_starts(block, base)
            assert r.hit_lines(block, starts, base) == r.hit_lines(block)
    assert r.hit_lines(block)  # not vacuous


def test_lines_still_marked_after_stripping_are_all_that_can_change() -> None:
    """`still_marked` drops a marked line only when masking leaves it as it was (checked line by line on
    fuzzed text full of colour codes around credential words, on every engine)."""
    import random

    from rlhealth.agents.bytescan import line_starts

    rnd = random.Random(29)
    frags = [f for f in _GUARD_FRAGMENTS if f != "\n"] + ["\x1b[1mtoken\x1b[0m", "\x1b]8;;x\x07", "\x1b", "\x1bX"]
    lines = ["".join(rnd.choice(frags) for _ in range(rnd.randint(1, 12))) for _ in range(20_000)]
    block = "\n".join(lines).encode("utf-8")
    starts, _ = line_starts(block, 7)
    for engine in ("hyperscan", "re2", "re"):
        r = Redactor(engine)
        marked = r.hit_lines(block, starts, 7)
        kept = r.still_marked(block, starts, 7, marked)
        assert set(kept) <= set(marked) and kept == sorted(kept)
        dropped = set(marked) - set(kept)
        assert len(dropped) > 500 and len(kept) > 2_000, (len(dropped), len(kept))  # both sides exercised
        for i in dropped:
            assert _redact_one(lines[i]) == lines[i], lines[i]
