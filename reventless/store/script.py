"""The SQL DDL script of a store, derived from declarations without a connection: the
system tables, one table per topic and one per read model, as ``CREATE ... IF NOT EXISTS``
statements for a dialect (``reventless infra synth`` writes them as ``schema.<dialect>.sql``).

Example::

    print(ddl_script("postgresql", [topic.definition], [directory]))
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.schema import CreateIndex, CreateTable

from ..topicdef import TopicDef
from . import tables
from .ddl import topic_table
from .readmodel import RowModel, read_model_table


def ddl_script(
    dialect: str, topics: Iterable[TopicDef], read_models: Iterable[RowModel[Any]]
) -> str:
    """The DDL for ``dialect`` (``sqlite`` or ``postgresql``): system tables, one table per
    topic, one per read model, each followed by its indexes."""
    eng = sa.create_mock_engine(f"{dialect}://", lambda *a, **k: None)
    d = eng.dialect
    parts = [f"-- reventless store DDL ({dialect}), derived from the App's declarations"]
    all_tables: list[sa.Table] = list(tables.metadata.sorted_tables)
    all_tables += [topic_table(t) for t in topics]
    all_tables += [read_model_table(m) for m in read_models]
    for table in all_tables:
        parts.append(str(CreateTable(table, if_not_exists=True).compile(dialect=d)).strip() + ";")
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            parts.append(
                str(CreateIndex(index, if_not_exists=True).compile(dialect=d)).strip() + ";"
            )
    return "\n\n".join(parts) + "\n"


__all__ = ["ddl_script", "read_model_table"]
