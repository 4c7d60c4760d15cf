"""The JSON documents' validator: docs/schemas/, with every $ref resolved (the boot, rebase and schema tests share it)."""

from __future__ import annotations

import json

from jsonschema import Draft202012Validator

from support.qtools import REPO

SCHEMAS = REPO / "docs" / "schemas"


def schema(command: str) -> dict:
    return json.loads((SCHEMAS / f"{command}.schema.json").read_text())


def validator(command: str, part: str | None = None) -> Draft202012Validator:
    doc = schema(command)
    if part is not None:  # one branch of the schema, keeping $defs for its references
        doc = {**doc["$defs"][part], "$defs": doc["$defs"]}
    Draft202012Validator.check_schema(doc)
    return Draft202012Validator(doc)
