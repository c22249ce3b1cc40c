"""Unit tests of the asyncio client (turnstile.aio) with no server: a fake
grpc.aio stub plays the Acquire and Observe streams. What a hold says and
when, that cancelling the awaiting task cancels the stream, the watchdog
as a timer of the loop, a hold read after the loop was blocked, callbacks
that are coroutines or that raise, and the async Observe iterator.

    PYTHONPATH=build/python /usr/bin/python3 -m unittest discover -s client/python/tests
"""
import asyncio
import threading
import time
import unittest

import grpc
from google.protobuf import duration_pb2

from turnstile import HELD, LEADER, LOST, NO_LEADER, RELEASED, SUSPENDED, UNKNOWN, load_stubs

from test_election_unit import FakeRpcError

C = grpc.StatusCode


class FakeCall:
    """A grpc.aio stream: reads what is put (an exception is raised),
    records writes; cancel() ends a pending read as grpc.aio does."""

    def __init__(self):
        self.q = asyncio.Queue()
        self.written = []
        self.half_closed = False
        self._cancelled = False

    def put(self, item):
        self.q.put_nowait(item)

    async def write(self, request):
        if self._cancelled:
            raise asyncio.InvalidStateError("done")
        self.written.append(request)

    async def done_writing(self):
        self.half_closed = True

    async def read(self):
        item = await self.q.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def cancel(self):
        if self._cancelled:
            return False
        self._cancelled = True
        self.put(asyncio.CancelledError())
        return True

    def cancelled(self):
        return self._cancelled


class FakeStub:
    def __init__(self):
        self.acquires = []
        self.observes = []
        self.script = {}   # Observe call number (1-based) -> what its stream plays
        self._opened = None

    def Acquire(self):
        call = FakeCall()
        self.acquires.append(call)
        if self._opened is not None and not self._opened.done():
            self._opened.set_result(None)
        return call

    async def acquire_call(self, n):
        """The n-th Acquire stream (from 0), once the client opened it."""
        while len(self.acquires) <= n:
            self._opened = asyncio.get_running_loop().create_future()
            await self._opened
        return self.acquires[n]

    def Observe(self, request, timeout=None):
        call = FakeCall()
        self.observes.append((request, call))
        for item in self.script.get(len(self.observes), []):
            call.put(item)
        return call


def stubbed_client():
    import turnstile.aio
    pb2, _ = load_stubs()
    client = turnstile.aio.Client.__new__(turnstile.aio.Client)
    client._pb2, client.target, client.timeout, client.retry_unavailable = pb2, "fake", 5, True
    client._stub = FakeStub()
    client._opened()
    return client, pb2


def ms(n):
    d = duration_pb2.Duration()
    d.FromMilliseconds(n)
    return d


async def opening(client, name="L", **options):
    """client.lock(name, **options) as a task, once its stream is open:
    (the task, the fake stream)."""
    n = len(client._stub.acquires)
    task = asyncio.ensure_future(client.lock(name, **options))
    return task, await client._stub.acquire_call(n)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


class AioLockTest(unittest.TestCase):
    def test_states_are_said_in_order_on_the_loop_with_no_thread(self):
        async def go():
            client, pb = stubbed_client()
            T = pb.AcquireEvent
            seen, queued = [], []
            threads = threading.active_count()
            pending, s = await opening(client, on_queued=queued.append,
                                       on_state=lambda h, state, why: seen.append((state, why)))
            s.put(T(type=T.QUEUED, queued=pb.Queued(position=1, ahead=1)))
            s.put(T(type=T.ACQUIRED, acquired=pb.Acquired(lease_id="l", fencing_token=5)))
            hold = await pending
            self.assertEqual((hold.fencing_token, hold.lease_id, hold.state), (5, "l", HELD))
            self.assertEqual(s.written[0].open.name, "L")
            self.assertEqual(queued, [1])
            s.put(T(type=T.SUSPENDED, suspended=pb.Suspended(safe_for=ms(4000))))
            s.put(T(type=T.RESUMED))
            s.put(T(type=T.LOST, lost=pb.Lost(reason=pb.Lost.DELETED)))
            s.put(grpc.aio.EOF)
            self.assertTrue(await hold.wait_for_state(LOST, timeout=5))
            self.assertEqual(seen, [(HELD, "ACQUIRED"), (SUSPENDED, "SUSPENDED"),
                                    (HELD, "RESUMED"), (LOST, "DELETED")])
            self.assertEqual(threading.active_count(), threads)
            self.assertFalse(await hold.release())  # lost already
        run(go())

    def test_cancelling_the_awaiting_task_cancels_the_stream(self):
        async def go():
            client, pb = stubbed_client()
            T = pb.AcquireEvent
            queued = asyncio.Event()
            seen = []
            task, s = await opening(client, on_queued=lambda p: queued.set(),
                                    on_state=lambda h, state, why: seen.append(state))
            s.put(T(type=T.QUEUED, queued=pb.Queued(position=2, ahead=1)))
            await queued.wait()
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            self.assertTrue(s.cancelled())  # the replica deletes the node
            self.assertEqual(seen, [])
            self.assertEqual(len(client._stub.acquires), 1)  # not retried
        run(go())

    def test_cancelled_as_it_is_granted_the_hold_is_let_go(self):
        async def go():
            client, pb = stubbed_client()
            T = pb.AcquireEvent
            seen = []
            task, s = await opening(client,
                                    on_state=lambda h, state, why: seen.append((state, why)))
            s.put(T(type=T.ACQUIRED, acquired=pb.Acquired(lease_id="l", fencing_token=5)))
            while not seen:  # the reader took ACQUIRED; the awaiting task has not resumed
                await asyncio.sleep(0)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            self.assertTrue(s.cancelled())
            while len(seen) < 2:
                await asyncio.sleep(0)
            self.assertEqual(seen, [(HELD, "ACQUIRED"), (RELEASED, "RELEASED")])
        run(go())

    def test_the_watchdog_is_a_loop_timer_in_doubt_then_refresh_overdue(self):
        # Silence past refresh_within (50 ms): IN_DOUBT; a STILL_HELD brings
        # it back (RESUMED); silence until the validity (300 ms) runs out:
        # LOST REFRESH_OVERDUE and the stream cancelled.
        async def go():
            client, pb = stubbed_client()
            T = pb.AcquireEvent
            seen = []
            pending, s = await opening(client,
                                       on_state=lambda h, state, why: seen.append((state, why)))
            s.put(T(type=T.ACQUIRED, acquired=pb.Acquired(
                lease_id="l", fencing_token=5, safe_for=ms(300), refresh_within=ms(50))))
            hold = await pending
            self.assertTrue(await hold.wait_for_state(SUSPENDED, timeout=5))
            s.put(T(type=T.STILL_HELD, still_held=pb.StillHeld(safe_for=ms(300),
                                                             refresh_within=ms(50))))
            self.assertTrue(await hold.wait_for_state(HELD, timeout=5))
            self.assertTrue(await hold.wait_for_state(LOST, timeout=5))
            self.assertEqual(seen, [(HELD, "ACQUIRED"), (SUSPENDED, "IN_DOUBT"),
                                    (HELD, "RESUMED"), (SUSPENDED, "IN_DOUBT"),
                                    (LOST, "REFRESH_OVERDUE")])
            self.assertEqual(hold.lost_reason, "REFRESH_OVERDUE")
            self.assertTrue(s.cancelled())
        run(go())

    def test_a_loop_blocked_past_the_validity_reads_lost_not_held(self):
        async def go():
            client, pb = stubbed_client()
            T = pb.AcquireEvent
            pending, s = await opening(client)
            s.put(T(type=T.ACQUIRED, acquired=pb.Acquired(
                lease_id="l", fencing_token=5, safe_for=ms(100), refresh_within=ms(50))))
            hold = await pending
            self.assertTrue(hold.held)
            time.sleep(0.15)  # the loop blocked (what is tested), no timer could run
            self.assertFalse(hold.held)
            self.assertEqual((hold.state, hold.lost_reason), (LOST, "REFRESH_OVERDUE"))
        run(go())

    def test_a_coroutine_callback_runs_as_a_task_and_a_raising_one_disturbs_nothing(self):
        async def go():
            client, pb = stubbed_client()
            T = pb.AcquireEvent
            errors = []
            asyncio.get_running_loop().set_exception_handler(
                lambda loop, ctx: errors.append(ctx.get("exception")))
            holds = []

            async def let_go(requester, reason):
                await holds[0].release(timeout=5)

            def bad_queued(position):
                raise RuntimeError("a buggy callback")

            pending, s = await opening(client, on_revoke=let_go, on_queued=bad_queued)
            s.put(T(type=T.QUEUED, queued=pb.Queued(position=1, ahead=1)))
            s.put(T(type=T.ACQUIRED, acquired=pb.Acquired(lease_id="l", fencing_token=5)))
            holds.append(await pending)
            self.assertEqual([type(e) for e in errors], [RuntimeError])
            s.put(T(type=T.REVOKE_REQUESTED, revoke_requested=pb.RevokeRequested(
                requester="ops", reason="maintenance")))
            while len(s.written) < 2:  # the release message, written by the callback's task
                await asyncio.sleep(0)
            self.assertTrue(s.written[1].HasField("release"))
            s.put(T(type=T.RELEASED))
            s.put(grpc.aio.EOF)
            self.assertTrue(await holds[0].wait_for_state(RELEASED, timeout=5))
            self.assertEqual(holds[0].revoke_requests, [("ops", "maintenance")])
        run(go())

    def test_a_failed_wait_raises_its_code_and_unavailable_is_retried(self):
        async def go():
            import turnstile
            client, pb = stubbed_client()
            T = pb.AcquireEvent
            pending, s = await opening(client, wait_timeout=5)
            s.put(FakeRpcError(C.UNAVAILABLE, "draining"))
            s = await client._stub.acquire_call(1)  # opened again after a backoff
            s.put(T(type=T.ACQUIRED, acquired=pb.Acquired(lease_id="l2", fencing_token=6)))
            self.assertEqual((await pending).fencing_token, 6)
            pending, s = await opening(client, wait_timeout=0)
            s.put(FakeRpcError(C.FAILED_PRECONDITION, "held"))
            with self.assertRaises(turnstile.TurnstileError) as e:
                await pending
            self.assertEqual(e.exception.code, C.FAILED_PRECONDITION)
            with self.assertRaises(turnstile.TurnstileError) as e:
                await client.lock("", wait_timeout=1)
            self.assertEqual(e.exception.code, C.INVALID_ARGUMENT)
        run(go())


class AioObserveTest(unittest.TestCase):
    def current(self, pb, seq, *holders):
        return pb.ObserveEvent(state=pb.ObserveEvent.CURRENT, name="L", sequence=seq, holders=[
            pb.Contender(owner=o, metadata={"value": v}, fencing_token=t, position=1)
            for (o, v, t) in holders])

    def test_an_async_iterator_that_observes_again_after_unavailable(self):
        async def go():
            client, pb = stubbed_client()
            client._stub.script = {
                1: [self.current(pb, 1, ("a", "v1", 10)), self.current(pb, 2, ("a", "v1", 10)),
                    FakeRpcError(C.UNAVAILABLE, "draining")],
                2: [self.current(pb, 1, ("b", "w", 12)), self.current(pb, 2)],
            }
            items = []
            async with client.observe("L") as obs:
                async for item in obs:
                    items.append((item.kind, item.leader and item.leader.value))
                    if len(items) == 4:
                        obs.close()
            self.assertEqual(items, [(LEADER, "v1"), (UNKNOWN, None), (LEADER, "w"),
                                     (NO_LEADER, None)])
            client._stub.script = {3: [self.current(pb, 1, ("c", "x", 14))]}
            leader = await client.leader("L")
            self.assertEqual((leader.owner, leader.value), ("c", "x"))
        run(go())

    def test_close_from_another_task_ends_the_iteration(self):
        async def go():
            client, _ = stubbed_client()
            obs = client.observe("L")

            async def drain():
                return [item async for item in obs]
            task = asyncio.ensure_future(drain())
            while not client._stub.observes:
                await asyncio.sleep(0)
            obs.close()
            self.assertEqual(await task, [])
        run(go())


if __name__ == "__main__":
    unittest.main()
