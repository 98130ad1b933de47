"""Redaction cost per line: the block marker scan (+ substitutions on hit lines) vs the old precheck.

    python bench/redact.py [--lines 200000] [--rounds 5]

Line sets (500-line batches, like the log reader): `plain` (python logging, uvicorn access, NCCL
INFO, loguru with ANSI, tqdm with UTF-8 blocks: no secret marker), `vllm_stats` (vLLM stats
lines, which say "tokens/s" twice), `secret` (every line carries a secret). Reports us/line for
`redact_lines` per engine and for `Redactor.redact_block` on the already-encoded batch (what the
log reader calls: it has the batch bytes already).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlhealth.sources.redact import Redactor

ESC = "\x1b"
PLAIN = [
    "2026-10-14 13:36:32,650\tINFO worker.py:1694 -- Connecting to existing Ray cluster at address: 10.0.2.179:6379...",
    f"{ESC}[36m(AsyncVLLMInferenceEngine pid=20531, ip=10.0.2.100){ESC}[0m INFO:     127.0.0.1:51122 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK",
    f"{ESC}[36m(FSDPPolicyWorkerBase pid=6289, ip=10.0.7.77){ESC}[0m iris-x-0:6289:6900 [0] NCCL INFO Broadcast: opCount dea0 sendbuff 0x7f3c2a000000 recvbuff 0x7f3c2a000000 count 1048576 datatype 9 op 0 root 0 comm 0x55d1c8a3e2f0 [nranks=9] stream 0x55d1c8b01230",
    f"{ESC}[36m(skyrl_entrypoint pid=7760, ip=10.0.2.179){ESC}[0m {ESC}[32m2026-10-14 13:40:04.036{ESC}[0m | {ESC}[1mINFO    {ESC}[0m | {ESC}[36mskyrl_train.fully_async_trainer{ESC}[0m:{ESC}[36m_build{ESC}[0m:{ESC}[36m357{ESC}[0m - {ESC}[1mLength of train_dataloader: 480{ESC}[0m",
    "\rGeneration Buffer Progress:  45%|████▌     | 230/512 [00:10<00:12, 22.1it/s]\rGeneration Buffer Progress:  46%|████▌     | 236/512 [00:11<00:12, 22.0it/s]",
]
STATS = [f"{ESC}[36m(AsyncVLLMInferenceEngine pid=20531, ip=10.0.8.179){ESC}[0m INFO 11-05 10:27:03 [loggers.py:271] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 612.3 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.2%, Prefix cache hit rate: 60.0%"]
SECRET = [
    "HF_TOKEN=hf_82013224c91143fd83fa4ae7a45ed81761",
    'curl -H "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abc.def" http://x',
    "git clone https://ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/x",
    "slack said xoxb-123456789012-abcdefABCDEF in free text",
]


def batches(pool: list[str], n: int) -> list[list[str]]:
    lines = [pool[i % len(pool)] for i in range(n)]
    return [lines[i:i + 500] for i in range(0, n, 500)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    engines = ["hyperscan", "re2", "re"]
    reds = {e: Redactor(e) for e in engines}
    for name, pool in (("plain", PLAIN), ("vllm_stats", STATS), ("secret", SECRET)):
        n = args.lines if name != "secret" else min(args.lines, 20_000)
        bs = batches(pool, n)
        enc = [("\n".join(b)).encode() for b in bs]
        res = {}
        for e in engines:
            if e == "re" and name == "plain":
                pass
            t_lines, t_block = [], []
            for _ in range(args.rounds):
                work = [list(b) for b in bs]
                t = time.perf_counter()
                for b in work:
                    reds[e].redact_lines(b)
                t_lines.append(time.perf_counter() - t)
                work = [list(b) for b in bs]
                t = time.perf_counter()
                for blk, b in zip(enc, work):
                    reds[e].redact_block(blk, b)
                t_block.append(time.perf_counter() - t)
            res[e] = (statistics.median(t_lines) / n * 1e6, statistics.median(t_block) / n * 1e6)
        print(f"{name:10s} n={n:>7,} " + "  ".join(
            f"{e}: redact_lines={a:.3f} redact_block={b:.3f} us/line" for e, (a, b) in res.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
