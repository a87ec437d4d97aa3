"""The README documents every setting with its real default, and its commands exist."""

from __future__ import annotations

import re
from pathlib import Path

from lakehouse.infra.settings import Settings
from lakehouse.pipelines import shop
from lakehouse.cli.main import build_parser

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_settings_table_matches_the_settings_object():
    """Each LAKEHOUSE_* row of the README equals (variable, default) from Settings.describe() or a parameter the
    shop pipeline declares, none missing."""
    rows = re.findall(r"^\| `(LAKEHOUSE_[A-Z0-9_]+)` \| `([^`]*)` \|", README.read_text(), re.M)
    params = [(p.variable, str(p.default)) for p in shop.PIPELINE.params]
    assert sorted(rows) == sorted([(env, default) for env, default, _ in Settings.describe()] + params)


def test_readme_commands_are_real_subcommands():
    """Every `lakehouse <subcommand>` the README shows parses with the real CLI parser."""
    parser = build_parser()
    subcommands = set(parser._subparsers._group_actions[0].choices)  # noqa: SLF001 - argparse has no public API for this
    shown = set(re.findall(r"^lakehouse (\w[\w-]*)", README.read_text(), re.M))
    assert shown and shown <= subcommands
    assert "infra/bootstrap.sh demo" in README.read_text() and "infra/bootstrap.sh test" in README.read_text()
