"""The state of one hold as its Acquire stream and the clock tell it: the
careful-client rules of lock.proto, with no I/O, shared by the threaded
library (turnstile.client.Lock) and the asyncio one (turnstile.aio.Lock).

A hold is 'waiting' until ACQUIRED, then 'held'; 'suspended' while it is in
doubt (the replica said SUSPENDED with its safe time, or fell silent past
refresh_within: IN_DOUBT), certainly held only until `safe_until`
(time.monotonic() seconds); 'lost' (terminal, `lost_reason` says why:
SESSION_EXPIRED, LEASE_EXPIRED, DELETED, SHUTDOWN, STREAM_BROKEN,
REFRESH_OVERDUE) as soon as the library knows it may no longer hold it,
which is before anyone else can be granted it; 'released' on request.

HoldState is a base class: its fields are the Lock's public attributes.
Its methods change state and return what the caller must do (callbacks,
tasks or threads to start); they never block and never call out.
Thread-safety: none of its own; turnstile.client.Lock calls every method
under its condition variable, turnstile.aio.Lock on its event loop.
"""

from typing import List, NamedTuple, Optional, Tuple

import grpc

__all__ = ["WAITING", "HELD", "SUSPENDED", "LOST", "RELEASED", "WatchdogStep", "watchdog_step",
           "HoldState", "HoldChange", "WatchdogTick"]

WAITING, HELD, SUSPENDED, LOST, RELEASED = "waiting", "held", "suspended", "lost", "released"


def seconds(d) -> float:
    """A google.protobuf.Duration in seconds."""
    return d.seconds + d.nanos / 1e9


class WatchdogStep(NamedTuple):
    state: str
    silent: bool                  # SUSPENDED by the watchdog, not by the server
    safe_until: Optional[float]
    lost_reason: Optional[str]    # set when state became LOST
    wake_at: Optional[float]      # when to look again (None: nothing left to watch)


def watchdog_step(state: str, now: float, refresh_due: float,
                  valid_until: Optional[float], safe_until: Optional[float],
                  silent: bool) -> WatchdogStep:
    """The careful-client rule of lock.proto, as a pure function of the
    clock (so it is tested with an injected one): what a hold in `state`
    becomes at `now`. A held hold whose refresh (STILL_HELD) is overdue is
    SUSPENDED, certainly safe until the validity of its latest refresh; a
    suspended hold (by the watchdog, or by the server's SUSPENDED with its
    safe time) is LOST once that runs out: REFRESH_OVERDUE when the replica
    fell silent, SESSION_EXPIRED when it said it lost ZooKeeper."""
    if state == HELD:
        if now >= refresh_due:
            return WatchdogStep(SUSPENDED, True, valid_until, None, now)
        return WatchdogStep(HELD, silent, safe_until, None, refresh_due)
    if state == SUSPENDED:
        deadline = safe_until if safe_until is not None else now
        if now >= deadline:
            return WatchdogStep(LOST, silent, safe_until,
                                "REFRESH_OVERDUE" if silent else "SESSION_EXPIRED", None)
        return WatchdogStep(SUSPENDED, silent, safe_until, None, deadline)
    return WatchdogStep(state, silent, safe_until, None, None)


class HoldChange(NamedTuple):
    """What one AcquireEvent did, for the caller to act on, in this order:
    start the lease's renewal, say the queue position, say the revoke
    request, start the watchdog, then say the new state."""
    start_keepalive: bool
    queued: Optional[int]                   # the new queue position
    revoke: Optional[Tuple[str, str]]       # (requester, reason)
    start_watchdog: bool
    state: Optional[Tuple[str, str]]        # (new state, reason) if it changed


class WatchdogTick(NamedTuple):
    """What one look of the watchdog did."""
    state: Optional[Tuple[str, str]]        # (new state, reason) if it changed
    cancel: bool                            # lost: cancel the stream (the node goes)
    wake_at: Optional[float]                # look again then (None: stop watching)


class HoldState:
    """The hold's fields and the rules that move them (see the module doc)."""

    def _init_hold(self, name: str, ttl: float) -> None:
        self.name = name
        self.revoke_requests: List[Tuple[str, str]] = []  # (requester, reason) seen
        self._state = WAITING
        self._ended = False            # the stream finished (any status)
        self._end_code = None          # grpc.StatusCode once ended
        self._end_details = ""
        self._releasing = False
        self.position: Optional[int] = None   # last QUEUED position
        self.lease_id: Optional[str] = None
        self.fencing_token: Optional[int] = None
        self.valid_for: Optional[float] = None
        self.session_timeout: Optional[float] = None
        self.safe_until: Optional[float] = None
        self.lost_reason: Optional[str] = None
        self.lost_message: str = ""
        # From ACQUIRED / STILL_HELD (a server that refreshes holds): the
        # hold is certainly valid until valid_until (time.monotonic()); when
        # no refresh comes within refresh_within the hold is SUSPENDED here,
        # and LOST (reason REFRESH_OVERDUE, the stream cancelled) once
        # valid_until has passed. None against an older server.
        self.valid_until: Optional[float] = None
        self._refresh_within = 0.0
        self._refresh_due = 0.0
        self._silent = False           # SUSPENDED by the watchdog, not the server
        self._ttl = ttl

    def __repr__(self) -> str:
        return "%s(name=%r, state=%r, fencing_token=%r, lease_id=%r)" % (
            type(self).__name__, self.name, self._state, self.fencing_token, self.lease_id)

    def _apply_event(self, pb, ev, now: float) -> HoldChange:
        """One event of the Acquire stream, received at `now`."""
        T = pb.AcquireEvent
        old = self._state
        start_keepalive = start_watchdog = False
        revoke = queued = None
        if ev.type == T.QUEUED:
            self.position = ev.queued.position
            queued = self.position
        elif ev.type == T.ACQUIRED:
            a = ev.acquired
            self.lease_id = a.lease_id
            self.fencing_token = a.fencing_token
            self.valid_for = seconds(a.valid_for) if a.HasField("valid_for") else None
            self.session_timeout = seconds(a.session_timeout)
            self._state = HELD
            start_keepalive = self._ttl > 0
            if a.HasField("refresh_within") and seconds(a.refresh_within) > 0:
                self._refresh_within = seconds(a.refresh_within)
                self._refresh_due = now + self._refresh_within
                self.valid_until = now + seconds(a.safe_for)
                start_watchdog = True
        elif ev.type == T.STILL_HELD:
            if self._state in (HELD, SUSPENDED) and self._refresh_within > 0:
                self._refresh_within = max(seconds(ev.still_held.refresh_within), 0.001)
                self._refresh_due = now + self._refresh_within
                self.valid_until = now + seconds(ev.still_held.safe_for)
                if self._state == SUSPENDED and self._silent:
                    self._state = HELD
                    self._silent = False
                    self.safe_until = None
        elif ev.type == T.SUSPENDED:
            if self._state == HELD:
                self._state = SUSPENDED
            self._silent = False
            self.safe_until = now + seconds(ev.suspended.safe_for)
        elif ev.type == T.RESUMED:
            if self._state == SUSPENDED:
                self._state = HELD
            self._silent = False
            if self._refresh_within > 0 and ev.HasField("still_held"):
                self._refresh_within = max(seconds(ev.still_held.refresh_within), 0.001)
                self.valid_until = now + seconds(ev.still_held.safe_for)
            self._refresh_due = now + self._refresh_within
            self.safe_until = None
        elif ev.type == T.LOST:
            self._state = LOST
            self.lost_reason = pb.Lost.Reason.Name(ev.lost.reason)
            self.lost_message = ev.lost.message
        elif ev.type == T.REVOKE_REQUESTED:
            if self._state in (HELD, SUSPENDED):
                revoke = (ev.revoke_requested.requester, ev.revoke_requested.reason)
                self.revoke_requests.append(revoke)
        elif ev.type == T.RELEASED:
            self._state = RELEASED
        new = self._state
        changed = None
        if new != old:
            if new == HELD:
                reason = "ACQUIRED" if old == WAITING else "RESUMED"
            elif new == SUSPENDED:
                reason = "SUSPENDED"
            elif new == LOST:
                reason = self.lost_reason or "LOST"
            else:
                reason = new.upper()
            changed = (new, reason)
        return HoldChange(start_keepalive, queued, revoke, start_watchdog, changed)

    def _stream_ended(self, code, details: str) -> Optional[Tuple[str, str]]:
        """The stream finished with `code` (a grpc.StatusCode). A hold still
        held is now released (we ended it) or lost (STREAM_BROKEN); returns
        (state, reason) if that changed it."""
        self._ended = True
        self._end_code, self._end_details = code, details
        if self._state not in (HELD, SUSPENDED):
            return None
        if self._releasing:
            self._state = RELEASED  # cancelled or half-closed by us
            return (RELEASED, "RELEASED")
        self._state = LOST
        self.lost_reason = self.lost_reason or "STREAM_BROKEN"
        self.lost_message = self.lost_message or ("%s: %s" % (code.name, details))
        return (LOST, self.lost_reason)

    def _watched(self) -> bool:
        """The watchdog still has something to watch."""
        return self._state in (HELD, SUSPENDED) and not self._ended and not self._releasing

    def _watchdog_tick(self, now: float) -> WatchdogTick:
        """A frozen replica or a stalled stream sends nothing, not even LOST:
        silence past refresh_within makes the hold SUSPENDED here (reason
        IN_DOUBT), and LOST when its validity (or a server SUSPENDED's safe
        time) runs out."""
        if not self._watched():
            return WatchdogTick(None, False, None)
        step = watchdog_step(self._state, now, self._refresh_due, self.valid_until,
                             self.safe_until, self._silent)
        if step.state == self._state:
            return WatchdogTick(None, False, step.wake_at)
        self._state, self._silent, self.safe_until = step.state, step.silent, step.safe_until
        if step.state != LOST:
            return WatchdogTick((step.state, "IN_DOUBT"), False, step.wake_at)
        self.lost_reason = step.lost_reason
        self.lost_message = (
            "no refresh from the replica before the hold's validity ran out" if step.silent
            else "the replica's safe time ran out before its ZooKeeper connection came back")
        return WatchdogTick((LOST, step.lost_reason), True, None)

    def _begin_release(self) -> Tuple[Optional[bool], bool]:
        """release() starts: (its answer when there is nothing to release:
        True already released, False lost; else None), and whether to send
        the release message (only the first call does)."""
        if self._state == RELEASED:
            return True, False
        if self._state == LOST or self._ended:
            return False, False
        first = not self._releasing
        self._releasing = True
        return None, first

    def _release_done(self) -> Tuple[bool, Optional[Tuple[str, str]]]:
        """release() ends (answered, cancelled or timed out): whether the
        hold ended released (not lost first), and (state, reason) to say if
        that changed its state."""
        old = self._state
        if old in (HELD, SUSPENDED, WAITING):
            self._state = RELEASED
        released = self._state == RELEASED
        return released, ((RELEASED, "RELEASED") if old in (HELD, SUSPENDED) and released
                          else None)

    def _wait_error(self, answered: bool, target: str, waited: float) -> Tuple[object, str]:
        """(code, details) of the TurnstileError of a wait that ended
        without ACQUIRED: unanswered within `waited` seconds, or the
        stream's end status."""
        if not answered:
            return (grpc.StatusCode.DEADLINE_EXCEEDED,
                    "no answer from %s within %.1fs" % (target, waited))
        code, details = self._end_code, self._end_details
        if code is None or code == grpc.StatusCode.OK:
            return grpc.StatusCode.UNKNOWN, "Acquire stream ended without ACQUIRED"
        return code, details
