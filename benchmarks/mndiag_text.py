"""The plain-text table of ``dcgmi mndiag`` (without ``--json``), read into plain values for ``benchmarks/mndiag.py``.

    fields = parse_mndiag_table(text)
    fields["status"], fields["hosts"][10], fields["results"][41]
    # "Fail", (10, "r07t11"), (10, 1, "Fail", ("CUDA Error : cudaStreamQuery returned an illegal memory access ...",))

Layout of DCGM 4.3-4.6 (NVIDIA/DCGM ``dcgmi/MnDiag.cpp`` ``HelperDisplayAsCli`` / ``HelperDisplayErrorSummary``,
``dcgmi/MnDiag.h`` stencils, ``dcgmi/CommandOutputController.cpp`` ``ReplaceTag``, ``dcgmi/Diag.cpp``
``DisplayVerboseInfo``)::

    Successfully ran multi-node diagnostic.          (or "Multi-node diagnostic failed.", after an error line)
    | <name, 25 wide>           | <info, 46 wide; longer text cut to "...">      |
    |-----  Metadata  ----------+------------------------------------------------|   MNUBERGEMM Test, Driver
        Version, DCGM Version, Hosts Found, Hosts With Errors, Host List ("0: host", then one row per host)
    |-----  Host Details  ------+------------------------------------------------|   "Host 3" | Fail, then
        "  GPUs: 0, 1, 2, 3" | Pass (all pass) or "  GPU 1" | Fail followed by its error in 45-character chunks
    |-----  Error Summary  -----+------------------------------------------------|   "Host 3 (GPU 1)" | Error: ...,
        "MPI Error" | Error: ...
"""

from __future__ import annotations

import re
from typing import Any

from healthcheck.core.spec import ParseError

CHUNK = 45                                  # dcgmi/Diag.cpp DATA_INFO_TAG_LEN
_SECTION = re.compile(r"^\|-+\s+(Metadata|Host Details|Error Summary)\s+-+\+-+\|$")
_HOST = re.compile(r"^Host (\d+)$")
_GPU = re.compile(r"^GPU (\d+)$")
_GPUS = re.compile(r"^GPUs: ([\d, ]+)$")
_SUMMARY = re.compile(r"^Host (\d+) \(GPU (\d+)\)$")
_LISTED = re.compile(r"^(\d+): (\S+)$")
_OPENING = {"Successfully ran multi-node diagnostic.": False, "Multi-node diagnostic failed.": True}


def _cells(line: str) -> tuple[str, str] | None:
    """(name, info) of one table row, info unstripped (error text continues over rows in 45-character chunks)."""
    if len(line) == 78 and line[:2] == "| " and line[27:30] == " | " and line.endswith(" |"):
        return line[2:27].strip(), line[30:76]
    parts = line.split("|")
    if len(parts) == 4 and line.startswith("|") and line.endswith("|"):
        return parts[1].strip(), parts[2][1:] if parts[2].startswith(" ") else parts[2]
    return None


class _Table:
    def __init__(self) -> None:
        self.fields: dict[str, Any] = {"status": None, "test": None, "num_hosts": None, "hosts": [], "driver": None,
                                       "dcgm": None, "results": [], "mpi_error": None, "runtime_error": None}
        self.section = ""
        self.host: int | None = None
        self.chunks: list[str] | None = None      # the error text being continued
        self._target: list[str] = []              # where the continued text goes when it ends

    def row(self, name: str, info: str) -> None:
        value = info.strip()
        if not name and self.chunks is not None:
            self.chunks.append(info[:CHUNK])
            return
        self._flush()
        handler = {"Metadata": self._metadata, "Host Details": self._details,
                   "Error Summary": self._summary}.get(self.section)
        if handler is not None:
            handler(name, value, info)

    def _metadata(self, name: str, value: str, info: str) -> None:
        keys = {"MNUBERGEMM Test": "status", "Driver Version": "driver", "DCGM Version": "dcgm"}
        if name in keys:
            self.fields[keys[name]] = value
            self.fields["test"] = "mnubergemm" if name == "MNUBERGEMM Test" else self.fields["test"]
        elif name == "Hosts Found" and value.isdigit():
            self.fields["num_hosts"] = int(value)
        elif name in ("Host List", "") and (m := _LISTED.match(value)):
            self.fields["hosts"].append((int(m[1]), m[2]))

    def _details(self, name: str, value: str, info: str) -> None:
        if m := _HOST.match(name):
            self.host = int(m[1])
        elif self.host is not None and (m := _GPUS.match(name)):
            self.fields["results"] += [[self.host, int(g), value, []] for g in m[1].replace(" ", "").split(",") if g]
        elif self.host is not None and (m := _GPU.match(name)):
            self.fields["results"].append([self.host, int(m[1]), value, []])
        elif not name and value.startswith("Error: ") and self.fields["results"]:
            self.chunks = [info[:CHUNK]]
            self._target = self.fields["results"][-1][3]

    def _summary(self, name: str, value: str, info: str) -> None:
        if _SUMMARY.match(name) or name == "MPI Error":
            self.chunks = [info[:CHUNK]]
            self._target = self.fields.setdefault("_summary", {}).setdefault(name, [])

    def _flush(self) -> None:
        if self.chunks is not None:
            text = "".join(self.chunks).strip()
            self._target.append(text[len("Error: "):] if text.startswith("Error: ") else text)
        self.chunks = None

    def result(self) -> dict[str, Any]:
        self._flush()
        summary = self.fields.pop("_summary", {})
        if "MPI Error" in summary:
            self.fields["mpi_error"] = "Error: " + summary["MPI Error"][0]
        for result in self.fields["results"]:        # a failed GPU's error, from the summary when not inline
            if not result[3]:
                result[3] = summary.get(f"Host {result[0]} (GPU {result[1]})", [])
        self.fields["results"] = [(h, g, s, tuple(e)) for h, g, s, e in self.fields["results"]]
        return self.fields


def parse_mndiag_table(text: str) -> dict[str, Any]:
    """The fields of ``dcgmi mndiag``'s table (pure); ``ParseError`` when the text has no such table."""
    table = _Table()
    failed: bool | None = None
    before: list[str] = []
    for raw in text.splitlines():
        line = raw.rstrip("\r\n")
        if line.strip() in _OPENING and failed is None:
            failed = _OPENING[line.strip()]
            continue
        if m := _SECTION.match(line.strip()):
            table._flush()
            table.section = m[1]
            continue
        cells = _cells(line.rstrip()) if line.startswith("|") else None
        if cells is not None and cells[0] not in ("Diagnostic",):
            table.row(*cells)
        elif failed is None and line.strip() and not line.startswith("+"):
            before.append(line.strip())
    fields = table.result()
    if failed is None or fields["status"] is None:
        raise ParseError("no 'MNUBERGEMM Test' row after 'Successfully ran multi-node diagnostic.' or "
                         "'Multi-node diagnostic failed.': not dcgmi mndiag output", text[:300])
    if failed and not fields["results"] and before:
        fields["runtime_error"] = before[-1][:500]
    return fields
