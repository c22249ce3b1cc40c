"""Leader election on a turnstile lock (Python client).

    from turnstile import Client, Election

    def said(is_leader, reason):          # called at once, on a library thread
        print("leader" if is_leader else "not leader", reason)

    with Client("ipv4:10.0.0.1:7400,10.0.0.2:7400") as client:
        election = Election(client, "jobs/scheduler", owner="host-a", on_leadership=said)
        term = election.campaign("host-a:8080", timeout=None)   # blocks until leader
        term.fencing_token                  # the term: pass it to what you lead
        election.proclaim("host-a:9090")   # observers see the new value
        election.resign()                  # the next candidate takes over

    for item in client.observe("jobs/scheduler"):   # leader changes
        print(item.kind, item.leader and item.leader.value)

The leader is the holder of the exclusive lock `name`; its value is the
hold's metadata key "value" (the convention of every turnstile client).

campaign() is an exclusive Acquire that waits until this candidate leads.
Its wait is re-queued invisibly when it ends before the caller's timeout:
the replica's --max-wait-timeout ends it with DEADLINE_EXCEEDED (or refuses
a longer wait with INVALID_ARGUMENT naming the limit: the limit is learnt
and used from then on), or it is told RESOURCE_EXHAUSTED (too many waiters)
or UNAVAILABLE / CANCELLED (the replica drains or is gone: through a
several-replica target the next attempt reaches another); these wait
retry_delays() between attempts. A re-queued wait joins the queue at its
end. campaign() raises TurnstileError only for the caller's own timeout
(DEADLINE_EXCEEDED), bad input (INVALID_ARGUMENT) and PERMISSION_DENIED,
or a code the server should never send a campaign (kept as it came).

on_leadership(is_leader, reason) says True when leadership starts
(ACQUIRED) and again when it is certain again after a doubt (RESUMED), and
False as soon as the library knows it may not lead: SUSPENDED (the replica
lost ZooKeeper), IN_DOUBT (the replica fell silent past refresh_within), a
loss (SESSION_EXPIRED, LEASE_EXPIRED, DELETED, SHUTDOWN, STREAM_BROKEN,
REFRESH_OVERDUE; after a doubt False is said again with the loss), and
RESIGNED before resign() lets go (so it is said before anyone else can
lead). REVOKE_REQUESTED (someone asks the leader to step down): the
election resigns by itself (reason RESIGNED) unless resign_on_revoke=False.
Calls come one at a time on library threads and must not block.

Thread-safety: an Election may be used from any thread; run one campaign
at a time.
"""

import re
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, Optional

import grpc

from .client import HELD, LOST, RELEASED, SUSPENDED, TurnstileError, retry_delays

__all__ = ["Election", "ElectionState", "Leadership", "Requeue", "requeue_until",
           "DEFAULT_ATTEMPT_WAIT"]

# The longest wait one Acquire of a campaign asks for: the replicas'
# default --max-wait-timeout (1 h). A lower limit is learnt from the
# replica's INVALID_ARGUMENT.
DEFAULT_ATTEMPT_WAIT = 3600.0

REQUEUED_CODES = (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE,
                  grpc.StatusCode.CANCELLED)
_WAIT_LIMIT = re.compile(r"wait_timeout is -?\d+ms; it must be 0\.\.(\d+)ms")


def _wait_limit(e: TurnstileError) -> float:
    """The replica's --max-wait-timeout from its INVALID_ARGUMENT (0: not
    that refusal)."""
    m = _WAIT_LIMIT.search(e.details or "")
    return int(m.group(1)) / 1000.0 if m else 0.0


class Requeue:
    """The campaign's wait loop as a plan, a function of the clock (tested
    with an injected one) that both clients follow: each attempt waits
    next_wait() (at most attempt_wait and what is left of `timeout`; None =
    no end); after a failure after(e) is the pause before the next attempt
    (0: at once), or raises: TurnstileError DEADLINE_EXCEEDED once `timeout`
    has passed, or any other error as it came (see the module doc)."""

    def __init__(self, timeout: Optional[float], attempt_wait: float = DEFAULT_ATTEMPT_WAIT,
                 clock: Callable[[], float] = time.monotonic):
        self._timeout = timeout
        self._end = None if timeout is None else clock() + timeout
        self._cap = attempt_wait
        self._clock = clock
        self._delays = retry_delays()
        self._last: Optional[TurnstileError] = None
        self._wait = self._started = 0.0

    def _timed_out(self) -> TurnstileError:
        last = self._last
        detail = " (last: %s: %s)" % (last.code.name, last.details) if last else ""
        return TurnstileError(grpc.StatusCode.DEADLINE_EXCEEDED,
                              "campaign: not leader within %.3fs%s" % (self._timeout, detail))

    def next_wait(self) -> float:
        left = None if self._end is None else self._end - self._clock()
        if left is not None and left < 0.001:
            raise self._timed_out()
        self._wait = self._cap if left is None else min(left, self._cap)
        self._started = self._clock()
        return self._wait

    def after(self, e: TurnstileError) -> float:
        self._last = e
        clock, end = self._clock, self._end
        if e.code == grpc.StatusCode.INVALID_ARGUMENT:
            limit = _wait_limit(e)
            if limit <= 0 or limit >= self._wait:
                raise e
            self._cap = limit  # the replica's --max-wait-timeout: ask for that
            return 0.0
        if e.code == grpc.StatusCode.DEADLINE_EXCEEDED:
            if end is not None and clock() >= end - 0.001:
                raise self._timed_out() from None
            if clock() - self._started >= min(self._wait, 1.0) / 2:
                self._delays = retry_delays()
                return 0.0  # a capped wait ran out: queue again at once
            # Ended early (a replica refusing at once): back off.
        elif e.code not in REQUEUED_CODES:
            raise e
        delay = next(self._delays)
        if end is not None and clock() + delay >= end:
            raise self._timed_out() from None
        return delay


def requeue_until(timeout: Optional[float], attempt: Callable[[float], object],
                  attempt_wait: float = DEFAULT_ATTEMPT_WAIT,
                  clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep):
    """Calls attempt(wait) (one Acquire wait) until it returns, following
    Requeue: re-queueing as the module doc says."""
    plan = Requeue(timeout, attempt_wait, clock)
    while True:
        wait = plan.next_wait()
        try:
            return attempt(wait)
        except TurnstileError as e:
            delay = plan.after(e)
        if delay > 0:
            sleep(delay)


@dataclass
class Leadership:
    """One term of leadership (what campaign() returns)."""
    name: str
    value: str
    fencing_token: int   # the term: strictly greater for every later leader
    lease_id: str
    owner: str

    @property
    def term(self) -> int:
        return self.fencing_token


def _check_value(value) -> None:
    if not isinstance(value, str):
        raise TurnstileError(grpc.StatusCode.INVALID_ARGUMENT, "value: must be a string")


class ElectionState:
    """The part of Election the asyncio client shares: the candidate's
    options, its current term and what on_leadership says. Its locks are
    never held across a call out of the library but on_leadership's."""

    def __init__(self, client, name: str, owner: str = "",
                 on_leadership: Optional[Callable[[bool, str], None]] = None,
                 metadata: Optional[Dict[str, str]] = None, resign_on_revoke: bool = True,
                 ttl: float = 0.0, lock_delay: float = 0.0,
                 attempt_wait: float = DEFAULT_ATTEMPT_WAIT,
                 clock: Callable[[], float] = time.monotonic):
        if not isinstance(name, str) or not name:
            raise TurnstileError(grpc.StatusCode.INVALID_ARGUMENT,
                                 "name: must be a non-empty string")
        if attempt_wait <= 0:
            raise TurnstileError(grpc.StatusCode.INVALID_ARGUMENT,
                                 "attempt_wait is %r; it must be > 0 seconds" % (attempt_wait,))
        self._client = client
        self.name = name
        self.owner = owner
        self._on_leadership = on_leadership
        self._metadata = dict(metadata or {})
        self._metadata.pop("value", None)
        self._resign_on_revoke = resign_on_revoke
        self._ttl, self._lock_delay = ttl, lock_delay
        self._attempt_wait = attempt_wait
        self._clock = clock
        # _said serializes the on_leadership calls (re-entrant: a callback
        # may resign); taken before _mu, never after.
        self._said = threading.RLock()
        self._mu = threading.Lock()
        self._lock = None            # the current (or last) hold, guarded by _mu
        self._value: Optional[str] = None
        self._leading = False        # what on_leadership said last
        self._end_said_for = None    # the hold whose end was already said

    # -- public ------------------------------------------------------------
    def is_leader(self) -> bool:
        """True only while the hold is held and not in doubt."""
        with self._mu:
            return self._leading and self._lock is not None and self._lock.state == HELD

    @property
    def leadership(self) -> Optional[Leadership]:
        """The current (or last) term; None before the first."""
        with self._mu:
            lk = self._lock
            if lk is None or lk.lease_id is None:
                return None
            return Leadership(self.name, self._value, lk.fencing_token, lk.lease_id, self.owner)

    def observe(self, changes_only: bool = True):
        """The election's leader changes (the client's observe of its name)."""
        return self._client.observe(self.name, changes_only)

    def leader(self, timeout: Optional[float] = None):
        """The current leader once (the client's leader of its name)."""
        return self._client.leader(self.name, timeout)

    # -- internals ---------------------------------------------------------
    def _campaign_plan(self, value: str, timeout: Optional[float]):
        """campaign() begins: (the term it holds already, or None), its
        attempt(wait) (one acquire through the client: a held Lock, or an
        awaitable of one from the asyncio client) and the end of its timeout
        (None: none)."""
        _check_value(value)
        if timeout is not None and timeout <= 0:
            raise TurnstileError(grpc.StatusCode.INVALID_ARGUMENT,
                                 "timeout is %r; it must be > 0 seconds, or None" % (timeout,))
        with self._mu:
            holding = self._lock is not None and self._lock.state in (HELD, SUSPENDED)
        metadata = dict(self._metadata)
        metadata["value"] = value
        end = None if timeout is None else self._clock() + timeout

        def attempt(wait):
            return self._client.acquire(
                self.name, wait_timeout=wait, owner=self.owner, metadata=metadata,
                ttl=self._ttl, lock_delay=self._lock_delay, on_state=self._hold_changed,
                on_revoke=self._revoke_requested)
        return (self.leadership if holding else None), attempt, end

    def _left(self, end: Optional[float]) -> Optional[float]:
        left = None if end is None else end - self._clock()
        return left if left is None or left > 0 else 0.0

    def _took(self, lock, value: str) -> Optional[Leadership]:
        """An attempt returned `lock`: the term, or None if it was lost
        again before campaign could return (queue again)."""
        with self._mu:
            self._lock = lock
            self._value = value
        if lock.state in (HELD, SUSPENDED):
            return self.leadership
        return None

    def _proclaim_plan(self, value: str):
        """(the hold whose metadata proclaim replaces, the new metadata)."""
        _check_value(value)
        with self._mu:
            lk = self._lock
        if lk is None or lk.state not in (HELD, SUSPENDED):
            raise TurnstileError(grpc.StatusCode.FAILED_PRECONDITION,
                                 "proclaim: not the leader of %r" % self.name)
        metadata = dict(self._metadata)
        metadata["value"] = value
        return lk, metadata

    def _proclaimed(self, lk, value: str) -> None:
        with self._mu:
            if self._lock is lk:
                self._value = value

    def _resign_said(self):
        """resign() begins: says on_leadership(False, "RESIGNED") if it
        leads or is in doubt; returns the hold to release, or None."""
        with self._said:
            with self._mu:
                lk = self._lock
                was = self._leading
                self._leading = False
                if lk is not None:
                    self._end_said_for = lk
            if lk is None or lk.state not in (HELD, SUSPENDED):
                return None
            if was or lk.state == SUSPENDED:
                self._say(False, "RESIGNED")
        return lk

    def _say(self, is_leader: bool, reason: str) -> None:
        if self._on_leadership is not None:
            self._on_leadership(is_leader, reason)

    def _hold_changed(self, lock, state: str, reason: str) -> None:
        """Lock.on_state of every hold this election takes."""
        with self._said:
            with self._mu:
                if state == HELD and reason == "ACQUIRED":
                    self._lock = lock  # before campaign() returns it
                if lock is not self._lock:
                    return
                leading = state == HELD
                was = self._leading
                self._leading = leading
                ended = state in (LOST, RELEASED)
                say = leading != was or (ended and self._end_said_for is not lock)
                if ended:
                    self._end_said_for = lock
            if say:
                self._say(leading, reason)

    def _revoke_requested(self, requester: str, reason: str):
        if self._resign_on_revoke:
            return self.resign()
        return None


class Election(ElectionState):
    """Campaigns for the lock `name` through `client` (see the module doc).
    metadata: more keys stored with the value (the key "value" is the
    election's). ttl / lock_delay: as Client.acquire. attempt_wait: the
    longest wait of one Acquire (see requeue_until)."""

    def __init__(self, client, name: str, owner: str = "",
                 on_leadership: Optional[Callable[[bool, str], None]] = None,
                 metadata: Optional[Dict[str, str]] = None, resign_on_revoke: bool = True,
                 ttl: float = 0.0, lock_delay: float = 0.0,
                 attempt_wait: float = DEFAULT_ATTEMPT_WAIT,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        super().__init__(client, name, owner, on_leadership, metadata, resign_on_revoke, ttl,
                         lock_delay, attempt_wait, clock)
        self._sleep = sleep

    def campaign(self, value: str, timeout: Optional[float] = None) -> Leadership:
        """Blocks until this candidate leads (timeout None: no limit) and
        returns the Leadership. While this candidate holds a term (leading,
        or in doubt: see is_leader()) it returns that term at once: a second
        Acquire would only queue behind its own hold."""
        term, attempt, end = self._campaign_plan(value, timeout)
        if term is not None:
            return term
        while True:
            lock = requeue_until(self._left(end), attempt, self._attempt_wait, self._clock,
                                 self._sleep)
            term = self._took(lock, value)
            if term is not None:
                return term

    def proclaim(self, value: str) -> None:
        """Replaces the leader's value, keeping the leadership. Raises
        TurnstileError: FAILED_PRECONDITION when this candidate holds no
        term (client-side) or the token is stale, NOT_FOUND when the hold is
        gone, INVALID_ARGUMENT for a value beyond the limits."""
        lk, metadata = self._proclaim_plan(value)
        self._client.proclaim(lk.lease_id, lk.fencing_token, metadata)
        self._proclaimed(lk, value)

    def resign(self) -> bool:
        """Gives up leadership: on_leadership(False, "RESIGNED") first, then
        the hold is released. True if it was held until now."""
        lk = self._resign_said()
        if lk is None:
            return False
        if threading.current_thread() is getattr(lk, "_reader", None):
            # Called from on_leadership on the hold's own reader: releasing
            # waits for that reader, so let another thread do it.
            threading.Thread(target=lk.release, name="turnstile-resign", daemon=True).start()
            return True
        return lk.release()
