"""The engine names no pipeline's tables: the shop's names appear in its package, never in the engine's code."""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ("cli", "orchestration", "streaming", "batch", "schemas", "quality", "infra")
# A word of its own or a part of a snake_case name (silver_orders), never a part of another word.
SHOP_WORDS = re.compile(r"(?<![A-Za-z])(orders|page_views|payments|products|customers|currency)(?![A-Za-z])", re.I)


def _docstring_lines(source: str) -> set[int]:
    """Lines of module, class and function docstrings."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def shop_names_in_code(path: Path) -> list[str]:
    """`file:line: token` for each name or string of code (not a comment or docstring) that names a shop word."""
    source = path.read_text()
    docs = _docstring_lines(source)
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.NAME, tokenize.STRING) and tok.start[0] not in docs and SHOP_WORDS.search(tok.string):
            found.append(f"{path.relative_to(ROOT)}:{tok.start[0]}: {tok.string[:80]}")
    return found


def test_the_scanner_finds_a_shop_name_in_code_and_skips_comments_and_docstrings(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    sample = tmp_path / "sample.py"
    sample.write_text('"""Orders in a docstring."""\n# orders in a comment\nx = "silver_orders"\ny = 1\n')
    assert shop_names_in_code(sample) == ["sample.py:3: \"silver_orders\""]


def test_no_engine_folder_names_the_shops_tables_or_columns():
    found = [hit for folder in ENGINE for path in sorted((ROOT / folder).rglob("*.py"))
             for hit in shop_names_in_code(path)]
    assert found == [], "the engine names the shop:\n" + "\n".join(found)
