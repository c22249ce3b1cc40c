"""The asyncio client: locks (turnstile.v1.LockService) over grpc.aio.

    import turnstile.aio

    async with turnstile.aio.Client("127.0.0.1:7400") as client:
        async with client.lock("my-lock", wait_timeout=30, owner="me") as hold:
            print(hold.fencing_token)   # pass it to the protected resource
        # released here

The asyncio twin of turnstile.client, with the same options, states,
events, errors and careful-client rules (turnstile.hold), which it shares
with it. What differs:
- Every call that talks to a replica is a coroutine; `client.lock(...)` is
  awaited for a held Lock, or entered with `async with`.
- A hold costs no thread: its Acquire stream is read by a task, its
  watchdog is a timer of the event loop, its lease renewal a task.
- Cancelling the task that awaits `client.lock(...)` (or a timeout around
  it, e.g. asyncio.wait_for) gives the wait up: the stream is cancelled and
  the replica deletes the contender's node at once, ACQUIRED or not.
  Cancelling a release (or the body of `async with`) cancels the stream:
  the hold ends too, involuntarily (a lock_delay applies).
- Callbacks (on_state, on_queued, on_revoke) run on the event loop and
  must not block; one that returns an awaitable has it run as a task of
  its own. An exception raised by a callback goes to the loop's exception
  handler; the hold is not disturbed.

Thread-safety: a Client and everything it returns belong to the event loop
they were created on (create the Client inside a coroutine).
"""

import asyncio
import inspect
import time
from typing import Awaitable, Callable, Dict, List, Optional

import grpc

from ..client import (AcquireRetry, Connection, Description, Leader, LeaderEvent, LeaderSearch,
                      LeaseStatus, LockNames, ObservationState, TokenCheck, TurnstileError,
                      acquire_open, check_name, description_from, lease_statuses_from,
                      lock_names_from, token_check_from, validate_acquire_options)
from ..hold import HELD, LOST, RELEASED, WAITING, HoldState, seconds

__all__ = ["Client", "Lock", "Observation"]


class _Background:
    """The tasks a client runs for its holds and callbacks: kept referenced
    until done (the loop keeps only weak references), their exceptions
    given to the loop's handler."""

    def __init__(self):
        self._tasks = set()

    def run(self, awaitable: Awaitable, what: str) -> "asyncio.Future":
        task = asyncio.ensure_future(awaitable)
        self._tasks.add(task)

        def done(t):
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                t.get_loop().call_exception_handler(
                    {"message": "turnstile.aio: %s failed" % what, "exception": t.exception(),
                     "task": t})
        task.add_done_callback(done)
        return task

    def call(self, fn: Callable, *args) -> None:
        """Calls a user's callback on the loop (see the module doc)."""
        try:
            result = fn(*args)
        except Exception as e:  # noqa: BLE001 - a callback must not end the stream's reader
            asyncio.get_running_loop().call_exception_handler(
                {"message": "turnstile.aio: callback %r raised" % (fn,), "exception": e})
            return
        if inspect.isawaitable(result):
            self.run(result, "callback %r" % (fn,))


class _Pending:
    """What Client.lock and Client.lock_all return: awaited, the hold;
    entered with `async with`, the hold, released on exit."""

    def __init__(self, make: Callable[[], Awaitable]):
        self._make = make
        self._hold = None

    def __await__(self):
        return self._make().__await__()

    async def __aenter__(self):
        self._hold = await self._make()
        return self._hold

    async def __aexit__(self, *exc) -> None:
        await self._hold.release()


class Lock(HoldState):
    """One Acquire stream, read by a task (see turnstile.hold for its states
    and fields). Obtained from Client.lock(); an async context manager that
    releases on exit."""

    def __init__(self, client: "Client", name: str, open_msg, on_revoke=None,
                 on_queued=None, on_state=None):
        self._client = client
        self._on_state, self._on_queued, self._on_revoke = on_state, on_queued, on_revoke
        self._init_hold(name, seconds(open_msg.ttl))
        self._loop = asyncio.get_running_loop()
        self._waits = []               # (predicate, future) of _wait_until
        self._write_mu = asyncio.Lock()
        self._watchdog_timer: Optional[asyncio.TimerHandle] = None
        self._watchdog_on = False
        self._renewal: Optional[asyncio.Future] = None
        self._call = client._stub.Acquire()
        self._reader = client._background.run(self._read(open_msg), "reading %r" % name)

    # -- public ------------------------------------------------------------
    @property
    def state(self) -> str:
        """The hold's state, the clock applied first: the watchdog is a
        timer of the loop, and a loop blocked past the hold's validity must
        read 'lost' (or 'suspended'), never a stale 'held'."""
        if self._watchdog_on:
            self._watchdog_look()
        return self._state

    @property
    def held(self) -> bool:
        """True while the lock is certainly held (state 'held')."""
        return self.state == HELD

    async def wait_for_state(self, *states: str, timeout: Optional[float] = None) -> bool:
        """Waits until state is one of `states`; False on timeout."""
        return await self._wait_until(lambda: self._state in states, timeout)

    async def release(self, timeout: float = 10.0) -> bool:
        """Releases the lock and waits (up to `timeout`) for RELEASED; if it
        does not come, cancels the stream (which also deletes the node).
        Returns False if the hold was already lost, True otherwise.
        Idempotent. Cancelled, it cancels the stream and re-raises."""
        answer, send = self._begin_release()
        if answer is not None:
            return answer
        try:
            if send:
                await self._write(self._client._pb2.AcquireRequest(
                    release=self._client._pb2.AcquireRelease()))
            done = await self._wait_until(
                lambda: self._ended or self._state in (RELEASED, LOST), timeout)
            if not done:
                self._call.cancel()
            await self._write(None)  # half-close, as the threaded client does
            await asyncio.wait({self._reader}, timeout=timeout)
        except asyncio.CancelledError:
            self._call.cancel()  # the replica deletes the node
            raise
        finally:
            released, said = self._release_done()
            self._changed()
            if said is not None:
                self._emit_state(*said)
        return released

    async def __aenter__(self) -> "Lock":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.release()

    # -- internals -----------------------------------------------------------
    async def _wait_until(self, pred: Callable[[], bool], timeout: Optional[float]) -> bool:
        """True once pred() holds, False after `timeout` seconds. Not
        asyncio.wait_for, which (before Python 3.12) returns the result and
        swallows the cancellation when both come at once: a cancelled wait
        must raise, so that its stream is cancelled."""
        if pred():
            return True
        fut = self._loop.create_future()
        entry = (pred, fut)
        self._waits.append(entry)
        timer = None
        if timeout is not None:
            timer = self._loop.call_later(max(timeout, 0.0),
                                          lambda: fut.done() or fut.set_result(False))
        try:
            return await fut
        finally:
            if timer is not None:
                timer.cancel()
            self._waits.remove(entry)

    def _changed(self) -> None:
        """The hold's fields changed: wake the waits now satisfied."""
        for pred, fut in list(self._waits):
            if not fut.done() and pred():
                fut.set_result(True)

    async def _write(self, request) -> None:
        """One message (None: half-close); a stream already ended takes none."""
        async with self._write_mu:
            try:
                if request is None:
                    await self._call.done_writing()
                else:
                    await self._call.write(request)
            except (grpc.RpcError, asyncio.InvalidStateError):
                pass  # the stream ended: its reader says how

    def _abandon(self) -> None:
        """The wait is given up (failed, timed out or its task cancelled):
        cancelling the stream makes the replica delete the node."""
        self._releasing = True
        self._call.cancel()

    async def _read(self, open_msg) -> None:
        code, details = grpc.StatusCode.OK, ""
        try:
            await self._write(self._client._pb2.AcquireRequest(open=open_msg))
            while True:
                ev = await self._call.read()
                if ev is grpc.aio.EOF:
                    break
                self._on_event(ev)
        except grpc.RpcError as e:
            code, details = e.code() or grpc.StatusCode.UNKNOWN, e.details() or ""
        except asyncio.CancelledError:
            code, details = grpc.StatusCode.CANCELLED, "cancelled by the client"
            if not self._call.cancelled():  # this task, not the stream, was cancelled
                self._call.cancel()
                raise
        except Exception as e:  # noqa: BLE001 - e.g. grpc.aio's own errors
            code, details = grpc.StatusCode.UNKNOWN, repr(e)
            self._call.cancel()
        finally:
            self._stop_watchdog()
            if self._renewal is not None:
                self._renewal.cancel()
            ended_as = self._stream_ended(code, details)
            self._client._holds.discard(self)
            self._changed()
            if ended_as is not None:
                self._emit_state(*ended_as)

    def _emit_state(self, state: str, reason: str) -> None:
        if self._on_state is not None:
            self._client._background.call(self._on_state, self, state, reason)

    def _on_event(self, ev) -> None:
        change = self._apply_event(self._client._pb2, ev, time.monotonic())
        self._changed()
        background = self._client._background
        if change.start_keepalive:
            self._renewal = background.run(self._renew(), "renewing %r" % self.name)
        if change.queued is not None and self._on_queued is not None:
            background.call(self._on_queued, change.queued)
        if change.revoke is not None and self._on_revoke is not None:
            background.call(self._on_revoke, *change.revoke)
        if change.start_watchdog:
            self._watchdog_on = True
        if change.state is not None:
            self._emit_state(*change.state)
        if self._watchdog_on:
            self._watchdog_look()  # an event may have moved its deadlines

    def _watchdog_look(self) -> None:
        """Looks at the hold as HoldState._watchdog_tick says, and again at
        its wake-up time (a timer of the loop); a loss cancels the stream."""
        while True:
            tick = self._watchdog_tick(time.monotonic())
            if tick.state is not None:
                self._changed()
                self._emit_state(*tick.state)  # may read hold.state: a look of its own
            if tick.cancel:
                self._call.cancel()  # a live replica deletes the node
            if tick.wake_at is None:
                self._watchdog_on = False
                self._stop_watchdog()
                return
            if tick.state is None:
                break
        self._stop_watchdog()
        self._watchdog_timer = self._loop.call_later(
            max(tick.wake_at - time.monotonic(), 0.0), self._watchdog_look)

    def _stop_watchdog(self) -> None:
        if self._watchdog_timer is not None:
            self._watchdog_timer.cancel()
            self._watchdog_timer = None

    async def _renew(self) -> None:
        interval = max(self._ttl / 3.0, 0.1)
        while True:
            if await self._wait_until(
                    lambda: self._state in (LOST, RELEASED) or self._ended or self._releasing,
                    interval):
                return
            try:
                st = (await self._client.keep_alive([self.lease_id], timeout=interval))[0]
            except TurnstileError:
                continue  # transient: try again next interval (the server says LOST if it expires)
            if st.code == grpc.StatusCode.NOT_FOUND:
                return  # gone; the Acquire stream reports LOST


class Observation(ObservationState):
    """An async iterator of LeaderEvent for one lock (Client.observe), with
    the threaded Observation's rules: a stream that fails with UNAVAILABLE
    or CANCELLED (or ends) is opened again after a backoff, first yielding
    an UNKNOWN item; other errors raise TurnstileError. close() ends the
    iteration; an async context manager."""

    def __init__(self, client: "Client", name: str, changes_only: bool = True):
        self._client = client
        self._init_observation(name, changes_only)
        self._closed = asyncio.Event()
        self._call = None

    def __aiter__(self) -> "Observation":
        return self

    async def __anext__(self) -> LeaderEvent:
        pb = self._client._pb2
        while True:
            if self._closed.is_set():
                raise StopAsyncIteration
            if self._call is None:
                self._call = self._client._stub.Observe(pb.ObserveRequest(name=self.name))
            try:
                ev = await self._call.read()
                if ev is not grpc.aio.EOF:
                    item = self._received(pb, ev)
                    if item is not None:
                        return item
                    continue
                failure = "the Observe stream ended"
            except asyncio.CancelledError:
                if self._closed.is_set():
                    raise StopAsyncIteration from None  # close() cancelled the stream
                raise
            except grpc.RpcError as e:
                if self._closed.is_set():
                    raise StopAsyncIteration from None
                failure = self._failure_of(e)
            self._call = None
            item, delay = self._failed(failure)
            closed = asyncio.ensure_future(self._closed.wait())
            try:
                await asyncio.wait({closed}, timeout=delay)  # the backoff, cut short by close()
            finally:
                closed.cancel()
            if item is not None:
                return item

    def close(self) -> None:
        self._closed.set()
        if self._call is not None:
            self._call.cancel()

    async def __aenter__(self) -> "Observation":
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()


class Client(Connection):
    """A connection to one turnstile replica over grpc.aio, with the
    threaded Client's options (target, credentials, timeout, options,
    retry_unavailable, tls_*_file: see turnstile.Client). An async context
    manager; close() is a coroutine."""

    _channels = grpc.aio

    def _opened(self) -> None:
        self._background = _Background()
        self._holds = set()  # the Locks whose streams are open: alive while they are

    async def close(self) -> None:
        """Closes the channel; open Acquire streams are cancelled (their
        locks are released by the server) and their holds end (released if
        being released, else lost: STREAM_BROKEN) before it returns."""
        await self._channel.close()
        readers = [h._reader for h in self._holds]
        if readers:
            await asyncio.wait(readers, timeout=self.timeout)

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def lock(self, name: str, wait_timeout: float = 60.0, ttl: float = 0.0,
             owner: str = "", metadata: Optional[Dict[str, str]] = None,
             grace: float = 15.0, shared: bool = False,
             on_revoke: Optional[Callable[[str, str], object]] = None,
             revoke_holders: bool = False, revoke_reason: str = "",
             lock_delay: float = 0.0, max_holders: int = 0,
             on_queued: Optional[Callable[[int], object]] = None,
             on_state: Optional[Callable[["Lock", str, str], object]] = None) -> _Pending:
        """Takes the lock `name`: `await client.lock(...)` returns a held
        Lock, `async with client.lock(...) as hold` releases it on exit.
        The options, errors and retries are turnstile.Client.acquire's;
        cancelling the awaiting task gives the wait up (no node is left)."""
        return _Pending(lambda: self._acquire(
            name, wait_timeout, ttl, owner, metadata, grace, shared, on_revoke,
            revoke_holders, revoke_reason, lock_delay, max_holders, on_queued, on_state))

    acquire = lock  # the threaded client's name

    async def _acquire(self, name, wait_timeout, ttl, owner, metadata, grace, shared,
                       on_revoke, revoke_holders, revoke_reason, lock_delay, max_holders,
                       on_queued, on_state) -> Lock:
        validate_acquire_options(name, wait_timeout, ttl, lock_delay, max_holders, shared)
        plan = AcquireRetry(wait_timeout, enabled=self.retry_unavailable)
        while True:
            wait = plan.next_wait()
            open_msg = acquire_open(self._pb2, name, wait, ttl, owner, metadata, shared,
                                    revoke_holders, revoke_reason, lock_delay, max_holders)
            try:
                return await self._acquire_once(name, open_msg, wait, grace, on_revoke,
                                                on_queued, on_state)
            except TurnstileError as e:
                delay = plan.backoff(e)
            await asyncio.sleep(delay)  # the backoff, bounded by the wait timeout

    async def _acquire_once(self, name, open_msg, wait_timeout, grace, on_revoke, on_queued,
                            on_state) -> Lock:
        lock = Lock(self, name, open_msg, on_revoke, on_queued, on_state)
        self._holds.add(lock)
        waited = max(wait_timeout, 0.0) + grace
        try:
            answered = await lock._wait_until(lambda: lock._state != WAITING or lock._ended,
                                              waited)
        except BaseException:
            lock._abandon()  # e.g. the awaiting task was cancelled
            raise
        if lock._state != WAITING:
            return lock  # held (or, rarely, already lost again: see lock.state)
        lock._abandon()
        raise TurnstileError(*lock._wait_error(answered, self.target, waited))

    def lock_all(self, names: List[str], wait_timeout: float = 60.0,
                 on_state: Optional[Callable[[str, str, str], object]] = None,
                 **lock_options) -> _Pending:
        """Takes every lock of `names` all-or-nothing under one deadline, in
        canonical (UTF-8 byte) order: awaited, a held turnstile.aio.MultiLock;
        entered with `async with`, released on exit. lock_options are
        lock()'s. See turnstile.multilock for the rules."""
        from .multilock import lock_all
        return _Pending(lambda: lock_all(self, names, wait_timeout, on_state, lock_options))

    acquire_all = lock_all  # the threaded client's name

    async def proclaim(self, lease_id: str, fencing_token: int,
                       metadata: Dict[str, str]) -> None:
        """Replaces the metadata of a hold (see turnstile.Client.proclaim)."""
        await self._unary(self._stub.Proclaim, self._pb2.ProclaimRequest(
            lease_id=lease_id, fencing_token=fencing_token, metadata=dict(metadata)))

    def observe(self, name: str, changes_only: bool = True) -> Observation:
        """Follows the leader (the first holder) of lock `name`: an async
        iterator of LeaderEvent (`async for item in client.observe(name)`),
        re-observing by itself after UNAVAILABLE; close() ends it."""
        check_name(name)
        return Observation(self, name, changes_only)

    async def leader(self, name: str, timeout: Optional[float] = None) -> Optional[Leader]:
        """The current leader of `name` once (None: nobody holds it),
        waiting through UNKNOWN states up to `timeout` (default: the
        client's); TurnstileError DEADLINE_EXCEEDED if it stays unknown."""
        timeout = self.timeout if timeout is None else timeout
        search = LeaderSearch(name, timeout)

        async def first():
            async for item in obs:
                if search.answers(item):
                    return item.leader
            raise search.timed_out()

        async with self.observe(name) as obs:
            try:
                return await asyncio.wait_for(first(), timeout)
            except asyncio.TimeoutError:
                raise search.timed_out() from None

    async def release(self, lease_id: str) -> bool:
        """Releases a lease by id (any replica). True if it was released,
        False if it was already gone (NOT_FOUND)."""
        return await self._unary_found(self._stub.Release,
                                       self._pb2.ReleaseRequest(lease_id=lease_id))

    async def revoke(self, lease_id: str, reason: str = "", requester: str = "") -> bool:
        """Asks the holder of a lease to let go (any replica); it decides.
        True if asked, False if the lease is gone (NOT_FOUND)."""
        return await self._unary_found(self._stub.Revoke, self._pb2.RevokeRequest(
            lease_id=lease_id, reason=reason, requester=requester))

    async def keep_alive(self, lease_ids: List[str],
                         timeout: Optional[float] = None) -> List[LeaseStatus]:
        """Renews leases (opened with ttl > 0) once; one status per id."""
        call = self._stub.KeepAlive(timeout=timeout or self.timeout)
        try:
            await call.write(self._pb2.KeepAliveRequest(lease_ids=list(lease_ids)))
            resp = await call.read()
        except grpc.RpcError as e:
            raise TurnstileError.from_rpc(e) from None
        finally:
            call.cancel()
        if resp is grpc.aio.EOF:
            raise TurnstileError(grpc.StatusCode.UNKNOWN, "KeepAlive ended without a response")
        return lease_statuses_from(resp)

    async def describe(self, name: str) -> Optional[Description]:
        """Holders and waiters of `name` in queue order; None if nobody
        holds or waits for it."""
        try:
            r = await self._unary(self._stub.Describe, self._pb2.DescribeRequest(name=name))
        except TurnstileError as e:
            if e.code == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        return description_from(self._pb2, r)

    async def check_token(self, name: str, fencing_token: int,
                          allow_stale: bool = False) -> TokenCheck:
        """Whether `fencing_token` still belongs to a hold of `name` (see
        turnstile.Client.check_token): apply a write only when `current`."""
        r = await self._unary(self._stub.CheckToken, self._pb2.CheckTokenRequest(
            name=name, fencing_token=fencing_token, allow_stale=allow_stale))
        return token_check_from(self._pb2, r)

    async def list(self, prefix: str = "", limit: int = 0) -> LockNames:
        """Names of locks with holders or waiters, in byte order."""
        r = await self._unary(self._stub.List, self._pb2.ListRequest(prefix=prefix, limit=limit))
        return lock_names_from(r)

    async def _unary(self, method, request):
        try:
            return await method(request, timeout=self.timeout)
        except grpc.RpcError as e:
            raise TurnstileError.from_rpc(e) from None

    async def _unary_found(self, method, request) -> bool:
        """A unary RPC on a lease: True if done, False on NOT_FOUND."""
        try:
            await self._unary(method, request)
            return True
        except TurnstileError as e:
            if e.code == grpc.StatusCode.NOT_FOUND:
                return False
            raise
