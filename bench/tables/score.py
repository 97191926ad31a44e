"""The ICDAR 2013 Table Competition's structure score: adjacency relations between cells.

As ``../shared/corpora/README.md`` describes it:

* a table is a grid (rows of cells, ``str`` or ``None``); a spanning cell's text sits at its
  top-left position and the positions it covers are empty. Ragged rows are padded with
  empty cells;
* a cell's text is compared lowercased, keeping letters and digits only (``"Total (€)"`` ->
  ``"total"``); a cell whose text keeps nothing (``None``, ``""``, ``"-"``) is empty;
* every non-empty cell is related to its nearest non-empty neighbour to the right (same
  row) and its nearest non-empty neighbour below (same column), skipping empty cells: a
  relation is ``(text, neighbour's text, "right" | "below")``;
* the relations of all of a document's tables form one multiset; a detected relation is
  correct when the ground truth has it (each ground-truth relation matches at most once).
  Precision = correct / detected, recall = correct / ground truth, F1 their harmonic mean;
  with nothing detected (or nothing correct) precision, recall and F1 are 0.

Per corpus: the mean of the documents' F1, and micro precision/recall/F1 from the summed
counts of all documents.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["Counts", "Grid", "Summary", "normalise", "relations", "score_document", "summarise"]

Grid = Sequence[Sequence[str | None]]
Relation = tuple[str, str, str]


def normalise(text: str | None) -> str:
    """``text`` lowercased, letters and digits only (``""`` for ``None``)."""
    if not text:
        return ""
    return "".join(ch for ch in text.lower() if ch.isalnum())


def relations(grid: Grid) -> Counter[Relation]:
    """The adjacency relations of one table (module docstring)."""
    cells = [[normalise(cell) for cell in row] for row in grid]
    width = max((len(row) for row in cells), default=0)
    for row in cells:
        row.extend([""] * (width - len(row)))
    found: Counter[Relation] = Counter()
    for r, row in enumerate(cells):
        for c, text in enumerate(row):
            if not text:
                continue
            right = next((t for t in row[c + 1 :] if t), None)
            if right is not None:
                found[(text, right, "right")] += 1
            below = next((cells[k][c] for k in range(r + 1, len(cells)) if cells[k][c]), None)
            if below is not None:
                found[(text, below, "below")] += 1
    return found


def _all(tables: Iterable[Grid]) -> Counter[Relation]:
    total: Counter[Relation] = Counter()
    for grid in tables:
        total.update(relations(grid))
    return total


@dataclass(frozen=True)
class Counts:
    """One document's relation counts, and its precision, recall and F1."""

    correct: int
    detected: int
    truth: int

    @property
    def precision(self) -> float:
        return self.correct / self.detected if self.detected else 0.0

    @property
    def recall(self) -> float:
        return self.correct / self.truth if self.truth else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def score_document(detected: Iterable[Grid], truth: Iterable[Grid]) -> Counts:
    """The counts of a document: the tables an engine found against the true ones."""
    mine, true = _all(detected), _all(truth)
    correct = sum((mine & true).values())
    return Counts(correct=correct, detected=sum(mine.values()), truth=sum(true.values()))


@dataclass(frozen=True)
class Summary:
    """A corpus: mean per-document F1 and micro precision/recall/F1."""

    documents: int
    mean_f1: float
    micro: Counts


def summarise(documents: Sequence[Counts]) -> Summary:
    micro = Counts(
        correct=sum(d.correct for d in documents),
        detected=sum(d.detected for d in documents),
        truth=sum(d.truth for d in documents),
    )
    mean = sum(d.f1 for d in documents) / len(documents) if documents else 0.0
    return Summary(documents=len(documents), mean_f1=mean, micro=micro)
