"""The lease-history checker (tests/lease_history.py) on hand-made histories: a clean
one passes, and each violation it exists for is found, and only that one."""

from datetime import datetime, timedelta, timezone

from ..lease_history import OK, REFUSED, UNKNOWN, LeaseHistory

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
LEASE = timedelta(seconds=5)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Recorder:
    """Builds a history with explicit times, in seconds from T0."""

    def __init__(self) -> None:
        self.history = LeaseHistory()

    def send(self, *keys: str) -> None:
        for key in keys:
            self.history.send_confirmed(key)

    def deliver(self, key: str, token: str, attempt: int | None, leased: float, holder: str,
                lease: timedelta = LEASE) -> None:
        self.history.delivered(key, token, attempt, at(leased) + lease, lease, holder)

    def settle(self, action: str, key: str, token: str | None, holder: str, sent: float, done: float,
               outcome: str = OK, new_token: str | None = None, new_end: float | None = None) -> None:
        self.history.settled(action, key, token, holder, at(sent), outcome, new_token,
                             None if new_end is None else at(new_end), done_at=at(done))


def clean() -> Recorder:
    r = Recorder()
    r.send("a", "b", "c", "d", "e")
    r.deliver("a", "a1", 1, 0, "x")
    r.settle("ack", "a", "a1", "x", 1, 1.01)
    # b: released, then taken at once by another holder.
    r.deliver("b", "b1", 1, 0, "x")
    r.settle("nack", "b", "b1", "x", 2, 2.01)
    r.deliver("b", "b2", 2, 2.02, "y")
    r.settle("ack", "b", "b2", "y", 3, 3.01)
    # c: its lease expired unacked; redelivered after it; the first holder's late ack is refused, rightly.
    r.deliver("c", "c1", 1, 0, "x")
    r.deliver("c", "c2", 2, 5.2, "y")
    r.settle("ack", "c", "c1", "x", 6, 6.01, REFUSED)
    r.settle("ack", "c", "c2", "y", 6, 6.02)
    # d: renewed past its first lease; the new token acks it; a renewal of the old token is refused, rightly.
    r.deliver("d", "d1", 1, 0, "x")
    r.settle("renew", "d", "d1", "x", 3, 3.01, OK, "d2", 8)
    r.settle("renew", "d", "d1", "x", 4, 4.01, REFUSED)
    r.settle("ack", "d", "d2", "x", 7, 7.01)
    # e: an ack by key (Spanner's mutation), its outcome unknown (a fault), and the message gone: acked.
    r.deliver("e", "e1", None, 0, "x")
    r.settle("ack", "e", None, "x", 1, 1.01, UNKNOWN)
    return r


def test_a_clean_history_passes():
    report = clean().history.check(remaining=[])
    assert report.ok, report
    assert report.deliveries == 7 and report.settles["ack_ok"] == 4 and report.settles["ack_refused"] == 1
    assert "duplicates=0 refused_current=0 attempts_not_up=0 lost=0" in report.summary()


def test_a_key_delivered_while_another_holders_lease_is_live_is_an_overlap():
    r = clean()
    r.send("f")
    r.deliver("f", "f1", 1, 0, "x")
    r.deliver("f", "f2", 2, 2, "y")  # 3 s of x's lease left
    r.settle("ack", "f", "f2", "y", 2.5, 2.51)
    report = r.history.check(remaining=[])
    assert [(k, a, b, round(left, 3)) for k, a, b, left in report.overlaps] == [("f", "x", "y", 3.0)]
    assert not (report.refused_current or report.attempts_not_up or report.lost)


def test_a_renewed_lease_is_live_until_its_new_end():
    r = clean()
    r.send("f")
    r.deliver("f", "f1", 1, 0, "x")
    r.settle("renew", "f", "f1", "x", 3, 3.01, OK, "f1+", 8)
    r.deliver("f", "f2", 2, 6, "y")  # after the first lease's end, before the renewed one's
    report = r.history.check(remaining=["f"])
    assert [o[:3] for o in report.overlaps] == [("f", "x", "y")]


def test_a_refused_ack_of_the_current_token_within_its_lease_is_found():
    r = clean()
    r.send("f")
    r.deliver("f", "f1", 1, 0, "x")
    r.settle("ack", "f", "f1", "x", 1, 1.01, REFUSED)
    r.settle("ack", "f", "f1", "x", 1.5, 1.51, REFUSED)
    report = r.history.check(remaining=["f"])
    assert [(a, k, h, round(left, 2)) for a, k, h, left in report.refused_current] == [
        ("ack", "f", "x", 3.99), ("ack", "f", "x", 3.49)]
    assert not (report.overlaps or report.attempts_not_up or report.lost)


def test_a_refused_renewal_of_the_current_token_counts_too():
    r = clean()
    r.send("f")
    r.deliver("f", "f1", 1, 0, "x")
    r.settle("renew", "f", "f1", "x", 1, 1.01, OK, "f2", 6)
    r.settle("renew", "f", "f2", "x", 2, 2.01, REFUSED)
    report = r.history.check(remaining=["f"])
    assert [(a, k) for a, k, _, _ in report.refused_current] == [("renew", "f")]


def test_an_attempt_that_does_not_go_up_is_found():
    r = clean()
    r.send("f")
    r.deliver("f", "f1", 3, 0, "x")
    r.settle("nack", "f", "f1", "x", 1, 1.01)
    r.deliver("f", "f2", 3, 1.1, "y")  # released, so no overlap: but attempt 3 again
    r.settle("ack", "f", "f2", "y", 2, 2.01)
    report = r.history.check(remaining=[])
    assert report.attempts_not_up == [("f", 3, 3)]
    assert not (report.overlaps or report.refused_current or report.lost)


def test_an_unread_lease_that_lapsed_may_give_its_attempt_back_but_never_more():
    r = clean()
    r.send("f", "g")
    r.deliver("f", "f1", 1, 0, "x")  # lapsed, nothing settled: the server's refund may repeat attempt 1
    r.deliver("f", "f2", 1, 5.1, "y")
    r.settle("ack", "f", "f2", "y", 6, 6.01)
    r.deliver("g", "g1", 2, 0, "x")
    r.deliver("g", "g2", 1, 5.1, "y")  # below the lapsed one's: a count taken back twice
    r.settle("ack", "g", "g2", "y", 6, 6.01)
    report = r.history.check(remaining=[])
    assert report.attempts_not_up == [("g", 2, 1)]
    assert not (report.overlaps or report.refused_current or report.lost)


def test_a_message_sent_never_acked_and_gone_is_lost():
    r = clean()
    r.send("f", "g")
    r.deliver("f", "f1", 1, 0, "x")
    report = r.history.check(remaining=["g"])  # g never delivered but still stored: not lost
    assert report.lost == ["f"]
    assert not (report.overlaps or report.refused_current or report.attempts_not_up)


def test_the_tolerance_gives_the_server_the_benefit_of_the_doubt_at_the_edge():
    r = clean()
    r.send("f")
    r.deliver("f", "f1", 1, 0, "x")
    r.deliver("f", "f2", 2, 4.95, "y")  # 50 ms before the end: one clock, a few ms apart
    r.settle("ack", "f", "f1", "x", 4.9, 4.96, REFUSED)
    r.settle("ack", "f", "f2", "y", 6, 6.01)
    assert r.history.check(remaining=[]).ok
