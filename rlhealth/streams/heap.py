"""Keeping the worker's long-lived objects out of the garbage collector's full collections.

At 10,000 jobs the worker holds a few hundred thousand container objects that live as long as their
job (decoded states, books' facts, the exporter's rows, freshness records). A full collection walks
every one of them: 0.5-1.1 s per collection and 14-20 s of the process's time over five 30 s rounds
of `bench/scale.py` (BENCHMARKS.md, sessions 8-10), during which the event loop, the judging pass
and the `/metrics` thread all stand still.

`HeapFreezer.after_pass` runs on the event loop after each regular judging pass (on the worker's 1 s
timer, `StreamWorker._after_passes`, not at the pass's tail, where the last books are being handed to
the changelog): it collects the two
young generations (cheap: they hold only what was made since the last freeze) and then moves every
surviving object to the permanent generation (`gc.freeze`), which no collection walks. Objects that
die later are still freed by reference counting; only *cyclic* garbage among frozen objects would
wait. Judging and folding make none (the in-process bench `bench/judge_all.py` with a freeze after
every tick found 0 objects to collect in six ticks, and the frozen count stayed flat), but the rest
of the worker may (faust, aiokafka, asyncio): with a thaw only every 60 passes, the scale bench's RSS
peaked at 641-825 MB against 607-652 MB without freezing (BENCHMARKS.md, session 10; frozen garbage
is the likely cause, not a proven one). So every
`thaw_every` passes (default 6: about a minute at the 10 s tick) the permanent generation is thawed
and collected in full: one full pause of today's size that often, and any cyclic garbage is kept
about a minute at most.
"""

from __future__ import annotations

import gc


class HeapFreezer:
    """Freeze the heap after regular passes; a full collection every `thaw_every` of them (0: never freeze)."""

    def __init__(self, thaw_every: int) -> None:
        self.thaw_every = thaw_every
        self.passes = 0
        self.thawed = 0  # full collections made on a thaw

    def after_pass(self) -> None:
        if self.thaw_every <= 0:
            return
        self.passes += 1
        if self.passes % self.thaw_every == 0:
            gc.unfreeze()
            gc.collect()  # everything, once: reclaims cyclic garbage that was frozen alive
            self.thawed += 1
        else:
            gc.collect(1)  # the young generations, so that their garbage is not frozen
        gc.freeze()


__all__ = ["HeapFreezer"]
