"""The web dashboard (spanq_server.dashboard) driven in headless Chromium:
Debian's chromium through Playwright, against a real server and PostgreSQL.
The run also takes the screenshots of docs/ (docs/dashboard-*.png): into docs/ itself
with SPANQ_SCREENSHOTS=docs (to refresh them), else into a temporary folder, so that
a plain run leaves the checkout as it was."""

import asyncio
import atexit
import dataclasses
import json
import os
import pathlib
import re
import shutil
import ssl
import subprocess
import tempfile
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import grpc
import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, async_playwright, expect

import spanq.aio
from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.edge import auth
from spanq_server.server import start

from ..conftest import ROOT
from ..helpers import duration, key, open_stream, until, value

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
REBINDING = "rebind.evil.example"
"""A name that resolves to this machine in the browser, as a DNS-rebinding attacker's does."""
REBINDING_ARGS = [f"--host-resolver-rules=MAP {REBINDING} 127.0.0.1",
                  # Chromium's own guard (Local/Private Network Access: a public page may not call
                  # loopback) off, as in browsers that have none (Firefox, Safari): the dashboard's check alone.
                  "--disable-features=BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights,"
                  "LocalNetworkAccessChecks"]
DOCS = ROOT / "docs" if os.environ.get("SPANQ_SCREENSHOTS") == "docs" else \
    pathlib.Path(tempfile.mkdtemp(prefix="spanq-screenshots-"))
if DOCS.name != "docs":
    atexit.register(shutil.rmtree, DOCS, ignore_errors=True)
LIVE = 10_000
"""Milliseconds a live update may take to show (the page refreshes every 2 s)."""


def ensure_chromium() -> str:
    """Debian's chromium, installed once when missing (CI runs as root on a fresh machine)."""
    if not os.path.exists(CHROMIUM):
        apt = shutil.which("apt-get")
        assert apt is not None, f"{CHROMIUM} is missing and there is no apt-get to install it: install chromium"
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        if subprocess.run([apt, "install", "-y", "-qq", "chromium"], stdout=subprocess.DEVNULL, env=env).returncode:
            subprocess.run([apt, "update", "-qq"], check=True, stdout=subprocess.DEVNULL, env=env)
            subprocess.run([apt, "install", "-y", "-qq", "chromium"], check=True, stdout=subprocess.DEVNULL, env=env)
    return CHROMIUM


# One event loop for the module's tests (and test_dashboard_archive's), so that one browser,
# started once, serves them all: Playwright and a launch were a second of each test.
pytestmark = [pytest.mark.asyncio(loop_scope="module"),
              # ... which pytest-asyncio also puts on the module's few plain tests, and says so.
              pytest.mark.filterwarnings("ignore:The test <Function .* is marked with '@pytest.mark.asyncio'")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def chromium() -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        launched = await p.chromium.launch(executable_path=ensure_chromium(), args=CHROMIUM_ARGS)
        yield launched
        await launched.close()


@pytest_asyncio.fixture(loop_scope="module")
async def browser(chromium: Browser) -> AsyncIterator[Browser]:
    """The module's browser for one test: each page it opens is in a context of its own (no
    cookies or storage shared between tests), closed after the test."""
    yield chromium
    for context in chromium.contexts:
        await context.close()


@pytest_asyncio.fixture(loop_scope="module")
async def ui(server_config, clock) -> AsyncIterator[Any]:
    running = await start(dataclasses.replace(server_config, ui_listen="127.0.0.1:0"), clock=clock)
    yield running
    await running.stop(0)


async def open_page(browser: Browser, port: int, path: str = "#/") -> Page:
    page = await browser.new_page(viewport={"width": 1100, "height": 640})
    page.on("dialog", lambda dialog: dialog.accept())  # the purge and redrive confirmations
    await page.goto(f"http://127.0.0.1:{port}/{path}")
    return page


def row(page: Page, queue: str) -> Any:
    return page.locator(f'#queues tr[data-queue="{queue}"]')


async def expect_counts(page: Page, queue: str, ready: int, leased: int, dead: int) -> None:
    r = row(page, queue)
    await expect(r.locator("td.ready")).to_have_text(str(ready), timeout=LIVE)
    await expect(r.locator("td.leased")).to_have_text(str(leased), timeout=LIVE)
    await expect(r.locator("td.dead_lettered")).to_have_text(str(dead), timeout=LIVE)


async def loaded(page: Page) -> None:
    """Until the page has drawn once more from a fresh read (each read samples the counts)."""
    before = await page.locator("#page").get_attribute("data-loaded")
    await expect(page.locator("#page")).not_to_have_attribute("data-loaded", before or "", timeout=LIVE)


async def test_queues_page_counts_live_and_marks_a_stuck_queue(ui, browser, clock):
    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("dead", key_columns=[("id", "INT64")], payload_type="STRING")
        await client.create_queue("work", key_columns=[("id", "INT64")], payload_type="STRING",
                                  max_delivery_attempts=5, dead_letter_queue="dead")
        for i in range(3):
            await client.send("work", f"m{i}", key=i)
        await client.send("work", "later", key=10, delay=3600)
        page = await open_page(browser, ui.ui_port)
        await expect_counts(page, "work", ready=3, leased=0, dead=0)
        await expect(row(page, "work").locator("td.scheduled")).to_have_text("1")
        await expect(row(page, "work").locator("td.send_rate")).to_have_text(f"{4 / 60:.2f}/s")
        await expect(row(page, "work")).not_to_have_class("alarm")  # not a minute seen yet
        await expect(page.locator("#refresh-state")).to_contain_text("Live, every 2 s · updated")
        # Nobody takes the ready messages for a minute: the row turns red, and says why.
        clock.advance(timedelta(seconds=61))
        await expect(row(page, "work")).to_have_class("alarm", timeout=LIVE)
        stalled = row(page, "work").locator(".mark.stalled")
        await expect(stalled).to_have_attribute("title", re.compile(r"stalled: its oldest ready message has waited "
                                                                    r"6\d s and nobody took it in the last 6\d s"))
        await expect(page.locator("#marks-legend")).to_contain_text("the same message has been the oldest ready one")

        [m] = await client.receive("work", 1, lease_duration=60)
        await expect_counts(page, "work", ready=2, leased=1, dead=0)
        await client.ack("work", m)
        await expect_counts(page, "work", ready=2, leased=0, dead=0)
        await expect(row(page, "work").locator("td.ack_rate")).to_have_text(f"{1 / 60:.2f}/s", timeout=LIVE)

        # A dead letter (sent straight to the dead-letter queue) counts, and marks work red, saying so.
        await client.send("dead", "buried", key=99)
        await expect_counts(page, "work", ready=2, leased=0, dead=1)
        await expect(row(page, "work").locator(".mark.dead-lettering")).to_have_attribute(
            "title", "dead-lettering: 1 message(s) went to its dead-letter queue in the last minute")
        await page.screenshot(path=str(DOCS / "dashboard-queues.png"))
        # The dead-letter queue's own letter waits for an operator: never a stalled mark.
        clock.advance(timedelta(seconds=61))
        await expect(row(page, "dead").locator("td.oldest_ready_age")).to_have_text(re.compile("min"), timeout=LIVE)
        await loaded(page)
        await expect(row(page, "dead")).not_to_have_class("alarm")
        await expect(row(page, "work").locator(".mark.dead-lettering")).to_have_count(0)  # over a minute ago

        # Pause stops the refresh, and says so; resume starts it again.
        await page.click("#pause")
        await expect(page.locator("#refresh-state")).to_contain_text("Paused")
        await client.send("work", "while paused", key=50)
        with pytest.raises(AssertionError):
            await expect(row(page, "work").locator("td.ready")).to_have_text("3", timeout=3000)
        await page.click("#pause")
        await expect(row(page, "work").locator("td.ready")).to_have_text("3", timeout=LIVE)

        # Streams: a Receive stream open on this server, and its lease in flight.
        async with grpc.aio.insecure_channel(ui.target) as channel:
            call = queue_pb2_grpc.QueueServiceStub(channel).Receive(queue_pb2.ReceiveRequest(
                queue="work", max_outstanding=1, lease_duration=duration(60)))
            first = await anext(aiter(call))
            assert len(first.messages) == 1
            streams = await open_page(browser, ui.ui_port, "#/streams")
            work = streams.locator('#streams tr[data-queue="work"]')
            await expect(work.locator("td.streams")).to_have_text("1", timeout=LIVE)
            await expect(work.locator("td.leased")).to_have_text("1", timeout=LIVE)
            await streams.screenshot(path=str(DOCS / "dashboard-streams.png"))
            call.cancel()


async def test_a_queue_worked_through_is_not_marked_stalled(ui, browser, clock):
    """The red mark fired on any queue whose oldest ready message aged over three reads (2 s
    apart): every backlog, and every dead-letter queue holding letters. Now: the same message
    oldest ready for a minute."""
    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("busy", key_columns=[("id", "INT64")], payload_type="STRING")
        await client.send("busy", "first", key=1)
        page = await open_page(browser, ui.ui_port)
        await expect_counts(page, "busy", ready=1, leased=0, dead=0)
        clock.advance(timedelta(seconds=30))
        await client.send("busy", "second", key=2)
        await expect_counts(page, "busy", ready=2, leased=0, dead=0)
        [m] = await client.receive("busy", 1)  # the oldest, taken
        await client.ack("busy", m)
        await expect_counts(page, "busy", ready=1, leased=0, dead=0)
        clock.advance(timedelta(seconds=31))
        await expect(row(page, "busy").locator("td.oldest_ready_age")).to_have_text(re.compile(r"^3\d\.\d s$"),
                                                                                     timeout=LIVE)
        await loaded(page)
        await expect(row(page, "busy")).not_to_have_class("alarm")
        # Left alone another minute, the second one is the same oldest ready message throughout: stalled.
        clock.advance(timedelta(seconds=61))
        await expect(row(page, "busy").locator(".mark.stalled")).to_have_count(1, timeout=LIVE)


async def test_queue_page_charts_have_axes_and_read_by_keyboard(ui, browser, clock, sql):
    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("dead", key_columns=[("id", "INT64")], payload_type="STRING")
        await client.create_queue("work", key_columns=[("id", "INT64")], payload_type="STRING",
                                  max_delivery_attempts=5, dead_letter_queue="dead")
        await client.send_many("work", [spanq.OutgoingMessage(f"m{i}", i) for i in range(12)])
        page = await open_page(browser, ui.ui_port, "#/queue/work")
        depth = page.locator("#chart-depth")
        await expect(depth.locator(".readout")).to_have_text("now: ready 12, scheduled 0, in flight 0", timeout=LIVE)
        # Axes: a round top (20 for 12 messages), 0, and the minutes before now.
        await expect(depth.locator("text.tick.y")).to_have_text(["0", "10", "20"])
        await expect(depth.locator("text.tick.x")).to_have_text(["now", "-1 min", "-2 min", "-3 min", "-4 min"])
        await expect(depth.locator("figcaption")).to_contain_text("ready")
        await expect(page.locator("#chart-rates .readout")).to_have_text(f"now: sent {12 / 10:.2f}, acked 0")
        await expect(page.locator("#chart-dead figcaption")).to_contain_text("Dead-lettered to dead")

        # Ten seconds on, three taken: the chart's newest point says so, the one before what was.
        leased = await client.receive("work", 3, lease_duration=60)
        assert len(leased) == 3
        clock.advance(timedelta(seconds=10))
        await expect(depth.locator(".readout")).to_have_text("now: ready 9, scheduled 0, in flight 3", timeout=LIVE)
        assert sql.execute('SELECT count(*) FILTER (WHERE spanq_lease_token IS NOT NULL), count(*) FROM "work"'
                           ).fetchone() == (3, 12)
        await depth.focus()
        await page.keyboard.press("ArrowLeft")
        await expect(depth.locator(".readout")).to_have_text("0:10 ago: ready 12, scheduled 0, in flight 0")
        await page.keyboard.press("Home")
        await expect(depth.locator(".readout")).to_have_text(
            "4:50 ago: ready not read, scheduled not read, in flight not read")
        # The page redraws every 2 s: the chart keeps the focus and its place.
        await loaded(page)
        await expect(depth).to_be_focused()
        await expect(depth.locator(".readout")).to_contain_text("4:50 ago")
        await page.keyboard.press("End")
        await expect(depth.locator(".readout")).to_have_text("now: ready 9, scheduled 0, in flight 3")
        await expect(depth.locator("polyline.line.leased")).to_have_count(1)
        await page.screenshot(path=str(DOCS / "dashboard-charts.png"))


async def test_the_dead_letter_queue_page_says_where_and_why_each_failed(ui, browser, clock, sql):
    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("dead", key_columns=[("id", "INT64")], payload_type="STRING")
        await client.create_queue("work", key_columns=[("id", "INT64")], payload_type="STRING",
                                  max_delivery_attempts=2, dead_letter_queue="dead", initial_backoff=1,
                                  max_backoff=1)
        await client.send("work", "card 4242", key=7)
        for _ in range(2):
            [m] = await client.receive("work", 1, lease_duration=60)
            await client.nack("work", m, reason="payment gateway said: card declined")
            clock.advance(timedelta(seconds=2))
        assert await client.receive("work", 1, timeout=0.5) == []  # the third delivery dead-letters it
        source, attempts, failure = sql.execute(
            'SELECT spanq_dead_letter_source, spanq_dead_letter_attempts, spanq_last_failure FROM "dead"').fetchone()
        assert (source, attempts, failure) == ("work", 2, "payment gateway said: card declined")

        page = await open_page(browser, ui.ui_port, "#/queue/dead")
        letter = page.locator('#messages tr.message[data-key="[\\"7\\"]"]')
        await expect(letter.locator("td.source")).to_have_text("work", timeout=LIVE)
        await expect(letter.locator("td.source-attempts")).to_have_text("2")
        await expect(letter.locator("td.failure")).to_have_text("payment gateway said: card declined")
        await expect(page.locator("#messages thead")).to_contain_text("Attempts there")
        # A queue without dead letters shows no such columns.
        await page.goto(f"http://127.0.0.1:{ui.ui_port}/#/queue/work")
        await expect(page.locator("#queue-name")).to_have_text("work", timeout=LIVE)
        await expect(page.locator("#messages thead")).not_to_contain_text("Attempts there")


async def test_the_queue_page_shows_priorities_and_headers_as_text(ui, browser):
    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("jobs", key_columns=[("id", "INT64")], payload_type="STRING")
        await client.send("jobs", "x", key=1, priority=7, headers={"tenant": "<b>acme</b>", "traceparent": "00-ab"})
        await client.send("jobs", "y", key=2)
        page = await open_page(browser, ui.ui_port, "#/queue/jobs")
        tagged = page.locator('#messages tr.message[data-key="[\\"1\\"]"]')
        await expect(tagged.locator("td.priority")).to_have_text("7", timeout=LIVE)
        await expect(tagged.locator("td.headers div.header")).to_have_text(["tenant=<b>acme</b>", "traceparent=00-ab"])
        await expect(page.locator('#messages tr.message[data-key="[\\"2\\"]"] td.priority')).to_have_text("0")
        await expect(page.locator("#messages thead")).to_contain_text("Headers")


async def test_the_queue_page_shows_ordering_keys_and_held_messages(ui, browser):
    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("jobs", key_columns=[("id", "INT64")], payload_type="STRING",
                                  enable_message_ordering=True)
        await client.send("jobs", "x", key=1, ordering_key="<i>cart-7</i>")
        await client.send("jobs", "y", key=2, ordering_key="<i>cart-7</i>")
        await client.send("jobs", "z", key=3)
        page = await open_page(browser, ui.ui_port, "#/queue/jobs")
        head = page.locator('#messages tr.message[data-key="[\\"1\\"]"]')
        held = page.locator('#messages tr.message[data-key="[\\"2\\"]"]')
        await expect(head.locator("td.ordering-key")).to_have_text("<i>cart-7</i>", timeout=LIVE)
        await expect(held.locator("td.state")).to_have_text("HELD")
        await expect(page.locator('#messages tr.message[data-key="[\\"3\\"]"] td.ordering-key')).to_have_text("none")
        await expect(page.locator("#messages thead")).to_contain_text("Ordering key")
        await expect(page.locator("#queue-counts")).to_contain_text("held 1")
        await expect(page.locator("#ordering")).to_have_text("on (ordering keys)")
        # The send form takes an ordering key on such a queue: sent behind 1 and 2, it is held.
        await page.click("#send-panel summary")
        await page.fill("#send-key-0", "4")
        await page.fill("#send-payload", "w")
        await page.fill("#send-ordering-key", "<i>cart-7</i>")
        await page.click("#send-submit")
        await expect(page.locator("#send-result")).to_have_text('Sent: key ["4"].', timeout=LIVE)
        await expect(page.locator('#messages tr.message[data-key="[\\"4\\"]"] td.state')).to_have_text(
            "HELD", timeout=LIVE)
        await expect(page.locator("#queue-counts")).to_contain_text("held 2", timeout=LIVE)


async def test_message_ordering_is_turned_on_and_off_from_the_settings_panel(ui, browser, sql):
    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("jobs", key_columns=[("id", "INT64")], payload_type="STRING")
        page = await open_page(browser, ui.ui_port, "#/queue/jobs")
        await expect(page.locator("#ordering")).to_have_text("off", timeout=LIVE)
        await page.click("#settings-panel summary")
        await page.select_option("#setting-enable_message_ordering", "on")
        await page.click("#settings-save")
        await expect(page.locator("#settings-result")).to_have_text("Saved: enable_message_ordering.", timeout=LIVE)
        await expect(page.locator("#ordering")).to_have_text("on (ordering keys)", timeout=LIVE)
        assert sql.execute("SELECT enable_message_ordering FROM spanq.queues WHERE name = 'jobs'").fetchone() == (True,)
        await client.send("jobs", "x", key=1, ordering_key="k")
        await client.send("jobs", "y", key=2, ordering_key="k")  # held behind 1: off is refused
        await page.select_option("#setting-enable_message_ordering", "off")
        await page.click("#settings-save")
        await expect(page.locator("#settings-result")).to_contain_text("holds messages", timeout=LIVE)
        assert sql.execute("SELECT enable_message_ordering FROM spanq.queues WHERE name = 'jobs'").fetchone() == (True,)


async def test_a_large_payload_is_folded_and_a_narrow_screen_scrolls_no_page(ui, browser):
    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("docs", key_columns=[("id", "INT64")], payload_type="JSON")
        big = {"title": "report", "rows": [{"n": i, "text": "x" * 40} for i in range(200)]}
        await client.send("docs", big, key=1)
        await client.send("docs", {"small": True}, key=2)
        page = await open_page(browser, ui.ui_port, "#/queue/docs")
        folded = page.locator('#messages tr[data-key="[\\"1\\"]"] details.payload')
        await expect(folded.locator("summary")).to_contain_text("{ …", timeout=LIVE)
        await expect(folded.locator("summary")).to_contain_text("characters)")
        assert not await folded.evaluate("d => d.open")
        small = page.locator('#messages tr[data-key="[\\"2\\"]"]')
        await expect(small.locator("pre.payload")).to_have_text('{\n  "small": true\n}')
        row_height = await page.locator('#messages tr[data-key="[\\"1\\"]"]').evaluate("r => r.offsetHeight")
        assert row_height < 60
        await folded.locator("summary").click()
        await expect(folded.locator("pre.payload")).to_contain_text('"n": 199')
        await loaded(page)  # stays open across the refresh
        assert await folded.evaluate("d => d.open")

        narrow = await browser.new_page(viewport={"width": 390, "height": 800})
        for path in ("#/", "#/queue/docs", "#/streams"):
            await narrow.goto(f"http://127.0.0.1:{ui.ui_port}/{path}")
            await expect(narrow.locator("#page")).to_have_attribute("data-loaded", re.compile("."), timeout=LIVE)
            width = await narrow.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, f"{path} is {width} px wide on a 390 px screen"
        await narrow.goto(f"http://127.0.0.1:{ui.ui_port}/#/queue/docs")
        # Measured in the page, once the chart has its width: a redraw between finding the chart and
        # measuring it detached it (bounding_box None), and one caught during the hash change's
        # redraw measured 0 (the embedded PostgreSQL's CI run).
        width = await (await narrow.wait_for_function(
            "() => { const e = document.getElementById('chart-depth');"
            " const w = e ? e.getBoundingClientRect().width : 0; return w > 0 ? w : null; }",
            timeout=LIVE)).json_value()
        assert width <= 390
        await narrow.screenshot(path=str(DOCS / "dashboard-narrow.png"))


async def shown_keys(page: Page) -> list[str]:
    return await page.locator("#messages tr.message td.key").all_inner_texts()


async def test_the_queue_page_searches_by_key_prefix_state_attempt_and_payload_text(ui, browser, sql):
    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("jobs", key_columns=[("id", "STRING")], payload_type="JSON")
        await client.send_many("jobs", [spanq.OutgoingMessage({"customer": c, "n": i}, f"{kind}-{i}")
                                        for i, (kind, c) in enumerate([("order", "Ada"), ("order", "Bob"),
                                                                       ("invoice", "Ada"), ("order", "Cy")])])
        await client.send("jobs", {"customer": "Ada", "later": True}, key="order-9", delay=3600)
        [held] = await client.receive("jobs", 1, lease_duration=600)  # order-0, attempt 1, leased
        assert held.key == ("order-0",)
        page = await open_page(browser, ui.ui_port, "#/queue/jobs")
        await expect(page.locator("#messages tr.message")).to_have_count(5, timeout=LIVE)

        await page.fill("#filter-key_prefix", "order-")
        await page.fill("#filter-text", "ada")  # case folded
        await loaded(page)  # typing survives a redraw
        await expect(page.locator("#filter-text")).to_have_value("ada")
        await page.click("#search-apply")
        await expect(page.locator("#search-applied")).to_contain_text("key starts with order-", timeout=LIVE)
        await expect(page.locator("#messages tr.message")).to_have_count(2, timeout=LIVE)
        assert await shown_keys(page) == ['["order-0"]', '["order-9"]']
        assert [r[0] for r in sql.execute(
            "SELECT id FROM jobs WHERE starts_with(id, 'order-') AND payload->>'customer' = 'Ada' "
            "ORDER BY deliver_time, id")] == ["order-0", "order-9"]  # order-0's lease moved its deliver_time

        await page.select_option("#filter-state", "SCHEDULED")
        await page.click("#search-apply")
        await expect(page.locator("#messages tr.message")).to_have_count(1, timeout=LIVE)
        assert await shown_keys(page) == ['["order-9"]']

        await page.click("#search-clear")
        await page.fill("#filter-min_attempt", "1")
        await page.click("#search-apply")
        await expect(page.locator("#messages tr.message")).to_have_count(1, timeout=LIVE)
        assert await shown_keys(page) == ['["order-0"]']
        await expect(page.locator("#messages tr.message td.state")).to_have_text("LEASED")

        await page.fill("#filter-text", "nobody has this")
        await page.click("#search-apply")
        await expect(page.locator("#no-messages")).to_have_text("No messages match.", timeout=LIVE)
        await page.click("#search-clear")
        await expect(page.locator("#messages tr.message")).to_have_count(5, timeout=LIVE)

        # A bad filter is a clear 400, and changes nothing.
        for query, said in (("state=GONE", "state must be one of READY, SCHEDULED, LEASED"),
                            ("min_attempt=-1", "min_attempt must be a whole number"),
                            ("text=" + "x" * 1001, "at most 1000 characters")):
            answer = await page.evaluate(f"""async () => {{
                const r = await fetch('/api/queues/jobs/messages?{query}');
                return [r.status, (await r.json()).error];
            }}""")
            assert answer[0] == 400 and said in answer[1], answer
        assert count(sql, "jobs") == 5


async def test_one_message_is_deleted_released_and_redriven_from_the_page(ui, browser, sql, clock):
    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("dead", key_columns=[("id", "INT64")], payload_type="STRING")
        await client.create_queue("work", key_columns=[("id", "INT64")], payload_type="STRING",
                                  max_delivery_attempts=1, dead_letter_queue="dead", initial_backoff=1, max_backoff=1)
        await client.send_many("work", [spanq.OutgoingMessage(f"w{i}", i) for i in range(1, 4)])
        [failing] = await client.receive("work", 1, lease_duration=60)  # key 1
        await client.nack("work", failing, reason="boom")
        clock.advance(timedelta(seconds=2))
        held, _ = await client.receive("work", 3, lease_duration=600)  # 2 and 3 held; 1 dead-lettered on the way
        assert held.key == (2,) and count(sql, "dead") == 1

        page = await open_page(browser, ui.ui_port, "#/queue/work")
        message = lambda key: page.locator(f'#messages tr.message[data-key="[\\"{key}\\"]"]')  # noqa: E731
        # Release now: the held message is ready at once, its attempt still counted; the holder's ack fails.
        await message(2).locator("button.release").click(timeout=LIVE)
        await expect(page.locator("#action-result")).to_have_text('Released the message with key ["2"].', timeout=LIVE)
        await expect(message(2).locator("td.state")).to_have_text("READY", timeout=LIVE)
        assert sql.execute("SELECT spanq_lease_token, spanq_delivery_attempt FROM work WHERE id = 2").fetchone() == \
            (None, 1)
        with pytest.raises(spanq.SpanqError):
            await client.ack("work", held)
        assert count(sql, "work") == 2
        # Delete (confirmed), leased or not: gone from the table.
        await message(3).locator("button.delete").click()
        await expect(page.locator("#action-result")).to_have_text('Deleted the message with key ["3"].', timeout=LIVE)
        assert [r[0] for r in sql.execute("SELECT id FROM work ORDER BY id")] == [2]
        await expect(message(3)).to_have_count(0, timeout=LIVE)

        # Redrive one, to the queue it failed in.
        await page.goto(f"http://127.0.0.1:{ui.ui_port}/#/queue/dead")
        await expect(message(1).locator("button.redrive-one")).to_have_text("Redrive to work", timeout=LIVE)
        await page.screenshot(path=str(DOCS / "dashboard-dead-letters.png"), full_page=True)
        await message(1).locator("button.redrive-one").click()
        await expect(page.locator("#action-result")).to_have_text('Redrove the message with key ["1"] to work.',
                                                                  timeout=LIVE)
        assert count(sql, "dead") == 0
        assert sql.execute("SELECT payload, spanq_delivery_attempt FROM work WHERE id = 1").fetchone() == ("w1", 0)

        # Refused: a key that is not there, a release of an unleased message, a bad key; nothing changes.
        for action, body, status, said in (
                ("delete", '{"key": ["77"]}', 400, "holds no message with key"),
                ("release", '{"key": ["2"]}', 409, "is not leased"),
                ("delete", '{"key": "2"}', 400, "must be a list"),
                ("delete", '{"key": ["x"]}', 400, "key"),
                ("redrive", '{"key": ["2"], "to": "work"}', 400, "cannot redrive queue 'work' into itself")):
            answer = await page.evaluate(f"""async () => {{
                const r = await fetch('/api/queues/work/messages/{action}', {{method: 'POST', body: '{body}',
                    headers: {{'Content-Type': 'application/json'}}}});
                return [r.status, (await r.json()).error];
            }}""")
            assert answer[0] == status and said in answer[1], (action, body, answer)
        assert [r[0] for r in sql.execute("SELECT id FROM work ORDER BY id")] == [1, 2]


async def test_queue_page_shows_payloads_by_type_and_pages(ui, browser):
    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("events", key_columns=[("id", "INT64")], payload_type="JSON")
        await client.create_queue("blobs", key_columns=[("id", "INT64")], payload_type="BYTES")
        await client.send("events", {"order": 7, "items": ["tea", "<b>cake</b>"]}, key=1)
        await client.send_many("events", [spanq.OutgoingMessage({"n": i}, i) for i in range(2, 26)])
        await client.send("blobs", b"\x00\xffhi", key=1)

        page = await open_page(browser, ui.ui_port, "#/queue/events")
        first = page.locator("#messages tr.message").first
        await expect(first.locator("pre.payload")).to_contain_text('"order": 7', timeout=LIVE)
        await expect(first.locator("pre.payload")).to_contain_text('"<b>cake</b>"')  # text, not markup
        await expect(first.locator("td.state")).to_have_text("READY")
        await expect(page.locator(".def")).to_contain_text("JSON")
        await expect(page.locator("#messages tr.message")).to_have_count(20)
        await page.screenshot(path=str(DOCS / "dashboard-queue.png"), full_page=False)
        await page.click("#next-page")
        await expect(page.locator("#messages tr.message")).to_have_count(5, timeout=LIVE)
        await expect(page.locator("#messages tr.message").last.locator("pre.payload")).to_contain_text('"n": 25')

        await page.goto(f"http://127.0.0.1:{ui.ui_port}/#/queue/blobs")
        await expect(page.locator("#queue-name")).to_have_text("blobs", timeout=LIVE)
        await expect(page.locator("#messages pre.payload")).to_have_text("00 ff 68 69", timeout=LIVE)


def count(sql, table: str) -> int:
    return sql.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]


async def test_purge_and_redrive_from_the_page(ui, browser, sql):
    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("dead", key_columns=[("id", "INT64")], payload_type="STRING")
        await client.create_queue("work", key_columns=[("id", "INT64")], payload_type="STRING",
                                  max_delivery_attempts=1, dead_letter_queue="dead")
        await client.send_many("dead", [spanq.OutgoingMessage(f"d{i}", i) for i in range(250)])
        await client.send_many("work", [spanq.OutgoingMessage(f"w{i}", 1000 + i) for i in range(3)])

        page = await open_page(browser, ui.ui_port, "#/queue/dead")
        await expect(page.locator("#redrive")).to_have_text("Redrive to work", timeout=LIVE)
        await page.click("#redrive")
        await expect(page.locator("#action-result")).to_contain_text("moved 250 to work, 0 left", timeout=LIVE)
        assert (count(sql, "dead"), count(sql, "work")) == (0, 253)

        await page.goto(f"http://127.0.0.1:{ui.ui_port}/#/queue/work")
        await expect(page.locator("#queue-counts")).to_contain_text("ready 253", timeout=LIVE)
        await page.click("#purge")
        await expect(page.locator("#action-result")).to_have_text("Purged 253 message(s).", timeout=LIVE)
        assert count(sql, "work") == 0


@pytest.fixture
def tokens(tmp_path: pathlib.Path, server_config) -> Any:
    tokens = {"reader": "spanq_reader_token", "operator": "spanq_operator_token"}
    grants = {"reader": '{ work = ["select"] }', "operator": '{ "*" = ["select", "ack", "send", "admin"] }'}
    path = tmp_path / "tokens.toml"
    path.write_text("".join(f'[tokens.{n}]\nsha256 = "{auth.digest(t)}"\ngrants = {grants[n]}\n'
                            for n, t in tokens.items()))
    return tokens, dataclasses.replace(server_config, auth_file=str(path), ui_listen="127.0.0.1:0")


async def test_pages_need_a_token_with_their_rpcs_privilege(tokens, clock, browser, sql, caplog):
    secrets, config = tokens
    running = await start(config, clock=clock)
    try:
        async with spanq.aio.Client(running.target, token=secrets["operator"]) as client:
            await client.create_queue("work", key_columns=[("id", "INT64")], payload_type="STRING")
            await client.create_queue("secret", key_columns=[("id", "INT64")], payload_type="STRING")
            await client.send("work", "hello", key=1)
        page = await open_page(browser, running.ui_port)
        # No token: the page asks for one; nothing is shown.
        await expect(page.locator("#token-form")).to_be_visible(timeout=LIVE)
        await expect(page.locator("#error")).to_contain_text("token")
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        await page.fill("#token", secrets["reader"])
        await page.click("#token-form button")
        await expect(row(page, "work").locator("td.ready")).to_have_text("1", timeout=LIVE)
        await expect(row(page, "secret")).to_have_count(0)  # no privilege on it: not even listed

        # select but not ack: the queue page shows, its purge is refused, and nothing is purged.
        await page.goto(f"http://127.0.0.1:{running.ui_port}/#/queue/work")
        await expect(page.locator("#purge")).to_be_disabled(timeout=LIVE)
        refused = await page.evaluate("""async () => {
            const r = await fetch('/api/queues/work/purge', {method: 'POST', body: '{}', headers: {
                'Content-Type': 'application/json', 'Authorization': 'Bearer ' + sessionStorage.getItem('spanq-token')}});
            return [r.status, (await r.json()).error];
        }""")
        assert refused[0] == 403 and "'ack' privilege on queue 'work'" in refused[1]
        await expect(page.locator("#messages tr.message button.delete")).to_be_disabled()
        for action, privilege in (("delete", "ack"), ("release", "receive")):
            refused = await page.evaluate(f"""async () => {{
                const r = await fetch('/api/queues/work/messages/{action}', {{method: 'POST', body: '{{"key": ["1"]}}',
                    headers: {{'Content-Type': 'application/json',
                               'Authorization': 'Bearer ' + sessionStorage.getItem('spanq-token')}}}});
                return [r.status, (await r.json()).error];
            }}""")
            assert refused[0] == 403 and f"'{privilege}' privilege on queue 'work'" in refused[1], refused
        assert count(sql, "work") == 1
        # Nor may it send (the send privilege) or change the settings (admin); it may see the consumers.
        await expect(page.locator("#send-submit")).to_be_disabled()
        await expect(page.locator("#settings-save")).to_be_disabled()
        for action, body, privilege in (("send", '{"key": ["2"], "payload": "x"}', "send"),
                                        ("settings", '{"lease_duration": "30s"}', "admin")):
            refused = await page.evaluate(f"""async () => {{
                const r = await fetch('/api/queues/work/{action}', {{method: 'POST', body: '{body}',
                    headers: {{'Content-Type': 'application/json',
                               'Authorization': 'Bearer ' + sessionStorage.getItem('spanq-token')}}}});
                return [r.status, (await r.json()).error];
            }}""")
            assert refused[0] == 403 and f"'{privilege}' privilege on queue 'work'" in refused[1], refused
        assert count(sql, "work") == 1
        assert sql.execute("SELECT lease_duration FROM spanq.queues WHERE name = 'work'").fetchone() == (
            timedelta(seconds=10),)
        consumers = await page.evaluate("""async () => (await fetch('/api/queues/work/consumers', {headers: {
            'Authorization': 'Bearer ' + sessionStorage.getItem('spanq-token')}})).json()""")
        assert consumers["streams"] == []
        # No privilege at all on a queue: its page is refused.
        await page.goto(f"http://127.0.0.1:{running.ui_port}/#/queue/secret")
        await expect(page.locator("#error")).to_contain_text("lacks the 'select' privilege", timeout=LIVE)
        await expect(page.locator("#messages")).to_have_count(0)

        # The token is never in a URL nor in the server's log.
        assert requests and not any(secrets["reader"] in url for url in requests)
        assert all(secrets["reader"] not in record.getMessage() for record in caplog.records)
        assert any("token=reader" in record.getMessage() for record in caplog.records)
    finally:
        await running.stop(0)


async def test_actions_refuse_another_sites_requests(ui):
    """A page of another site cannot make the browser purge: the actions take JSON (which
    a cross-site request cannot send without CORS, never granted) from this origin only."""
    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("work", key_columns=[("id", "INT64")], payload_type="STRING")
        await client.send("work", "keep me", key=1)
    host = f"127.0.0.1:{ui.ui_port}"
    for action in ("purge", "messages/delete", "messages/release", "messages/redrive", "send", "settings", "pause"):
        path = f"/api/queues/work/{action}"
        plain = await http_post(host, path, "text/plain", "", '{"key": ["1"]}')
        assert plain[0] == 400 and "application/json" in plain[1]
        foreign = await http_post(host, path, "application/json", "http://evil.example", '{"key": ["1"]}')
        assert foreign[0] == 403 and "origin" in foreign[1]
        rebound = await http_post(f"{REBINDING}:{ui.ui_port}", path, "application/json", "", '{"key": ["1"]}')
        assert rebound[0] == 421
    async with spanq.aio.Client(ui.target) as client:
        assert (await client.stats("work")).ready == 1
    ok = await http_post(host, "/api/queues/work/purge", "application/json", f"http://{host}")
    assert ok == (200, '{"purged":1}')


async def http_post(host: str, path: str, content_type: str, origin: str, body: str = "{}") -> tuple[int, str]:
    return await http(int(host.split(":")[1]), f"POST {path}", {"Host": host, "Content-Type": content_type,
                                                                **({"Origin": origin} if origin else {})}, body)


async def http(port: int, request: str, headers: dict[str, str], body: str = "") -> tuple[int, str]:
    """One raw HTTP/1.1 exchange with the dashboard on 127.0.0.1 (headers as given: no Host
    unless named; Content-Length added unless named): (status, body)."""
    data = body.encode()
    headers = {"Content-Length": str(len(data)), **headers} if body else headers
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{request} HTTP/1.1\r\n".encode() + "".join(f"{k}: {v}\r\n" for k, v in headers.items()
                                                              ).encode("latin-1") + b"\r\n" + data)
    answer = (await reader.read()).decode()
    writer.close()
    head, _, text = answer.partition("\r\n\r\n")
    return int(head.split(" ")[1]), text


async def test_a_dns_rebinding_page_reads_and_purges_nothing(ui, sql):
    """The attacker's page, served under its own name, which then resolves to this machine:
    its fetches are same-origin for the browser, and reach the dashboard with the attacker's Host."""
    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("work", key_columns=[("id", "INT64")], payload_type="STRING")
        await client.send("work", "secret payload", key=1)
    origin = f"http://{REBINDING}:{ui.ui_port}"
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=ensure_chromium(), args=CHROMIUM_ARGS + REBINDING_ARGS)
        page = await browser.new_page()
        # The page comes from the attacker's server (here: Playwright), its calls from the dashboard.
        await page.route(f"{origin}/", lambda route: route.fulfill(content_type="text/html", body="the attacker's"))
        await page.goto(f"{origin}/")
        read, purge, script = await page.evaluate("""async () => {
            const read = await fetch('/api/queues/work/messages');
            const purge = await fetch('/api/queues/work/purge',
                                      {method: 'POST', body: '{}', headers: {'Content-Type': 'application/json'}});
            const script = await fetch('/static/app.js');
            return [[read.status, await read.text()], [purge.status, await purge.text()], [script.status, '']];
        }""")
        await browser.close()
    assert read[0] == purge[0] == script[0] == 421, (read, purge, script)
    assert "secret payload" not in read[1] and f"does not answer for host '{REBINDING}:{ui.ui_port}'" in read[1]
    assert "--ui-allowed-hosts" in purge[1]
    assert sql.execute("SELECT id, payload FROM work").fetchall() == [(1, "secret payload")]


async def test_the_dashboard_answers_for_its_own_host_names_only(server_config, clock, sql):
    config = dataclasses.replace(server_config, ui_listen="127.0.0.1:0", ui_allowed_hosts=("Spanq.Internal", "fd00::1"))
    running = await start(config, clock=clock)
    try:
        async with spanq.aio.Client(running.target) as client:
            await client.create_queue("work", key_columns=[("id", "INT64")], payload_type="STRING")
            await client.send("work", "keep me", key=1)
        port = running.ui_port
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", f"[0:0:0:0:0:0:0:1]:{port}",
                     f"LOCALHOST:{port}", "localhost", "localhost:8080",  # a port another (an ssh tunnel's)
                     f"spanq.internal:{port}", "spanq.internal", f"[fd00::1]:{port}"):
            status, body = await http(port, "GET /api/queues", {"Host": host})
            assert status == 200 and '"name":"work"' in body, (host, body)
        for host in (f"{REBINDING}:{port}", REBINDING, f"localhost.{REBINDING}:{port}", f"spanq.internal.:{port}",
                     f"[fd00::2]:{port}", "localhost:x", "localhost/x", "local host", "127.0.0.1@evil"):
            for request in ("GET /", "GET /static/app.js", "GET /api/queues", "GET /api/queues/work/messages"):
                status, body = await http(port, request, {"Host": host})
                assert status == 421 and "does not answer for host" in body and "keep me" not in body, (host, request)
            status, body = await http(port, "POST /api/queues/work/purge", {
                "Host": host, "Origin": f"http://{host}", "Content-Type": "application/json"}, "{}")
            assert status == 421, (host, body)
        assert (await http(port, "GET /api/queues", {}))[0] == 400  # no Host at all
        assert sql.execute("SELECT id, payload FROM work").fetchall() == [(1, "keep me")]
    finally:
        await running.stop(0)


async def test_bad_bodies_and_numbers_are_400_and_change_nothing(ui, sql):
    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("dead", key_columns=[("id", "INT64")], payload_type="STRING")
        await client.create_queue("work", key_columns=[("id", "INT64")], payload_type="STRING",
                                  max_delivery_attempts=1, dead_letter_queue="dead")
        await client.send_many("dead", [spanq.OutgoingMessage(f"d{i}", i) for i in range(3)])
    host = f"127.0.0.1:{ui.ui_port}"
    post = {"Host": host, "Origin": f"http://{host}", "Content-Type": "application/json"}
    for action in ("redrive", "purge"):
        for body, says in (('["work"]', "must be a JSON object, not an array"), ("7", "must be a JSON object, not a number"),
                           ("[" * 30_000 + "]" * 30_000, "nested too deep")):
            status, answer = await http(ui.ui_port, f"POST /api/queues/dead/{action}", post, body)
            assert (status, says in answer) == (400, True), (action, body[:10], status, answer)
    status, answer = await http(ui.ui_port, "POST /api/queues/dead/purge", {**post, "Content-Length": "\u00b2"}, "{}")
    assert (status, "Content-Length is not a number" in answer) == (400, True), answer
    for size in ("%C2%B2", "%D9%A3", "-1"):  # "²" and ARABIC-INDIC DIGIT THREE, which str.isdigit() takes
        status, answer = await http(ui.ui_port, f"GET /api/queues/dead/messages?page_size={size}", {"Host": host})
        assert (status, "page_size must be a whole number" in answer) == (400, True), (size, answer)
    assert (count(sql, "dead"), count(sql, "work")) == (3, 0)
    # The send form's and the settings' fields: each refused with what is wrong, nothing stored or changed.
    before = settings_row(sql, "work")
    for action, body, says in (
            ("send", '{"key": ["1"], "payload": {"a": 1}}', "`payload` must be text"),
            ("send", '{"key": "1", "payload": "x"}', "key"),
            ("send", '{"key": ["1"], "payload": "x", "priority": "high"}', "priority must be a whole number"),
            ("send", '{"key": ["1"], "payload": "x", "priority": "12"}', "priority must be between 0 and 9"),
            ("send", '{"key": ["1"], "payload": "x", "delay": "soon"}', "delay must be a number of seconds"),
            ("send", '{"key": ["1"], "payload": "x", "delay": "nan"}', "delay must be a number of seconds"),
            ("send", '{"key": ["1"], "payload": "x", "headers": "no equals sign"}', "headers line 1"),
            ("send", '{"key": ["1"], "payload": "x", "request_id": "' + "r" * 200 + '"}', "request_id must be"),
            ("settings", "{}", "give one or more of lease_duration"),
            ("settings", '{"disable_send": true}', "give one or more of lease_duration"),
            ("settings", '{"lease_duration": 30}', "lease_duration"),
            ("settings", '{"max_delivery_attempts": "many"}', "max_delivery_attempts"),
            ("settings", '{"max_delivery_attempts": 2000, "dead_letter_queue": "dead"}', "between 1 and 1000")):
        status, answer = await http(ui.ui_port, f"POST /api/queues/work/{action}", post, body)
        assert (status, says in answer) == (400, True), (action, body[:60], status, answer)
    assert count(sql, "work") == 0 and settings_row(sql, "work") == before


def test_serve_takes_more_dashboard_host_names():
    from spanq_server import cli

    assert cli.parse_config(["serve"], {}).ui_allowed_hosts == ()
    assert cli.parse_config(["serve", "--ui-allowed-hosts", "Spanq.Internal, 10.0.0.5,[FD00::1],fd00::2"],
                            {}).ui_allowed_hosts == ("spanq.internal", "10.0.0.5", "fd00::1", "fd00::2")
    assert cli.parse_config(["serve"], {"SPANQ_UI_ALLOWED_HOSTS": "a.example"}).ui_allowed_hosts == ("a.example",)
    for bad in ("spanq.internal:443", "http://x", "a b", "[::1]:9465"):
        with pytest.raises(SystemExit):
            cli.parse_config(["serve", "--ui-allowed-hosts", bad], {})


def test_serve_defaults_to_a_loopback_dashboard_and_refuses_plaintext_elsewhere():
    from spanq_server import cli
    from spanq_server.ground.config import Config, ConfigError
    from spanq_server.server import check

    assert cli.parse_config(["serve"], {}).ui_listen == "localhost:9465"
    assert cli.parse_config(["serve", "--ui-listen", "off"], {}).ui_listen == "off"
    assert cli.parse_config(["serve"], {"SPANQ_UI_LISTEN": "127.0.0.1:0"}).ui_listen == "127.0.0.1:0"
    assert Config().ui_listen == "off"  # embedding start() serves none unless asked
    with pytest.raises(ConfigError, match="refusing to serve the dashboard"):
        check(Config(ui_listen="0.0.0.0:9465"))
    with pytest.raises(ConfigError, match="dashboard address 'nope' is not HOST:PORT"):
        check(Config(ui_listen="nope"))
    check(Config(ui_listen="0.0.0.0:9465", insecure=True))


async def test_with_tls_the_dashboard_is_https_with_the_grpc_certificate(server_config, clock, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    running = await start(dataclasses.replace(server_config, ui_listen="127.0.0.1:0", tls_cert=str(cert),
                                              tls_key=str(key)), clock=clock)
    try:
        context = ssl.create_default_context(cafile=str(cert))
        reader, writer = await asyncio.open_connection("127.0.0.1", running.ui_port, ssl=context,
                                                       server_hostname="localhost")
        writer.write(b"GET /api/queues HTTP/1.1\r\nHost: localhost\r\n\r\n")
        answer = (await reader.read()).decode()
        writer.close()
        assert answer.startswith("HTTP/1.1 200 OK") and '"queues":[]' in answer
        # Plain HTTP gets no answer from a TLS port.
        reader, writer = await asyncio.open_connection("127.0.0.1", running.ui_port)
        writer.write(b"GET /api/queues HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert b"200 OK" not in await reader.read()
        writer.close()
    finally:
        await running.stop(0)


async def test_the_send_form_sends_once_per_request_id_and_shows_the_rpcs_errors(ui, browser, sql):
    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("work", key_columns=[("id", "INT64")], payload_type="JSON")
        await client.create_queue("gen", payload_type="STRING")
    page = await open_page(browser, ui.ui_port, "#/queue/work")
    await page.click("#send-panel summary")
    await page.fill("#send-key-0", "7")
    await page.fill("#send-payload", '{"order": 1}')
    await page.select_option("#send-priority", "3")
    await page.fill("#send-headers", "source=console\nteam=ops")
    await expect(page.locator("#send-ordering-key")).to_have_count(0)  # not an ordering queue
    await loaded(page)  # typing survives a redraw
    await expect(page.locator("#send-payload")).to_have_value('{"order": 1}')
    await page.click("#send-submit")
    await expect(page.locator("#send-result")).to_have_text('Sent: key ["7"].', timeout=LIVE)
    assert sql.execute("SELECT id, payload, spanq_priority, spanq_headers FROM work").fetchall() == [
        (7, {"order": 1}, 3, {"source": "console", "team": "ops"})]
    # The same form again (a double submit): the same request id, answered from the ledger.
    await page.click("#send-submit")
    await expect(page.locator("#send-result")).to_contain_text("Already sent with request id", timeout=LIVE)
    assert count(sql, "work") == 1

    # Bad input: the error spanq.v1 Send gives for it, in the form; nothing stored.
    async with grpc.aio.insecure_channel(ui.target) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as rpc:
            await queue_pb2_grpc.QueueServiceStub(channel).Send(queue_pb2.SendRequest(queue="work", messages=[
                queue_pb2.SendMessage(key=key("x8"), payload=value({"order": 2}))]))
    assert rpc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    await page.fill("#send-key-0", "x8")
    await page.click("#send-submit")
    await expect(page.locator("#send-result")).to_have_text("Refused: " + rpc.value.details(), timeout=LIVE)
    await expect(page.locator("#send-result")).to_have_class("error")
    await page.fill("#send-key-0", "8")
    await page.fill("#send-payload", "{not json")
    await page.click("#send-submit")
    await expect(page.locator("#send-result")).to_contain_text("Refused: the payload is not JSON", timeout=LIVE)
    await page.fill("#send-payload", '"later"')
    await page.fill("#send-delay", "-5")
    await page.click("#send-submit")
    await expect(page.locator("#send-result")).to_contain_text("delay cannot be negative", timeout=LIVE)
    assert count(sql, "work") == 1
    await page.fill("#send-delay", "3600")
    await page.click("#send-submit")
    await expect(page.locator("#send-result")).to_have_text('Sent: key ["8"].', timeout=LIVE)
    [(later,)] = sql.execute("SELECT deliver_time - now() > interval '59 minutes' FROM work WHERE id = 8").fetchall()
    assert later
    await page.screenshot(path=str(DOCS / "dashboard-send.png"), full_page=True)

    # A generated key: no key fields, a fresh UUID per send.
    await page.goto(f"http://127.0.0.1:{ui.ui_port}/#/queue/gen")
    # A new hash draws the page after its read: until then the summary is work's (open) panel.
    await expect(page.locator("#queue-name")).to_have_text("gen", timeout=LIVE)
    await page.click("#send-panel summary")
    await expect(page.locator("#send")).to_contain_text("The key is generated", timeout=LIVE)
    await expect(page.locator("#send-key-0")).to_have_count(0)
    await page.fill("#send-payload", "hello")
    await page.click("#send-submit")
    await expect(page.locator("#send-result")).to_contain_text("Sent: key", timeout=LIVE)
    assert sql.execute("SELECT payload FROM gen").fetchall() == [("hello",)]


def settings_row(sql, name: str) -> tuple[Any, ...]:
    return sql.execute("SELECT lease_duration, initial_backoff, max_backoff, max_delivery_attempts, dead_letter_queue, "
                       "message_retention, archive_duration FROM spanq.queues WHERE name = %s", [name]).fetchone()


async def test_queue_settings_are_edited_from_the_page_with_update_queues_checks(ui, browser, sql):
    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("dead", key_columns=[("id", "INT64")], payload_type="STRING")
        await client.create_queue("other", key_columns=[("id", "STRING")], payload_type="STRING")
        await client.create_queue("work", key_columns=[("id", "INT64")], payload_type="STRING")
    page = await open_page(browser, ui.ui_port, "#/queue/work")
    await page.click("#settings-panel summary")
    await expect(page.locator("#setting-lease_duration")).to_have_value("10", timeout=LIVE)
    await page.fill("#setting-lease_duration", "30")
    await page.fill("#setting-max_delivery_attempts", "5")
    await page.fill("#setting-dead_letter_queue", "dead")
    await page.fill("#setting-archive_duration", "3600")
    await page.click("#settings-save")
    await expect(page.locator("#settings-result")).to_have_text(
        "Saved: lease_duration, max_delivery_attempts, dead_letter_queue, archive_duration.", timeout=LIVE)
    assert settings_row(sql, "work") == (timedelta(seconds=30), timedelta(seconds=1), timedelta(hours=1), 5, "dead",
                                         None, timedelta(hours=1))
    await expect(page.locator("dl.def")).to_contain_text("acked kept 3600s", timeout=LIVE)
    await expect(page.locator("#setting-lease_duration")).to_have_value("30")

    # Bad values: UpdateQueue's own errors, and nothing changed.
    before = settings_row(sql, "work")
    for field, bad, error in (
            ("lease_duration", "0.5", "lease_duration must be between 1s and 12h"),
            ("dead_letter_queue", "nowhere", "dead-letter queue 'nowhere' does not exist"),
            ("dead_letter_queue", "other", "must have the same key columns and payload type"),
            ("max_backoff", "soon", "max_backoff")):
        await page.click("#settings-reset")
        await page.fill(f"#setting-{field}", bad)
        await page.click("#settings-save")
        await expect(page.locator("#settings-result")).to_contain_text(error, timeout=LIVE)
        await expect(page.locator("#settings-result")).to_have_class("error")
        assert settings_row(sql, "work") == before
    await page.click("#settings-reset")
    await page.click("#settings-save")
    await expect(page.locator("#settings-result")).to_have_text("Nothing changed.", timeout=LIVE)
    # Without the pair: both go, and the dead-letter queue is gone.
    await page.fill("#setting-max_delivery_attempts", "0")
    await page.fill("#setting-dead_letter_queue", "")
    await page.click("#settings-save")
    await expect(page.locator("#settings-result")).to_contain_text("Saved: max_delivery_attempts, dead_letter_queue",
                                                                    timeout=LIVE)
    assert settings_row(sql, "work")[3:5] == (None, None)


async def test_the_consumers_list_shows_an_open_stream_until_it_closes(ui, browser, server_config, clock):
    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("work", key_columns=[("id", "INT64")], payload_type="STRING")
        await client.send_many("work", [spanq.OutgoingMessage(f"m{i}", i) for i in range(5)])
    page = await open_page(browser, ui.ui_port, "#/queue/work")
    await expect(page.locator("#no-consumers")).to_be_visible(timeout=LIVE)
    async with grpc.aio.insecure_channel(ui.target) as channel:
        stub = queue_pb2_grpc.QueueServiceStub(channel)
        async with open_stream(stub, "work", max_outstanding=3, max_batch_size=2, lease_duration=duration(60)) as s:
            got = await s.take(3)
            consumer = page.locator("#consumers tr.consumer")
            await expect(consumer).to_have_count(1, timeout=LIVE)
            await expect(consumer.locator("td.held")).to_have_text("3", timeout=LIVE)
            await expect(consumer.locator("td.delivered")).to_have_text("3")
            await expect(consumer.locator("td.max-outstanding")).to_have_text("3")
            await expect(consumer.locator("td.batch")).to_have_text("2")
            await expect(consumer.locator("td.lease")).to_have_text("60 s")
            await expect(consumer.locator("td.peer")).to_contain_text("127.0.0.1:")
            await expect(page.locator("#page")).to_contain_text(f"127.0.0.1:{ui.port} (pid {os.getpid()})")
            # An ack through this server frees a lease: the holding says so, and the stream takes the next.
            await stub.Ack(queue_pb2.AckRequest(queue="work", acks=[
                queue_pb2.AckMessage(key=got[0].key, lease_token=got[0].lease_token)]))
            await s.next()
            await expect(consumer.locator("td.delivered")).to_have_text("4", timeout=LIVE)
            await expect(consumer.locator("td.held")).to_have_text("3")
            answer = await page.evaluate("async () => (await fetch('/api/queues/work/consumers')).json()")
            [stream] = answer["streams"]
            assert (stream["held"], stream["delivered"], stream["max_outstanding"]) == (3, 4, 3)
            assert stream["peer"].startswith("ipv4:127.0.0.1:") and answer["server"].endswith(f"(pid {os.getpid()})")
            # Another server on the database: its stream is listed too, as of its last report.
            other = await start(server_config, clock=clock)
            try:
                async with grpc.aio.insecure_channel(other.target) as elsewhere, \
                        open_stream(queue_pb2_grpc.QueueServiceStub(elsewhere), "work", max_outstanding=1):
                    await expect(consumer).to_have_count(2, timeout=LIVE)
                    await expect(consumer.nth(1).locator("td.server")).to_have_text(other.roster.server)
                    await expect(consumer.nth(1).locator("td.reported")).to_contain_text("s ago")
                    await expect(consumer.nth(0).locator("td.reported")).to_have_text("live")
                    await page.click("#send-panel summary")
                    await page.click("#settings-panel summary")
                    await page.screenshot(path=str(DOCS / "dashboard-consumers.png"), full_page=True)
            finally:
                await other.stop(0)
    # Closed: gone from the list (the page polls; the expectation is bounded).
    await expect(page.locator("#consumers tr.consumer")).to_have_count(0, timeout=LIVE)
    await expect(page.locator("#no-consumers")).to_be_visible()


async def is_focused(page: Page, selector: str) -> bool:
    return await page.evaluate("s => !!document.activeElement && document.activeElement.matches(s)", selector)


async def tab_to(page: Page, selector: str, limit: int = 300) -> None:
    """Presses Tab until ``selector`` has the focus (it is reachable by keyboard), and checks
    that the focus shows (style.css's ring, not the browser's faint one, or none)."""
    for _ in range(limit):
        if await is_focused(page, selector):
            ring = await page.evaluate("() => { const s = getComputedStyle(document.activeElement); "
                                       "return [s.outlineStyle, s.outlineWidth]; }")
            assert ring == ["solid", "3px"], (selector, ring)
            return
        await page.keyboard.press("Tab")
    raise AssertionError(f"{selector} not reached with {limit} presses of Tab")


async def test_every_panel_works_by_keyboard_alone(ui, browser, sql):
    """Tab, Enter and Escape only (and typing): pause and resume, the send form, the settings,
    the consumers list, a message's release, copy and delete, each checked in PostgreSQL."""
    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("work", key_columns=[("id", "INT64")], payload_type="STRING")
        await client.send_many("work", [spanq.OutgoingMessage(f"w{i}", i) for i in (1, 2)])
    context = await browser.new_context(viewport={"width": 1100, "height": 640},
                                        permissions=["clipboard-read", "clipboard-write"])
    page = await context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # the native confirm: Enter accepts it
    async with grpc.aio.insecure_channel(ui.target) as channel:
        stub = queue_pb2_grpc.QueueServiceStub(channel)
        async with open_stream(stub, "work", max_outstanding=1, lease_duration=duration(600)) as stream:
            assert (await stream.next()).key == key("1")
            await page.goto(f"http://127.0.0.1:{ui.ui_port}/#/queue/work")
            await expect(page.locator("#consumers tr.consumer")).to_have_count(1, timeout=LIVE)

            # Pause send, then Resume send: the same place keeps the focus as the button changes.
            await tab_to(page, "#pause-send")
            await page.keyboard.press("Enter")
            await until(lambda: sql.execute("SELECT disable_send FROM spanq.queues").fetchone() == (True,),
                        "send paused", LIVE / 1000)
            await expect(page.locator("#resume-send")).to_be_focused(timeout=LIVE)
            await page.keyboard.press("Enter")
            await until(lambda: sql.execute("SELECT disable_send FROM spanq.queues").fetchone() == (False,),
                        "send resumed", LIVE / 1000)
            await expect(page.locator("#pause-send")).to_be_focused(timeout=LIVE)

            # The send form: open it, fill it, send, close it with Escape.
            await tab_to(page, "#send-panel summary")
            await page.keyboard.press("Enter")
            await expect(page.locator("#send-panel")).to_have_attribute("open", "")
            await tab_to(page, "#send-key-0")
            await page.keyboard.type("7")
            await tab_to(page, "#send-payload")
            await page.keyboard.type("by keyboard")
            await tab_to(page, "#send-submit")
            await page.keyboard.press("Enter")
            await expect(page.locator("#send-result")).to_have_text('Sent: key ["7"].', timeout=LIVE)
            assert sql.execute("SELECT payload FROM work WHERE id = 7").fetchone() == ("by keyboard",)
            await page.keyboard.press("Escape")
            await expect(page.locator("#send-panel")).not_to_have_attribute("open", "")
            await expect(page.locator("#send-panel summary")).to_be_focused()

            # The settings: a new lease, saved with Enter.
            await tab_to(page, "#settings-panel summary")
            await page.keyboard.press("Enter")
            await tab_to(page, "#setting-lease_duration")
            await page.keyboard.press("Control+A")
            await page.keyboard.type("45")
            await tab_to(page, "#settings-save")
            await page.keyboard.press("Enter")
            await expect(page.locator("#settings-result")).to_have_text("Saved: lease_duration.", timeout=LIVE)
            assert settings_row(sql, "work")[0] == timedelta(seconds=45)
            await page.keyboard.press("Escape")
            await expect(page.locator("#settings-panel")).not_to_have_attribute("open", "")

            # The consumers list: a region the keyboard reaches (and scrolls, on a narrow screen).
            await tab_to(page, "#consumers-region")
        await expect(page.locator("#no-consumers")).to_be_visible(timeout=LIVE)

        # One message's actions: release (the lease stays with the closed stream's client until then).
        message = lambda k: f'#messages tr.message[data-key="[\\"{k}\\"]"]'  # noqa: E731
        assert sql.execute("SELECT spanq_lease_token IS NOT NULL FROM work WHERE id = 1").fetchone() == (True,)
        await tab_to(page, f"{message(1)} button.release")
        await page.keyboard.press("Enter")
        await expect(page.locator("#action-result")).to_have_text('Released the message with key ["1"].', timeout=LIVE)
        assert sql.execute("SELECT spanq_lease_token FROM work WHERE id = 1").fetchone() == (None,)

        # Copy: the menu opens with Enter; key, payload and the message as JSON reach the clipboard.
        await tab_to(page, f"{message(2)} details.copy-menu summary")
        await page.keyboard.press("Enter")
        await tab_to(page, f"{message(2)} button.copy-key")
        await page.locator("#messages-region").screenshot(path=str(DOCS / "dashboard-copy.png"))
        copied = []
        for what in ("key", "payload", "json"):
            await tab_to(page, f"{message(2)} button.copy-{what}")
            await page.keyboard.press("Enter")
            await expect(page.locator(f"{message(2)} button.copy-{what}")).to_contain_text("copied", timeout=LIVE)
            copied.append(await page.evaluate("navigator.clipboard.readText()"))
        assert copied[:2] == ['["2"]', "w2"]
        whole = json.loads(copied[2])
        assert (whole["key"], whole["payload"], whole["state"]) == (["2"], "w2", "READY")
        await page.keyboard.press("Escape")
        await expect(page.locator(f"{message(2)} details.copy-menu")).not_to_have_attribute("open", "")
        await expect(page.locator(f"{message(2)} details.copy-menu summary")).to_be_focused()

        # Delete (confirmed): gone from the table, and the focus goes to the line that says so.
        await tab_to(page, f"{message(2)} button.delete")
        await page.keyboard.press("Enter")
        await expect(page.locator("#action-result")).to_have_text('Deleted the message with key ["2"].', timeout=LIVE)
        assert [r[0] for r in sql.execute("SELECT id FROM work ORDER BY id")] == [1, 7]
        await expect(page.locator("#action-result")).to_be_focused(timeout=LIVE)
    await context.close()
async def test_the_limits_are_edited_from_the_page_and_shown_with_what_they_hold_back(ui, browser, sql):
    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("work", key_columns=[("tenant", "STRING"), ("id", "INT64")], payload_type="STRING")
        await client.send_many("work", [spanq.OutgoingMessage(f"m{i}", ("a", i)) for i in range(3)])
    page = await open_page(browser, ui.ui_port, "#/queue/work")
    await expect(page.locator("#limits")).to_have_text("none", timeout=LIVE)
    await page.click("#settings-panel summary")
    await page.fill("#setting-max_in_flight_per_key", "1")
    await page.fill("#setting-rate_limit", "2.5")
    await page.click("#settings-save")
    await expect(page.locator("#settings-result")).to_have_text("Saved: max_in_flight_per_key, rate_limit.",
                                                                timeout=LIVE)
    assert sql.execute("SELECT max_in_flight_per_key, concurrency_key, rate_limit FROM spanq.queues "
                       "WHERE name = 'work'").fetchone() == (1, "tenant", 2.5)
    assert len(sql.execute("SELECT * FROM spanq.receive_work(10)").fetchall()) == 1
    await expect(page.locator("#limits")).to_contain_text("1 in flight per tenant (2 due held, 1 keys at the limit)",
                                                          timeout=LIVE)
    await expect(page.locator("#limits")).to_contain_text("2.5/s, burst 3", timeout=LIVE)
    # Bad values: UpdateQueue's own errors, and nothing changed.
    for field, bad, error in (("concurrency_key", "colour", "not a key column"),
                              ("rate_limit", "-1", "rate_limit must be between"),
                              ("max_in_flight_per_key", "lots", "max_in_flight_per_key")):
        await page.click("#settings-reset")
        await page.fill(f"#setting-{field}", bad)
        await page.click("#settings-save")
        await expect(page.locator("#settings-result")).to_contain_text(error, timeout=LIVE)
        assert sql.execute("SELECT max_in_flight_per_key, concurrency_key, rate_limit FROM spanq.queues "
                           "WHERE name = 'work'").fetchone() == (1, "tenant", 2.5)
