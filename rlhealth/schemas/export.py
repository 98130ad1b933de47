"""Export JSON Schema for every wire model, for consumers in other languages.

`python -m rlhealth.schemas.export` rewrites rlhealth/schemas/json/; a test fails when the
checked-in files are out of date.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from rlhealth.schemas.codec import DeadLetter
from rlhealth.schemas.events import EVENT_MODELS
from rlhealth.schemas.evidence import FindingRecord, MetricsPoint
from rlhealth.schemas.verdict import Verdict

JSON_DIR = Path(__file__).with_name("json")


def schema_documents() -> dict[str, str]:
    models: dict[str, type[BaseModel]] = dict(EVENT_MODELS)
    models["verdict"] = Verdict
    models["dead_letter"] = DeadLetter
    models["finding"] = FindingRecord
    models["metrics_point"] = MetricsPoint
    docs = {}
    for kind, model in sorted(models.items()):
        schema = model.model_json_schema(mode="validation")
        schema["$id"] = f"https://rlhealth.invalid/schemas/v1/{kind}.schema.json"
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        docs[f"{kind}.schema.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return docs


def write(directory: Path = JSON_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in schema_documents().items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for p in write():
        print(p)
