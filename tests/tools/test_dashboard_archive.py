"""The dashboard's archive view in headless Chromium (test_dashboard.py's fixtures): a queue's
acked messages browsed a page at a time in the messages table's look, and the range of ack
times a page shows replayed into the queue after a confirmation that counts it; the effect
read back from PostgreSQL."""

import json
from datetime import timedelta

import pytest
from playwright.async_api import expect

import spanq
import spanq.aio

from .test_dashboard import LIVE, browser, chromium, http_post, open_page, ui  # noqa: F401  (fixtures)

pytestmark = pytest.mark.asyncio(loop_scope="module")  # the loop of the module's one browser (chromium)


async def test_the_archive_is_browsed_and_the_range_shown_replayed(ui, browser, sql, clock):
    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("work", key_columns=[("id", "INT64")], payload_type="STRING", archive_duration=3600)
        await client.send_many("work", [spanq.OutgoingMessage(f"w{i}", i, priority=i % 3) for i in range(25)])
        for n, keys in enumerate((range(10), range(10, 20), range(20, 25))):
            await client.ack("work", *[(i,) for i in keys], request_id=f"ack-{n}")
            clock.advance(timedelta(seconds=10))
        await client.send("work", "live again", key=5)

    page = await open_page(browser, ui.ui_port, "#/queue/work")
    asked: list[str] = []
    page.on("dialog", lambda dialog: asked.append(dialog.message))
    await page.click("#archive-link")
    table = page.locator("#archived")
    await expect(table.locator("tr.message")).to_have_count(20, timeout=LIVE)
    first = table.locator("tr.message").first
    await expect(first.locator("td.key")).to_have_text('["0"]')
    await expect(first.locator("td.ack-request")).to_have_text("ack-0")
    await expect(table.locator("thead")).to_contain_text("Priority")
    await expect(page.locator("#archive-kept")).to_contain_text("kept 3600s")
    # The next page, then back; Replay sends the first page's range: acked by ack-0 and ack-1.
    await page.click("#next-page")
    await expect(table.locator("tr.message")).to_have_count(5, timeout=LIVE)
    await expect(table.locator("tr.message").first.locator("td.ack-request")).to_have_text("ack-2")
    await page.click("#first-page")
    await expect(table.locator("tr.message")).to_have_count(20, timeout=LIVE)
    await page.click("#replay")
    await expect(page.locator("#action-result")).to_have_text(
        "Replayed: sent 19 back into work, skipped 1 (their key is in the queue).", timeout=LIVE)
    assert len(asked) == 1 and asked[0].startswith("Send the 20 archived message(s) of work acked from "), asked
    assert sql.execute("SELECT id, payload, spanq_delivery_attempt, spanq_priority FROM work ORDER BY id").fetchall() \
        == [(i, "live again" if i == 5 else f"w{i}", 0, 0 if i == 5 else i % 3) for i in range(20)]
    assert sql.execute("SELECT count(*) FROM spanq.archive_work").fetchone() == (25,)


async def test_a_bad_replay_from_the_dashboard_is_400_and_changes_nothing(ui, sql):
    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("work", key_columns=[("id", "INT64")], payload_type="STRING", archive_duration=3600)
        await client.send("work", "w", key=1)
        await client.ack("work", (1,))
        await client.create_queue("plain")
    host = f"127.0.0.1:{ui.ui_port}"
    for queue, body, says in [
        ("work", {"from": "2030-01-02T00:00:00Z", "through": "2030-01-01T00:00:00Z"}, "must be after start_time"),
        ("work", {"from": "yesterday", "through": "2030-01-01T00:00:00Z"}, "start_time"),
        ("work", {"through": "2030-01-01T00:00:00Z"}, "start_time"),
        ("plain", {"from": "2020-01-01T00:00:00Z", "through": "2030-01-01T00:00:00Z"}, "keeps no archive"),
    ]:
        code, text = await http_post(host, f"/api/queues/{queue}/replay", "application/json", "", json.dumps(body))
        assert code in (400, 409) and says in json.loads(text)["error"], text
    assert sql.execute("SELECT count(*) FROM work").fetchone() == (0,)
    code, text = await http_post(host, "/api/queues/work/replay", "application/json", "", json.dumps(
        {"from": "2020-01-01T00:00:00Z", "through": "2030-01-01T00:00:00Z", "validate_only": True}))
    assert code == 200 and json.loads(text)["remaining"] == 1, text
    assert sql.execute("SELECT count(*) FROM work").fetchone() == (0,)
