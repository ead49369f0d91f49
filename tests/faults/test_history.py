"""Concurrent producers and consumers over raw gRPC stubs with every injected
fault on; the history checker proves exactly-once effects afterwards."""

import dataclasses
import os

from spanq_proto.v1 import queue_pb2
from spanq_server.server import start

from ..helpers import create_queue
from ..workload import Workload, remaining_rows

SCALE = int(os.environ.get("SPANQ_CHAOS_SCALE", "1"))


async def test_exactly_once_under_injected_faults(server_config, clock, sql):
    faults = "unknown_commit_after=0.1,unknown_commit_before=0.08,unavailable_before=0.07"
    running = await start(dataclasses.replace(server_config, inject_faults=faults), clock=clock)
    work = Workload([running.target], "work")
    try:
        await create_queue(work.stubs[0], "work", payload_type=queue_pb2.JSON)
        await work.run(producers=4, per_producer=150 * SCALE, consumers=4, timeout_s=90 * SCALE)
    finally:
        await work.close()
        await running.stop(0)
    report = work.history.check(remaining_rows(sql, "work"), work.lease_s)
    print(report.summary(), running.mutator.faults.injected)
    assert sum(running.mutator.faults.injected.values()) >= 100  # the faults really happened
    assert report.confirmed_sends == 600 * SCALE
    assert report.ok, report
    assert remaining_rows(sql, "work") == []
