"""Data Docs that need no network: every CDN address GX uses is served from the site, and each table keeps its newest N."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import unquote

import great_expectations
import great_expectations.expectations as gxe

from lakehouse.quality.docs_assets import CDN
from lakehouse.quality.docs_views import offline
from lakehouse.quality.evaluate import Outcome
from lakehouse.quality.report import build_data_docs
from lakehouse.quality.results import Validation, store_in_gx
from lakehouse.quality.suites import Expectation, Suite

TEMPLATES = Path(great_expectations.__file__).parent / "render" / "view"
FETCHED = re.compile(r"""<(?:script|link|img)\b[^>]*?(?:src|href)=["']([^"']+)["']""", re.I)
START = datetime(2026, 11, 29, 12, tzinfo=timezone.utc)


def gx_sources() -> list[Path]:
    return sorted(TEMPLATES.glob("templates/*.j2")) + sorted(TEMPLATES.glob("static/styles/*.css"))


def test_every_address_gx_fetches_from_a_cdn_is_one_we_serve():
    """The script, style and image addresses in GX's templates are all known, and none is left after `offline`."""
    found = {url for p in gx_sources() for url in FETCHED.findall(p.read_text()) if url.startswith("http")}
    assert found and found <= set(CDN), found - set(CDN)
    for path in gx_sources():
        rewritten = offline(path.read_text())
        assert not [u for u in FETCHED.findall(rewritten) if u.startswith("http")], path.name
        assert "great-expectations-web-assets" not in rewritten and 'crossorigin="anonymous"' not in rewritten, path.name


def validations(suite: Suite, count: int) -> list[Validation]:
    """`count` batches of `suite`, a minute apart, the odd ones failing."""
    return [Validation(suite, suite.table, suite.table, "stream", b, None, ((f"t.{suite.table}", 0, b, b),),
                       [Outcome(e, element_count=4, unexpected_count=b % 2, samples=["x"] * (b % 2))
                        for e in suite.expectations],
                       START + timedelta(minutes=b), "run") for b in range(count)]


def test_docs_keep_the_newest_validations_of_each_table_and_reference_only_their_own_files(tmp_path):
    """Five batches per table, keep 3: the store and the pages hold batches 2-4 of each; every asset they load exists."""
    rule = Expectation(gxe.ExpectColumnValuesToNotBeNull(column="id"), "warn")
    suites = [Suite(name, name, (rule,)) for name in ("silver_a", "gold_b")]
    root = str(tmp_path / "quality")
    store_in_gx(root, [v for s in suites for v in validations(s, 5)])

    index = build_data_docs(root, keep=3)

    site = index.parent
    pages = sorted(site.glob("validations/**/*.html"))
    assert sorted(p.stem for p in pages) == sorted(f"stream-{s.table}-{b}" for s in suites for b in (2, 3, 4))
    stored = sorted(p.name for p in (tmp_path / "quality" / "gx" / "uncommitted" / "validations").rglob("*.json"))
    assert stored == sorted(f"stream-{s.table}-{b}.json" for s in suites for b in (2, 3, 4))
    for page in [index, *pages, *site.glob("expectations/*.html")]:
        for url in FETCHED.findall(page.read_text()):
            assert not url.startswith(("http:", "https:", "//")), (page.name, url)
            assert (page.parent / unquote(url.split("?")[0])).resolve().is_file(), (page.name, url)
    assert (site / "static" / "vendor").joinpath("@fortawesome__fontawesome-free@6.6.0", "webfonts",
                                                 "fa-solid-900.woff2").is_file()

    # A later run adds two batches of one table: only that table's oldest two go.
    later = [Validation(**{**v.__dict__, "batch_id": v.batch_id + 5, "validated_at": v.validated_at + timedelta(hours=1)})
             for v in validations(suites[0], 2)]
    build_data_docs(root, keep=3, new=store_in_gx(root, later))
    assert sorted(p.stem for p in site.glob("validations/**/*.html")) == sorted(
        [f"stream-silver_a-{b}" for b in (4, 5, 6)] + [f"stream-gold_b-{b}" for b in (2, 3, 4)])
    assert "stream-silver_a-6" in index.read_text() and "stream-silver_a-3" not in index.read_text()
