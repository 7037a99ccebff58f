"""Parser for ``nvidia-smi -q -x`` (command id ``nvidia-smi-q-x``) into the normalized tree.

    log = parse_nvidia_smi_xml(result.text)
    log.gpus[0]["product_name"]            # "NVIDIA A100-SXM4-80GB"
    log.gpus[0]["clocks_event_reasons"]    # {"gpu_idle": "Not Active", "hw_slowdown": ...}

Written against the corpus files in ../shared/corpus/nvidia-smi-xml: driver 418 without a DOCTYPE
(quadro-p400), DTD v12 (a100-sxm4-80gb, driver 535) and v13 with tab indentation (rtx4000-sff-ada,
driver 595), MIG devices, the pre-535 ``clocks_throttle_reasons`` block, the pre-Ampere
``single_bit``/``double_bit`` ECC layout, and the Blackwell fragment with padded values
(" 40 % "). Leaves keep the printed string; "N/A" and "[N/A]" stay as text for the reader.

Robustness: text printed around the document (warnings such as "WARNING: infoROM is corrupted at
gpu ...") is returned as error lines, not a parse failure. ``<supported_clocks>`` and
``<processes>`` are dropped before parsing: we read neither, and some drivers emit malformed
``<supported_clocks>`` (lollipopkit/flutter_server_box#286). A document without its closing
``</nvidia_smi_log>`` is truncated and raises ``ParseError``.

A plain document (no comment, CDATA, processing instruction, namespace declaration or entity past
its prolog, no carriage return: every nvidia-smi report) is split on its tags into the tree
ElementTree would give; anything else goes through ElementTree itself, whose error ``ParseError``
quotes. Nodes of one model and driver print the same tags with other values, so the tags are checked
(expat) and laid out as a tree once per distinct set (``_plain_skeleton``, ``_Layout``), and each
report's GPUs are that layout read with the report's own texts (``IndexedTree``: a text is looked up
when it is read, and no per-report tree is built).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from itertools import chain
from typing import Any
from xml.parsers import expat

from healthcheck.core.spec import ParseError
from healthcheck.probes.nvidia_smi_log import (
    RENAMED_SECTIONS,
    IndexedTree,
    SmiError,
    SmiLog,
    canonical_reason,
    find_nvidia_smi_errors,
    indexed_value,
    normalize_bus_id,
)
from healthcheck.probes.parse_memo import memoized

_START = re.compile(r"<\?xml[^>]*\?>|<nvidia_smi_log\b")
_END = "</nvidia_smi_log>"
_DROPPED = ("supported_clocks", "processes", "accounted_processes")
_REPEATED = {"gpu", "mig_device"}
_ROOT = "<nvidia_smi_log"
_UTF8 = re.compile(r"""encoding\s*=\s*["']utf-?8["']""", re.I)
_TAG_END_ODD = frozenset("\"' \t\n")  # a tag ending so has attributes or trailing whitespace
_ATTRIBUTE = re.compile(r"""([^\s=]+)\s*=\s*(?:"([^"]*)"|'([^']*)')""")


def parse_nvidia_smi_xml(text: str) -> SmiLog:
    """Parse ``nvidia-smi -q -x`` output; text outside the document is scanned for error lines."""
    found = _document(text)
    if isinstance(found, SmiLog):
        return found
    document, outside = found
    errors = find_nvidia_smi_errors(outside)
    plain = _plain_parts(document)
    layout = plain[1].layout() if plain is not None and plain[1] is not None else None
    if layout is not None:
        return layout.log(plain[0], errors)
    return _log(_built(plain), document, errors)


def _log(top: dict[str, Any] | None, document: str, errors: tuple[SmiError, ...]) -> SmiLog:
    """The report whose tree is ``top`` (None: left to ElementTree, which reads ``document`` or says
    why it cannot)."""
    if top is None:
        top = _element_tree(_etree_root(document))
    listed = top.get("gpu", [])
    if not all(isinstance(gpu, dict) for gpu in listed):
        raise ParseError("a <gpu> element of nvidia-smi -q -x output has no fields", document)
    gpus = tuple(_normalize_gpu(gpu) for gpu in listed)
    return SmiLog(
        driver_version=_text(top.get("driver_version")),
        cuda_version=_text(top.get("cuda_version")),
        attached_gpus=_int(top.get("attached_gpus")),
        gpus=gpus,
        errors=errors,
    )


def _document(text: str) -> tuple[str, str] | SmiLog:
    """The ``<nvidia_smi_log>`` document in ``text`` (read sections dropped) and the text around it;
    the log of nvidia-smi's error lines when there is no document."""
    start = _START.search(text)
    if start is None:
        errors = find_nvidia_smi_errors(text)
        if errors:
            return SmiLog(None, None, None, (), errors)
        raise ParseError("no <nvidia_smi_log> document in nvidia-smi -q -x output", text)
    end = text.find(_END, start.start())
    if end < 0:
        raise ParseError("nvidia-smi -q -x output is truncated (no </nvidia_smi_log>)", text[-200:])
    outside = text[:start.start()] + "\n" + text[end + len(_END):]
    return _drop_unread(text[start.start():end + len(_END)]), outside


def _drop_unread(document: str) -> str:
    """``document`` without the ``<supported_clocks>``, ``<processes>`` and ``<accounted_processes>``
    sections: each from its opening tag to the first closing tag of the same name (an opening tag
    never closed stays). The next opening of each tag is kept and searched for again only once passed;
    a tag found never closed is no longer searched for (no later one of it is closed either)."""
    following = {tag: document.find(f"<{tag}>") for tag in _DROPPED}  # next opening of each tag (-1: none)
    kept: list[str] = []
    pos = 0
    while live := [(at, tag) for tag, at in following.items() if at >= 0]:
        at, tag = min(live)
        closed = document.find(f"</{tag}>", at + len(tag) + 2)
        if closed < 0:
            del following[tag]
            continue
        kept.append(document[pos:at])
        pos = closed + len(tag) + 3
        for other, next_at in following.items():
            if 0 <= next_at < pos:
                following[other] = document.find(f"<{other}>", pos)
    kept.append(document[pos:])
    return "".join(kept)


def _etree_root(document: str) -> ET.Element:
    """The reference parse (ElementTree): any document, and the error message for a malformed one."""
    try:
        root = ET.fromstring(document.encode("utf-8"))
    except (ET.ParseError, LookupError, ValueError) as exc:  # LookupError: a bogus encoding= declaration
        raise ParseError(f"nvidia-smi -q -x output is not well-formed XML: {exc}", document) from exc
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"unexpected XML root <{root.tag}>", document)
    return root


def _plain_tree(document: str) -> dict[str, Any] | None:
    """``_element_tree`` of a well-formed plain document, without building an ElementTree; None for
    anything else (malformed, or XML features ``_split_tree`` does not read), left to ElementTree."""
    return _built(_plain_parts(document))


def _built(plain: tuple[list[str], _Skeleton | None] | None) -> dict[str, Any] | None:
    """``_plain_tree`` of the document whose ``_plain_parts`` are ``plain``."""
    return None if plain is None else _split_tree(plain[0])


def _plain_parts(document: str) -> tuple[list[str], _Skeleton | None] | None:
    """A well-formed plain document's body split on its tags ("", tag, text after it, tag, ...) and
    the skeleton of its tags (None for a document not remembered by its tags: over ``_SKELETON_MAX``,
    or its text not plain); None for anything else (malformed, or XML features the split does not read)."""
    at = document.find(_ROOT)
    prolog, body = document[:at], document[at:]
    if (at < 0 or "[" in prolog or prolog.count("<!--") != prolog.count("-->")
            or ("encoding" in prolog and not _UTF8.search(prolog))
            or "&" in body or "\r" in body):
        return None
    parts = body.replace(">", "<").split("<")  # "", tag, text, tag, text, ...
    if len(body) <= _SKELETON_MAX and _plain_text(body):
        skeleton = _plain_skeleton(prolog, "<".join(parts[1::2]))  # one string: hashed and compared in C
        return None if skeleton is None else (parts, skeleton)
    # equal counts: every '>' ends a tag, none is in an attribute value or text
    plain = body.count("<") == body.count(">") and _plain_document(prolog, document)
    return (parts, None) if plain else None


_SKELETON_MAX = 1 << 20  # a report remembered by its tags only up to here (8 GPUs: ~90 KB): 32 kept, 32 MB at most
_XML_ASCII = b"\t\n" + bytes(range(0x20, 0x80))            # XML 1.0 characters in ASCII (CR: excluded above)
_TEXT_ASCII = _XML_ASCII.translate(None, b"<>")              # deleted: all of them but the two delimiters


def _plain_text(body: str) -> bool:
    """``body`` is ASCII, every character is one XML allows, and its delimiters alternate ``<`` ``>``
    (each tag opens and closes before the next): then the document is its tags (its *skeleton*) with
    text between them that XML accepts as character data (no ``<``, ``>`` or ``&``, so no "]]>"), and it
    is well-formed exactly when its skeleton is. One C-level pass (``bytes.translate``) deletes every
    allowed character but the delimiters: what is left must be ``<>`` repeated (any other character
    left is one XML refuses)."""
    if not body.isascii():
        return False
    left = body.encode("ascii").translate(None, _TEXT_ASCII)
    return left == b"<>" * (len(left) // 2)


@memoized(32)  # nodes of one model and driver print the same tags: expat checks them once, not per host
def _plain_skeleton(prolog: str, tags: str) -> _Skeleton | None:
    """None unless the prolog and ``tags`` (each without its ``<``/``>``, joined by ``<``) form a
    well-formed plain document (``_plain_document`` of the tags alone, the text between them left out);
    else the builder of the trees of documents with these tags (``_Skeleton``)."""
    if not _plain_document(prolog, f"{prolog}<{tags.replace('<', '><')}>"):
        return None
    return _Skeleton(tuple(tags.split("<")))


class _Skeleton:
    """What documents with one set of ``tags`` share: their layout (``layout``), made once."""

    __slots__ = ("_layout", "tags")

    def __init__(self, tags: tuple[str, ...]) -> None:
        self.tags = tags
        self._layout: _Layout | bool | None = False  # False: not made yet

    def layout(self) -> _Layout | None:
        """The layout of documents with these tags (made once), or None when they have none."""
        if self._layout is False:
            self._layout = _Layout.of(self.tags)
        return self._layout


class _Layout:
    """The tree of every plain document with one set of tags, normalized as a report's tree is, each
    leaf's text left as its index in the document's split parts (the text is ``parts[index]``, stripped).
    A tree's shape is a function of its tags alone, and so is every step of ``_normalize_gpu`` (the bus
    id is an attribute: part of the tags)."""

    __slots__ = ("gpus", "top")

    def __init__(self, top: dict[str, Any], gpus: tuple[dict[str, Any], ...]) -> None:
        self.top, self.gpus = top, gpus

    @classmethod
    def of(cls, tags: tuple[str, ...]) -> _Layout | None:
        """The layout of documents with ``tags``; None when they have none (not rooted at
        ``<nvidia_smi_log>``, or a ``<gpu>`` without fields: ``_log`` says why)."""
        slots = map(_Slot, range(2, 2 * len(tags) + 2, 2))
        top = _split_tree(["", *chain.from_iterable(zip(tags, slots, strict=True))])
        listed = top.get("gpu", []) if top is not None else None
        if listed is None or not all(isinstance(gpu, dict) for gpu in listed):
            return None
        return cls(_indexed(top), tuple(_indexed(_normalize_gpu(gpu)) for gpu in listed))

    def log(self, parts: list[str], errors: tuple[SmiError, ...]) -> SmiLog:
        """The report whose split parts are ``parts``: each GPU this layout's tree read with its texts
        (``IndexedTree``: nothing filled in)."""
        top = self.top
        return SmiLog(driver_version=_text(indexed_value(top.get("driver_version"), parts)),
                      cuda_version=_text(indexed_value(top.get("cuda_version"), parts)),
                      attached_gpus=_int(indexed_value(top.get("attached_gpus"), parts)),
                      gpus=tuple(IndexedTree(gpu, parts) for gpu in self.gpus), errors=errors)


class _Slot(int):
    """The position of a tag's text in a layout (``_Layout``): ``_split_tree`` strips the text it reads,
    and a slot strips to itself."""

    def strip(self) -> _Slot:
        return self


def _indexed(value: Any) -> Any:
    """A layout's tree with each slot as a plain ``int`` (the index of a leaf's text: no other value is one)."""
    if type(value) is dict:
        return {key: _indexed(item) for key, item in value.items()}
    if type(value) is list:
        return [_indexed(item) for item in value]
    return int(value) if type(value) is _Slot else value


def _plain_document(prolog: str, document: str) -> bool:
    """expat (as ElementTree sets it up) finds ``document`` well-formed, with no comment, processing
    instruction, CDATA section or namespace declaration past ``prolog``."""
    parser = expat.ParserCreate(namespace_separator="}")  # as ElementTree
    body_at = len(prolog.encode("utf-8"))
    features: list[int] = []  # where expat met a comment, PI, CDATA section or namespace declaration

    def feature(*_: Any) -> None:
        features.append(parser.CurrentByteIndex)
    parser.CommentHandler = parser.ProcessingInstructionHandler = feature
    parser.StartCdataSectionHandler = parser.StartNamespaceDeclHandler = feature
    try:
        parser.Parse(document.encode("utf-8"), True)
    except (expat.ExpatError, LookupError, ValueError):
        return False
    return all(position < body_at for position in features)  # past the prolog: left to ElementTree


def _split_tree(parts: list[str]) -> dict[str, Any] | None:
    """The root element of a well-formed plain document as ``_element_tree`` gives it, from its body
    split on '<' and '>' (``parts``: "", tag, text after it, tag, ...). An opening tag followed by a
    closing one is a leaf (its stripped text); one followed by another opening tag is a container (a dict)."""
    pairs = zip(parts[1::2], parts[2::2], strict=True)
    stack: list[tuple[dict[str, Any], str]] = []  # open containers: (the parent's children, own tag)
    node: dict[str, Any] = {}  # children of the innermost open container
    for piece, after in pairs:
        if piece[0] == "/":  # a container closes
            value, (node, tag) = node, stack.pop()
            if not stack:  # the root
                return value if tag == "nvidia_smi_log" else None
            _put(node, tag, value)
            continue
        while True:  # an opening tag: a leaf, or a container whose first child is the next tag
            if piece[-1] == "/":  # <empty/>
                _put(node, piece[:-1].split(None, 1)[0], "")
                break
            following, following_text = next(pairs, ("/", ""))
            tag, attrs = (piece, "") if piece[-1] not in _TAG_END_ODD else \
                piece.split(None, 1) if "=" in piece else (piece.rstrip(), "")
            if following[0] == "/":  # its own closing tag: a leaf
                if tag in _REPEATED:
                    node.setdefault(tag, []).append(after.strip())
                else:
                    node[tag] = after.strip()
                break
            stack.append((node, tag))
            node = _attributes(attrs) if attrs else {}
            piece, after = following, following_text
    return None


def _put(node: dict[str, Any], tag: str, value: Any) -> None:
    if tag in _REPEATED:
        node.setdefault(tag, []).append(value)
    else:
        node[tag] = value


def _attributes(attrs: str) -> dict[str, str]:
    """``id="00000000:19:00.0"`` -> {"@id": ...}, whitespace normalized as expat does."""
    return {f"@{key}": (double or single).replace("\t", " ").replace("\n", " ").strip()
            for key, double, single in _ATTRIBUTE.findall(attrs)}


def _element_tree(element: ET.Element) -> dict[str, Any]:
    """Element -> dict of child tag -> str (leaf) or dict; ``gpu``/``mig_device`` become lists."""
    out: dict[str, Any] = {}
    for key, value in element.attrib.items():
        out[f"@{key}"] = value.strip()
    for child in element:
        value: Any = _element_tree(child) if len(child) else (child.text or "").strip()
        if child.tag in _REPEATED:
            out.setdefault(child.tag, []).append(value)
        else:
            out[child.tag] = value
    return out


def _normalize_gpu(gpu: dict[str, Any]) -> dict[str, Any]:
    """Rename the fields that changed across drivers; keep the bus id as ``@id``."""
    for old, new in RENAMED_SECTIONS.items():
        if old in gpu and new not in gpu:
            gpu[new] = gpu.pop(old)
    reasons = gpu.get("clocks_event_reasons")
    if isinstance(reasons, dict):
        gpu["clocks_event_reasons"] = {canonical_reason(k): v for k, v in reasons.items()}
    mig = gpu.get("mig_devices")
    gpu["mig_devices"] = mig.get("mig_device", []) if isinstance(mig, dict) else []
    if gpu.get("@id"):
        gpu["@id"] = normalize_bus_id(gpu["@id"])
    return gpu


def _text(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None
