"""All-or-nothing multi-lock for the turnstile Python client.

    with client.acquire_all(["accounts/7", "accounts/3"], wait_timeout=10) as locks:
        locks.fencing_tokens["accounts/3"]   # each name keeps its own token
        ...
    # every lock released here

acquire_all takes the locks one by one in canonical order (sorted by the
UTF-8 bytes of their names, the order the server lists names in), so two
multi-locks that overlap never wait for each other in a cycle: whoever
holds the smaller name of their common ones is never waiting for the other.
One deadline covers the whole set: each lock waits only for what is left of
it. When any lock cannot be had (timeout, refusal, an error, an
interruption), every lock already taken is released before the call raises.
A try-once (wait_timeout 0) tries each name once.

Once held, the set is one hold: its state is 'held' while every lock is
held, 'suspended' while any is in doubt (SUSPENDED, or the client watchdog's
IN_DOUBT) and none is gone, and 'lost' as soon as any lock is lost (the
others are then released by the library: the set is gone). release()
releases every lock.

Thread-safety: a MultiLock may be used from any thread; on_state runs on
library threads, one call at a time, and must not block.
"""

import threading
import time
from typing import Callable, Dict, Iterable, List, Optional

import grpc

from .client import HELD, LOST, RELEASED, SUSPENDED, WAITING, TurnstileError

__all__ = ["MultiLock", "MultiLockState", "AllOrNothing", "acquire_all", "canonical_order"]


def canonical_order(names: Iterable[str]) -> List[str]:
    """The names sorted by their UTF-8 bytes (the same as code point order;
    every client library sorts this way, e.g. not by UTF-16 units, which
    differ for characters beyond the BMP). INVALID_ARGUMENT for a non-string, an empty name, an
    empty set or a name given twice, before any RPC."""
    if isinstance(names, (str, bytes)):
        raise TurnstileError(grpc.StatusCode.INVALID_ARGUMENT,
                             "names: a list of lock names, not one string")
    names = list(names)
    if not names:
        raise TurnstileError(grpc.StatusCode.INVALID_ARGUMENT, "names: at least one lock name")
    seen = set()
    for n in names:
        if not isinstance(n, str) or not n:
            raise TurnstileError(grpc.StatusCode.INVALID_ARGUMENT,
                                 "names: every name must be a non-empty string, got %r" % (n,))
        if n in seen:
            raise TurnstileError(grpc.StatusCode.INVALID_ARGUMENT,
                                 "names: %r is given twice" % n)
        seen.add(n)
    return sorted(names, key=lambda n: n.encode("utf-8"))


class AllOrNothing:
    """acquire_all's deadline as a plan both clients follow: the names in
    canonical order, and the wait of each (wait_for): what is left of the
    one deadline, or 0 for every name of a try-once."""

    def __init__(self, names: Iterable[str], wait_timeout: float,
                 clock: Callable[[], float] = time.monotonic):
        self.order = canonical_order(names)
        if wait_timeout is None or wait_timeout < 0:
            raise TurnstileError(grpc.StatusCode.INVALID_ARGUMENT,
                                 "wait_timeout is %r; it must be >= 0 seconds" % (wait_timeout,))
        self._wait_timeout = wait_timeout
        self._clock = clock
        self._end = clock() + wait_timeout

    def wait_for(self, name: str, taken: int) -> float:
        if self._wait_timeout == 0:
            return 0.0
        left = self._end - self._clock()
        if left < 0.001:
            raise TurnstileError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                "acquire_all: the %.3fs deadline passed with %d of %d locks taken "
                "(next: %r)" % (self._wait_timeout, taken, len(self.order), name))
        return left


class MultiLockState:
    """The part of MultiLock the asyncio client shares: the members, the
    set's combined state and what on_state says. Subclasses let the other
    members go (_let_go) when one is lost."""

    def __init__(self, on_state: Optional[Callable[[str, str, str], None]] = None):
        self._on_state = on_state
        self._mu = threading.RLock()   # serializes the member callbacks too
        self.locks: Dict[str, object] = {}
        self._state = WAITING          # guarded by _mu
        self._releasing = False
        self.lost_name: Optional[str] = None
        self.lost_reason: Optional[str] = None

    @property
    def state(self) -> str:
        with self._mu:
            return self._state

    @property
    def held(self) -> bool:
        """True while every lock of the set is certainly held."""
        return self.state == HELD

    @property
    def fencing_tokens(self) -> Dict[str, int]:
        return {n: lk.fencing_token for n, lk in self.locks.items()}

    @property
    def lease_ids(self) -> Dict[str, str]:
        return {n: lk.lease_id for n, lk in self.locks.items()}

    def __repr__(self) -> str:
        return "%s(state=%r, fencing_tokens=%r)" % (type(self).__name__, self.state,
                                                     self.fencing_tokens)

    # -- internals ---------------------------------------------------------
    def _begin_release(self) -> str:
        """release() begins: the set's state until now."""
        with self._mu:
            was = self._state
            self._releasing = True
            if self._state in (HELD, SUSPENDED, WAITING):
                self._state = RELEASED
        return was

    def _let_go(self) -> None:
        """A member was lost: release the others (not on the caller's
        thread or task, which may be a member's stream reader)."""
        raise NotImplementedError

    def _member_state(self, lock, state: str, reason: str) -> None:
        """on_state of every member Lock (called by its threads)."""
        with self._mu:
            if self._state in (WAITING, RELEASED, LOST) or self._releasing:
                if state == LOST and self.lost_name is None and self._state == WAITING:
                    self.lost_name, self.lost_reason = lock.name, reason
                return
            old = self._state
            new = self._combined()
            if new == LOST:
                self.lost_name, self.lost_reason = lock.name, reason
            self._state = new
            if new != old and self._on_state is not None:
                self._on_state(new, lock.name, reason)
        if new == LOST:
            self._let_go()

    def _combined(self) -> str:
        """REQUIRES: _mu held."""
        states = [lk.state for lk in self.locks.values()]
        if any(s in (LOST, RELEASED) for s in states):
            return LOST
        if any(s == SUSPENDED for s in states):
            return SUSPENDED
        return HELD

    def _took(self, name: str, lock) -> None:
        """acquire_all took `name`: ABORTED if a member is gone already."""
        self.locks[name] = lock
        with self._mu:
            if self.lost_name is not None or any(
                    lk.state in (LOST, RELEASED) for lk in self.locks.values()):
                gone = self.lost_name or next(
                    n for n, lk in self.locks.items() if lk.state in (LOST, RELEASED))
                raise TurnstileError(
                    grpc.StatusCode.ABORTED,
                    "acquire_all: %r was lost (%s) while taking the others" % (
                        gone, self.lost_reason or self.locks[gone].state))

    def _complete(self) -> None:
        """acquire_all took every name: the set is held (or ABORTED)."""
        with self._mu:
            self._state = self._combined()
            if self._state == LOST:
                raise TurnstileError(grpc.StatusCode.ABORTED,
                                     "acquire_all: a lock was lost while taking the others")

    def _abandon(self) -> None:
        """acquire_all failed: the members taken are to be released."""
        with self._mu:
            self._releasing = True
            self._state = RELEASED


class MultiLock(MultiLockState):
    """Several holds taken together by acquire_all. `locks` maps each name
    to its Lock in canonical order; `fencing_tokens` and `lease_ids` the
    same way. A context manager that releases every lock on exit."""

    def release(self, timeout: float = 10.0) -> bool:
        """Releases every lock (in reverse order). True if all were still
        held until now; False if the set had been lost. Idempotent."""
        was = self._begin_release()
        ok = self._release_all(timeout)
        return ok and was in (HELD, SUSPENDED)

    def __enter__(self) -> "MultiLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def _release_all(self, timeout: float) -> bool:
        ok = True
        for lk in reversed(list(self.locks.values())):
            try:
                ok = lk.release(timeout) and ok
            except Exception:  # noqa: BLE001 - keep releasing the others
                ok = False
        return ok

    def _let_go(self) -> None:
        threading.Thread(target=self._release_all, args=(10.0,),
                         name="turnstile-multilock-release", daemon=True).start()


def acquire_all(acquire: Callable[[str, float, Callable], object], names: Iterable[str],
                wait_timeout: float,
                on_state: Optional[Callable[[str, str, str], None]] = None,
                clock: Callable[[], float] = time.monotonic) -> MultiLock:
    """Takes every lock of `names` all-or-nothing (see the module doc).

    acquire(name, wait_timeout, on_state) takes one lock and returns it (a
    held turnstile.Lock) or raises TurnstileError; Client.acquire_all
    passes its own. on_state(state, name, reason) is told when the set
    becomes 'suspended', 'held' again, or 'lost' (name: the lock that
    caused it). Raises TurnstileError: INVALID_ARGUMENT (bad or duplicate
    names, before any RPC), DEADLINE_EXCEEDED (the deadline passed),
    FAILED_PRECONDITION (try-once: a lock was held), ABORTED (a lock
    already taken was lost while waiting for the rest), or what acquire
    raised; in every case no lock of the set is held any more."""
    plan = AllOrNothing(names, wait_timeout, clock)
    multi = MultiLock(on_state)
    try:
        for name in plan.order:
            left = plan.wait_for(name, len(multi.locks))
            multi._took(name, acquire(name, left, multi._member_state))
        multi._complete()
        return multi
    except BaseException:
        multi._abandon()
        multi._release_all(10.0)
        raise
