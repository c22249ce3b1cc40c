"""Unit tests of the election helpers with no server: the campaign's
re-queue loop against injected failures and an injected clock, what
on_leadership says and when, proclaim/resign, a Lock's on_state from its
stream, and Observe's re-observing iterator against a fake stub.

The Lock and Observe tests build real turnstile.v1 messages: they need the
generated stubs: run them on the package the CMake build assembles (as
ctest does) or on an installed one.

    PYTHONPATH=build/python /usr/bin/python3 -m unittest discover -s client/python/tests
"""
import queue
import threading
import unittest

import grpc

from turnstile.client import (HELD, LEADER, LOST, NO_LEADER, RELEASED, SUSPENDED, UNKNOWN,
                               Client, TurnstileError, load_stubs)
from turnstile.election import Election, requeue_until

E = TurnstileError
C = grpc.StatusCode


class FakeClock:
    def __init__(self):
        self.now = 10.0
        self.slept = []

    def __call__(self):
        return self.now

    def sleep(self, s):
        self.slept.append(round(s, 3))
        self.now += s


def scripted(clock, script):
    """attempt(wait) that plays `script`: (seconds it takes, result or error)."""
    asked = []

    def attempt(wait):
        asked.append(round(wait, 3))
        took, result = script.pop(0)
        clock.now += took
        if isinstance(result, BaseException):
            raise result
        return result
    return attempt, asked


class RequeueTest(unittest.TestCase):
    def test_a_wait_capped_by_the_replica_is_queued_again_at_once(self):
        clock = FakeClock()
        attempt, asked = scripted(clock, [(30.0, E(C.DEADLINE_EXCEEDED, "wait timed out")),
                                          (30.0, E(C.DEADLINE_EXCEEDED, "wait timed out")),
                                          (5.0, "lock")])
        self.assertEqual(requeue_until(100.0, attempt, attempt_wait=30.0, clock=clock,
                                       sleep=clock.sleep), "lock")
        self.assertEqual(asked, [30.0, 30.0, 30.0])
        self.assertEqual(clock.slept, [])

    def test_the_callers_own_timeout_is_deadline_exceeded(self):
        clock = FakeClock()
        attempt, asked = scripted(clock, [(30.0, E(C.DEADLINE_EXCEEDED, "cap")),
                                          (20.0, E(C.DEADLINE_EXCEEDED, "wait timed out"))])
        with self.assertRaises(TurnstileError) as e:
            requeue_until(50.0, attempt, attempt_wait=30.0, clock=clock, sleep=clock.sleep)
        self.assertEqual(e.exception.code, C.DEADLINE_EXCEEDED)
        self.assertEqual(asked, [30.0, 20.0])  # the last wait asks only for what is left

    def test_busy_and_unavailable_back_off_then_time_out_as_deadline_exceeded(self):
        clock = FakeClock()
        attempt, asked = scripted(clock, [(0.0, E(C.RESOURCE_EXHAUSTED, "too many waiters")),
                                          (0.0, E(C.UNAVAILABLE, "draining")),
                                          (0.0, E(C.CANCELLED, "shutting down")),
                                          (0.0, "lock")])
        self.assertEqual(requeue_until(10.0, attempt, clock=clock, sleep=clock.sleep), "lock")
        self.assertEqual(clock.slept, [0.05, 0.1, 0.2])
        clock = FakeClock()
        attempt, _ = scripted(clock, [(0.0, E(C.UNAVAILABLE, "no session"))] * 20)
        with self.assertRaises(TurnstileError) as e:
            requeue_until(1.0, attempt, clock=clock, sleep=clock.sleep)
        self.assertEqual(e.exception.code, C.DEADLINE_EXCEEDED)
        self.assertIn("UNAVAILABLE: no session", e.exception.details)
        self.assertLessEqual(clock.now, 11.0)

    def test_a_deadline_exceeded_at_once_backs_off_rather_than_spinning(self):
        clock = FakeClock()
        attempt, _ = scripted(clock, [(0.0, E(C.DEADLINE_EXCEEDED, "x")), (0.0, "lock")])
        self.assertEqual(requeue_until(60.0, attempt, clock=clock, sleep=clock.sleep), "lock")
        self.assertEqual(clock.slept, [0.05])

    def test_the_replicas_wait_limit_is_learnt_from_its_invalid_argument(self):
        clock = FakeClock()
        refusal = E(C.INVALID_ARGUMENT, "wait_timeout is 3600000ms; it must be 0..2000ms")
        attempt, asked = scripted(clock, [(0.0, refusal),
                                          (2.0, E(C.DEADLINE_EXCEEDED, "timed out")),
                                          (1.0, "lock")])
        self.assertEqual(requeue_until(None, attempt, clock=clock, sleep=clock.sleep), "lock")
        self.assertEqual(asked, [3600.0, 2.0, 2.0])

    def test_bad_input_permission_and_other_codes_are_raised_as_they_came(self):
        for err in (E(C.INVALID_ARGUMENT, "metadata value for \"value\" is 300 bytes"),
                    E(C.PERMISSION_DENIED, "policy"),
                    E(C.FAILED_PRECONDITION, "a semaphore of 3 is ahead"),
                    E(C.INVALID_ARGUMENT, "wait_timeout is 5ms; it must be 0..9000ms")):
            clock = FakeClock()
            attempt, asked = scripted(clock, [(0.0, err)])
            with self.assertRaises(TurnstileError) as e:
                requeue_until(5.0, attempt, clock=clock, sleep=clock.sleep)
            self.assertIs(e.exception, err)
            self.assertEqual(len(asked), 1)


class FakeHold:
    """A held Lock as Client.acquire returns it; `become` plays its stream."""

    def __init__(self, name, token, on_state, on_revoke, log):
        self.name, self.fencing_token, self.lease_id = name, token, "lease-%d" % token
        self.state = HELD
        self._on_state, self._on_revoke, self._log = on_state, on_revoke, log

    def become(self, state, reason):
        self.state = state
        self._on_state(self, state, reason)

    def release(self, timeout=10.0):
        self._log.append(("release", self.lease_id))
        if self.state in (HELD, SUSPENDED):
            self.become(RELEASED, "RELEASED")
            return True
        return False


class FakeClient:
    def __init__(self, script=None):
        self.log = []
        self.script = list(script or [])   # errors raised by the next acquires
        self.holds = []
        self.proclaimed = []

    def acquire(self, name, wait_timeout, owner, metadata, ttl, lock_delay, on_state,
                on_revoke):
        self.log.append(("acquire", name, owner, dict(metadata), round(wait_timeout, 3)))
        if self.script:
            raise self.script.pop(0)
        hold = FakeHold(name, 7 + len(self.holds), on_state, on_revoke, self.log)
        self.holds.append(hold)
        on_state(hold, HELD, "ACQUIRED")   # the reader says it before acquire returns
        return hold

    def proclaim(self, lease_id, token, metadata):
        self.proclaimed.append((lease_id, token, dict(metadata)))


class ElectionTest(unittest.TestCase):
    def make(self, client, **kw):
        said = []
        clock = FakeClock()
        el = Election(client, "jobs/leader", owner="me",
                      on_leadership=lambda ok, why: said.append((ok, why)),
                      clock=clock, sleep=clock.sleep, **kw)
        return el, said, clock

    def test_campaign_acquires_with_the_value_and_says_leader(self):
        client = FakeClient()
        el, said, _ = self.make(client, metadata={"zone": "a", "value": "ignored"})
        term = el.campaign("host-1:80", timeout=30)
        self.assertEqual(client.log, [("acquire", "jobs/leader", "me",
                                       {"zone": "a", "value": "host-1:80"}, 30.0)])
        self.assertEqual((term.value, term.term, term.lease_id), ("host-1:80", 7, "lease-7"))
        self.assertTrue(el.is_leader())
        self.assertEqual(said, [(True, "ACQUIRED")])
        again = el.campaign("other", timeout=1)   # already leading: the same term
        self.assertEqual((again.term, again.value, len(client.log)), (7, "host-1:80", 1))

    def test_campaign_requeues_invisibly_then_leads(self):
        client = FakeClient([E(C.UNAVAILABLE, "draining"), E(C.RESOURCE_EXHAUSTED, "busy")])
        el, said, clock = self.make(client)
        el.campaign("v", timeout=10)
        self.assertEqual(len(client.log), 3)
        self.assertEqual(clock.slept, [0.05, 0.1])
        self.assertEqual(said, [(True, "ACQUIRED")])

    def test_campaign_raises_on_its_own_timeout_bad_input_and_permission(self):
        client = FakeClient([E(C.UNAVAILABLE, "x")] * 50)
        el, said, _ = self.make(client)
        with self.assertRaises(TurnstileError) as e:
            el.campaign("v", timeout=1)
        self.assertEqual(e.exception.code, C.DEADLINE_EXCEEDED)
        for bad in ((None, 1), ("v", 0), ("v", -1)):
            with self.assertRaises(TurnstileError) as e:
                el.campaign(*bad)
            self.assertEqual(e.exception.code, C.INVALID_ARGUMENT)
        el2, _, _ = self.make(FakeClient([E(C.PERMISSION_DENIED, "policy")]))
        with self.assertRaises(TurnstileError) as e:
            el2.campaign("v", timeout=5)
        self.assertEqual(e.exception.code, C.PERMISSION_DENIED)
        self.assertEqual(said, [])
        self.assertFalse(el.is_leader())

    def test_doubt_loss_and_resume_are_said_at_once(self):
        client = FakeClient()
        el, said, _ = self.make(client)
        el.campaign("v", timeout=5)
        hold = client.holds[0]
        hold.become(SUSPENDED, "SUSPENDED")
        self.assertFalse(el.is_leader())
        hold.become(HELD, "RESUMED")
        self.assertTrue(el.is_leader())
        hold.become(SUSPENDED, "IN_DOUBT")
        hold.become(LOST, "REFRESH_OVERDUE")
        self.assertFalse(el.is_leader())
        self.assertEqual(said, [(True, "ACQUIRED"), (False, "SUSPENDED"), (True, "RESUMED"),
                                (False, "IN_DOUBT"), (False, "REFRESH_OVERDUE")])

    def test_resign_says_not_leader_before_letting_go(self):
        client = FakeClient()
        said_at_release = []
        el, said, _ = self.make(client)
        el.campaign("v", timeout=5)
        orig = client.holds[0].release

        def release(timeout=10.0):
            said_at_release.append(list(said))
            return orig(timeout)
        client.holds[0].release = release
        self.assertTrue(el.resign())
        self.assertEqual(said_at_release, [[(True, "ACQUIRED"), (False, "RESIGNED")]])
        self.assertEqual(said, [(True, "ACQUIRED"), (False, "RESIGNED")])  # RELEASED not again
        self.assertFalse(el.is_leader())
        self.assertFalse(el.resign())

    def test_revoke_requested_resigns_unless_told_not_to(self):
        client = FakeClient()
        el, said, _ = self.make(client)
        el.campaign("v", timeout=5)
        client.holds[0]._on_revoke("ops", "maintenance")
        self.assertEqual(said[-1], (False, "RESIGNED"))
        self.assertEqual(client.holds[0].state, RELEASED)
        client2 = FakeClient()
        el2, said2, _ = self.make(client2, resign_on_revoke=False)
        el2.campaign("v", timeout=5)
        client2.holds[0]._on_revoke("ops", "maintenance")
        self.assertTrue(el2.is_leader())
        self.assertEqual(said2, [(True, "ACQUIRED")])

    def test_proclaim_sends_lease_token_and_value_and_needs_a_term(self):
        client = FakeClient()
        el, _, _ = self.make(client, metadata={"zone": "a"})
        with self.assertRaises(TurnstileError) as e:
            el.proclaim("early")
        self.assertEqual(e.exception.code, C.FAILED_PRECONDITION)
        self.assertEqual(client.proclaimed, [])
        el.campaign("v1", timeout=5)
        el.proclaim("v2")
        self.assertEqual(client.proclaimed, [("lease-7", 7, {"zone": "a", "value": "v2"})])
        self.assertEqual(el.leadership.value, "v2")
        client.holds[0].become(LOST, "DELETED")
        with self.assertRaises(TurnstileError) as e:
            el.proclaim("v3")
        self.assertEqual(e.exception.code, C.FAILED_PRECONDITION)

    def test_campaign_while_in_doubt_returns_the_term_without_queueing_behind_it(self):
        client = FakeClient()
        el, said, _ = self.make(client)
        el.campaign("v", timeout=5)
        client.holds[0].become(SUSPENDED, "SUSPENDED")
        self.assertEqual(el.campaign("v", timeout=5).term, 7)
        self.assertEqual(len(client.holds), 1)
        self.assertFalse(el.is_leader())

    def test_a_new_term_after_a_loss_says_leader_again(self):
        client = FakeClient()
        el, said, _ = self.make(client)
        el.campaign("v", timeout=5)
        client.holds[0].become(LOST, "SESSION_EXPIRED")
        term = el.campaign("v", timeout=5)
        self.assertEqual(term.term, 8)
        self.assertEqual(said, [(True, "ACQUIRED"), (False, "SESSION_EXPIRED"),
                                (True, "ACQUIRED")])
        # The old hold's late news changes nothing.
        client.holds[0].become(RELEASED, "RELEASED")
        self.assertTrue(el.is_leader())


# ---- the stream-level pieces, with generated messages and a fake stub ----

class FakeRpcError(grpc.RpcError):
    def __init__(self, code, details=""):
        super().__init__()
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


class FakeStream:
    """A server stream: yields what is put, raises a put FakeRpcError."""

    def __init__(self):
        self.q = queue.Queue()
        self.cancelled = False

    def put(self, item):
        self.q.put(item)

    def __iter__(self):
        return self

    def __next__(self):
        item = self.q.get(timeout=10)
        if isinstance(item, BaseException):
            raise item
        if item is StopIteration:
            raise StopIteration
        return item

    def cancel(self):
        self.cancelled = True
        self.q.put(FakeRpcError(C.CANCELLED, "Locally cancelled"))


class FakeStub:
    def __init__(self):
        self.acquires = []
        self.observes = []
        self.script = {}   # Observe call number (1-based) -> what its stream plays

    def Acquire(self, requests):
        s = FakeStream()
        self.acquires.append(s)
        return s

    def Observe(self, request):
        s = FakeStream()
        self.observes.append((request, s))
        if len(self.observes) in self.script:
            for item in self.script[len(self.observes)]:
                s.put(item)
        return s


def stubbed_client():
    pb2, _ = load_stubs()
    client = Client.__new__(Client)
    client._pb2, client.target, client.timeout, client.retry_unavailable = pb2, "fake", 5, True
    client._stub = FakeStub()
    return client, pb2


class LockOnStateTest(unittest.TestCase):
    def test_on_state_follows_the_stream_in_order(self):
        client, pb = stubbed_client()
        T = pb.AcquireEvent
        seen = []
        done = threading.Event()

        def on_state(lock, state, reason):
            seen.append((state, reason))
            if state in (LOST, RELEASED):
                done.set()
        from turnstile.client import Lock
        lock = Lock(client, "L", pb.AcquireOpen(name="L"), on_state=on_state)
        s = client._stub.acquires[0]
        s.put(T(type=T.QUEUED, queued=pb.Queued(position=1, ahead=1)))
        s.put(T(type=T.ACQUIRED, acquired=pb.Acquired(lease_id="l", fencing_token=5)))
        s.put(T(type=T.SUSPENDED, suspended=pb.Suspended()))
        s.put(T(type=T.RESUMED))
        s.put(T(type=T.LOST, lost=pb.Lost(reason=pb.Lost.DELETED)))
        s.put(StopIteration)
        self.assertTrue(done.wait(10))
        self.assertEqual(seen, [(HELD, "ACQUIRED"), (SUSPENDED, "SUSPENDED"),
                                (HELD, "RESUMED"), (LOST, "DELETED")])
        self.assertEqual(lock.state, LOST)

    def test_the_watchdogs_doubt_is_said_as_in_doubt_then_refresh_overdue(self):
        # The replica falls silent past refresh_within (50 ms): IN_DOUBT; a
        # STILL_HELD brings it back (RESUMED); silence until the validity
        # (1 s) runs out: LOST REFRESH_OVERDUE and the stream cancelled.
        from google.protobuf import duration_pb2
        client, pb = stubbed_client()
        T = pb.AcquireEvent
        seen, cond = [], threading.Condition()

        def on_state(lock, state, reason):
            with cond:
                seen.append((state, reason))
                cond.notify_all()

        def wait_seen(n):
            with cond:
                self.assertTrue(cond.wait_for(lambda: len(seen) >= n, 10), seen)

        def d(ms):
            x = duration_pb2.Duration()
            x.FromMilliseconds(ms)
            return x
        from turnstile.client import Lock
        Lock(client, "L", pb.AcquireOpen(name="L"), on_state=on_state)
        s = client._stub.acquires[0]
        s.put(T(type=T.ACQUIRED, acquired=pb.Acquired(
            lease_id="l", fencing_token=5, safe_for=d(1000), refresh_within=d(50))))
        wait_seen(2)
        s.put(T(type=T.STILL_HELD, still_held=pb.StillHeld(safe_for=d(1000),
                                                         refresh_within=d(50))))
        wait_seen(5)
        self.assertEqual(seen, [(HELD, "ACQUIRED"), (SUSPENDED, "IN_DOUBT"), (HELD, "RESUMED"),
                                (SUSPENDED, "IN_DOUBT"), (LOST, "REFRESH_OVERDUE")])
        self.assertTrue(s.cancelled)

    def test_a_broken_stream_is_lost_stream_broken(self):
        client, pb = stubbed_client()
        T = pb.AcquireEvent
        seen = []
        done = threading.Event()
        from turnstile.client import Lock
        Lock(client, "L", pb.AcquireOpen(name="L"),
             on_state=lambda lk, st, why: (seen.append((st, why)), done.set()
                                           if st == LOST else None))
        s = client._stub.acquires[0]
        s.put(T(type=T.ACQUIRED, acquired=pb.Acquired(lease_id="l", fencing_token=5)))
        s.put(FakeRpcError(C.UNAVAILABLE, "socket closed"))
        self.assertTrue(done.wait(10))
        self.assertEqual(seen, [(HELD, "ACQUIRED"), (LOST, "STREAM_BROKEN")])


class ObserveTest(unittest.TestCase):
    def current(self, pb, seq, *holders, waiters=0):
        return pb.ObserveEvent(state=pb.ObserveEvent.CURRENT, name="L", sequence=seq,
                               waiters=waiters, holders=[
                                   pb.Contender(owner=o, metadata={"value": v}, fencing_token=t,
                                                identity="spiffe://x/" + o, position=1)
                                   for (o, v, t) in holders])

    def test_leader_changes_unknown_and_reobserve_after_unavailable(self):
        client, pb = stubbed_client()
        unknown = pb.ObserveEvent(state=pb.ObserveEvent.UNKNOWN, name="L", sequence=3,
                                  message="no ZooKeeper connection")
        client._stub.script = {
            1: [self.current(pb, 1, ("a", "v1", 10)),
                self.current(pb, 2, ("a", "v1", 10), waiters=3),  # waiters only: not a change
                unknown,
                self.current(pb, 4, ("a", "v2", 10)),             # proclaimed
                FakeRpcError(C.UNAVAILABLE, "draining")],
            2: [self.current(pb, 1, ("b", "w", 12)), self.current(pb, 2)],
        }
        with client.observe("L") as obs:
            items = [next(obs) for _ in range(6)]
        got = [(i.kind, i.leader and (i.leader.owner, i.leader.value, i.leader.fencing_token))
               for i in items]
        self.assertEqual(got, [(LEADER, ("a", "v1", 10)), (UNKNOWN, None),
                               (LEADER, ("a", "v2", 10)), (UNKNOWN, None),
                               (LEADER, ("b", "w", 12)), (NO_LEADER, None)])
        self.assertEqual(items[1].message, "no ZooKeeper connection")
        self.assertIn("UNAVAILABLE: draining", items[3].message)
        self.assertEqual(items[0].leader.identity, "spiffe://x/a")
        self.assertEqual(len(client._stub.observes), 2)
        self.assertEqual(client._stub.observes[1][0].name, "L")
        self.assertTrue(client._stub.observes[1][1].cancelled)  # closed by the with

    def test_other_errors_raise_and_close_stops(self):
        client, pb = stubbed_client()
        client._stub.script = {1: [FakeRpcError(C.INVALID_ARGUMENT, "name")]}
        obs = client.observe("L")
        with self.assertRaises(TurnstileError) as e:
            next(obs)
        self.assertEqual(e.exception.code, C.INVALID_ARGUMENT)
        client._stub.script = {2: [self.current(pb, 1)]}
        obs = client.observe("L", changes_only=False)
        self.assertEqual(next(obs).kind, NO_LEADER)
        threading.Timer(0.05, obs.close).start()
        self.assertEqual(list(obs), [])   # ends when closed from another thread

    def test_leader_once_waits_through_unknown(self):
        client, pb = stubbed_client()
        client._stub.script = {1: [pb.ObserveEvent(state=pb.ObserveEvent.UNKNOWN),
                                   self.current(pb, 2, ("a", "v", 9))]}
        leader = client.leader("L")
        self.assertEqual((leader.owner, leader.value, leader.fencing_token), ("a", "v", 9))
        client._stub.script = {2: [pb.ObserveEvent(state=pb.ObserveEvent.UNKNOWN)]}
        with self.assertRaises(TurnstileError) as e:
            client.leader("L", timeout=0.2)
        self.assertEqual(e.exception.code, C.DEADLINE_EXCEEDED)


if __name__ == "__main__":
    unittest.main()
