"""Unit tests of acquire_all (turnstile.multilock) with no server: the
canonical order, refused duplicates, the single deadline, release of what
was taken when the set cannot be had, and the set's state from its members.

    PYTHONPATH=build/python /usr/bin/python3 -m unittest discover -s client/python/tests
"""
import threading
import unittest

import grpc

from turnstile.client import HELD, LOST, RELEASED, SUSPENDED, TurnstileError
from turnstile.multilock import acquire_all, canonical_order


class FakeClock:
    def __init__(self):
        self.now = 50.0

    def __call__(self):
        return self.now


class FakeLock:
    def __init__(self, name, log, token):
        self.name = name
        self.state = HELD
        self.fencing_token = token
        self.lease_id = "lease-" + name
        self._log = log
        self.on_state = None
        self.released = threading.Event()

    def release(self, timeout=10.0):
        self._log.append(("release", self.name))
        ok = self.state == HELD
        if self.state in (HELD, SUSPENDED):
            self.state = RELEASED
        self.released.set()
        return ok

    def become(self, state, reason):
        """What the library's reader thread does when the stream says so."""
        self.state = state
        self.on_state(self, state, reason)


class FakeAcquirer:
    """acquire(name, wait, on_state): records the calls, fails where told."""

    def __init__(self, clock=None, fail=None, cost=0.0):
        self.log = []
        self.locks = {}
        self.clock = clock
        self.fail = fail or {}     # name -> TurnstileError
        self.cost = cost           # seconds each acquire takes on the fake clock
        self.during = {}           # name -> callable run while "waiting" for it

    def __call__(self, name, wait, on_state):
        self.log.append(("acquire", name, round(wait, 3)))
        if name in self.during:
            self.during[name]()
        if self.clock is not None:
            self.clock.now += self.cost
        if name in self.fail:
            raise self.fail[name]
        lock = FakeLock(name, self.log, 100 + len(self.locks))
        lock.on_state = on_state
        self.locks[name] = lock
        return lock


class CanonicalOrderTest(unittest.TestCase):
    def test_sorted_by_utf8_bytes(self):
        names = ["b", "a/2", "a/10", "\U0001F512", "\uff5e", "Z", "\u00e9"]
        self.assertEqual(canonical_order(names),
                         sorted(names, key=lambda n: n.encode("utf-8")))
        # Beyond the BMP sorts after U+FF5E in UTF-8 (in UTF-16 units it would not).
        self.assertEqual(canonical_order(["\U0001F512", "\uff5e"]), ["\uff5e", "\U0001F512"])
        self.assertEqual(canonical_order(["a/2", "a/10", "Z"]), ["Z", "a/10", "a/2"])

    def test_bad_sets_are_invalid_argument(self):
        for names, word in ((["x", "y", "x"], "twice"), ([], "at least one"),
                            ("abc", "not one string"), (["ok", ""], "non-empty"),
                            (["ok", 3], "non-empty")):
            with self.assertRaises(TurnstileError) as e:
                canonical_order(names)
            self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(word, e.exception.details)


class AcquireAllTest(unittest.TestCase):
    def test_takes_every_name_in_canonical_order_each_with_its_token(self):
        acq = FakeAcquirer()
        multi = acquire_all(acq, ["c", "a", "b"], 5.0)
        self.assertEqual([e[1] for e in acq.log if e[0] == "acquire"], ["a", "b", "c"])
        self.assertEqual(list(multi.locks), ["a", "b", "c"])
        self.assertEqual(multi.fencing_tokens, {"a": 100, "b": 101, "c": 102})
        self.assertEqual(multi.state, HELD)
        self.assertTrue(multi.release())
        self.assertEqual(acq.log[3:], [("release", "c"), ("release", "b"), ("release", "a")])
        self.assertEqual(multi.state, RELEASED)

    def test_duplicates_are_refused_before_any_acquire(self):
        acq = FakeAcquirer()
        with self.assertRaises(TurnstileError) as e:
            acquire_all(acq, ["a", "b", "a"], 5.0)
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(acq.log, [])

    def test_a_failure_on_the_third_name_releases_the_first_two(self):
        acq = FakeAcquirer(fail={"c": TurnstileError(grpc.StatusCode.DEADLINE_EXCEEDED, "t")})
        with self.assertRaises(TurnstileError) as e:
            acquire_all(acq, ["d", "c", "b", "a"], 5.0)
        self.assertEqual(e.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertEqual(acq.log, [("acquire", "a", 5.0), ("acquire", "b", 5.0),
                                   ("acquire", "c", 5.0), ("release", "b"), ("release", "a")])
        self.assertTrue(all(lk.state == RELEASED for lk in acq.locks.values()))

    def test_an_interruption_releases_too(self):
        acq = FakeAcquirer(fail={"b": KeyboardInterrupt()})
        with self.assertRaises(KeyboardInterrupt):
            acquire_all(acq, ["a", "b"], 5.0)
        self.assertEqual(acq.log[-1], ("release", "a"))

    def test_one_deadline_for_the_whole_set(self):
        clock = FakeClock()
        acq = FakeAcquirer(clock=clock, cost=1.5)
        acquire_all(acq, ["a", "b", "c"], 5.0, clock=clock)
        self.assertEqual([e[2] for e in acq.log], [5.0, 3.5, 2.0])
        # Past the deadline before the last name: DEADLINE_EXCEEDED, nothing held.
        clock = FakeClock()
        acq = FakeAcquirer(clock=clock, cost=2.5)
        with self.assertRaises(TurnstileError) as e:
            acquire_all(acq, ["a", "b", "c"], 5.0, clock=clock)
        self.assertEqual(e.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertEqual(acq.log, [("acquire", "a", 5.0), ("acquire", "b", 2.5),
                                   ("release", "b"), ("release", "a")])

    def test_try_once_tries_each_name_once(self):
        acq = FakeAcquirer(fail={"b": TurnstileError(grpc.StatusCode.FAILED_PRECONDITION,
                                                     "held")})
        with self.assertRaises(TurnstileError) as e:
            acquire_all(acq, ["b", "a", "c"], 0)
        self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertEqual(acq.log, [("acquire", "a", 0), ("acquire", "b", 0), ("release", "a")])

    def test_a_lock_lost_while_taking_the_others_aborts_the_set(self):
        acq = FakeAcquirer()
        acq.during["b"] = lambda: acq.locks["a"].become(LOST, "SESSION_EXPIRED")
        with self.assertRaises(TurnstileError) as e:
            acquire_all(acq, ["a", "b", "c"], 5.0)
        self.assertEqual(e.exception.code, grpc.StatusCode.ABORTED)
        self.assertIn("'a' was lost (SESSION_EXPIRED)", e.exception.details)
        self.assertNotIn(("acquire", "c", 5.0), acq.log)
        self.assertEqual(acq.locks["b"].state, RELEASED)

    def test_the_set_is_suspended_while_any_is_in_doubt_and_lost_when_any_is_lost(self):
        seen = []
        acq = FakeAcquirer()
        multi = acquire_all(acq, ["a", "b", "c"], 5.0,
                            on_state=lambda st, name, why: seen.append((st, name, why)))
        acq.locks["b"].become(SUSPENDED, "SUSPENDED")
        self.assertEqual(multi.state, SUSPENDED)
        self.assertFalse(multi.held)
        acq.locks["c"].become(SUSPENDED, "IN_DOUBT")
        acq.locks["b"].become(HELD, "RESUMED")
        self.assertEqual(multi.state, SUSPENDED)  # c is still in doubt
        acq.locks["c"].become(HELD, "RESUMED")
        self.assertEqual(multi.state, HELD)
        acq.locks["a"].become(LOST, "DELETED")
        self.assertEqual(multi.state, LOST)
        self.assertEqual(seen, [(SUSPENDED, "b", "SUSPENDED"), (HELD, "c", "RESUMED"),
                                (LOST, "a", "DELETED")])
        self.assertEqual((multi.lost_name, multi.lost_reason), ("a", "DELETED"))
        # The others are let go at once (on a thread of the library).
        self.assertTrue(acq.locks["b"].released.wait(5))
        self.assertTrue(acq.locks["c"].released.wait(5))
        self.assertFalse(multi.release())

    def test_release_ends_callbacks(self):
        seen = []
        acq = FakeAcquirer()
        multi = acquire_all(acq, ["a", "b"], 5.0, on_state=lambda *a: seen.append(a))
        multi.release()
        acq.locks["a"].become(LOST, "DELETED")
        self.assertEqual(seen, [])
        self.assertEqual(multi.state, RELEASED)


if __name__ == "__main__":
    unittest.main()
