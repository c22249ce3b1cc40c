"""Unit tests of the Python client's own logic, with no server: the
careful-client watchdog against an injected clock, the retry backoff of an
Acquire told UNAVAILABLE, and the options checked before any RPC.

    PYTHONPATH=build/python /usr/bin/python3 -m unittest discover -s client/python/tests
"""
import unittest

import grpc

from turnstile.client import (HELD, LOST, SUSPENDED, TurnstileError, retry_delays, retry_until,
                               validate_acquire_options, watchdog_step)


class FakeClock:
    def __init__(self):
        self.now = 100.0
        self.slept = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


class WatchdogTest(unittest.TestCase):
    def run_watchdog(self, state, now, refresh_due, valid_until, safe_until, silent, until):
        """Steps the watchdog as its thread would, jumping the clock to each
        wake-up; returns the (time, state, reason) transitions."""
        seen = []
        while now <= until:
            step = watchdog_step(state, now, refresh_due, valid_until, safe_until, silent)
            if step.state != state:
                seen.append((now, step.state, step.lost_reason))
            state, silent, safe_until = step.state, step.silent, step.safe_until
            if step.wake_at is None:
                break
            now = max(step.wake_at, now)
        return seen

    def test_silence_past_refresh_within_suspends_then_loses_as_refresh_overdue(self):
        # Acquired at t=0: refresh within 2 s, safe for 8 s; nothing more comes.
        t0 = 0.0
        seen = self.run_watchdog(HELD, t0 + 1.0, refresh_due=t0 + 2.0, valid_until=t0 + 8.0,
                                 safe_until=None, silent=False, until=20.0)
        self.assertEqual(seen, [(2.0, SUSPENDED, None), (8.0, LOST, "REFRESH_OVERDUE")])

    def test_a_refresh_in_time_keeps_it_held(self):
        step = watchdog_step(HELD, 1.9, refresh_due=2.0, valid_until=8.0, safe_until=None,
                             silent=False)
        self.assertEqual((step.state, step.wake_at), (HELD, 2.0))

    def test_server_suspended_loses_as_session_expired_at_its_safe_time(self):
        step = watchdog_step(SUSPENDED, 3.0, refresh_due=2.0, valid_until=8.0, safe_until=5.0,
                             silent=False)
        self.assertEqual((step.state, step.wake_at), (SUSPENDED, 5.0))
        step = watchdog_step(SUSPENDED, 5.0, refresh_due=2.0, valid_until=8.0, safe_until=5.0,
                             silent=False)
        self.assertEqual((step.state, step.lost_reason), (LOST, "SESSION_EXPIRED"))

    def test_without_a_known_validity_an_overdue_hold_is_lost_at_once(self):
        step = watchdog_step(HELD, 3.0, refresh_due=2.0, valid_until=None, safe_until=None,
                             silent=False)
        self.assertEqual(step.state, SUSPENDED)
        step = watchdog_step(step.state, 3.0, 2.0, None, step.safe_until, step.silent)
        self.assertEqual((step.state, step.lost_reason), (LOST, "REFRESH_OVERDUE"))

    def test_ended_holds_are_not_watched(self):
        for state in (LOST, "released", "waiting"):
            self.assertIsNone(watchdog_step(state, 0, 0, 0, 0, False).wake_at)


class RetryTest(unittest.TestCase):
    def test_delays_double_from_50ms_up_to_1s(self):
        gen = retry_delays()
        self.assertEqual([next(gen) for _ in range(8)],
                         [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])

    def test_unavailable_is_retried_until_the_wait_timeout_then_raised(self):
        clock = FakeClock()
        asked = []

        def attempt(left):
            asked.append(round(left, 3))
            raise TurnstileError(grpc.StatusCode.UNAVAILABLE, "replica draining")

        with self.assertRaises(TurnstileError) as e:
            retry_until(3.0, attempt, clock=clock, sleep=clock.sleep)
        self.assertEqual(e.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(clock.slept, [0.05, 0.1, 0.2, 0.4, 0.8, 1.0])
        # Each attempt asks for what is left of the wait.
        self.assertEqual(asked, [3.0, 2.95, 2.85, 2.65, 2.25, 1.45, 0.45])
        self.assertLessEqual(sum(clock.slept), 3.0)

    def test_success_after_failures_returns_the_result(self):
        clock = FakeClock()
        results = iter([TurnstileError(grpc.StatusCode.CANCELLED, "shutting down"),
                        TurnstileError(grpc.StatusCode.UNAVAILABLE, "no session"), "lock"])

        def attempt(left):
            r = next(results)
            if isinstance(r, Exception):
                raise r
            return r

        self.assertEqual(retry_until(10.0, attempt, clock=clock, sleep=clock.sleep), "lock")
        self.assertEqual(clock.slept, [0.05, 0.1])

    def test_try_once_other_codes_and_disabled_retries_are_not_retried(self):
        for wait, code, enabled in ((0.0, grpc.StatusCode.UNAVAILABLE, True),
                                    (5.0, grpc.StatusCode.FAILED_PRECONDITION, True),
                                    (5.0, grpc.StatusCode.UNAVAILABLE, False)):
            clock = FakeClock()

            def attempt(left):
                raise TurnstileError(code, "no")

            with self.assertRaises(TurnstileError) as e:
                retry_until(wait, attempt, clock=clock, sleep=clock.sleep, enabled=enabled)
            self.assertEqual(e.exception.code, code)
            self.assertEqual(clock.slept, [])


class OptionsTest(unittest.TestCase):
    def test_bad_options_are_invalid_argument_before_any_rpc(self):
        cases = [
            (("", 1.0, 0.0, 0.0, 0, False), "name"),
            (("x", -1.0, 0.0, 0.0, 0, False), "wait_timeout"),
            (("x", 1.0, -0.5, 0.0, 0, False), "ttl"),
            (("x", 1.0, 0.0, -1.0, 0, False), "lock_delay"),
            (("x", 1.0, 0.0, 0.0, -2, False), "max_holders"),
            (("x", 1.0, 0.0, 0.0, 2, True), "shared"),
        ]
        for args, word in cases:
            with self.assertRaises(TurnstileError) as e:
                validate_acquire_options(*args)
            self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(word, str(e.exception))
        validate_acquire_options("x", 0.0, 1.0, 0.5, 3, False)  # fine: no exception


if __name__ == "__main__":
    unittest.main()
