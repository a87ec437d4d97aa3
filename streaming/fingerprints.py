"""What defines a flow, kept beside its checkpoint, so a changed definition never meets an old checkpoint unannounced.

A flow's definition is what it reads (its sources and lookups, and the schemas of the events behind them),
how it computes (its transform's and its declaration's code, its kind), the values of the pipeline
parameters it uses, and its version. A flow records its definition beside its checkpoints
(`<layer>/_checkpoints/<table>/<flow>/definition.json`, which outlives a lost checkpoint); when it starts
and its definition differs from the recorded one, it stops before reading anything with
`DefinitionChanged`: one sentence naming the table, what changed, and `lakehouse refresh TABLE`, which
rebuilds the table from the retained log, starts a new checkpoint and records the new definition. A flow
with nothing recorded (new, or from before definitions were recorded) records the current one.

Code is compared function by function (its source text): a change inside a helper that a transform calls is
not seen; bump the declaration's `version` for such a change.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from pyspark.sql import SparkSession

from lakehouse.schemas.pipeline import Param, active_pipeline
from lakehouse.streaming.lake_files import hadoop_fs

if TYPE_CHECKING:
    from lakehouse.streaming.context import FlowContext
    from lakehouse.streaming.flows import Flow

FILE = "definition.json"


class DefinitionChanged(RuntimeError):
    """A flow's definition differs from the one its checkpoint was started with; the message says how to refresh."""

    def __init__(self, table: str, changes: list[str]):
        self.table, self.changes = table, changes
        super().__init__(
            f"{table} is defined differently since its stream last ran ({'; '.join(changes)}): run `lakehouse "
            f"refresh {table}` to rebuild it from the retained log (its current rows stay readable by time travel).")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _code(fn: Any) -> str:
    """A function's source text, or its compiled code where the source cannot be read."""
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        return repr((code.co_code, code.co_consts)) if code is not None else getattr(fn, "__qualname__", repr(fn))


def canonical(value: Any) -> Any:
    """A declaration as plain, stable data: functions by their code, Params by name, dataclasses field by field."""
    if isinstance(value, Param):
        return {"param": value.name}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"kind": type(value).__name__,
                **{f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)
                   if f.name not in ("description", "question", "example", "expectations", "reads", "lookups")}}
    if callable(value):
        return {"code": _digest(_code(value))}
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)


def _schemas(flow: "Flow") -> dict[str, str]:
    """The schema of the events behind each silver table the flow reads (fields, rules, derived columns)."""
    by_silver = {s.silver_table.name: s for s in active_pipeline().sources}
    found = {}
    for table in (*flow.sources, *flow.lookups):
        source = by_silver.get(getattr(table, "name", ""))
        if source is None and table.name.startswith("dim_"):
            source = next((s for s in active_pipeline().sources if s.dimension_table and
                           s.dimension_table.name == table.name), None)
        if source is not None:
            schema = source.schema
            found[table.name] = _digest(json.dumps([schema.payload.json(), schema.rules, schema.derived]))
    if flow.schema is not None:  # a silver flow: the schema it parses against
        found["parse"] = _digest(json.dumps([flow.schema.payload.json(), flow.schema.rules, flow.schema.derived]))
    return found


def definition(flow: "Flow", ctx: "FlowContext") -> dict[str, Any]:
    """What defines the flow now, in parts a person can compare."""
    declaration = flow.declaration
    used = declaration.params() if declaration is not None else ()
    return {
        "flow": flow.name,
        "version": flow.version,
        "reads": [s.name for s in flow.sources],
        "lookups": [t.name for t in flow.lookups],
        "schemas": _schemas(flow),
        "code": _digest(json.dumps(canonical(declaration) if declaration is not None else
                                   [canonical(flow.transform), canonical(flow.aggregate)], sort_keys=True)),
        "params": {p.name: str(ctx.params.get(p.name, p.default)) for p in used},
    }


def changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """How `new` differs from `old`, one phrase per part."""
    out = []
    added = [s for s in new["reads"] + new["lookups"] if s not in old.get("reads", []) + old.get("lookups", [])]
    gone = [s for s in old.get("reads", []) + old.get("lookups", []) if s not in new["reads"] + new["lookups"]]
    if added:
        out.append(f"it now reads {', '.join(added)} too")
    if gone:
        out.append(f"it no longer reads {', '.join(gone)}")
    for name, digest in new["schemas"].items():
        if name in old.get("schemas", {}) and old["schemas"][name] != digest:
            out.append("the events it parses have another schema" if name == "parse"
                       else f"the events behind {name} have another schema")
    if old.get("code") != new["code"]:
        out.append("its transform or declaration changed")
    for name, value in new["params"].items():
        if name in old.get("params", {}) and old["params"][name] != value:
            out.append(f"LAKEHOUSE_{name.upper()} was {old['params'][name]}, is {value}")
        elif name not in old.get("params", {}):
            out.append(f"it now uses LAKEHOUSE_{name.upper()}")
    if old.get("version") != new["version"]:
        out.append(f"its version was {old.get('version')}, is {new['version']}")
    return out


def _read(spark: SparkSession, path: str) -> dict | None:
    fs, jpath = hadoop_fs(spark, path)
    if not fs.exists(jpath):
        return None
    stream = fs.open(jpath)
    try:
        reader = spark._jvm.java.io.BufferedReader(spark._jvm.java.io.InputStreamReader(stream, "UTF-8"))
        return json.loads(reader.readLine() or "null")
    finally:
        stream.close()


def _write(spark: SparkSession, path: str, found: Mapping[str, Any]) -> None:
    fs, jpath = hadoop_fs(spark, path)
    out = fs.create(jpath, True)
    try:
        out.write(json.dumps(found, sort_keys=True).encode())
    finally:
        out.close()


def definition_path(flow: "Flow", ctx: "FlowContext") -> str:
    """Beside the flow's checkpoint folders (one per version), so a lost checkpoint does not lose it."""
    return f"{flow.checkpoint(ctx).rstrip('/').rsplit('/', 1)[0]}/{FILE}"


def changed(spark: SparkSession, flow: "Flow", ctx: "FlowContext") -> list[str]:
    """How the flow's definition differs from the recorded one ([] if it does not, or none is recorded)."""
    recorded = _read(spark, definition_path(flow, ctx))
    return [] if recorded is None else changes(recorded, definition(flow, ctx))


def changed_on_disk(flow: "Flow", ctx: "FlowContext") -> list[str] | None:
    """`changed` without Spark (`lakehouse status`), on local disk or an object store; None when it cannot be read."""
    path = definition_path(flow, ctx)
    if "://" in path and not path.startswith("file://"):
        from lakehouse.streaming.health import _read   # pyarrow's client, as status reads the checkpoints

        try:
            text = _read(path)
        except FileNotFoundError:
            return []
        except OSError:
            return None
        return changes(json.loads(text or "null") or {}, definition(flow, ctx))
    local = Path(path.removeprefix("file://"))
    if not local.exists():
        return []
    return changes(json.loads(local.read_text() or "null") or {}, definition(flow, ctx))


def check_definition(spark: SparkSession, flow: "Flow", ctx: "FlowContext") -> None:
    """Refuse to run a flow defined otherwise than when it last ran; record its definition if none is."""
    now = definition(flow, ctx)
    path = definition_path(flow, ctx)
    recorded = _read(spark, path)
    if recorded is not None and (found := changes(recorded, now)):
        raise DefinitionChanged(flow.target.name, found)
    if recorded != now:
        _write(spark, path, now)


def record_definition(spark: SparkSession, flow: "Flow", ctx: "FlowContext") -> None:
    """Record the flow's current definition (a refresh rebuilt its table with it)."""
    _write(spark, definition_path(flow, ctx), definition(flow, ctx))
