"""The wire contract without Kafka: validation, the codec's error reasons, JSON Schema files, imports."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone

import orjson
import pytest

from rlhealth import schemas as s
from rlhealth.schemas import EVENT_MODELS, DeadLetter, EventDecodeError, decode_event, decode_verdict, encode
from rlhealth.schemas.export import JSON_DIR, schema_documents


def _as_dict(event) -> dict:
    return orjson.loads(encode(event))


def _reason(payload) -> str:
    with pytest.raises(EventDecodeError) as info:
        decode_event(payload)
    return info.value.reason


# ---------------------------------------------------------------- valid events


def test_samples_cover_every_event_kind(sample_events):
    assert sorted(e.kind for e in sample_events) == sorted(EVENT_MODELS)


def test_every_kind_round_trips_through_the_codec(sample_events):
    for event in sample_events:
        payload = encode(event)
        assert isinstance(payload, bytes)
        decoded = decode_event(payload)
        assert type(decoded) is EVENT_MODELS[event.kind]
        assert decoded == event
        # the wire form carries kind and version, so a consumer can route before validating
        obj = orjson.loads(payload)
        assert obj["kind"] == event.kind and obj["schema_version"] == 1


def test_every_kind_validates_from_a_minimal_dict():
    minimal = {
        "log_batch": {"lines": []},
        "gpu_poll": {"host": "h"},
        "trial": {"phase": "started", "trial_name": "t"},
        "job_state": {"state": "pending"},
        "job_spec": {},
        "heartbeat": {"shipper": "s"},
        "job_ended": {},
    }
    assert sorted(minimal) == sorted(EVENT_MODELS)
    for kind, fields in minimal.items():
        obj = {"schema_version": 1, "kind": kind, "job_id": "j", "event_time": "2026-01-01T00:00:00Z", **fields}
        event = decode_event(orjson.dumps(obj))
        assert event.kind == kind and event.job_id == "j"


def test_naive_and_offset_times_become_utc():
    ev = decode_event(b'{"schema_version":1,"kind":"job_ended","job_id":"j","event_time":"2026-01-01T02:00:00+02:00"}')
    assert ev.event_time.utcoffset().total_seconds() == 0 and ev.event_time.hour == 0
    ev = decode_event(b'{"schema_version":1,"kind":"job_ended","job_id":"j","event_time":"2026-01-01T02:00:00"}')
    assert ev.event_time.utcoffset().total_seconds() == 0 and ev.event_time.hour == 2


def test_na_gpu_fields_are_accepted_as_none():
    obj = {
        "schema_version": 1, "kind": "gpu_poll", "job_id": "j", "event_time": "2026-01-01T00:00:00Z", "host": "h",
        "gpus": [{"index": 0, "uuid": None, "util_pct": None, "mem_used_mib": None, "mem_total_mib": None,
                  "power_w": None}],
        "apps": [{"gpu_uuid": None, "pid": None, "process_name": None, "used_mib": None}],
    }
    ev = decode_event(orjson.dumps(obj))
    g = ev.gpus[0]
    assert (g.util_pct, g.mem_used_mib, g.mem_total_mib, g.power_w) == (None, None, None, None)
    assert ev.apps[0].used_mib is None
    assert decode_event(encode(ev)) == ev


# ---------------------------------------------------------------- rejections


def test_extra_top_level_field_is_rejected_for_every_kind(sample_events):
    for event in sample_events:
        obj = _as_dict(event)
        obj["surprise"] = 1
        with pytest.raises(EventDecodeError) as info:
            decode_event(orjson.dumps(obj))
        assert info.value.reason == "invalid_fields", event.kind
        assert "surprise" in info.value.detail


def test_extra_nested_field_is_rejected(sample_events):
    obj = _as_dict(sample_events[0])
    obj["source"]["colour"] = "blue"
    assert _reason(orjson.dumps(obj)) == "invalid_fields"
    gpu = _as_dict(next(e for e in sample_events if e.kind == "gpu_poll"))
    gpu["gpus"][0]["fan_speed_pct"] = 80  # not a GpuReading field
    assert _reason(orjson.dumps(gpu)) == "invalid_fields"


def test_models_reject_extra_fields_directly():
    with pytest.raises(ValueError):
        s.JobEnded(job_id="j", event_time="2026-01-01T00:00:00Z", colour="blue")


@pytest.mark.parametrize("version", [2, 0, "1", None, 1.5])
def test_unsupported_schema_version(sample_events, version):
    obj = _as_dict(sample_events[0])
    obj["schema_version"] = version
    assert _reason(orjson.dumps(obj)) == "unsupported_schema_version"


def test_missing_schema_version(sample_events):
    obj = _as_dict(sample_events[0])
    del obj["schema_version"]
    assert _reason(orjson.dumps(obj)) == "unsupported_schema_version"


@pytest.mark.parametrize("kind", ["log_line", "", None, 7, "LOG_BATCH", "dead_letter"])
def test_unknown_kind(sample_events, kind):
    obj = _as_dict(sample_events[0])
    obj["kind"] = kind
    assert _reason(orjson.dumps(obj)) == "unknown_kind"


def test_truncated_json_for_every_kind(sample_events):
    for event in sample_events:
        payload = encode(event)
        for cut in (1, len(payload) // 2, len(payload) - 1):
            assert _reason(payload[:cut]) == "invalid_json", (event.kind, cut)


@pytest.mark.parametrize("payload", [
    b"\xff\xfe\x00{}",
    b'{"schema_version":1,"kind":"job_ended","job_id":"\xc3\x28","event_time":"2026-01-01T00:00:00Z"}',
    "caf\u00e9".encode("latin-1"),
])
def test_non_utf8_bytes(payload):
    assert _reason(payload) == "invalid_json"


@pytest.mark.parametrize("payload,reason", [
    (b"", "invalid_json"),
    (b"null", "not_an_object"),
    (b"[1, 2]", "not_an_object"),
    (b'"log_batch"', "not_an_object"),
])
def test_not_an_object(payload, reason):
    assert _reason(payload) == reason


def test_invalid_field_values_give_invalid_fields(sample_events):
    obj = _as_dict(next(e for e in sample_events if e.kind == "log_batch"))
    obj["offsets"] = obj["offsets"][:-1]  # columns must line up
    assert _reason(orjson.dumps(obj)) == "invalid_fields"
    obj = _as_dict(next(e for e in sample_events if e.kind == "trial"))
    obj["phase"] = "exploded"
    assert _reason(orjson.dumps(obj)) == "invalid_fields"
    obj = _as_dict(sample_events[0])
    obj["job_id"] = ""
    assert _reason(orjson.dumps(obj)) == "invalid_fields"


def test_expected_kind_mismatch(sample_events):
    with pytest.raises(EventDecodeError) as info:
        decode_event(encode(sample_events[0]), expected_kind="gpu_poll")
    assert info.value.reason == "wrong_kind_for_topic"


def test_decode_error_is_a_value_error_with_reason_in_message():
    with pytest.raises(ValueError, match="^invalid_json: "):
        decode_event(b"{")


# ---------------------------------------------------------------- dead letters and verdicts


def test_dead_letter_keeps_original_bytes_and_provenance():
    original = b'\xff{"broken'
    dl = DeadLetter.build(original, "invalid_json", "x" * 5000, key=b"job-1", topic="rlhealth.logs",
                          partition=3, offset=17, job_id="job-1")
    back = DeadLetter.model_validate_json(encode(dl))
    assert back.original() == original
    assert base64.b64decode(back.original_key_b64) == b"job-1"
    assert (back.source_topic, back.source_partition, back.source_offset, back.reason) == ("rlhealth.logs", 3, 17, "invalid_json")
    assert len(back.detail) == 2000  # bounded
    assert back.kind == "dead_letter"


@pytest.mark.parametrize("at", [
    datetime(2026, 12, 2, 10, 42, 40, 829943, tzinfo=UTC),
    datetime(2026, 12, 2, 10, 42, 40, tzinfo=UTC),  # no microseconds: both must leave them out
    datetime(2026, 12, 2, 10, 42, 40, 7),  # naive: taken as UTC
    datetime(2026, 12, 2, 5, 42, 40, 7, tzinfo=timezone(timedelta(hours=-5))),  # converted to UTC
])
@pytest.mark.parametrize("fields", [
    {},
    {"key": b"k\xff", "topic": "rlhealth.logs", "partition": 1, "offset": 2, "job_id": "j\u00e9", "stage": "core"},
])
def test_dead_letter_bytes_without_the_model_equal_the_models_encoding(at, fields):
    from rlhealth.schemas.codec import dead_letter_json

    original = b'\xff{"broken\x00'
    want = encode(DeadLetter.build(original, "invalid_json", "d" * 3000, received_at=at, **fields))
    assert dead_letter_json(original, "invalid_json", "d" * 3000, received_at=at, **fields) == want


@pytest.mark.parametrize(("payload", "reason"), [
    (b'{"schema_version": 1, "kind": "log_batch", "lines": ["a", "b"', "invalid_json"),  # truncated
    (b'{"a": 1} trailing', "invalid_json"),
    (b'{"schema_version": 7}  \n', "unsupported_schema_version"),  # whitespace after the object is JSON
    (b"[1, 2]", "not_an_object"),
])
def test_an_object_not_ending_in_a_brace_is_invalid_json_like_the_parser_says(payload, reason):
    assert _reason(payload) == reason


def test_verdict_round_trip_and_version_check():
    v = s.Verdict(job_id="j", verdict="KILL", confidence="high", job_status="WEDGED", reasoning="stalled",
                  produced_at="2026-01-01T00:00:00Z", seq=3)
    assert decode_verdict(encode(v)) == v
    obj = _as_dict(v)
    obj["schema_version"] = 2
    with pytest.raises(EventDecodeError) as info:
        decode_verdict(orjson.dumps(obj))
    assert info.value.reason == "unsupported_schema_version"


# ---------------------------------------------------------------- JSON Schema files


def test_json_schema_files_are_in_sync_with_the_models():
    docs = schema_documents()
    on_disk = {p.name for p in JSON_DIR.glob("*.schema.json")}
    assert on_disk == set(docs), "run `rlhealth schemas export`"
    expected_names = {f"{k}.schema.json" for k in EVENT_MODELS} | {
        "verdict.schema.json", "dead_letter.schema.json", "finding.schema.json", "metrics_point.schema.json"}
    assert set(docs) == expected_names
    for name, text in docs.items():
        assert (JSON_DIR / name).read_text(encoding="utf-8") == text, f"{name} is stale: run `rlhealth schemas export`"


def test_json_schemas_forbid_additional_properties():
    for name, text in schema_documents().items():
        schema = json.loads(text)
        assert schema.get("additionalProperties") is False, name


# ---------------------------------------------------------------- import hygiene


def test_schemas_and_catalogue_import_no_io_framework():
    code = (
        "import sys\n"
        "import rlhealth.schemas, rlhealth.schemas.export, rlhealth.streams, rlhealth.schemas.topics\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'faust', 'mode', 'aiokafka', 'kafka', 'duckdb', 'prometheus_client', 'kubernetes', 'click'})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"imported: {out.stdout.strip()}"
