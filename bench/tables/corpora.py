"""The ground-truthed corpora, read in place from ``../shared/corpora/`` (its README gives the
formats), and their ground truth as grids (``bench.tables.score``).

* ``pdf``: the ICDAR 2013 competition's EU PDFs; truth from ``<name>-str.xml``: every
  ``table``'s ``region``s laid out by ``start-row``/``start-col`` (plus the region's
  ``row-increment``/``col-increment``), a spanning cell's ``content`` at its top-left.
* ``images``: the PubTabNet examples; truth from ``PubTabNet_Examples.jsonl``: the HTML
  structure tokens (``<tr>``, ``<td``, `` colspan="2"``, ``>``...) give the grid, the cells'
  tokens the texts, with inline tags (``<b>``, ``<i>``, ``<sup>``...) dropped.
* ``scans``: the PDFs of ``pdf`` as office scans, one multi-page TIFF per document
  (``bench.tables.scans``), with the PDFs' truth.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from bench._common import ROOT, git_output

__all__ = ["Doc", "corpora_dir", "html_grid", "icdar_truth", "load_images", "load_pdfs"]

Grid = list[list[str | None]]

_TAG = re.compile(r"^</?[a-zA-Z][a-zA-Z0-9]*>$")
_SPAN = re.compile(r'(colspan|rowspan)="(\d+)"')


@dataclass
class Doc:
    """One document of a corpus: where it is, what it is, its pages and its true tables."""

    name: str
    path: Path
    kind: str  # "pdf" or "image"
    pages: int
    truth: list[Grid] = field(default_factory=list)


def corpora_dir() -> Path:
    """``RELAY_CORPORA`` if set, else ``shared/corpora`` beside the checkout (or beside the
    main checkout, for a git worktree elsewhere)."""
    if os.environ.get("RELAY_CORPORA"):
        return Path(os.environ["RELAY_CORPORA"])
    candidates = [ROOT.parent / "shared" / "corpora"]
    common = git_output("rev-parse", "--path-format=absolute", "--git-common-dir")
    if common:
        candidates.append(Path(common).parent.parent / "shared" / "corpora")
    for path in candidates:
        if path.is_dir():
            return path
    return candidates[0]


def _grid(placed: dict[tuple[int, int], str | None], covered: set[tuple[int, int]]) -> Grid:
    cells = set(placed) | covered
    if not cells:
        return []
    height = max(r for r, _ in cells) + 1
    width = max(c for _, c in cells) + 1
    grid: Grid = [[None] * width for _ in range(height)]
    for (r, c), text in placed.items():
        grid[r][c] = text
    return grid


def icdar_truth(xml: bytes) -> list[Grid]:
    """The tables of an ICDAR 2013 ``-str.xml`` file as grids."""
    root = ET.fromstring(xml)  # noqa: S314 (the competition's files, read from our own disk)
    tables: list[Grid] = []
    for table in root.iter("table"):
        placed: dict[tuple[int, int], str | None] = {}
        covered: set[tuple[int, int]] = set()
        for region in table.findall("region"):
            dr = int(region.get("row-increment") or "0")
            dc = int(region.get("col-increment") or "0")
            for cell in region.findall("cell"):
                r0 = int(cell.get("start-row", "0")) + dr
                c0 = int(cell.get("start-col", "0")) + dc
                r1 = max(r0, int(cell.get("end-row", "-1")) + dr)
                c1 = max(c0, int(cell.get("end-col", "-1")) + dc)
                content = cell.find("content")
                text = content.text if content is not None else None
                for r in range(r0, r1 + 1):
                    for c in range(c0, c1 + 1):
                        covered.add((r, c))
                placed[(r0, c0)] = text
        grid = _grid(placed, covered)
        if grid:
            tables.append(grid)
    return tables


def _cell_text(tokens: list[str]) -> str:
    return "".join(t for t in tokens if not _TAG.match(t))


def html_grid(structure: list[str], cells: list[dict[str, object]]) -> Grid:
    """A PubTabNet table (structure tokens and cells) as a grid."""
    placed: dict[tuple[int, int], str | None] = {}
    covered: set[tuple[int, int]] = set()
    row, col, index, i = -1, 0, 0, 0
    while i < len(structure):
        token = structure[i]
        if token == "<tr>":
            row, col = row + 1, 0
        elif token in ("<td>", "<td"):
            spans = {"colspan": 1, "rowspan": 1}
            if token == "<td":
                i += 1
                while i < len(structure) and structure[i] != ">":
                    for name, value in _SPAN.findall(structure[i]):
                        spans[name] = max(1, int(value))
                    i += 1
            while (row, col) in covered:
                col += 1
            tokens = cells[index].get("tokens", []) if index < len(cells) else []
            index += 1
            text = _cell_text([str(t) for t in tokens]) if isinstance(tokens, list) else ""
            placed[(row, col)] = text
            for r in range(row, row + spans["rowspan"]):
                for c in range(col, col + spans["colspan"]):
                    covered.add((r, c))
            col += spans["colspan"]
        i += 1
    return _grid(placed, covered)


def _pdf_pages(path: Path) -> int:
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(str(path))
    try:
        return len(document)
    finally:
        document.close()


def load_pdfs(limit: int | None = None) -> list[Doc]:
    """The ICDAR 2013 EU PDFs with their truth, by name."""
    folder = corpora_dir() / "icdar2013-eu"
    docs: list[Doc] = []
    for pdf in sorted(folder.glob("*.pdf"))[:limit]:
        truth = icdar_truth((folder / f"{pdf.stem}-str.xml").read_bytes())
        docs.append(Doc(pdf.stem, pdf, "pdf", _pdf_pages(pdf), truth))
    return docs


def load_images(limit: int | None = None) -> list[Doc]:
    """The PubTabNet example images with their truth, in the order of the JSONL file."""
    folder = corpora_dir() / "pubtabnet-examples"
    docs: list[Doc] = []
    for line in (folder / "PubTabNet_Examples.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)
        html = entry["html"]
        grid = html_grid(list(html["structure"]["tokens"]), list(html["cells"]))
        path = folder / entry["filename"]
        docs.append(Doc(path.stem, path, "image", 1, [grid]))
    return docs[:limit]
