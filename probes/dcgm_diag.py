"""Pure parsers for ``dcgmi diag``: both JSON shapes (``-j``) and the text table.

    parse_dcgmi_diag(text)   # JSON when the output holds a '{', else the boxed text table
    # -> DiagReport(format="json-4", dcgm_version="4.2.3", tests=(DiagTest(category="Deployment",
    #        name="software", status="fail", results=(DiagEntityResult(entity="gpu0", ...),)),))

JSON shapes (DCGM source ``nvvs/include/JsonResult.hpp``, ``dcgm_diag_schema.json``):
- 3.x: ``{"DCGM GPU Diagnostic": {"version", "Driver Version Detected", "runtime_error",
  "test_categories": [{"category", "tests": [{"name", "results": [{"gpu_ids": "0,1"|0, "status": "PASS",
  "warnings": ["text" | {"warning", "error_id", "error_category", "error_severity"}], "info": [...]}]}]}]}}``;
  ``null`` entries may appear in ``tests`` and ``results`` and are skipped.
- 4.x: ``{"DCGM Diagnostic": {"test_categories": [... "results": [{"entity_group": "GPU", "entity_id": 0,
  "status": "Fail", "warnings": [...]}], "test_summary": {"status", "info"}]}, "entity_groups": [...],
  "metadata": {"version", "Driver Version Detected"}}``.
Warnings' ``error_severity`` numbers changed between releases, so they are mapped to names by version.
Text lines before the JSON document (``WARNING: ...``) are skipped; a document that does not parse raises
ParseError.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from healthcheck.core.spec import ParseError

# dcgm_errors.h dcgmErrorSeverity_t: renumbered after 3.1.x (NONE added at 0, TRIAGE/CONFIG/RESET appended).
SEVERITY_NAMES_NEW = {0: "NONE", 1: "MONITOR", 2: "ISOLATE", 3: "UNKNOWN", 4: "TRIAGE", 5: "CONFIG",
                      6: "RESET"}
SEVERITY_NAMES_OLD = {0: "MONITOR", 1: "ISOLATE", 2: "UNKNOWN"}
_STATUS = {"pass": "pass", "passed": "pass", "fail": "fail", "failed": "fail", "error": "fail",
           "warn": "warn", "warning": "warn", "skip": "skip", "skipped": "skip", "not run": "skip"}


@dataclass(frozen=True)
class DiagWarning:
    message: str
    error_id: int | None = None
    error_category: int | None = None
    severity: str | None = None       # NONE, MONITOR, ISOLATE, UNKNOWN, TRIAGE, CONFIG, RESET
    severity_code: int | None = None


@dataclass(frozen=True)
class DiagEntityResult:
    entity: str                        # "gpu3", "gpu0,gpu1" (3.x deployment) or "all" (text "- All")
    status: str                        # pass, fail, warn, skip, or the tool's word when unknown
    warnings: tuple[DiagWarning, ...] = ()
    info: tuple[str, ...] = ()


@dataclass(frozen=True)
class DiagTest:
    category: str
    name: str
    status: str                        # test summary (4.x, text) or worst entity status (3.x)
    results: tuple[DiagEntityResult, ...] = ()
    warnings: tuple[DiagWarning, ...] = ()   # test-level (text "Warning"/"Error" rows)
    info: tuple[str, ...] = ()


@dataclass(frozen=True)
class DiagReport:
    format: str                        # json-3, json-4, text
    tests: tuple[DiagTest, ...]
    dcgm_version: str | None = None
    driver_version: str | None = None
    runtime_error: str | None = None


# The lowest ``dcgmi diag -r`` level that runs each test (DCGM diagnostics docs, "Run Levels"; the corpus
# files of each level agree): level 1 is the deployment/software checks, 2 adds PCIe and GPU memory, 3 the
# stress tests (Diagnostic, Targeted Stress/Power, SM Stress, Memory Bandwidth, EUD), 4 memtest and pulse.
_TEST_LEVEL = {"pcie": 2, "gpu_memory": 2, "memory": 2, "diagnostic": 3, "targeted_stress": 3,
               "targeted_power": 3, "sm_stress": 3, "memory_bandwidth": 3, "eud_test": 3, "eud": 3,
               "memtest": 4, "memory_test": 4, "pulse_test": 4, "input_edpp": 4}
_STRESS_CATEGORIES = {"stress", "performance"}


def report_level(report: DiagReport) -> int | None:
    """The diag level the output shows it ran (from its tests), None without tests. A published snippet
    shows only some tests: the level is then a lower bound."""
    if not report.tests:
        return None
    levels = [max(_TEST_LEVEL.get(re.sub(r"[^a-z0-9]+", "_", t.name.lower()).strip("_"), 1),
                  3 if t.category.lower() in _STRESS_CATEGORIES else 1) for t in report.tests]
    return max(levels)


def severity_name(code: Any, version: str | None) -> str | None:
    """Numeric ``error_severity`` -> name, using the table of the DCGM release that wrote it."""
    if not isinstance(code, int):
        return None
    table = SEVERITY_NAMES_OLD if _older_than(version, (3, 2)) else SEVERITY_NAMES_NEW
    return table.get(code, f"code {code}")


def _older_than(version: str | None, bound: tuple[int, int]) -> bool:
    m = re.match(r"^\s*(\d+)\.(\d+)", version or "")
    return bool(m) and (int(m[1]), int(m[2])) < bound


def norm_status(word: Any) -> str:
    text = str(word or "").strip().lower()
    return _STATUS.get(text, text or "unknown")


def parse_dcgmi_diag(text: str) -> DiagReport:
    """``dcgmi diag -r N [-j]`` output of DCGM 2.x-4.x, JSON or text (see module docstring)."""
    start = re.search(r"^\s*\{", text, re.MULTILINE)
    if start is not None:
        return parse_dcgmi_diag_json(text[start.start():])
    return parse_dcgmi_diag_text(text)


def parse_dcgmi_diag_json(text: str) -> DiagReport:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"dcgmi diag JSON does not parse: {exc}", text[max(0, exc.pos - 80):exc.pos + 80]) \
            from exc
    except RecursionError:  # thousands of nested brackets: not dcgmi's output
        raise ParseError("dcgmi diag JSON is nested too deeply", text[:200]) from None
    if not isinstance(doc, dict):
        raise ParseError("dcgmi diag JSON is not an object", text)
    key = "DCGM Diagnostic" if "DCGM Diagnostic" in doc else "DCGM GPU Diagnostic"
    root = doc.get(key)
    if not isinstance(root, dict):
        raise ParseError("dcgmi diag JSON has neither 'DCGM Diagnostic' nor 'DCGM GPU Diagnostic'", text)
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    version = meta.get("version") or root.get("version")
    driver = meta.get("Driver Version Detected") or root.get("Driver Version Detected")
    tests = []
    for category in root.get("test_categories") or ():
        if not isinstance(category, dict):
            continue
        for test in category.get("tests") or ():
            if isinstance(test, dict):
                tests.append(_json_test(str(category.get("category", "")), test, version))
    runtime_error = root.get("runtime_error") or doc.get("runtime_error")
    return DiagReport(format="json-4" if key == "DCGM Diagnostic" else "json-3", tests=tuple(tests),
                      dcgm_version=version, driver_version=driver,
                      runtime_error=str(runtime_error) if runtime_error else None)


def _json_test(category: str, test: dict, version: str | None) -> DiagTest:
    results = tuple(_json_result(r, version) for r in test.get("results") or () if isinstance(r, dict))
    summary = test.get("test_summary") if isinstance(test.get("test_summary"), dict) else {}
    status = norm_status(summary["status"]) if summary.get("status") else _worst([r.status for r in results])
    info = tuple(str(i) for i in summary.get("info") or ())
    warnings = tuple(_json_warning(w, version) for w in summary.get("warnings") or () if w is not None)
    return DiagTest(category=category, name=str(test.get("name", "")), status=status, results=results,
                    warnings=warnings, info=info)


def _json_result(result: dict, version: str | None) -> DiagEntityResult:
    if "entity_id" in result:
        group = str(result.get("entity_group", "GPU")).lower()
        entity = f"{group}{result['entity_id']}"
    else:
        ids = result.get("gpu_ids", result.get("gpu_id", ""))
        parts = [p.strip() for p in str(ids).split(",") if p.strip()]
        entity = ",".join(f"gpu{p}" for p in parts) or "all"
    warnings = tuple(_json_warning(w, version) for w in result.get("warnings") or () if w is not None)
    return DiagEntityResult(entity=entity, status=norm_status(result.get("status")), warnings=warnings,
                            info=tuple(str(i) for i in result.get("info") or ()))


def _json_warning(warning: Any, version: str | None) -> DiagWarning:
    if not isinstance(warning, dict):
        return DiagWarning(message=str(warning))
    code = warning.get("error_severity")
    return DiagWarning(message=str(warning.get("warning", "")), error_id=warning.get("error_id"),
                       error_category=warning.get("error_category"),
                       severity=severity_name(code, version),
                       severity_code=code if isinstance(code, int) else None)


def _worst(statuses: list[str]) -> str:
    order = ["pass", "skip", "warn", "fail"]
    known = [s for s in statuses if s in order]
    if len(known) != len(statuses):
        return next(s for s in statuses if s not in order)
    return max(known, key=order.index) if known else "unknown"


_SECTION = re.compile(r"^[|+]-+\s+(?P<name>[A-Za-z][A-Za-z /]*?)\s+-+[+|]")
_ROW = re.compile(r"^\|(?P<label>[^|]*)\|(?P<value>.*?)(?:\|\s*)?$")
_GPU_ROW = re.compile(r"^GPU\s*(?P<id>\d+)\s*:\s*(?P<status>\w[\w ]*)$")
_LIST = re.compile(r"^(?P<status>Pass|Fail|Warn|Skip)\w*\s*-\s*(?P<who>.*)$", re.IGNORECASE)


def parse_dcgmi_diag_text(text: str) -> DiagReport:
    """The boxed ``dcgmi diag`` table (DCGM 2.x-4.x): sections ``|-----  Deployment  ---...``, a row per
    test (``Pass``, ``Fail - All``, ``Pass - GPUs: 1, 2``, 4.x ``GPU0: Pass`` sub-rows) and ``Warning``/
    ``Info``/``Error`` rows whose text DCGM wraps at the column width, mid-word (joined back here).
    Unterminated last rows (published snippets) are accepted. No section or test row raises ParseError.
    """
    rows = _table_rows(text)
    meta: dict[str, str] = {}
    builder = _TextTests()
    for section, label, value in rows:
        if section == "Metadata":
            if label:
                meta[label] = value
            continue
        builder.add(section, label, value)
    tests = builder.finish()
    if not tests:
        raise ParseError("dcgmi diag text has no test rows", text[:400])
    return DiagReport(format="text", tests=tests, dcgm_version=meta.get("DCGM Version"),
                      driver_version=meta.get("Driver Version Detected"))


def _table_rows(text: str) -> list[tuple[str, str, str]]:
    """(section, label, value) per logical row; continuation rows are appended to the previous value.

    DCGM wraps long values every ``width`` characters, mid-word, inside a cell one space wider on each
    side; ``width`` comes from the table's border line (45 in every corpus file).
    """
    border = re.search(r"^\+-+\+(?P<right>-+)\+", text, re.MULTILINE)
    width = len(border["right"]) - 3 if border else 45
    rows: list[list[str]] = []
    section = ""
    for line in text.splitlines():
        line = line.rstrip("\n")
        if m := _SECTION.match(line):
            section = m["name"].strip()
            continue
        if not line.startswith("|") or line.startswith("|="):
            continue
        m = _ROW.match(line)
        if m is None or (m["label"].strip() == "Diagnostic" and m["value"].strip() == "Result"):
            continue
        label, piece = m["label"].strip(), m["value"][1:width + 1]
        if label or not rows or rows[-1][0] != section or _GPU_ROW.match(piece.strip()) \
                or _LIST.match(piece.strip()):
            rows.append([section, label, piece])
        else:
            rows[-1][2] += piece  # a wrapped slice: concatenate exactly, words were cut mid-way
    return [(s, label, " ".join(v.split())) for s, label, v in rows]


class _TextTests:
    """Accumulates text rows into DiagTests (a tiny state machine: current test, its rows)."""

    def __init__(self) -> None:
        self.tests: list[dict] = []

    def add(self, section: str, label: str, value: str) -> None:
        kind = label.lower()
        if kind in ("warning", "info", "error"):
            current = self._current(section, label)
            if kind == "info":
                current["info"].append(value)
            else:
                current["warnings"].append(DiagWarning(message=value))
                if kind == "error":
                    current["status"] = "fail"
            return
        if label:
            self.tests.append({"category": section, "name": label, "status": "", "results": [],
                               "warnings": [], "info": []})
        if not self.tests or self.tests[-1]["category"] != section:
            return
        current = self.tests[-1]
        if m := _GPU_ROW.match(value):
            current["results"].append(DiagEntityResult(entity=f"gpu{m['id']}",
                                                       status=norm_status(m["status"])))
        elif m := _LIST.match(value):
            status, who = norm_status(m["status"]), m["who"].strip()
            if who.lower() == "all":
                current["results"].append(DiagEntityResult(entity="all", status=status))
            else:
                for gpu in re.findall(r"\d+", who.split(":", 1)[-1]):
                    current["results"].append(DiagEntityResult(entity=f"gpu{gpu}", status=status))
            if label:
                current["status"] = status
        elif label:
            current["status"] = norm_status(value)

    def _current(self, section: str, label: str) -> dict:
        if not self.tests or self.tests[-1]["category"] != section:
            self.tests.append({"category": section, "name": section, "status": "", "results": [],
                               "warnings": [], "info": []})
        return self.tests[-1]

    def finish(self) -> tuple[DiagTest, ...]:
        out = []
        for t in self.tests:
            status = t["status"] or _worst([r.status for r in t["results"]]) if t["results"] else \
                t["status"] or "unknown"
            if any(r.status == "fail" for r in t["results"]) and status == "pass":
                status = "fail"
            out.append(DiagTest(category=t["category"], name=t["name"], status=status,
                                results=tuple(t["results"]), warnings=tuple(t["warnings"]),
                                info=tuple(t["info"])))
        return tuple(out)
