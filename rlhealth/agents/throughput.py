"""Throughput floors for vLLM decode, looked up by active parameters and GPU, scaled by HBM bandwidth.

Pure: the table arrives already parsed (see rlhealth.rules.loader.load_throughput).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FloorRow:
    label: str
    active_b_max: float
    single_stream_tps: tuple[float, float]
    healthy_aggregate_tps: tuple[float, float]
    awful_below_tps: float


@dataclass(frozen=True, slots=True)
class Floor:
    """The expectation for one engine of this job: below `awful_tps` at full batch is a red flag."""

    label: str
    awful_tps: float  # at full batch, scaled to this GPU
    healthy_low_tps: float
    single_stream_low_tps: float
    bandwidth_scale: float
    full_batch_running: int

    def floor_for(self, running: float, waiting: float) -> float:
        """The floor at this batch: a queue (waiting > 0) means the engine should be at full batch."""
        if waiting > 0:
            return self.awful_tps
        share = min(1.0, max(running, 0.0) / self.full_batch_running)
        return max(self.awful_tps * share, 0.0)


@dataclass(frozen=True)
class ThroughputTable:
    id: str
    version: str
    reference_gpu: str
    full_batch_running: int
    rows: tuple[FloorRow, ...]
    hbm_tbps: dict[str, float]

    @classmethod
    def from_dict(cls, data: dict) -> ThroughputTable:
        t = data["table"]
        rows = tuple(
            sorted(
                (
                    FloorRow(
                        label=r["label"],
                        active_b_max=float(r["active_b_max"]),
                        single_stream_tps=tuple(float(x) for x in r["single_stream_tps"]),  # type: ignore[arg-type]
                        healthy_aggregate_tps=tuple(float(x) for x in r["healthy_aggregate_tps"]),  # type: ignore[arg-type]
                        awful_below_tps=float(r["awful_below_tps"]),
                    )
                    for r in data["row"]
                ),
                key=lambda r: r.active_b_max,
            )
        )
        return cls(
            id=t["id"],
            version=str(t["version"]),
            reference_gpu=t["reference_gpu"],
            full_batch_running=int(t.get("full_batch_running", 32)),
            rows=rows,
            hbm_tbps={k.lower(): float(v) for k, v in data.get("hbm_tbps", {}).items()},
        )

    def bandwidth(self, gpu: str | None) -> float | None:
        if not gpu:
            return None
        g = gpu.lower().replace("_", "-")
        for name in sorted(self.hbm_tbps, key=len, reverse=True):
            if name in g or name.replace("-", " ") in g:
                return self.hbm_tbps[name]
        return None

    def floor(self, active_params_b: float | None, gpu: str | None) -> Floor | None:
        """None when the model size is unknown: then only the shape (tok/s > 0, Waiting ~ 0) is judged."""
        if active_params_b is None or active_params_b <= 0:
            return None
        row = next((r for r in self.rows if active_params_b <= r.active_b_max), None)
        if row is None:
            # Larger than the table: decode scales ~1/active bytes from the last row.
            last = self.rows[-1]
            k = last.active_b_max / active_params_b
            row = FloorRow(f">{last.active_b_max:g}B active (extrapolated)", active_params_b,
                           (last.single_stream_tps[0] * k, last.single_stream_tps[1] * k),
                           (last.healthy_aggregate_tps[0] * k, last.healthy_aggregate_tps[1] * k),
                           last.awful_below_tps * k)
        ref_bw = self.bandwidth(self.reference_gpu) or 1.0
        bw = self.bandwidth(gpu)
        scale = (bw / ref_bw) if bw else 1.0
        return Floor(
            label=row.label,
            awful_tps=row.awful_below_tps * scale,
            healthy_low_tps=row.healthy_aggregate_tps[0] * scale,
            single_stream_low_tps=row.single_stream_tps[0] * scale,
            bandwidth_scale=scale,
            full_batch_running=self.full_batch_running,
        )
