"""The Dagster UI in a browser, on a small lake: lineage, a gold table's columns, a materialization launched there.

One broker, one small lake (the orders path: topic -> bronze_orders -> silver_orders -> gold_revenue_per_minute, built
by `lakehouse run`), one `lakehouse ui` for the module, and headless Chromium (Debian's, through Playwright) with no
network beyond loopback. What each test asserts is read from what the page draws; what it expects comes from the
pipeline's declarations and from what the test itself produced. Screenshots go to LAKEHOUSE_SCREENSHOTS (the README
shows the ones in docs/images) or to a temporary folder.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.parse
from datetime import datetime, timedelta, timezone
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.instance.ref import InstanceRef

from lakehouse.infra.settings import Settings
from lakehouse.orchestration.assets import topic_key
from lakehouse.pipelines import shop
from lakehouse.pipelines.shop.generator import generate
from lakehouse.pipelines.shop.gold import GOLD
from lakehouse.schemas import topics
from lakehouse.schemas.gold import Windowed
from lakehouse.streaming.kafka_topics import ensure_topics
from lakehouse.streaming.producer import produce
from tests.browser import offline_page
from tests.conftest import free_port
from tests.dagster_ui import LAKEHOUSE, lakehouse_env, running_ui

TOPIC = shop.ORDERS.topic_spec
TOPIC_ASSET = topic_key(TOPIC).to_user_string()
GOLD_TABLE = "gold_revenue_per_minute"
PATH = (TOPIC_ASSET, "bronze_orders", "silver_orders", GOLD_TABLE)
WIDTH, HEIGHT = 1400, 900
# Before the first page loads: no "Join the Dagster community" dialog over the page (the UI's own flag for it).
NO_NUX = "window.localStorage.setItem('communityNux', JSON.stringify('1'));"
NAV_COLLAPSED = "window.localStorage.setItem('dagster-nav-collapsed', 'true');"
# How the UI marks an asset, a check or a run as failed: Dagster's red theme colours (in inline styles: a status
# row's background, its text, a partition count, a check icon, a group's count tag), and these icons and words.
RED = re.compile(r"var\(--color-(?:background|text|accent)-red")
FAILED_ICONS = {"close", "cancel", "check_failed", "partition_failure", "run_failed"}
FAILED_WORDS = re.compile(r"\b(Failed|Overdue|Execution failed)\b")


def _orders(seed: int, count: int) -> list:
    """Those of the generator's first `count` records (a small catalog, so that most are events) that go to the
    orders topic."""
    start = datetime.now(timezone.utc) - timedelta(minutes=10)
    return [r for r in generate(count, seed=seed, start=start, customers=20, products=10) if r.topic == TOPIC.name]


@pytest.fixture(scope="module")
def lake(broker: Settings) -> Settings:
    """The broker's home with the orders path built by `lakehouse run` (one run, in its own process)."""
    ensure_topics(broker.kafka_bootstrap, topics.ALL)   # as `lakehouse topics` does: every topic exists
    records = _orders(seed=11, count=500)
    assert produce(records, bootstrap=broker.kafka_bootstrap, topics=[TOPIC.name]).delivered == len(records)
    ran = subprocess.run([str(LAKEHOUSE), "run", *PATH], env=lakehouse_env(broker), capture_output=True, text=True,
                         timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return broker


@pytest.fixture(scope="module")
def ui(lake: Settings, tmp_path_factory: pytest.TempPathFactory):
    """The port of one `lakehouse ui` on the lake's home for the whole module (stopped by PID at its end)."""
    port = free_port()
    with running_ui(lakehouse_env(lake), port, tmp_path_factory.mktemp("ui-logs")) as assets:
        assert set(PATH) <= set(assets), sorted(assets)
        yield port


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = Path(os.environ.get("LAKEHOUSE_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _page(browser, *init_scripts: str):
    page = browser.page
    page.context.add_init_script(NO_NUX + "".join(init_scripts))
    page.set_default_timeout(60_000)
    return page


def _node_name(path: str) -> str:
    return path.split("/")[-1]   # a node shows the last part of its asset key


# What the lineage draws, read from its SVG: every asset node (a foreignObject holding the name's data-tooltip,
# unlike a group's, which has class "group"), its box in graph units, its text, its icons and its red styles;
# every edge (a path with an arrow marker), by its first and last point.
READ_GRAPH = """
() => {
  const nodes = {};
  for (const fo of document.querySelectorAll('svg foreignObject')) {
    const name = fo.querySelector('[data-tooltip]');
    if (!name || fo.classList.contains('group')) continue;
    nodes[name.dataset.tooltip] = {
      x: +fo.getAttribute('x'), y: +fo.getAttribute('y'), w: +fo.getAttribute('width'), h: +fo.getAttribute('height'),
      text: fo.textContent,
      icons: [...fo.querySelectorAll('[role=img]')].map(e => e.getAttribute('aria-label')),
      styles: [...fo.querySelectorAll('[style]')].map(e => e.getAttribute('style')),
    };
  }
  const edges = [...document.querySelectorAll('svg path[marker-end]')].map(p => {
    const n = (p.getAttribute('d').match(/-?[0-9.]+/g) || []).map(Number);
    return [n[0], n[1], n[n.length - 2], n[n.length - 1]];
  });
  return {nodes, edges};
}
"""
READ_GROUPS = """
() => [...document.querySelectorAll('svg foreignObject.group')].map(g => ({
  name: g.querySelector('[data-tooltip]')?.dataset.tooltip,
  text: g.textContent,
  counts: [...g.querySelectorAll('[style*="--tag-fill-color"]')].map(t => [t.textContent, t.getAttribute('style')]),
}))
"""


def _failed_marks(node: dict) -> list[str]:
    """What, in a node or group as drawn, says that something failed (empty: nothing)."""
    marks = [s for s in node["styles"] if RED.search(s)]
    marks += [f"icon {i}" for i in node.get("icons", []) if i in FAILED_ICONS]
    marks += [f"text {m}" for m in FAILED_WORDS.findall(node["text"])]
    return marks


def _edge(graph: dict, source: str, target: str) -> bool:
    """Whether an arrow is drawn from the right side of `source`'s box to the left side of `target`'s."""
    a, b = graph["nodes"][source], graph["nodes"][target]
    return any(abs(x0 - (a["x"] + a["w"])) <= 3 and a["y"] <= y0 <= a["y"] + a["h"]
               and b["x"] - 12 <= x1 <= b["x"] + 1 and b["y"] <= y1 <= b["y"] + b["h"]
               for x0, y0, x1, y1 in graph["edges"])


def _fit_graph(page) -> None:
    """Give the graph the page's width (hide the asset sidebar) and zoom it to fit, as a double-click does."""
    page.locator("svg foreignObject").first.wait_for()
    page.locator("button:has([aria-label=panel_show_right])").click()   # "Hide sidebar" (the nav is collapsed)
    page.locator("svg:has(foreignObject)").dblclick(position={"x": 4, "y": 4})


def _wait_for(page, predicate, what: str, timeout: float = 60) -> object:
    deadline = time.monotonic() + timeout
    while True:
        found = predicate()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"the UI did not show {what} within {timeout:.0f} s")
        page.wait_for_timeout(500)


def test_lineage_draws_the_orders_path_and_no_asset_as_failed(ui, shots, lake):
    """The global lineage, filtered to the gold table and what it reads, draws topic -> bronze -> silver -> gold with
    an arrow between each pair, every node as materialized and none as failed; the whole lake's groups (collapsed)
    count no failed asset and account for every asset."""
    from lakehouse.orchestration.location import build_definitions

    groups: dict[str, int] = {}
    for spec in build_definitions(lake).resolve_all_asset_specs():
        groups[spec.group_name] = groups.get(spec.group_name, 0) + 1
    expected = [_node_name(p) for p in PATH]
    selection = urllib.parse.quote(f'+key:"{GOLD_TABLE}"', safe="")   # the gold table and everything upstream
    expanded = ",".join(f"global@global:{g}" for g in ("kafka", "bronze", "silver", "gold"))
    with offline_page(WIDTH, HEIGHT) as browser:
        page = _page(browser, NAV_COLLAPSED)
        page.goto(f"http://127.0.0.1:{ui}/asset-groups~{selection}?expanded={expanded}")
        _fit_graph(page)

        def drawn() -> dict | None:   # every node drawn in full, with its status loaded
            graph = page.evaluate(READ_GRAPH)
            names = set(graph["nodes"])
            loaded = names == set(expected) and not any("Loading" in n["text"] for n in graph["nodes"].values())
            return graph if loaded and len(graph["edges"]) >= len(expected) - 1 else None

        graph = _wait_for(page, drawn, f"the nodes {expected} with their status")
        page.wait_for_timeout(1000)   # the zoom's animation ends
        graph = page.evaluate(READ_GRAPH)
        page.screenshot(path=str(shots / "dagster-lineage.png"))
        assert sorted(graph["nodes"]) == sorted(expected), graph["nodes"].keys()
        for source, target in zip(expected, expected[1:]):
            assert _edge(graph, source, target), (source, target, graph["edges"])
        assert len(graph["edges"]) == len(expected) - 1, graph["edges"]
        for name, node in graph["nodes"].items():
            assert _failed_marks(node) == [], (name, node["text"])
            # Materialized: a green status row ("Materialized", or the partition count of a partitioned table).
            assert any("background-color: var(--color-background-green)" in s for s in node["styles"]), (
                name, node["text"])

        # The whole lake: each group collapsed shows how many of its assets are materialized, never materialized,
        # running, or failed (a red count).
        page.goto(f"http://127.0.0.1:{ui}/asset-groups")
        _fit_graph(page)

        def counted() -> list | None:
            shown = page.evaluate(READ_GROUPS)
            done = {g["name"] for g in shown} == set(groups) and not any("fetching" in g["text"] for g in shown)
            return shown if done else None

        for group in _wait_for(page, counted, f"the groups {sorted(groups)} with their counts"):
            assert _failed_marks({"styles": [s for _, s in group["counts"]], "text": group["text"]}) == [], group
            assert sum(int(n) for n, _ in group["counts"]) == groups[group["name"]], group
        assert browser.blocked == []   # the UI needs nothing beyond loopback


def test_gold_table_shows_its_declared_column_descriptions(ui, shots):
    """The gold table's overview says what the table is and answers (once), and lists its columns, each with the
    description its declaration gives: the window's bounds, the grouping columns as the source declares them, each
    aggregate as declared."""
    [gold] = [g for g in GOLD if g.name == GOLD_TABLE]
    assert isinstance(gold.kind, Windowed)
    source_docs = shop.ORDERS.column_docs()
    with offline_page(WIDTH, HEIGHT) as browser:
        page = _page(browser)
        page.goto(f"http://127.0.0.1:{ui}/assets/{GOLD_TABLE}")
        table = page.locator("table", has=page.locator("thead td", has_text=re.compile(r"^Column name$")))
        table.locator("tbody tr").first.wait_for()

        def columns() -> dict[str, str]:   # name -> description, as the rows show them
            return {row.locator("td").nth(0).locator("span").first.inner_text().strip():
                    row.locator("td").nth(2).inner_text().strip() for row in table.locator("tbody tr").all()}

        try:   # descriptions render as Markdown, a moment after the rows
            _wait_for(page, lambda: all(columns().values()), "every column's description", timeout=20)
        except AssertionError:
            pass   # a column without one: the comparison below says which
        shown = columns()
        text = page.locator("body").inner_text()
        page.screenshot(path=str(shots / "dagster-gold-table.png"))
        assert browser.blocked == []

    assert text.count(gold.description) == 1 and gold.question in text, text[:2000]
    assert set(shown) == {"window_start", "window_end", *gold.kind.by, *gold.kind.aggregates}, shown
    assert "Start of the event-time window" in shown["window_start"], shown
    assert "End of the event-time window" in shown["window_end"], shown
    for column in gold.kind.by:
        assert shown[column] == source_docs[column], (column, shown[column])
    for column, aggregate in gold.kind.aggregates.items():
        assert f"{aggregate.function}({aggregate.expression})" in shown[column], (column, shown[column])


LAUNCH = "LaunchPipelineExecution"


def test_materialize_button_runs_the_materialize_job_and_succeeds(ui, shots, lake):
    """New orders arrive; bronze_orders' Materialize button launches a run of job Materialize (not Dagster's anonymous
    asset job), whose page shows it succeed; the run consumed exactly the new records."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    records = _orders(seed=12, count=200)
    assert produce(records, bootstrap=lake.kafka_bootstrap, topics=[TOPIC.name]).delivered == len(records)
    with offline_page(WIDTH, HEIGHT) as browser:
        page = _page(browser)
        page.goto(f"http://127.0.0.1:{ui}/assets/bronze_orders")
        button = page.locator("button", has_text=re.compile(r"^Materialize$"))
        button.wait_for()
        with page.expect_response(lambda r: "/graphql" in r.url and LAUNCH in (r.request.post_data or ""),
                                  timeout=180_000) as launched:
            button.click()   # the UI loads what it launches (slow on a busy machine), then launches it
        request = json.loads(launched.value.request.post_data)
        job = request["variables"]["executionParams"]["selector"]["pipelineName"]
        assert job == "Materialize", job
        result = launched.value.json()["data"]["launchPipelineExecution"]
        assert result.get("run"), result
        run_id = result["run"]["id"]

        # The toast's View link opens the run's page.
        page.locator(f'a[href="/runs/{run_id}"]', has_text="View").click()
        page.wait_for_url(f"**/runs/{run_id}")
        job_link = page.locator("a[href$='/jobs/Materialize']", has_text=re.compile(r"^Materialize$"))
        job_link.first.wait_for()
        assert page.locator("a[href*='/jobs/__ASSET_JOB']").count() == 0

        deadline, last_reload = time.monotonic() + 420, time.monotonic()
        while not page.locator("[role=img][aria-label=run_success]").first.is_visible():
            for icon in ("run_failed", "run_canceled"):
                assert not page.locator(f"[role=img][aria-label={icon}]").first.is_visible(), (
                    f"the run's page shows {icon}: {page.locator('body').inner_text()[:3000]}")
            assert time.monotonic() < deadline, "the run's page did not show it succeeded in time"
            if time.monotonic() - last_reload > 30:   # the page follows the run live; reload in case it stalls
                page.reload()
                last_reload = time.monotonic()
            page.wait_for_timeout(2000)
        assert page.locator("[role=img][aria-label=run_success] + div").first.inner_text().strip() == "Success"
        page.mouse.move(WIDTH // 2, HEIGHT // 3)   # off the launch toast, which stays while the pointer is on it
        try:
            page.get_by_text(re.compile(r"^Launched run")).wait_for(state="hidden", timeout=15_000)
        except PlaywrightTimeout:
            pass   # only the screenshot shows it
        page.wait_for_timeout(1000)   # the event log below has rendered the run's last events
        page.screenshot(path=str(shots / "dagster-run-succeeded.png"))
        assert browser.blocked == []

    # What the instance recorded (not the UI): a run of job Materialize that consumed exactly the new orders.
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(lake.dagster_home)) as instance:
        run = instance.get_run_by_id(run_id)
        latest = instance.get_latest_materialization_event(dg.AssetKey("bronze_orders"))
    assert run.job_name == "Materialize" and run.status == dg.DagsterRunStatus.SUCCESS
    assert latest.run_id == run_id
    assert latest.asset_materialization.metadata["rows_written"].value == len(records)
