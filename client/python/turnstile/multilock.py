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

__all__ = ["MultiLock", "acquire_all", "canonical_order"]


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


class MultiLock:
    """Several holds taken together by acquire_all. `locks` maps each name
    to its Lock in canonical order; `fencing_tokens` and `lease_ids` the
    same way. A context manager that releases every lock on exit."""

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

    def release(self, timeout: float = 10.0) -> bool:
        """Releases every lock (in reverse order). True if all were still
        held until now; False if the set had been lost. Idempotent."""
        with self._mu:
            was = self._state
            self._releasing = True
            if self._state in (HELD, SUSPENDED, WAITING):
                self._state = RELEASED
        ok = self._release_all(timeout)
        return ok and was in (HELD, SUSPENDED)

    def __enter__(self) -> "MultiLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        return "MultiLock(state=%r, fencing_tokens=%r)" % (self.state, self.fencing_tokens)

    # -- internals ---------------------------------------------------------
    def _release_all(self, timeout: float) -> bool:
        ok = True
        for lk in reversed(list(self.locks.values())):
            try:
                ok = lk.release(timeout) and ok
            except Exception:  # noqa: BLE001 - keep releasing the others
                ok = False
        return ok

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
            # The set is gone: let the others go too (not on this thread,
            # which may be a member's stream reader).
            threading.Thread(target=self._release_all, args=(10.0,),
                             name="turnstile-multilock-release", daemon=True).start()

    def _combined(self) -> str:
        """REQUIRES: _mu held."""
        states = [lk.state for lk in self.locks.values()]
        if any(s in (LOST, RELEASED) for s in states):
            return LOST
        if any(s == SUSPENDED for s in states):
            return SUSPENDED
        return HELD


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
    order = canonical_order(names)
    if wait_timeout is None or wait_timeout < 0:
        raise TurnstileError(grpc.StatusCode.INVALID_ARGUMENT,
                             "wait_timeout is %r; it must be >= 0 seconds" % (wait_timeout,))
    multi = MultiLock(on_state)
    end = clock() + wait_timeout
    try:
        for name in order:
            if wait_timeout == 0:
                left = 0.0
            else:
                left = end - clock()
                if left < 0.001:
                    raise TurnstileError(
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        "acquire_all: the %.3fs deadline passed with %d of %d locks taken "
                        "(next: %r)" % (wait_timeout, len(multi.locks), len(order), name))
            lock = acquire(name, left, multi._member_state)
            multi.locks[name] = lock
            with multi._mu:
                if multi.lost_name is not None or any(
                        lk.state in (LOST, RELEASED) for lk in multi.locks.values()):
                    gone = multi.lost_name or next(
                        n for n, lk in multi.locks.items() if lk.state in (LOST, RELEASED))
                    raise TurnstileError(
                        grpc.StatusCode.ABORTED,
                        "acquire_all: %r was lost (%s) while taking the others" % (
                            gone, multi.lost_reason or multi.locks[gone].state))
        with multi._mu:
            multi._state = multi._combined()
            if multi._state == LOST:
                raise TurnstileError(grpc.StatusCode.ABORTED,
                                     "acquire_all: a lock was lost while taking the others")
        return multi
    except BaseException:
        with multi._mu:
            multi._releasing = True
            multi._state = RELEASED
        multi._release_all(10.0)
        raise
