"""JSON Schemas of an App's topics, for API documents: each event type's fields (pydantic's
``model_json_schema`` of its model, in serialization mode, its ``$defs`` moved beside it),
the metadata columns every row starts with, and per topic the rows a broker message
carries. Pure: reads declarations only.

Personal fields (``rv.Personal``) are marked ``x-personal: true`` with
``x-personal-subject`` (the field naming the data subject, ``""`` for the aggregate id):
brokers and the store carry them sealed, as text.

Example::

    schemas = TopicSchemas("#/components/schemas/")
    row_ref = schemas.add(app.topics["Order"].definition)   # the topic's row schema
    schemas.schemas                                         # name -> JSON Schema
"""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from ..codec import TAGS_COLUMN
from ..codec.columns import META_FIELDS
from ..errors import SpecError
from ..personal import personal_fields
from ..topicdef import TopicDef

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")

#: What each metadata column means (``reventless.codec.columns.META_FIELDS``).
META_DOCS = {
    "_offset": "Position of the event in its topic (1, 2, ...; gapless).",
    "_row_idx": "Index of the event within the append that wrote it.",
    "_produced_at": "When the event was appended (UTC, microseconds).",
    "_aggregate_id": "The aggregate the event belongs to (null in DCB logs).",
    "_version": "The aggregate's version after this event (null outside aggregate logs).",
    "_type": "The event type (discriminates the topic's event union).",
    "_schema_version": "The event type's schema version when it was written.",
    "_msg_id": "The event id (UUIDv7), unique per event.",
    "_correlation_id": "Id shared by every event one request caused.",
    "_causation_id": "Id of the command or event that caused this one.",
    "_user": "Who caused the event.",
    "_service": "The service that appended the event.",
    "_ip": "Client address of the request that caused the event.",
    "_tenant": "Tenant of the event (null: global).",
    "_partition": "Topic partition: crc32(aggregate id) % partitions.",
    "_trace": "W3C trace context of the command that appended the event (traceparent, "
    "then a space and tracestate if any); null without tracing.",
}


def schema_key(*parts: str) -> str:
    """A component key (``[A-Za-z0-9_.-]``) for ``parts`` joined by dots."""
    return ".".join(_UNSAFE.sub("_", p) for p in parts)


def arrow_json_schema(t: pa.DataType) -> dict[str, Any]:
    """The JSON Schema of an Arrow type's values as JSON shows them."""
    if pa.types.is_boolean(t):
        return {"type": "boolean"}
    if pa.types.is_integer(t):
        return {"type": "integer"}
    if pa.types.is_floating(t):
        return {"type": "number"}
    if pa.types.is_decimal(t):
        return {"type": "string", "format": "decimal"}
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return {"type": "string"}
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return {"type": "string", "contentEncoding": "base64"}
    if pa.types.is_timestamp(t):
        return {"type": "string", "format": "date-time"}
    if pa.types.is_date(t):
        return {"type": "string", "format": "date"}
    if pa.types.is_time(t):
        return {"type": "string", "format": "time"}
    if pa.types.is_duration(t):
        return {"type": "string", "format": "duration"}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return {"type": "array", "items": arrow_json_schema(t.value_type)}
    if pa.types.is_struct(t):
        return {
            "type": "object",
            "properties": {t.field(i).name: _field(t.field(i)) for i in range(t.num_fields)},
        }
    if pa.types.is_map(t):
        return {"type": "object", "additionalProperties": arrow_json_schema(t.item_type)}
    if pa.types.is_dictionary(t):
        return arrow_json_schema(t.value_type)
    return {"description": f"Arrow type {t}"}


def _field(f: pa.Field) -> dict[str, Any]:
    s = arrow_json_schema(f.type)
    return {"anyOf": [s, {"type": "null"}]} if f.nullable else s


def metadata_schema() -> dict[str, Any]:
    """The metadata columns of every row (``META_FIELDS``), as one object schema."""
    props = {f.name: {**_field(f), "description": META_DOCS.get(f.name, "")} for f in META_FIELDS}
    return {
        "type": "object",
        "description": "The metadata columns every stored row (and every broker row) starts with.",
        "properties": props,
        "required": [f.name for f in META_FIELDS if not f.nullable],
    }


def _mark_personal(schema: dict[str, Any], model: type[BaseModel]) -> None:
    props = schema.get("properties", {})
    for name, subject in personal_fields(model):
        info = model.model_fields[name]
        prop = props.get(info.serialization_alias or info.alias or name)
        if prop is not None:
            prop["x-personal"] = True
            prop["x-personal-subject"] = subject or ""
            note = "Personal data: sealed (encrypted) in the store and on brokers."
            prop["description"] = f"{prop['description']} {note}" if "description" in prop else note


class TopicSchemas:
    """Collects the JSON Schemas of topics under one ``$ref`` prefix (``ref``)."""

    def __init__(self, ref: str = "#/components/schemas/") -> None:
        self.ref = ref
        #: Schema name -> JSON Schema (events, their nested models, rows, metadata).
        self.schemas: dict[str, Any] = {"EventMetadata": metadata_schema()}

    def _ref(self, key: str) -> dict[str, str]:
        return {"$ref": self.ref + key}

    def add(self, topic: TopicDef) -> dict[str, Any]:
        """Add ``topic``'s schemas; returns the schema of one of its rows (metadata
        columns and the fields of its event type, a ``oneOf`` per type)."""
        models = {
            etype: m for etype, m in topic.schema.event_types.items() if "@" not in etype
        }  # "X@retired" stand-ins keep old columns; no row has that type
        refs = self._models(topic.name, models)
        extra: dict[str, Any] = {}
        if topic.schema.tags_at is not None:
            extra[TAGS_COLUMN] = {
                "type": "array",
                "items": {"type": "string"},
                "description": "Tags of the event (DCB: queries select events by type and tag).",
            }
        variants = []
        for etype, ref in refs.items():
            fields = self.schemas[ref["$ref"].removeprefix(self.ref)]
            variants.append(
                {
                    "title": etype,
                    "description": f"One {etype} row: the metadata columns and the fields of "
                    f"{ref['$ref']}.",
                    "allOf": [
                        self._ref("EventMetadata"),
                        {
                            "type": "object",
                            "properties": {
                                **fields.get("properties", {}),
                                "_type": {"const": etype, "description": META_DOCS["_type"]},
                                **extra,
                            },
                            "required": fields.get("required", []),
                        },
                    ],
                }
            )
        if not models:  # an Arrow-schema topic: rows are its columns
            columns = {
                c.name: self._column(c.name, c.arrow_type, c.nullable, c.personal)
                for c in topic.schema.columns
            }
            variants.append(
                {
                    "allOf": [
                        self._ref("EventMetadata"),
                        {
                            "type": "object",
                            "properties": columns,
                            "required": [c.name for c in topic.schema.columns if not c.nullable],
                        },
                    ]
                }
            )
        row = variants[0] if len(variants) == 1 else {"oneOf": variants}
        key = schema_key(topic.name, "Row")
        self.schemas[key] = {
            **row,
            "title": f"{topic.name} row",
            "description": f"One event of topic {topic.name} ({topic.kind} topic).",
        }
        return self._ref(key)

    def _column(
        self, name: str, t: pa.DataType, nullable: bool, personal: str | None
    ) -> dict[str, Any]:
        s = _field(pa.field(name, t, nullable))
        if personal is not None:
            s |= {"x-personal": True, "x-personal-subject": personal}
        return s

    def _models(self, topic: str, models: dict[str, type[BaseModel]]) -> dict[str, dict[str, str]]:
        """The event types' schemas, named ``<topic>.<type>``; nested models keep pydantic's
        names (qualified by pydantic where two would clash)."""
        if not models:
            return {}
        keymap, top = models_json_schema(
            [(m, "serialization") for m in models.values()],
            ref_template=self.ref + "{model}",
        )
        defs: dict[str, Any] = top.get("$defs", {})
        out: dict[str, dict[str, str]] = {}
        renamed: dict[str, str] = {}
        for etype, model in models.items():
            name = keymap[(model, "serialization")]["$ref"].removeprefix(self.ref)
            key = schema_key(topic, etype)
            schema = defs.pop(name)
            _mark_personal(schema, model)
            schema.setdefault("title", etype)
            self.schemas[key] = schema
            out[etype] = self._ref(key)
            if name != key:
                renamed[name] = key
        text = json.dumps([defs, [self.schemas[k] for k in renamed.values()]])
        for name, key in renamed.items():  # a nested model that is an event type itself
            if f'"{self.ref}{name}"' in text:
                defs[name] = {"$ref": self.ref + key}
        for name, schema in defs.items():
            have = self.schemas.setdefault(name, schema)
            if have != schema:
                raise SpecError(
                    f"topic {topic!r}: another model named {name!r} has another schema; "
                    "rename one of them"
                )
        return out


__all__ = ["META_DOCS", "TopicSchemas", "arrow_json_schema", "metadata_schema", "schema_key"]
