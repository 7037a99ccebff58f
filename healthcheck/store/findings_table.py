"""The full findings table of a run, PASS included: ``findings.table.json.gz``, columnar and dictionary-encoded.

    write_table(run_dir, results.findings())      # at the end of a run, beside results.json
    by_host = read_table(run_dir)                 # {"gpu001": [Finding, ...], ...}
    frame = findings_frame(run_dir)               # pandas: one row per finding
    frame.groupby(["host", "status"], observed=True).size()

Format ``healthcheck.findings-table/1`` (docs/results-schema.md): a gzip'd JSON object whose
columns (``model.FINDING_FIELDS``) each list their distinct values once plus one code per row, the
codes as base64 little-endian uint32. At 10,000 hosts the 1.2 M findings repeat a few thousand
checks, components, units and remedies, so the table is a small fraction of the same findings as
JSON objects, and it loads without building a dict per finding.
"""

from __future__ import annotations

import base64
import gzip
import json
from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import groupby
from operator import attrgetter
from pathlib import Path
from typing import Any

from healthcheck.core.model import FINDING_FIELDS, Finding, Status, findings_from_columns, json_safe
from healthcheck.store.jsoncodec import loads as jsonloads

TABLE = "findings.table.json.gz"
SCHEMA = "healthcheck.findings-table/1"
_MIXED = frozenset({"value", "expected"})  # JSON scalars of any type: True, 1 and 1.0 are three values
_OBSERVE = attrgetter("observe")
_STATUS_TEXT = attrgetter("status._value_")  # Status.value, read without the Enum property's Python call
OBSERVE = "observe"   # Finding.observe, an optional column (observe-only checks; tables written before it lack it)


class TableError(ValueError):
    pass


def _encode(values: Sequence[Any], mixed: bool) -> dict[str, Any]:
    """One column: its distinct values in order of first appearance, and one uint32 code per row.
    Done with C-level passes (``dict.fromkeys``, ``map``): a fleet's column has a row per finding."""
    # mixed: True, 1 and 1.0 are three values; the (type, value) keys are streamed twice, never listed per row
    def keys() -> Iterable[Any]:
        return zip(map(type, values), values, strict=True) if mixed else values
    index = {key: i for i, key in enumerate(dict.fromkeys(keys()))}
    codes = array("I", map(index.__getitem__, keys()))
    distinct = [json_safe(v) for _, v in index] if mixed else list(index)  # a NaN value is null (strict JSON)
    if codes.itemsize != 4:  # pragma: no cover - "I" is 4 bytes on every platform we run on
        raise TableError("uint32 codes need a 4-byte array('I')")
    if array("I", [1]).tobytes()[0] != 1:  # pragma: no cover - big-endian hosts
        codes.byteswap()
    return {"values": distinct, "codes": base64.b64encode(codes.tobytes()).decode("ascii")}


def _decode_codes(column: dict[str, Any], rows: int) -> array:
    codes = array("I")
    codes.frombytes(base64.b64decode(column["codes"]))
    if array("I", [1]).tobytes()[0] != 1:  # pragma: no cover - big-endian hosts
        codes.byteswap()
    if len(codes) != rows or (rows and max(codes) >= len(column["values"])):
        raise TableError(f"column has {len(codes)} codes for {rows} rows or a code past its values")
    return codes


def write_table(run_dir: Path, findings: Iterable[Finding]) -> Path:
    """Write every finding as the columnar table (atomically: temp file + rename), one column at a time into
    the compressed file: a fleet's table is never held whole as text."""
    findings = list(findings)
    path = Path(run_dir) / TABLE
    tmp = path.with_name(path.name + ".tmp")
    try:
        with tmp.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=5, mtime=0) as out:
            out.write(f'{{"schema":{json.dumps(SCHEMA)},"rows":{len(findings)},"columns":{{'.encode())
            for i, (name, column) in enumerate(_columns_of(findings)):
                out.write(f'{"," if i else ""}{json.dumps(name)}:{json.dumps(column, separators=(",", ":"))}'.encode())
            out.write(b"}}")
        tmp.replace(path)
    except BaseException:  # a full disk leaves no half-written temp file behind
        tmp.unlink(missing_ok=True)
        raise
    return path


def _columns_of(findings: Sequence[Finding]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each column encoded in turn (``attrgetter``: never a tuple per row), ``observe`` last (optional:
    tables written before it lack it)."""
    for name in FINDING_FIELDS:
        if name == "status":  # as text: hashing a Status (an Enum) is a Python call per row
            yield name, _encode(list(map(_STATUS_TEXT, findings)), False)
        else:
            yield name, _encode(list(map(attrgetter(name), findings)), name in _MIXED)
    yield OBSERVE, _encode(list(map(_OBSERVE, findings)), False)


def _load(run_dir: Path) -> tuple[int, dict[str, Any]]:
    path = Path(run_dir) / TABLE
    try:
        doc = jsonloads(gzip.decompress(path.read_bytes()))
    except (OSError, EOFError, ValueError) as exc:
        raise TableError(f"{path}: {exc}") from exc
    return _columns(doc, path)


def _columns(doc: Any, path: Path | str) -> tuple[int, dict[str, Any]]:
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise TableError(f"{path}: schema {doc.get('schema') if isinstance(doc, dict) else None!r}, "
                         f"expected {SCHEMA!r}")
    columns = doc.get("columns") or {}
    missing = [name for name in FINDING_FIELDS if name not in columns]
    if missing:
        raise TableError(f"{path}: missing columns {', '.join(missing)}")
    return int(doc.get("rows") or 0), columns


def read_table(run_dir: Path) -> dict[str, list[Finding]]:
    """Every finding by host, in the order written. Raises ``TableError`` on a missing or bad file."""
    return _findings(*_load(run_dir))


def _findings(rows: int, columns: dict[str, Any]) -> dict[str, list[Finding]]:
    cells, _ = _cells(rows, columns)
    built = findings_from_columns(cells)  # FINDING_FIELDS order is Finding's, ``observe`` last
    out: dict[str, list[Finding]] = {}
    at = 0
    for host, run in groupby(cells[0]):  # a host's findings are one run of rows (in C: no loop per row)
        rows_of_host = len(list(run))
        out.setdefault(host, []).extend(built[at:at + rows_of_host])
        at += rows_of_host
    return out


def _cells(rows: int, columns: dict[str, Any]) -> tuple[list[list[Any]], list[list[Any]]]:
    """Each field's cells (``FINDING_FIELDS`` order, then ``observe``), and each field's distinct values."""
    decoded = []
    for name in FINDING_FIELDS:
        values = columns[name]["values"]
        if name == "status":
            try:
                values = [Status(v) for v in values]
            except ValueError as exc:
                raise TableError(f"status column: {exc}") from exc
        decoded.append((values, _decode_codes(columns[name], rows)))
    observe = (columns[OBSERVE]["values"], _decode_codes(columns[OBSERVE], rows)) if OBSERVE in columns else None
    # Column by column (C-level ``map``): no Python loop per cell.
    cells = [list(map(values.__getitem__, codes)) for values, codes in decoded]
    marks = list(map(bool, map(observe[0].__getitem__, observe[1]))) if observe is not None else [False] * rows
    distinct = [values for values, _ in decoded] + [observe[0] if observe is not None else [False]]
    return [*cells, marks], distinct


def table_cells(text: bytes, where: str) -> tuple[list[list[Any]], list[list[Any]]]:
    """A table already read and decompressed (a node bundle's, read as untrusted input by the caller) as
    cell columns (``FINDING_FIELDS`` order, then ``observe``) and each column's distinct values, no finding
    built: a merge checks the values' types once per distinct value and passes the cells on. ``TableError``
    naming ``where`` when it is not a table."""
    try:
        doc = jsonloads(text)
    except (ValueError, RecursionError) as exc:
        raise TableError(f"{where}: {exc}") from exc
    try:
        return _cells(*_columns(doc, where))
    except (KeyError, TypeError, ValueError, IndexError) as exc:  # a column of the wrong shape
        raise TableError(f"{where}: malformed column: {exc}") from exc


def findings_frame(run_dir: Path) -> Any:
    """The table as a pandas DataFrame: ``value``/``expected`` as objects, every other column categorical."""
    import numpy as np
    import pandas as pd

    rows, columns = _load(run_dir)
    data: dict[str, Any] = {}
    for name in FINDING_FIELDS:
        values = columns[name]["values"]
        codes = np.frombuffer(base64.b64decode(columns[name]["codes"]), dtype="<u4").astype(np.int64)
        if len(codes) != rows:
            raise TableError(f"column {name} has {len(codes)} codes for {rows} rows")
        if name in _MIXED:
            data[name] = np.array(values, dtype=object)[codes] if values else np.array([None] * rows, dtype=object)
            continue
        keep = [v for v in values if v is not None]
        remap = np.full(len(values), -1, dtype=np.int64)
        remap[[i for i, v in enumerate(values) if v is not None]] = np.arange(len(keep))
        data[name] = pd.Categorical.from_codes(remap[codes], categories=keep)
    return pd.DataFrame(data)
