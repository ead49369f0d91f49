"""The `spanq` client commands, each run as a subprocess against a real server and
PostgreSQL: output (tables and --json), exit statuses, one-line errors, send from
stdin, receive/tail with and without --ack, purge, a redrive interrupted with
Ctrl-C and resumed, replay with its counted confirmation, and psql."""

import asyncio
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

import spanq.aio
from spanq_server.edge import auth
from spanq_server.server import start

from ..conftest import ROOT
from ..helpers import until, until_settled
from ..readme_session import replay
from ..spawned import free_port, spawn_server, wait_serving_sync

CLI = [sys.executable, "-m", "spanq_server"]


async def spanq_cli(target: str, *args: str, stdin: str | None = None, env: dict[str, str] | None = None,
                    timeout: float = 60) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *CLI, *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "SPANQ_TARGET": target, **(env or {})})
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin is not None else None), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spanq: "), err
    return lines[0]


async def test_queue_commands_print_tables_json_and_say_what_failed(server):
    t = server.target
    code, out, err = await spanq_cli(t, "queue", "create", "orders", "--key", "shop:INT64", "--key", "id:STRING",
                                     "--payload-type", "json")
    assert code == 0, err
    assert out.split("\n")[0].split() == ["NAME", "KEY", "PAYLOAD", "LEASE", "DEAD", "LETTERS", "ORDERING", "LIMITS",
                                          "PAUSED", "CREATED"]
    assert "orders  shop INT64, id STRING  JSON" in out
    code, _, err = await spanq_cli(t, "queue", "create", "orders")
    assert code == 4 and "already" in one_line(err)
    code, out, _ = await spanq_cli(t, "queue", "create", "orders", "--exist-ok", "--json")
    assert code == 0 and json.loads(out)["name"] == "orders"
    code, _, err = await spanq_cli(t, "queue", "create", "x", "--key", "id:FLOAT")
    assert code == 2 and "BOOL, INT64" in one_line(err)

    code, out, _ = await spanq_cli(t, "queues", "--json")
    assert code == 0 and [q["name"] for q in json.loads(out)] == ["orders"]
    assert json.loads(out)[0]["key_columns"] == [{"name": "shop", "type": "INT64"}, {"name": "id", "type": "STRING"}]
    code, out, _ = await spanq_cli(t, "queue", "get", "orders", "--json")
    assert code == 0 and json.loads(out)["payload_type"] == "JSON"

    code, _, err = await spanq_cli(t, "queue", "drop", "orders", stdin="")
    assert code == 2 and "--yes" in one_line(err)
    code, out, _ = await spanq_cli(t, "queue", "drop", "orders", "--yes")
    assert code == 0 and out.strip() == "dropped queue orders"
    code, _, err = await spanq_cli(t, "queue", "get", "orders")
    assert code == 3 and "does not exist" in one_line(err)
    code, _, err = await spanq_cli(t, "stats", "nope")
    assert code == 3

    code, _, err = await spanq_cli(t, "peek")
    assert code == 2 and "Missing argument" in one_line(err) and "spanq peek --help" in err
    code, _, err = await spanq_cli(t, "frobnicate")
    assert code == 2 and "spanq --help" in one_line(err)


async def test_an_unreachable_server_is_one_line_and_exit_6_within_the_timeout():
    started = time.monotonic()
    code, _, err = await spanq_cli("127.0.0.1:9", "queues", "--timeout", "1")
    assert code == 6 and "nothing listens on 127.0.0.1:9 (connection refused)" in one_line(err) and "--target" in err


async def test_a_refused_or_unresolvable_target_fails_at_once_with_its_own_message():
    """Not the whole --timeout (10 s) with one message for every case: a refused connection and a host
    that does not resolve are known at once; a server that accepts and never answers takes the timeout."""
    started = time.monotonic()
    code, _, err = await spanq_cli("127.0.0.1:9", "queues")
    assert code == 6 and one_line(err) == ("spanq: nothing listens on 127.0.0.1:9 (connection refused); start one "
                                           "with `spanq serve`, or give --target HOST:PORT")
    code, _, err = await spanq_cli("no-such-host.invalid:50051", "stats")
    assert code == 6 and one_line(err).startswith("spanq: cannot resolve host 'no-such-host.invalid' (")
    assert time.monotonic() - started < 8  # both together, with two interpreter start-ups
    with socket.socket() as silent:  # accepts (the kernel does), never speaks HTTP/2
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        target = f"127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        code, _, err = await spanq_cli(target, "queues", "--timeout", "1")
    assert code == 6 and f"cannot connect to {target} within 1s" in one_line(err), err
    assert time.monotonic() - started >= 1
    assert time.monotonic() - started < 5
    code, _, err = await spanq_cli("http://localhost:50051", "queues")
    assert code == 2 and "is a URL" in one_line(err) and "--target" in err


async def test_send_peek_stats_receive_tail_purge(server, sql):
    t = server.target
    assert (await spanq_cli(t, "queue", "create", "tasks", "--payload-type", "STRING"))[0] == 0
    code, out, err = await spanq_cli(t, "send", "tasks", "first")
    assert code == 0 and out.startswith("sent 1 message to tasks (key "), err
    lines = "".join(f"line {i}\n" for i in range(250))
    code, out, err = await spanq_cli(t, "send", "tasks", "--json", stdin=lines)
    assert code == 0, err
    sent = json.loads(out)
    assert sent["sent"] == 250 and len(sent["keys"]) == 250
    assert sql.execute("SELECT count(*) FROM tasks").fetchone() == (251,)

    code, out, _ = await spanq_cli(t, "stats", "tasks", "--json")
    stats = json.loads(out)
    assert code == 0 and (stats["ready"], stats["scheduled"], stats["leased"]) == (251, 0, 0)
    code, out, _ = await spanq_cli(t, "stats")
    assert code == 0 and out.split("\n")[1].split()[:4] == ["tasks", "251", "0", "0"]

    code, out, _ = await spanq_cli(t, "peek", "tasks", "--limit", "3", "--json")
    peeked = json.loads(out)
    assert code == 0 and [m["payload"] for m in peeked][0] == "first" and len(peeked) == 3
    assert {m["state"] for m in peeked} == {"READY"} and all(m["delivery_attempt"] == 0 for m in peeked)
    code, out, _ = await spanq_cli(t, "peek", "tasks", "-n", "1")
    assert code == 0 and "READY" in out and "first" in out
    assert sql.execute("SELECT count(*) FROM tasks WHERE spanq_delivery_attempt > 0").fetchone() == (0,)

    # receive without --ack releases: the message stays, with one attempt counted.
    code, out, _ = await spanq_cli(t, "receive", "tasks", "--json")
    [m] = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and m["payload"] == "first" and m["acked"] is False
    assert sql.execute("SELECT count(*) FROM tasks").fetchone() == (251,)
    code, out, _ = await spanq_cli(t, "receive", "tasks", "-n", "5", "--ack")
    assert code == 0 and len(out.splitlines()) == 5 and all("\tacked\t" in line for line in out.splitlines())
    assert sql.execute("SELECT count(*) FROM tasks").fetchone() == (246,)
    code, out, _ = await spanq_cli(t, "tail", "tasks", "--ack", "--max", "3", "--json")
    assert code == 0 and len(out.splitlines()) == 3
    assert sql.execute("SELECT count(*) FROM tasks").fetchone() == (243,)

    code, out, _ = await spanq_cli(t, "purge", "tasks", "--yes")
    assert code == 0 and out.strip() == "purged 243 messages from tasks"
    code, out, err = await spanq_cli(t, "receive", "tasks", "--wait", "0.2")
    assert code == 0 and out == "" and "no message in tasks" in one_line(err)

    code, _, err = await spanq_cli(t, "queue", "create", "orders", "--key", "id:INT64", "--payload-type", "JSON")
    code, _, err = await spanq_cli(t, "send", "orders", stdin="not json\n")
    assert code == 2 and "line 1" in one_line(err) and '{"key"' in err
    code, out, err = await spanq_cli(t, "send", "orders", '{"n": 1}', "--key", "7")
    assert code == 0 and "key 7" in out, err
    code, out, err = await spanq_cli(t, "send", "orders", stdin='{"key": [8], "payload": {"n": 2}}\n')
    assert code == 0, err
    code, _, err = await spanq_cli(t, "send", "orders", '{"n": 1}', "--key", "7")
    assert code == 4 and "already" in one_line(err)
    assert sql.execute("SELECT id, payload FROM orders ORDER BY id").fetchall() == [(7, {"n": 1}), (8, {"n": 2})]


async def test_redrive_with_progress_interrupted_and_resumed(server, sql):
    t = server.target
    async with spanq.aio.Client(t) as client:
        await client.create_queue("dead", key_columns=[("id", "INT64")], payload_type="STRING")
        await client.create_queue("work", key_columns=[("id", "INT64")], payload_type="STRING",
                                  max_delivery_attempts=1, dead_letter_queue="dead")
        await client.send_many("dead", [spanq.OutgoingMessage(f"d{i}", i) for i in range(30)])

    # Ctrl-C a slow redrive (5 a second) once its first batches have moved.
    proc = await asyncio.create_subprocess_exec(
        *CLI, "redrive", "dead", "--rate", "5", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "SPANQ_TARGET": t})
    await until(lambda: sql.execute("SELECT count(*) FROM work").fetchone()[0] >= 5, "a first batch redriven")
    proc.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 130 and "run it again to continue" in one_line(err.decode())

    work, dead = await until_settled(lambda: ([r[0] for r in sql.execute("SELECT id FROM work ORDER BY id")],
                                              [r[0] for r in sql.execute("SELECT id FROM dead ORDER BY id")]),
                                     "the redrive to stop")
    assert 5 <= len(work) < 30 and sorted(work + dead) == list(range(30))

    code, out, err = await spanq_cli(t, "redrive", "dead", "--to", "work", "--json")
    assert code == 0, err
    assert json.loads(out) == {"moved": 30 - len(work), "remaining": 0, "skipped": 0, "to": "work", "done": True}
    assert [r[0] for r in sql.execute("SELECT id FROM work ORDER BY id")] == list(range(30))
    code, out, _ = await spanq_cli(t, "redrive", "dead")
    assert code == 0 and out.strip() == "moved 0 messages from dead to work; 0 left"
    code, _, err = await spanq_cli(t, "redrive", "work")
    assert code == 2 and "no queue names it" in one_line(err) and "--to" in err


async def test_replay_asks_with_the_count_then_sends_the_range_back(server, sql):
    t = server.target
    async with spanq.aio.Client(t) as client:
        await client.create_queue("work", key_columns=[("id", "INT64")], payload_type="STRING",
                                  archive_duration=3600)
        await client.send_many("work", [spanq.OutgoingMessage(f"w{i}", i) for i in range(6)])
        await client.ack("work", *[(i,) for i in range(6)])
        await client.send("work", "live again", key=3)
    # Refused without --yes when it cannot ask; on a terminal it asks with the range's count.
    code, _, err = await spanq_cli(t, "replay", "work", stdin="")
    assert code == 2 and "--yes" in one_line(err)
    leader, follower = os.openpty()
    try:
        proc = await asyncio.create_subprocess_exec(
            *CLI, "replay", "work", "--from-key", "2", "--to-key", "4", stdin=follower,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, "SPANQ_TARGET": t})
        os.write(leader, b"n\n")
        out_b, err_b = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        os.close(leader)
        os.close(follower)
    assert proc.returncode == 1, err_b
    assert "send 3 archived messages of 'work' (acked since the oldest kept until now from key 2 to key 4) back " \
           "into it?" in out_b.decode()
    assert sql.execute("SELECT id FROM work ORDER BY id").fetchall() == [(3,)]

    code, out, err = await spanq_cli(t, "replay", "work", "--from-key", "2", "--to-key", "4", "--yes",
                                     "--request-id", "cli-1")
    assert code == 0, err
    assert out.strip() == "sent 2 archived messages back into work; 1 skipped (their key was live in work); " \
                          "replay cli-1"
    assert sql.execute("SELECT id, payload, spanq_delivery_attempt FROM work ORDER BY id").fetchall() == [
        (2, "w2", 0), (3, "live again", 0), (4, "w4", 0)]
    code, out, err = await spanq_cli(t, "replay", "work", "--from-key", "2", "--to-key", "4", "--yes",
                                     "--request-id", "cli-1", "--json")
    assert code == 0 and json.loads(out) == {"sent": 2, "skipped": 1, "remaining": 0, "done": True,
                                             "replayed": True, "request_id": "cli-1"}, err
    code, _, err = await spanq_cli(t, "replay", "work", "--from", "2030-01-02", "--to", "2030-01-01", "--yes")
    assert code == 2 and "must be after start_time" in one_line(err)
    code, _, err = await spanq_cli(t, "replay", "work", "--from-key", "1", "--from-key", "2", "--yes")
    assert code == 2 and "1 key column(s) and 2 --from-key value(s)" in one_line(err)
    code, _, err = await spanq_cli(t, "replay", "nope", "--yes")
    assert code == 3
    assert sql.execute("SELECT count(*) FROM work").fetchone() == (3,)


async def test_psql_opens_the_servers_database(database_url, tmp_path):
    code, out, _ = await spanq_cli("unused", "psql", "--print-url", env={"DATABASE_URL": database_url})
    assert code == 0 and out.strip() == database_url
    code, out, err = await spanq_cli("unused", "psql", "--", "-X", "-At", "-c", "SELECT count(*) FROM spanq.queues",
                                     env={"DATABASE_URL": database_url})
    assert code == 0 and out.strip() == "0", err
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    proc = await asyncio.create_subprocess_exec(*CLI, "psql", "--data-dir", str(tmp_path), env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out_b, err_b = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 3 and "no embedded PostgreSQL is running" in one_line(err_b.decode())


async def test_readme_command_line_session_replays(server, database_url):
    """README's "From the command line" runs as printed (tables, JSON, messages)."""
    session = await replay("From the command line", server.target, database_url)
    assert any("redrive" in c for c in session.ran) and len(session.ran) == 15


async def test_tail_stops_on_ctrl_c(server):
    t = server.target
    assert (await spanq_cli(t, "queue", "create", "tasks", "--payload-type", "STRING"))[0] == 0
    proc = await asyncio.create_subprocess_exec(
        *CLI, "tail", "tasks", "--ack", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "SPANQ_TARGET": t})
    assert (await spanq_cli(t, "send", "tasks", "hello"))[0] == 0
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 20)
    assert line.decode().rstrip("\n").endswith("\tacked\thello")
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    await asyncio.wait_for(proc.wait(), 10)
    assert proc.returncode == 0 and time.monotonic() - started < 5


async def test_the_token_goes_with_every_command(server_config, clock, tmp_path):
    reader = "tok-reader"
    (tmp_path / "tokens.toml").write_text(
        f'[tokens.reader]\nsha256 = "{auth.digest(reader)}"\ngrants = {{ "*" = ["select"] }}\n')
    running = await start(dataclasses.replace(server_config, auth_file=str(tmp_path / "tokens.toml")), clock=clock)
    try:
        code, _, err = await spanq_cli(running.target, "queues")
        assert code == 5 and "requires a bearer token" in one_line(err) and "--token" in err
        code, out, err = await spanq_cli(running.target, "queues", "--json", env={"SPANQ_TOKEN": reader})
        assert code == 0 and json.loads(out) == [], err
        code, _, err = await spanq_cli(running.target, "queue", "create", "q", "--token", reader)
        assert code == 5 and "lacks the 'admin' privilege" in one_line(err)
    finally:
        await running.stop(0)


HOSTILE = {"[b]k1[/b]": "[bold red]PAYMENT OK[/bold red]", "k2\x1b]0;title\x07": "[/oops] x",
           "k3": ":thumbs_up: \x1b[31mred\x1b[0m \x9b2J\x07 a\tb\nc \u202eevil\x7f"}
"""Keys and payloads that rich would take for markup (or emoji codes), and terminal control codes:
an OSC title, SGR colours, C1 CSI, BEL, a tab, a newline, a bidi override, DEL."""
SHOWN = {"[b]k1[/b]": "[bold red]PAYMENT OK[/bold red]", "k2\\x1b]0;title\\x07": "[/oops] x",
         "k3": ":thumbs_up: \\x1b[31mred\\x1b[0m \\x9b2J\\x07 a\\tb\\nc \\u202eevil\\x7f"}
RAW = "\x1b\x9b\x07\t\u202e\x7f"


async def test_payloads_and_keys_print_as_text_never_as_markup_or_terminal_codes(server, sql):
    t = server.target
    async with spanq.aio.Client(t) as client:
        await client.create_queue("q", key_columns=[("k", "STRING")], payload_type="STRING")
        await client.send_many("q", [spanq.OutgoingMessage(p, k) for k, p in HOSTILE.items()])

    code, out, err = await spanq_cli(t, "peek", "q")
    assert code == 0, err
    rows = out.splitlines()
    assert len(rows) == 4 and not any(c in out for c in RAW), out  # one line each, no control code
    for row, (key, payload) in zip(rows[1:], SHOWN.items()):
        assert row.startswith(key + " ") and row.rstrip().endswith(payload), row
    code, out, err = await spanq_cli(t, "peek", "q", "--json")
    assert code == 0 and {m["key"][0]: m["payload"] for m in json.loads(out)} == HOSTILE, err
    assert not any(c in out for c in RAW)  # exact once parsed, and escaped in the text itself

    # receive and tail: one line per message, tab-separated fields, and the same escapes.
    code, out, err = await spanq_cli(t, "receive", "q", "-n", "3")
    assert code == 0, err
    assert [line.split("\t") for line in out.splitlines()] == [
        [k, "attempt 1", "released", p] for k, p in SHOWN.items()]
    code, out, err = await spanq_cli(t, "tail", "q", "--max", "3", "--ack")
    assert code == 0, err
    assert [line.split("\t") for line in out.splitlines()] == [
        [k, "attempt 2", "acked", p] for k, p in SHOWN.items()]

    # An error that quotes a key: one line on stderr, the key escaped.
    code, _, err = await spanq_cli(t, "send", "q", "again", "--key", "k2\x1b]0;title\x07")
    assert code == 0, err
    code, _, err = await spanq_cli(t, "send", "q", "again", "--key", "k2\x1b]0;title\x07")
    assert code == 4 and not any(c in err for c in RAW) and "k2\\x1b]0;title\\x07" in one_line(err), err
    assert sql.execute("SELECT k, payload FROM q").fetchall() == [("k2\x1b]0;title\x07", "again")]


async def test_tail_and_receive_lease_no_more_than_they_print(server, sql):
    """A release counts a delivery attempt: on a queue with max attempts 1, a message leased and released
    unseen would be dead-lettered unseen. tail --max 1 and receive --max 1 lease one message, not a batch."""
    t = server.target
    async with spanq.aio.Client(t) as client:
        await client.create_queue("work1_dlq", key_columns=[("id", "INT64")], payload_type="STRING")
        await client.create_queue("work1", key_columns=[("id", "INT64")], payload_type="STRING",
                                  initial_backoff=0, max_delivery_attempts=1, dead_letter_queue="work1_dlq")
        await client.send_many("work1", [spanq.OutgoingMessage(f"m{i}", (i,)) for i in range(1, 6)])

    code, out, err = await spanq_cli(t, "tail", "work1", "--max", "1", "--ack")
    assert code == 0 and out.splitlines() == ["1\tattempt 1\tacked\tm1"], err
    code, out, err = await spanq_cli(t, "receive", "work1", "--max", "1", "--ack")
    assert code == 0 and out.splitlines() == ["2\tattempt 1\tacked\tm2"], err
    code, out, err = await spanq_cli(t, "tail", "work1", "--max", "2", "--ack", "--json")
    assert code == 0 and [json.loads(line)["key"] for line in out.splitlines()] == [[3], [4]], err
    assert sql.execute("SELECT id, spanq_delivery_attempt FROM work1").fetchall() == [(5, 0)]
    assert sql.execute("SELECT count(*) FROM work1_dlq").fetchone() == (0,)


async def test_send_sends_lines_as_they_arrive_and_a_rerun_resumes_with_skip_existing(server, sql):
    t = server.target
    assert (await spanq_cli(t, "queue", "create", "log", "--key", "n:INT64", "--payload-type", "STRING"))[0] == 0
    lines = [json.dumps({"key": n, "payload": f"line {n}"}) + "\n" for n in range(1, 151)]
    proc = await asyncio.create_subprocess_exec(
        *CLI, "send", "log", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "SPANQ_TARGET": t})
    assert proc.stdin is not None
    # A pipe that stays open (tail -f log | spanq send log): what came is sent without waiting for the end.
    proc.stdin.write("".join(lines[:3]).encode())
    await proc.stdin.drain()
    await until(lambda: sql.execute("SELECT count(*) FROM log").fetchone() == (3,), "the first 3 lines sent")
    proc.stdin.write("".join(lines[3:100]).encode())
    await proc.stdin.drain()
    await until(lambda: sql.execute("SELECT count(*) FROM log").fetchone() == (100,), "100 lines sent")
    proc.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 130 and out == b""
    assert one_line(err.decode()) == ("spanq: interrupted: 100 message(s) were sent, none from line 101 on; "
                                      "run it again with --skip-existing to send the rest")

    code, _, err = await spanq_cli(t, "send", "log", stdin="".join(lines))
    assert code == 4 and "100 message(s) were sent" not in err and "0 message(s) were sent" in one_line(err)
    code, out, err = await spanq_cli(t, "send", "log", "--skip-existing", stdin="".join(lines))
    assert code == 0 and out.strip() == "sent 50 messages to log (100 skipped: their keys were in log already)", err
    code, out, err = await spanq_cli(t, "send", "log", "--skip-existing", "--json", stdin="".join(lines[:2]))
    assert code == 0 and json.loads(out) == {"sent": 0, "skipped": 2, "keys": []}, err
    assert sql.execute("SELECT count(*), min(n), max(n) FROM log").fetchone() == (150, 1, 150)
    assert sql.execute("SELECT count(*) FROM log WHERE payload <> 'line ' || n").fetchone() == (0,)

    # A bad line: what came before it is sent, and the error says so.
    code, _, err = await spanq_cli(t, "send", "log", stdin='{"key": 151, "payload": "x"}\nnot json\n')
    assert code == 2 and "line 2" in one_line(err) and "1 message(s) were sent" in err
    assert sql.execute("SELECT count(*) FROM log").fetchone() == (151,)


async def test_a_first_day_without_surprises(server, sql):
    """--version; bad values refused (exit 2) with nothing stored; errors name commands, not RPCs; --tls
    against plaintext is one line, not gRPC core's logs; the purge prompt says how many it would delete."""
    t = server.target
    code, out, _ = await spanq_cli(t, "--version")
    assert code == 0 and out.strip() == "spanq 0.1.0"
    code, _, err = await spanq_cli(t, "queue", "create", "q", "--lease-duration", "0")
    assert code == 2 and "--lease-duration" in one_line(err)
    assert sql.execute("SELECT count(*) FROM spanq.queues").fetchone() == (0,)
    assert (await spanq_cli(t, "queue", "create", "q", "--key", "id:INT64"))[0] == 0
    code, _, err = await spanq_cli(t, "send", "q", "x", "--key", "1", "--key", "2")
    assert code == 2 and "1 key column(s) and 2 --key value(s)" in one_line(err)
    code, _, err = await spanq_cli(t, "send", "q", "x")
    assert code == 2 and "give each with --key" in one_line(err)
    assert sql.execute("SELECT count(*) FROM q").fetchone() == (0,)
    code, _, err = await spanq_cli(t, "peek", "nope")
    assert code == 3 and one_line(err) == "spanq: queue 'nope' does not exist; create it with `spanq queue create`"
    code, _, err = await spanq_cli(t, "queues", "--tls", "--timeout", "1")
    assert code == 6 and "cannot connect" in one_line(err), err  # one line: gRPC core says nothing

    for n in range(3):
        assert (await spanq_cli(t, "send", "q", f"m{n}", "--key", str(n)))[0] == 0
    main, terminal = os.openpty()  # the prompt needs a terminal on stdin
    try:
        proc = await asyncio.create_subprocess_exec(
            *CLI, "purge", "q", stdin=terminal, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "SPANQ_TARGET": t})
        os.write(main, b"n\n")
        out_b, err_b = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        os.close(main)
        os.close(terminal)
    assert proc.returncode == 1 and "nothing done" in err_b.decode()
    assert out_b.decode().startswith("delete every message of 'q' (3 messages: 3 ready, 0 scheduled, 0 leased)? ")
    assert sql.execute("SELECT count(*) FROM q").fetchone() == (3,)


async def test_tail_goes_on_across_a_server_restart(database_url):
    """tail leases with one Receive at a time; across a server that goes away and comes back on the same
    port it goes on (an outage past the SDK's retries said once on stderr), and prints what is sent after."""
    port = free_port()
    target = f"127.0.0.1:{port}"
    server = spawn_server(database_url, port)
    tail = None
    try:
        await asyncio.to_thread(wait_serving_sync, target)
        assert (await spanq_cli(target, "queue", "create", "q", "--payload-type", "STRING"))[0] == 0
        tail = await asyncio.create_subprocess_exec(
            *CLI, "tail", "q", "--ack", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "SPANQ_TARGET": target})
        assert tail.stdout is not None and tail.stderr is not None
        assert (await spanq_cli(target, "send", "q", "before"))[0] == 0
        assert (await asyncio.wait_for(tail.stdout.readline(), 20)).decode().endswith("\tacked\tbefore\n")
        server.kill()
        await asyncio.to_thread(server.wait, 10)
        server = spawn_server(database_url, port)
        await asyncio.to_thread(wait_serving_sync, target)
        assert (await spanq_cli(target, "send", "q", "after"))[0] == 0
        while True:  # "before" again, if the kill took its ack with it (then it is said on stderr)
            line = (await asyncio.wait_for(tail.stdout.readline(), 30)).decode()
            assert line.endswith(("\tacked\tbefore\n", "\tacked\tafter\n")), line
            if line.endswith("after\n"):
                break
        tail.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(tail.wait(), 20)
        said = (await tail.stderr.read()).decode().splitlines()
        assert code == 0, said
        # The SDK's retries may ride out a short outage; a longer one is said once, and its end.
        trying = [line for line in said if "still trying (Ctrl-C to stop)" in line]
        assert len(trying) <= 1 and (not trying or f"spanq: reconnected to {target}" in said), said
        assert all(line.startswith("spanq: ") for line in said), said
    finally:
        if tail is not None and tail.returncode is None:
            tail.kill()
            await tail.wait()
        server.kill()
        await asyncio.to_thread(server.wait, 10)


async def test_shell_completion_is_printed_and_completes_commands_and_options():
    code, out, _ = await spanq_cli("localhost:1", "completion", "bash")
    assert code == 0 and "_spanq_completion()" in out and "_SPANQ_COMPLETE=bash_complete" in out
    for shell in ("zsh", "fish"):
        code, out, _ = await spanq_cli("localhost:1", "completion", shell)
        assert code == 0 and "_SPANQ_COMPLETE" in out, shell
    code, _, err = await spanq_cli("localhost:1", "completion", "tcsh")
    assert code == 2 and "'tcsh' is not one of 'bash', 'zsh', 'fish'" in one_line(err)
    # What the printed script asks at each Tab: the client commands (loaded lazily) and serve's options.
    for words, cword, want in (("spanq qu", "1", {"plain,queue", "plain,queues"}),
                               ("spanq queue cr", "2", {"plain,create"}),
                               ("spanq serve --wo", "2", {"plain,--workers"})):
        code, out, _ = await spanq_cli("localhost:1", env={"_SPANQ_COMPLETE": "bash_complete", "COMP_WORDS": words,
                                                           "COMP_CWORD": cword})
        assert code == 0 and set(out.split()) == want, (words, out)


async def test_a_groups_help_names_only_the_commands_it_has():
    """`spanq queue --help` said "Create, show, ..." while the command is `get`: a newcomer typed
    `spanq queue show` and got "No such command"."""
    code, out, _ = await spanq_cli("localhost:1", "queue", "--help")
    assert code == 0
    summary = out.split("\n\n")[1].strip()  # "Create, get, update, pause, resume or drop one queue."
    named = {w.lower() for w in summary.removesuffix(" one queue.").replace(" or ", ", ").split(", ")}
    listed = {line.split()[0] for line in out.split("Commands:")[1].strip().splitlines()}
    assert named == listed, (named, listed)


@pytest.mark.parametrize("target", ["run", "run-spanner"])
def test_make_run_passes_args_to_serve(target):
    """README: `make run ARGS='--ui-listen localhost:9999'` passes flags to `spanq serve`; run-spanner
    "serves as make run does", so it takes them too (it dropped them)."""
    # -n: print what make would run, and run nothing; -o: take the installs as done, so that only serve is printed.
    done = subprocess.run(["make", "-s", "-n", "-o", ".venv/.installed-server", "-o", ".venv/.installed-spanner",
                           target, "ARGS=--ui-listen localhost:9999"], cwd=ROOT, capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == ".venv/bin/spanq serve --ui-listen localhost:9999"
