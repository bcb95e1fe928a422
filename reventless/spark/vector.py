"""The vectorised path: read models declared with ``ColumnUpserts`` compiled to Spark SQL.

Each event contributes, per row column, "set to this value" (latest) or "add this"
(counter); one ``groupBy(key).agg(...)`` then gives every key's final row: a latest
column takes the value of the last event (in the fold's order: topic, then offset) that
sets it, a counter adds its sum to the column's default. No Python runs per event.
Only columns stored as SQL int, float, bool or text qualify, and no personal field
(``rv.Personal``: sealed in the log, opened only by Python); otherwise the rebuild uses
the Python path. (Float counters are summed in Spark's order: equal to the live sum up
to rounding.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..collect.component import ReadModel
from ..collect.upserts import RULE, UpsertRule
from .fold import TopicPlan, row_schema, schema_of

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

Compiled = Callable[[list["DataFrame"]], tuple["DataFrame", Callable[[], int]]]
_SPARK = {"int": "bigint", "float": "double", "bool": "boolean", "text": "string"}
_ARROW = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "text": pa.string()}


def _rules(plans: Sequence[TopicPlan]) -> list[dict[str, UpsertRule]] | None:
    out = []
    for p in plans:
        if "*" in p.handlers:
            return None
        rules = {t: getattr(s.fn, RULE, None) for t, s in p.handlers.items()}
        if any(r is None for r in rules.values()):
            return None
        out.append({t: r for t, r in rules.items() if r is not None})
    return out


def compile_upserts(model: ReadModel[Any], plans: Sequence[TopicPlan]) -> Compiled | None:
    """A function from the topics' frames to the final rows, or None if ``model`` is not
    made of column upserts over simple columns."""
    rules = _rules(plans)
    if rules is None:
        return None
    cols = row_schema(model).columns
    kinds = {c.name: c.sql_kind for c in cols}
    if any(
        k not in _SPARK or not c.arrow_type.equals(_ARROW[k]) for c in cols for k in [c.sql_kind]
    ):
        return None
    for p, by_type in zip(plans, rules, strict=True):
        schema = schema_of(p.recipe)
        sealed = {c.name for c in schema.columns if c.personal is not None}
        fields = {f.name: f.type for f in schema.arrow_schema if f.name not in sealed}
        for r in by_type.values():
            sources = [
                r.key,
                *r.latest.values(),
                *(s for s in r.add.values() if isinstance(s, str)),
            ]
            if any(not _simple(fields.get(s)) for s in sources):
                return None
    defaults = {
        n: f.get_default(call_default_factory=True)
        for n, f in model.row.model_fields.items()
        if n != model.key
    }

    def run(frames: list[DataFrame]) -> tuple[DataFrame, Callable[[], int]]:
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        per_topic = [
            _contributions(df, i, by_type, kinds, model.key)
            for i, (df, by_type) in enumerate(zip(frames, rules, strict=True))
        ]
        events = per_topic[0]
        for other in per_topic[1:]:
            events = events.unionByName(other)
        seen = Observation("reventless_vectorised")
        events = events.observe(seen, F.count(F.lit(1)).alias("events"))
        aggs: list[Column] = []
        for name, kind in kinds.items():
            if name == model.key:
                continue
            typ = _SPARK[kind]
            last = F.max(
                F.when(
                    F.col(f"s_{name}"), F.struct("_tidx", "_offset", F.col(f"v_{name}").alias("v"))
                )
            )
            default = F.lit(defaults[name]).cast(typ)
            latest = F.when(last.isNull(), default).otherwise(last["v"])
            if _adds(rules, name):
                base = latest if _sets(rules, name) else default
                total = F.coalesce(F.sum(F.col(f"a_{name}")), F.lit(0))
                aggs.append((base + total).cast(typ).alias(name))
            else:
                aggs.append(latest.cast(typ).alias(name))
        rows = events.groupBy("_k").agg(*aggs).withColumnRenamed("_k", model.key)
        out = rows.select(*[F.col(n) for n in kinds])
        return out, lambda: int(seen.get.get("events", 0))

    return run


def _simple(t: pa.DataType | None) -> bool:
    return t is not None and any(
        t.equals(x) for x in (pa.int64(), pa.int32(), pa.float64(), pa.bool_(), pa.string())
    )


def _sets(rules: list[dict[str, UpsertRule]], col: str) -> bool:
    return any(col in r.latest for by_type in rules for r in by_type.values())


def _adds(rules: list[dict[str, UpsertRule]], col: str) -> bool:
    return any(col in r.add for by_type in rules for r in by_type.values())


def _contributions(
    df: DataFrame, tidx: int, by_type: dict[str, UpsertRule], kinds: Mapping[str, str], key: str
) -> DataFrame:
    """Per event: its row key and, per column, whether/what it sets and what it adds."""
    from pyspark.sql import functions as F

    def case(pick: Callable[[UpsertRule], Column | None], typ: str) -> Column:
        expr: Column | None = None
        for etype, rule in by_type.items():
            val = pick(rule)
            if val is None:
                continue
            cond = F.col("_type") == etype
            expr = F.when(cond, val) if expr is None else expr.when(cond, val)
        return (expr if expr is not None else F.lit(None)).cast(typ)

    parts = [
        case(lambda r: F.col(r.key), _SPARK[kinds[key]]).alias("_k"),
        F.lit(tidx).alias("_tidx"),
        F.col("_offset"),
    ]
    for name, kind in kinds.items():
        if name == key:
            continue
        typ = _SPARK[kind]
        sets = [t for t, r in by_type.items() if name in r.latest]
        parts.append(F.col("_type").isin(sets).alias(f"s_{name}"))
        parts.append(case(partial(_latest, name=name), typ).alias(f"v_{name}"))
        parts.append(case(partial(_added, name=name), typ).alias(f"a_{name}"))
    return df.where(F.col("_type").isin(list(by_type))).select(*parts)


def _src(s: str | int | float) -> Column:
    from pyspark.sql import functions as F

    return F.col(s) if isinstance(s, str) else F.lit(s)


def _latest(rule: UpsertRule, name: str) -> Column | None:
    return _src(rule.latest[name]) if name in rule.latest else None


def _added(rule: UpsertRule, name: str) -> Column | None:
    return _src(rule.add[name]) if name in rule.add else None
