"""Fast unit tests: the SQL file parser, migrations, fault specs, status table, lapse watches."""

import asyncio
import dataclasses
import os
import subprocess
import sys
import uuid

import grpc
import pytest
from google.rpc import error_details_pb2

from spanq_server.ground import errors
from spanq_server.edge import status
from spanq_server.domain.faults import FaultInjector
from spanq_server.domain.mutations import new_uuids
from spanq_server.sql import MIGRATIONS, QUERIES, parse_queries
from spanq_server.ground.tasks import BackgroundTask


def test_parse_queries_splits_named_blocks_and_drops_descriptions():
    text = "-- header\n\n-- one --\n-- what it does\nSELECT 1\n\n-- two_more --\nSELECT 2;\nSELECT 3\n"
    assert parse_queries(text) == {"one": "SELECT 1", "two_more": "SELECT 2;\nSELECT 3"}


def test_parse_queries_rejects_duplicates_and_empty_blocks():
    with pytest.raises(ValueError, match="twice"):
        parse_queries("-- a --\nSELECT 1\n-- a --\nSELECT 2\n")
    with pytest.raises(ValueError, match="empty"):
        parse_queries("-- a --\n-- only a description\n")


def test_every_statement_the_store_uses_is_defined():
    for name in ("message_insert", "message_insert_claimed", "message_lease_batch", "message_ack", "lease_renew", "ledger_claim",
                 "ledger_record", "ledger_lookup", "ledger_prune", "queue_table_create",
                 "queue_receive_function_create", "queue_renew_function_create", "queue_ordering_create",
                 "queue_ordering_drop", "queue_held_exists", "wakeup_listen",
                 "roster_publish", "roster_withdraw", "roster_streams", "roster_counts"):
        assert name in QUERIES
    versions = [m.version for m in MIGRATIONS]
    assert versions == sorted(set(versions)) and versions[0] == 1
    # Only a migration that says so re-creates the queues' functions (the store does it).
    assert [m.version for m in MIGRATIONS if m.recreates_queue_functions] == [4, 5, 6, 8, 10, 12, 13]
    assert [m.version for m in MIGRATIONS if m.adds_history_columns] == [8, 12, 13]


def test_fault_spec_parsing():
    faults = FaultInjector.parse("unknown_commit_after=0.2, unavailable_before=0.1")
    assert faults.probabilities == {"unknown_commit_after": 0.2, "unavailable_before": 0.1}
    assert not FaultInjector.parse("").enabled
    for bad in ("nope=0.1", "unknown_commit_after", "unknown_commit_after=2", "unknown_commit_after=x",
                "unknown_commit_after=0.6,unknown_commit_before=0.6"):
        with pytest.raises(ValueError):
            FaultInjector.parse(bad)


def test_fault_draws_follow_the_probabilities():
    faults = FaultInjector({"unknown_commit_after": 0.3}, seed=1)
    drawn = [faults.draw() for _ in range(10_000)]
    assert 2700 < drawn.count("unknown_commit_after") < 3300
    assert set(drawn) == {None, "unknown_commit_after"}
    assert faults.injected["unknown_commit_after"] == 0, "a draw is counted only when its error is raised"
    assert isinstance(faults.error("unknown_commit_after"), errors.CommitOutcomeUnknown)
    assert isinstance(faults.error("unavailable_before"), errors.StoreUnavailable)
    assert faults.injected == {"unknown_commit_after": 1, "unknown_commit_before": 0, "unavailable_before": 1}


def test_generated_keys_are_distinct_version_4_uuids():
    keys = new_uuids(5000)
    assert len(set(keys)) == 5000
    for k in keys:
        parsed = uuid.UUID(k)
        assert str(parsed) == k and parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_status_table_maps_each_error_to_its_code():
    assert status.code_and_reason(errors.MessageNotFound())[0] == grpc.StatusCode.OUT_OF_RANGE
    assert status.code_and_reason(errors.LeaseNotHeld())[0] == grpc.StatusCode.FAILED_PRECONDITION
    assert status.code_and_reason(errors.CommitOutcomeUnknown()) == (grpc.StatusCode.UNKNOWN, "UNKNOWN_COMMIT")
    s = status.to_status(errors.CommitOutcomeUnknown("lost", request_id="r"))
    assert s.code == grpc.StatusCode.UNKNOWN.value[0] and s.message == "lost" and len(s.details) == 1


def test_the_spanner_front_end_codes_the_same_errors_its_own_way():
    pytest.importorskip("google.cloud.spanner")
    from spanq_server.spanner.handlers.status import SPANNER_ERRORS

    missing = errors.MessageNotFound("message ('k',) is gone", queue="q")
    ours, theirs = status.to_status(missing), SPANNER_ERRORS.to_status(missing)
    assert ours.code == grpc.StatusCode.OUT_OF_RANGE.value[0] and ours.message == "message ('k',) is gone"
    assert theirs.code == grpc.StatusCode.NOT_FOUND.value[0]
    assert theirs.message == "Message not found"  # Spanner's exact words, which its tests compare
    infos = []
    for s in (ours, theirs):  # the same ErrorInfo (reason, domain) on both
        [detail] = s.details
        info = error_details_pb2.ErrorInfo()
        assert detail.Unpack(info) and info.domain == "spanq.dev" and info.reason == "MESSAGE_NOT_FOUND"
        infos.append(dict(info.metadata))
    # spanq's explanation, cut from the Spanner message, is in its ErrorInfo.
    assert infos == [{"queue": "q"}, {"queue": "q", "detail": "message ('k',) is gone"}]
    # The rest of the table is spanq.v1's.
    assert SPANNER_ERRORS.codes(errors.LeaseNotHeld()) == status.code_and_reason(errors.LeaseNotHeld())


def test_the_server_type_checks(tmp_path):
    """mypy over spanq_server (configured in pyproject.toml), as `make typecheck` runs it."""
    import os
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path), "-p", "spanq_server"],
                            cwd=root, env=dict(os.environ), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def _leased(end, tokens):  # type: ignore[no-untyped-def]
    from spanq_server.ground.model import LeasedMessage

    return [LeasedMessage(("k",), "p", end, t, end, 1, end, False) for t in tokens]


def test_a_lapse_watch_proves_a_client_that_settles_and_suspects_one_that_lets_all_lapse():
    from datetime import datetime, timedelta, timezone

    from spanq_server.domain.receive.lapses import LapseWatch

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    lease = timedelta(seconds=8)
    watch = LapseWatch(lease)
    watch.delivered(_leased(t0 + lease, ["a", "b"]))
    assert watch.due_in(t0) == 2.0  # unproven: an early look, a quarter into the lease
    early = t0 + timedelta(seconds=2)
    assert watch.to_look_at(early) == ["a", "b"]
    assert not watch.found(early, 2, 0, 2)  # nothing settled yet: look again at the lease's end
    assert watch.due_in(early) == 6.0 and not watch.proven
    end = t0 + lease
    assert watch.found(end, 2, 2, 0)  # both lapsed
    assert watch.suspect and not watch.proven and watch.due_in(end) is None

    watch.delivered(_leased(end + lease, ["c", "d"]))
    later = end + timedelta(seconds=2)
    assert not watch.found(later, 2, 0, 0)  # both settled (acked, renewed or released)
    assert watch.proven and not watch.suspect and watch.healthy(later)
    watch.delivered(_leased(later + lease, ["e"]))
    assert watch.due_in(later) == 8.0  # proven: looks at the lease's end only
    assert not watch.healthy(later + lease)  # a lease ended unlooked at: not counted as settling
    assert not watch.found(later + lease, 1, 0, 1)  # still live by the database's clock: look again soon
    assert 0 < watch.due_in(later + lease) < 1
    assert watch.found(later + lease, 1, 1, 0)  # one of one lapsed: suspect again
    assert watch.suspect


def test_a_lapse_watch_with_some_lapsed_is_neither_proven_nor_suspect():
    from datetime import datetime, timedelta, timezone

    from spanq_server.domain.receive.lapses import LapseWatch

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    watch = LapseWatch(timedelta(seconds=4))
    watch.delivered(_leased(t0, ["a", "b", "c"]))
    assert not watch.found(t0, 3, 1, 0)
    assert not watch.proven and not watch.suspect


def test_a_holding_keeps_the_read_watermark_and_gives_each_unread_token_once():
    from datetime import datetime, timedelta, timezone

    from spanq_server.domain.receive.held import StreamHolding

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    holding = StreamHolding()
    for i, tokens in enumerate((["a", "b"], ["c"], ["d", "e"], ["f"])):  # four responses, in order
        batch = _leased(t0 + timedelta(seconds=i), tokens)
        holding.leased(batch)
        holding.handed(batch)
    assert holding.unread_end() == t0
    holding.settled("c")  # an ack of response 2: responses 1 and 2 were read
    assert holding.unread_end() == t0 + timedelta(seconds=2)
    assert holding.unread_ended(t0 + timedelta(seconds=2)) == ["d", "e"]
    assert holding.unread_ended(t0 + timedelta(seconds=2)) == []  # each once
    holding.settled("a")  # behind the watermark: moves nothing
    assert holding.unread() == ["f"] and holding.unread() == []

    holding.handed(_leased(t0, ["g"]))
    holding.handed(_leased(t0, ["h"]))
    holding.renewed("h", "h2", t0)  # a renewal (or a release) shows its response was read too
    assert holding.unread() == []


def test_every_serve_flag_has_help_and_its_default(capsys):
    from spanq_server import cli

    with pytest.raises(SystemExit):
        cli.parse_config(["serve", "--help"], {})
    text = " ".join(capsys.readouterr().out.split())
    for flag, default in [("--max-queues", "100"), ("--max-streams-per-queue", "1000"),
                          ("--max-payload-bytes", "1048576"), ("--max-response-bytes", "4128768"),
                          ("--poll-interval", "5"), ("--log-level", "INFO")]:
        after = text.split(f"{flag} {flag[2:].upper().replace('-', '_')} ", 1)[1].split(" --", 1)[0]
        assert f"(default {default})" in after or f"default {default})" in after, (flag, after)


def test_serve_takes_its_defaults_from_config_and_an_empty_variable_as_given():
    from spanq_server import cli
    from spanq_server.ground.config import SERVE_UI_LISTEN, Config

    assert cli.parse_config(["serve"], {}) == dataclasses.replace(
        Config(), ui_listen=SERVE_UI_LISTEN, default_listens=frozenset({"metrics", "ui"}))
    # As with argparse before: SPANQ_METRICS_LISTEN= is "" (no endpoint), where click alone would skip it.
    quiet = cli.parse_config(["serve"], {"SPANQ_METRICS_LISTEN": "", "SPANQ_UI_LISTEN": ""})
    assert quiet.metrics_listen == quiet.ui_listen == "" and quiet.default_listens == frozenset()


def test_serve_loads_none_of_the_client_commands():
    # admin.py quiets gRPC core's logging (GRPC_VERBOSITY) and loads rich: the server keeps its logs.
    check = ("import os, sys; from spanq_server.cli import parse_config; parse_config(['serve'], {}); "
             "print(sorted(m for m in ('spanq_server.cli.admin', 'rich', 'spanq') if m in sys.modules), "
             "os.environ.get('GRPC_VERBOSITY'))")
    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.split() == ["[]", "None"], done.stderr


async def test_a_background_task_that_swallows_a_cancellation_is_still_stopped():
    # What asyncio.wait_for does on Python 3.11 when the cancel races its inner call (gh-86296).
    swallowed = 0
    running = asyncio.Event()

    async def run() -> None:
        nonlocal swallowed
        running.set()
        while True:
            try:
                await asyncio.sleep(0.01)  # a task at work, cancelled in the middle of it
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed += 1

    task = BackgroundTask("swallower", run)
    task.start()
    await running.wait()
    loop = asyncio.get_running_loop()
    started = loop.time()
    stopping = asyncio.ensure_future(task.stop())
    done, _ = await asyncio.wait({stopping}, timeout=5)
    assert done and swallowed == 1, "stop() waited on a task that swallowed its cancellation"
    assert loop.time() - started < 3
