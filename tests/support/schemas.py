"""docs/schemas/: each command's JSON Schema, and a validator for it or one of its branches."""

from __future__ import annotations

import json
from pathlib import Path

from jsonschema import Draft202012Validator

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"


def schema_names() -> set[str]:
    """The documents docs/schemas describes: `audit` for audit.schema.json."""
    return {p.name.removesuffix(".schema.json") for p in SCHEMAS.glob("*.schema.json")}


def schema(command: str) -> dict:
    return json.loads((SCHEMAS / f"{command}.schema.json").read_text())


def validator(command: str, part: str | None = None) -> Draft202012Validator:
    doc = schema(command)
    if part is not None:  # one branch of the schema, keeping $defs for its references
        doc = {**doc["$defs"][part], "$defs": doc["$defs"]}
    Draft202012Validator.check_schema(doc)
    return Draft202012Validator(doc)
