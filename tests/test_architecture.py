"""The layering of docs/architecture.md, checked: its import contracts and its module map.

The contracts are read from the document's table (the one place they are written), the
imports from relay's source with :mod:`ast` (every import statement, lazy and
``TYPE_CHECKING`` ones included); nothing is imported or run.
"""

from __future__ import annotations

import ast
import re
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "relay"
DOC = ROOT / "docs" / "architecture.md"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """relay's modules by dotted name."""
    return {module_name(p, root): p for p in sorted((root / "relay").rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module ``name``'s source imports, as dotted names (``from relay import keys`` is
    ``relay.redis.keyspace`` when that is a module, relative imports resolved)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known)
    return found


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    mods = modules(root)
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@dataclass(frozen=True)
class Contract:
    sources: tuple[str, ...]
    forbidden: tuple[str, ...]
    allowed: tuple[str, ...]  # exceptions to ``forbidden`` ("relay, except relay.extract")
    transitive: bool

    def breaks(self, target: str) -> bool:
        return any(within(target, f) for f in self.forbidden) and not any(
            within(target, a) for a in self.allowed
        )

    def violations(self, imports: dict[str, set[str]]) -> list[str]:
        out = []
        for source in sorted(m for m in imports if any(within(m, s) for s in self.sources)):
            if not self.transitive:
                out += [f"{source} imports {t}" for t in sorted(imports[source]) if self.breaks(t)]
                continue
            # Breadth first over relay's own modules, so each violation shows one shortest path.
            seen = {source: [source]}
            todo = deque([source])
            while todo:
                here = todo.popleft()
                for target in sorted(imports.get(here, ())):
                    if target in seen:
                        continue
                    seen[target] = [*seen[here], target]
                    if self.breaks(target):
                        out.append(" -> ".join(seen[target]))
                    elif target in imports:
                        todo.append(target)
        return out


def contracts(text: str) -> list[Contract]:
    """The rows of the table under ``## Import contracts``."""
    section = text.split("## Import contracts", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| relay")]
    out = []
    for row in rows:
        sources, forbidden, how = (cell.strip() for cell in row.strip("|").split("|"))
        forbidden, _, allowed = forbidden.partition(", except ")
        out.append(
            Contract(
                sources=tuple(s.strip() for s in sources.split(",")),
                forbidden=tuple(f.strip() for f in forbidden.split(",")),
                allowed=tuple(a.strip() for a in allowed.split(",") if a.strip()),
                transitive={"directly": False, "at all": True}[how],
            )
        )
    return out


CONTRACTS = contracts(DOC.read_text())


def test_the_document_states_the_four_contracts() -> None:
    assert len(CONTRACTS) == 4
    assert {s for c in CONTRACTS for s in c.sources} >= {
        "relay.api",
        "relay.console",
        "relay.state.store",
        "relay.state.webhooks",
        "relay.extract",
        "relay.runtime.processing",
        "relay.delivery",
        "relay.runtime.detector",
    }


@pytest.mark.parametrize("contract", CONTRACTS, ids=lambda c: ",".join(c.sources))
def test_import_contract(contract: Contract) -> None:
    imports = graph()
    assert all(any(within(m, s) for m in imports) for s in contract.sources), contract.sources
    assert contract.violations(imports) == []


def test_a_planted_violation_is_caught(tmp_path: Path) -> None:
    """The check itself can fail: a copy of the tree with one forbidden import added."""
    for path in PACKAGE.rglob("*.py"):
        copy = tmp_path / path.relative_to(ROOT)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(path.read_text())
    planted = tmp_path / "relay" / "api" / "paths.py"
    planted.write_text(planted.read_text() + "\nfrom relay import keys as _keys  # planted\n")
    extract = tmp_path / "relay" / "extract" / "sniff.py"
    extract.write_text(extract.read_text() + "\nimport relay.config  # planted\n")
    imports = graph(tmp_path)
    found = [v for c in CONTRACTS for v in c.violations(imports)]
    assert "relay.api.paths imports relay.redis.keyspace" in found
    assert "relay.extract.sniff -> relay.config" in found


# -- the module map -------------------------------------------------------------------------

_ENTRY = re.compile(r"^(?P<indent> +)(?P<name>[\w.]+(?:\.py|/))(?:\s|$)")


def mapped_modules(text: str) -> list[str]:
    """The files the module map names, as paths below the repository (``relay/api/x.py``)."""
    block = text.split("## Module map", 1)[1].split("```", 2)[1]
    stack: list[tuple[int, str]] = []
    out = []
    for line in block.splitlines():
        if line.strip() == "relay/":
            stack = [(0, "relay/")]
            continue
        match = _ENTRY.match(line)
        if not match:
            continue  # a description's next line
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "".join(part for _, part in stack) + match["name"]
        if match["name"].endswith("/"):
            stack.append((indent, match["name"]))
        else:
            out.append(path)
    return out


def test_the_module_map_lists_every_module_once_and_only_modules_that_exist() -> None:
    listed = mapped_modules(DOC.read_text())
    repeated = sorted({p for p in listed if listed.count(p) > 1})
    assert repeated == [], f"listed more than once: {repeated}"
    missing = sorted(
        str(p.relative_to(ROOT))
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py" and str(p.relative_to(ROOT)) not in listed
    )
    assert missing == [], f"docs/architecture.md's module map does not list {missing}"
    gone = sorted(p for p in listed if not (ROOT / p).is_file())
    assert gone == [], f"docs/architecture.md's module map lists {gone}, which do not exist"
