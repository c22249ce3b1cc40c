"""The turnstile client: locks (turnstile.v1.LockService) over gRPC.

Import it as `turnstile` (the names below are re-exported there):

    import turnstile

    with turnstile.Client("127.0.0.1:7400") as client:
        with client.acquire("my-lock", wait_timeout=30, owner="me") as lock:
            print(lock.fencing_token)   # pass it to the protected resource
            ...                         # check lock.state if the work is long
        # released here

The protobuf messages and gRPC stubs (turnstile.v1.lock_pb2, lock_pb2_grpc)
are generated from the contract's .proto when the package is built.

Times are in seconds (float). Every failure raises TurnstileError whose
`code` is the grpc.StatusCode the server (or the client) ended with, e.g.
FAILED_PRECONDITION for a try-once (wait_timeout=0) on a held lock,
DEADLINE_EXCEEDED when the wait timeout passed.

A Lock is held while its Acquire stream stays open. A background reader
thread follows the stream and keeps `lock.state` current:
  'held'       the lock is held;
  'suspended'  the replica lost ZooKeeper; the hold is in doubt and certainly
               safe only until `lock.safe_until` (time.monotonic() seconds);
  'lost'       the hold is gone without us asking (`lock.lost_reason`:
               SESSION_EXPIRED, LEASE_EXPIRED, DELETED, SHUTDOWN, or
               STREAM_BROKEN if the stream itself failed);
  'released'   released on request.
With ttl > 0 the lock also renews its lease with KeepAlive (every ttl/3)
until it is released or lost.

Thread-safety: a Client may be shared by threads; a Lock's methods and
properties may be used from any thread.
"""

import datetime
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import grpc

from .hold import (HELD, LOST, RELEASED, SUSPENDED, WAITING, HoldState,  # noqa: F401
                   WatchdogStep, seconds as _seconds, watchdog_step)

__all__ = [
    "Client", "Lock", "TurnstileError", "Contender", "Description", "LockNames",
    "LeaseStatus", "load_stubs", "watchdog_step", "retry_delays", "retry_until",
    "validate_acquire_options", "Leader", "LeaderEvent", "Observation", "LEADER", "NO_LEADER",
    "UNKNOWN", "TokenCheck", "CURRENT", "SUPERSEDED", "TOKEN_WAITING",
]

_pb2 = None
_pb2_grpc = None
_load_mu = threading.Lock()


def load_stubs():
    """Returns the generated modules (turnstile.v1.lock_pb2, lock_pb2_grpc).

    They are built into the package from the contract's .proto when it is
    installed (pip) or assembled in a CMake build tree; they are imported on
    first use so that the client's pure logic loads without them.
    """
    global _pb2, _pb2_grpc
    with _load_mu:
        if _pb2 is not None:
            return _pb2, _pb2_grpc
        try:
            from .v1 import lock_pb2, lock_pb2_grpc
        except ImportError as e:
            raise ImportError(
                "cannot import the generated turnstile.v1 stubs (lock_pb2, "
                "lock_pb2_grpc): install the package (pip install client/python "
                "generates them) or, in a CMake build tree, build the target "
                "turnstile_python_package and use <build>/python") from e
        _pb2, _pb2_grpc = lock_pb2, lock_pb2_grpc
        return _pb2, _pb2_grpc


class TurnstileError(Exception):
    """A failed call. `code` is a grpc.StatusCode, `details` the message."""

    def __init__(self, code: grpc.StatusCode, details: str = ""):
        super().__init__("%s: %s" % (code.name, details))
        self.code = code
        self.details = details

    @classmethod
    def from_rpc(cls, err: grpc.RpcError) -> "TurnstileError":
        code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
        details = err.details() if hasattr(err, "details") else str(err)
        return cls(code or grpc.StatusCode.UNKNOWN, details or "")


def _duration(seconds: float):
    from google.protobuf import duration_pb2
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(round(seconds * 1e9)))
    return d


_CLOSE = object()  # ends the request iterator: half-closes the stream


def retry_delays(first: float = 0.05, cap: float = 1.0):
    """The waits between attempts of an Acquire told UNAVAILABLE: 50 ms,
    doubling, at most 1 s each."""
    delay = first
    while True:
        yield delay
        delay = min(delay * 2, cap)


RETRIED_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)


class AcquireRetry:
    """The retry rule of an acquire, the plan both clients follow (the
    threaded one sleeps between attempts, the asyncio one awaits): each
    attempt waits next_wait(); after a failure backoff(e) is the pause
    before the next attempt, or raises e. UNAVAILABLE (and CANCELLED from a
    replica shutting down) is retried after retry_delays() while the wait
    timeout lasts; a try-once (wait_timeout <= 0) never is."""

    def __init__(self, wait_timeout: float, clock=time.monotonic, enabled: bool = True):
        self._wait_timeout = wait_timeout
        self._clock = clock
        self._enabled = enabled
        self._end = clock() + max(wait_timeout, 0.0)
        self._delays = retry_delays()
        self._attempts = 0

    def next_wait(self) -> float:
        """The wait of the next attempt: the whole wait timeout first, then
        what is left of it."""
        self._attempts += 1
        if self._attempts == 1:
            return self._wait_timeout
        return max(self._end - self._clock(), 0.001)

    def backoff(self, e: "TurnstileError") -> float:
        delay = next(self._delays)
        if (e.code not in RETRIED_CODES or not self._enabled or self._wait_timeout <= 0
                or self._clock() + delay >= self._end):
            raise e
        return delay


def retry_until(wait_timeout: float, attempt, clock=time.monotonic, sleep=time.sleep,
                enabled: bool = True):
    """Calls attempt(wait_left) until it returns, following AcquireRetry.
    Other errors, and the last UNAVAILABLE, are raised."""
    plan = AcquireRetry(wait_timeout, clock, enabled)
    while True:
        try:
            return attempt(plan.next_wait())
        except TurnstileError as e:
            delay = plan.backoff(e)
        sleep(delay)  # the backoff, bounded by the wait timeout


def validate_acquire_options(name: str, wait_timeout: float, ttl: float, lock_delay: float,
                             max_holders: int, shared: bool) -> None:
    """What the client can tell is wrong before asking the server
    (TurnstileError INVALID_ARGUMENT, the server's code for the same); the
    server checks the ranges that depend on its flags."""
    def bad(msg):
        raise TurnstileError(grpc.StatusCode.INVALID_ARGUMENT, msg)
    if not isinstance(name, str) or not name:
        bad("name: must be a non-empty string")
    for field_name, value in (("wait_timeout", wait_timeout), ("ttl", ttl),
                              ("lock_delay", lock_delay)):
        if value < 0:
            bad("%s is %r; it must be >= 0 seconds" % (field_name, value))
    if max_holders < 0:
        bad("max_holders is %r; it must be 0 (not a semaphore) or more" % max_holders)
    if max_holders > 0 and shared:
        bad("max_holders is only for semaphores; a shared hold cannot have it")


def acquire_open(pb, name: str, wait_timeout: float, ttl: float, owner: str,
                 metadata: Optional[Dict[str, str]], shared: bool, revoke_holders: bool,
                 revoke_reason: str, lock_delay: float, max_holders: int):
    """The AcquireOpen message of an acquire (its options validated)."""
    if shared:
        kind = pb.LOCK_KIND_SHARED  # with max_holders too: the server refuses the mix
    elif max_holders > 0:
        kind = pb.LOCK_KIND_SEMAPHORE
    else:
        kind = pb.LOCK_KIND_EXCLUSIVE
    return pb.AcquireOpen(
        name=name, owner=owner, metadata=metadata or {},
        wait_timeout=_duration(wait_timeout), ttl=_duration(ttl),
        kind=kind, max_holders=max_holders,
        revoke_holders=revoke_holders, revoke_reason=revoke_reason,
        lock_delay=_duration(lock_delay))


class Lock(HoldState):
    """One Acquire stream. Obtained from Client.acquire(); a context manager
    that releases on exit. Its state and fields are turnstile.hold's: one
    reader thread per Lock feeds them, under _cond."""

    def __init__(self, client: "Client", name: str, open_msg, on_revoke=None,
                 on_queued=None, on_state=None):
        self._client = client
        # on_state(lock, state, reason): the hold changed state (see
        # Client.acquire). Calls are made in order, one at a time, under
        # _notify_mu (taken before _cond, never after), outside _cond.
        self._on_state = on_state
        self._notify_mu = threading.RLock()
        # on_queued(position): the wait's place in the queue (1 = next in
        # line), whenever it changes; called on the reader thread.
        self._on_queued = on_queued
        # on_revoke(requester, reason): someone asked this holder to let go
        # (REVOKE_REQUESTED); called on the reader thread; the holder decides.
        self._on_revoke = on_revoke
        self._cond = threading.Condition()
        self._init_hold(name, _seconds(open_msg.ttl))  # its fields, guarded by _cond
        self._requests: "queue.SimpleQueue" = queue.SimpleQueue()
        self._keepalive: Optional[threading.Thread] = None
        self._requests.put(client._pb2.AcquireRequest(open=open_msg))
        self._call = client._stub.Acquire(self._request_iter())
        self._reader = threading.Thread(
            target=self._read, name="turnstile-lock-reader", daemon=True)
        self._reader.start()

    # -- public ------------------------------------------------------------
    @property
    def state(self) -> str:
        with self._cond:
            return self._state

    @property
    def held(self) -> bool:
        """True while the lock is certainly held (state 'held')."""
        return self.state == HELD

    def wait_for_state(self, *states: str, timeout: Optional[float] = None) -> bool:
        """Blocks until state is one of `states`; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._state in states, timeout)

    def release(self, timeout: float = 10.0) -> bool:
        """Releases the lock and waits (up to `timeout`) for RELEASED; if it
        does not come, cancels the stream (which also deletes the node).
        Returns False if the hold was already lost, True otherwise.
        Idempotent."""
        with self._cond:
            answer, send = self._begin_release()
        if answer is not None:
            return answer
        if send:
            self._requests.put(self._client._pb2.AcquireRequest(
                release=self._client._pb2.AcquireRelease()))
        with self._cond:
            done = self._cond.wait_for(
                lambda: self._ended or self._state in (RELEASED, LOST), timeout)
        if not done:
            self._call.cancel()
        self._requests.put(_CLOSE)
        if threading.current_thread() is not self._reader:
            self._reader.join(timeout)
        with self._notify_mu:
            with self._cond:
                released, said = self._release_done()
                self._cond.notify_all()
            if said is not None:
                self._emit_state(*said)
            return released

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    # -- internals -----------------------------------------------------------
    def _request_iter(self):
        while True:
            item = self._requests.get()
            if item is _CLOSE:
                return
            yield item

    def _read(self) -> None:
        code, details = grpc.StatusCode.OK, ""
        try:
            for ev in self._call:
                self._on_event(ev)
        except grpc.RpcError as e:
            code, details = e.code() or grpc.StatusCode.UNKNOWN, e.details() or ""
        except Exception as e:  # pragma: no cover - defensive
            code, details = grpc.StatusCode.UNKNOWN, repr(e)
        finally:
            self._requests.put(_CLOSE)
            with self._notify_mu:
                with self._cond:
                    ended_as = self._stream_ended(code, details)
                    self._cond.notify_all()
                if ended_as is not None:
                    self._emit_state(*ended_as)

    def _emit_state(self, state: str, reason: str) -> None:
        """REQUIRES: _notify_mu held, _cond not held."""
        if self._on_state is not None:
            self._on_state(self, state, reason)

    def _on_event(self, ev) -> None:
        with self._notify_mu:
            with self._cond:
                change = self._apply_event(self._client._pb2, ev, time.monotonic())
                self._cond.notify_all()
            if change.start_keepalive:
                self._keepalive = threading.Thread(
                    target=self._renew, name="turnstile-lock-keepalive", daemon=True)
                self._keepalive.start()
            if change.queued is not None and self._on_queued is not None:
                self._on_queued(change.queued)
            if change.revoke is not None and self._on_revoke is not None:
                self._on_revoke(*change.revoke)
            if change.start_watchdog:
                threading.Thread(target=self._watchdog, name="turnstile-lock-watchdog",
                                 daemon=True).start()
            if change.state is not None:
                self._emit_state(*change.state)

    def _watchdog(self) -> None:
        """Looks at the hold when HoldState._watchdog_tick says, until it
        ends; a loss cancels the stream (a live replica deletes the node)."""
        while True:
            with self._notify_mu:
                with self._cond:
                    tick = self._watchdog_tick(time.monotonic())
                    if tick.state is not None:
                        self._cond.notify_all()
                if tick.state is not None:
                    self._emit_state(*tick.state)
            if tick.cancel:
                self._call.cancel()
                return
            if tick.wake_at is None:
                return
            if tick.state is not None:
                continue
            with self._cond:
                # Events that arrived meanwhile moved the deadlines: wake at
                # the earlier of the two, and step again.
                if self._watched():
                    self._cond.wait(max(tick.wake_at - time.monotonic(), 0.0))

    def _renew(self) -> None:
        interval = max(self._ttl / 3.0, 0.1)
        while True:
            with self._cond:
                if self._cond.wait_for(
                        lambda: self._state in (LOST, RELEASED) or self._ended
                        or self._releasing, interval):
                    return
                lease = self.lease_id
            try:
                st = self._client.keep_alive([lease], timeout=interval)[0]
            except TurnstileError:
                continue  # transient: try again next interval (the server says LOST if it expires)
            if st.code == grpc.StatusCode.NOT_FOUND:
                return  # gone; the Acquire stream reports LOST


@dataclass
class Contender:
    owner: str
    metadata: Dict[str, str]
    since: Optional[datetime.datetime]
    fencing_token: int
    replica_id: str
    position: int
    kind: str
    max_holders: int = 0  # a semaphore contender's N
    # When a holder was granted, where known (a semaphore holder's grant
    # mark; an exclusive/shared holder only on the replica that granted it).
    granted: Optional[datetime.datetime] = None
    # The verified identity of the client that opened it (mutual TLS: its
    # certificate's first URI SAN, else DNS SAN, else CN); "" without.
    identity: str = ""


@dataclass
class Description:
    name: str
    holders: List[Contender] = field(default_factory=list)
    waiters: List[Contender] = field(default_factory=list)
    max_holders: int = 0  # a semaphore's N; 0 for an exclusive/shared lock


class LockNames(list):
    """The names List returned; `truncated` is True when more matched."""
    truncated: bool = False


# TokenCheck.verdict
CURRENT, SUPERSEDED, TOKEN_WAITING = "CURRENT", "SUPERSEDED", "WAITING"


@dataclass
class TokenCheck:
    """Client.check_token's answer. `verdict`: CURRENT (a hold with this
    token exists), SUPERSEDED (its hold is gone, for good) or WAITING (a
    contender that was never granted: refuse it too)."""
    verdict: str
    highest_holder_token: int  # the highest token among the holders; 0: none
    linearizable: bool  # False when allow_stale skipped ZooKeeper's sync

    @property
    def current(self) -> bool:
        return self.verdict == CURRENT


@dataclass
class LeaseStatus:
    lease_id: str
    code: grpc.StatusCode
    message: str
    valid_for: float


_CODES = {c.value[0]: c for c in grpc.StatusCode}

# LeaderEvent.kind
LEADER, NO_LEADER, UNKNOWN = "leader", "none", "unknown"


@dataclass
class Leader:
    """The holder of an election's lock (the first holder in grant order)."""
    value: Optional[str]          # metadata["value"] (the election convention)
    owner: str
    identity: str                 # verified client identity (mutual TLS), else ""
    fencing_token: int            # the term: greater for every later leader
    granted: Optional[datetime.datetime]
    since: Optional[datetime.datetime]
    metadata: Dict[str, str] = field(default_factory=dict)


@dataclass
class LeaderEvent:
    """One item of Client.observe(): kind is LEADER (`leader` set),
    NO_LEADER (nobody holds the lock) or UNKNOWN (the replica has no
    ZooKeeper connection, or the stream failed and is being opened again:
    the holders are unknown; `message` says why)."""
    kind: str
    leader: Optional[Leader] = None
    holders: List[Contender] = field(default_factory=list)
    waiters: int = 0
    max_holders: int = 0
    sequence: int = 0
    message: str = ""

    def same_leader(self, other: Optional["LeaderEvent"]) -> bool:
        if other is None or self.kind != other.kind:
            return False
        if self.kind != LEADER:
            return True
        a, b = self.leader, other.leader
        return (a.fencing_token, a.metadata, a.owner) == (b.fencing_token, b.metadata, b.owner)


OBSERVE_RETRIED_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)


# -- replies into the library's types (both clients) ---------------------------

def _timestamp(msg, name: str) -> Optional[datetime.datetime]:
    return (getattr(msg, name).ToDatetime(tzinfo=datetime.timezone.utc)
            if msg.HasField(name) else None)


def contender_from(pb, c) -> Contender:
    return Contender(c.owner, dict(c.metadata), _timestamp(c, "since"), c.fencing_token,
                     c.replica_id, c.position, pb.LockKind.Name(c.kind),
                     c.max_holders, _timestamp(c, "granted"), c.identity)


def description_from(pb, r) -> Description:
    return Description(r.name, [contender_from(pb, c) for c in r.holders],
                       [contender_from(pb, c) for c in r.waiters], r.max_holders)


def leader_event_from(pb, ev) -> LeaderEvent:
    if ev.state != pb.ObserveEvent.CURRENT:
        return LeaderEvent(UNKNOWN, sequence=ev.sequence,
                           message=ev.message or "the replica's state is unknown")
    holders = [contender_from(pb, c) for c in ev.holders]
    leader = None
    if holders:
        h = holders[0]
        leader = Leader(h.metadata.get("value"), h.owner, h.identity, h.fencing_token,
                        h.granted, h.since, h.metadata)
    return LeaderEvent(LEADER if leader else NO_LEADER, leader, holders, ev.waiters,
                       ev.max_holders, ev.sequence)


def token_check_from(pb, r) -> TokenCheck:
    verdict = pb.CheckTokenResponse.Verdict.Name(r.verdict)
    if verdict not in (CURRENT, SUPERSEDED, TOKEN_WAITING):
        raise TurnstileError(grpc.StatusCode.UNKNOWN, "unknown verdict " + verdict)
    return TokenCheck(verdict, r.highest_holder_token, r.linearizable)


def lease_statuses_from(resp) -> List[LeaseStatus]:
    return [LeaseStatus(s.lease_id, _CODES.get(s.code, grpc.StatusCode.UNKNOWN),
                        s.message, _seconds(s.valid_for)) for s in resp.leases]


def lock_names_from(r) -> LockNames:
    names = LockNames(r.names)
    names.truncated = r.truncated
    return names


def check_name(name) -> None:
    if not isinstance(name, str) or not name:
        raise TurnstileError(grpc.StatusCode.INVALID_ARGUMENT,
                             "name: must be a non-empty string")


class LeaderSearch:
    """Client.leader's rule (both clients): the first LEADER or NO_LEADER
    item answers (its `leader`, None for NO_LEADER); UNKNOWN items are
    waited through until the timeout."""

    def __init__(self, name: str, timeout: float):
        self._name, self._timeout = name, timeout
        self._last = ""

    def answers(self, item: LeaderEvent) -> bool:
        if item.kind in (LEADER, NO_LEADER):
            return True
        self._last = item.message
        return False

    def timed_out(self) -> TurnstileError:
        return TurnstileError(grpc.StatusCode.DEADLINE_EXCEEDED,
                              "the leader of %r stayed unknown for %.1fs (%s)" % (
                                  self._name, self._timeout, self._last or "no state received"))


class ObservationState:
    """What an Observe stream's events and failures become, the part of
    Observation that the asyncio client shares: an item to yield (or None:
    nothing new) and, after a failure, the pause before observing again."""

    def _init_observation(self, name: str, changes_only: bool) -> None:
        self.name = name
        self._changes_only = changes_only
        self._last: Optional[LeaderEvent] = None
        self._delays = retry_delays()
        self.reopened = 0            # streams opened again after a failure

    def _received(self, pb, ev) -> Optional[LeaderEvent]:
        self._delays = retry_delays()
        item = leader_event_from(pb, ev)
        if self._changes_only and item.same_leader(self._last):
            return None
        self._last = item
        return item

    def _failed(self, failure: str):
        """-> (an UNKNOWN item to yield, or None if the last one was), and
        the pause before the next stream."""
        self.reopened += 1
        item = LeaderEvent(UNKNOWN, message="observing again: " + failure)
        delay = next(self._delays)
        if item.same_leader(self._last):
            return None, delay
        self._last = item
        return item, delay

    @staticmethod
    def _failure_of(e: grpc.RpcError) -> str:
        """A stream's failure: observed again (its description), or raised."""
        if e.code() not in OBSERVE_RETRIED_CODES:
            raise TurnstileError.from_rpc(e) from None
        return "%s: %s" % (e.code().name, e.details() or "")


class Observation(ObservationState):
    """An iterator of LeaderEvent for one lock (Client.observe). Each
    Observe stream failure with UNAVAILABLE (the replica drains or cannot be
    reached), or CANCELLED by a replica shutting down, or an end without a
    status, opens a new stream through the client's target after
    retry_delays() backoff, first yielding an UNKNOWN item (the leader is
    not known meanwhile). Other errors raise TurnstileError from next().
    close() (from any thread) ends the iteration. A context manager.

    changes_only=True yields an item only when the leader (its token,
    owner, metadata), or NO_LEADER / UNKNOWN, differs from the last item
    yielded; False yields every event (waiter counts too)."""

    def __init__(self, client: "Client", name: str, changes_only: bool = True):
        self._client = client
        self._init_observation(name, changes_only)
        self._mu = threading.Lock()
        self._closed = threading.Event()
        self._call = None            # guarded by _mu

    def __iter__(self) -> "Observation":
        return self

    def __next__(self) -> LeaderEvent:
        while True:
            if self._closed.is_set():
                raise StopIteration
            with self._mu:
                if self._closed.is_set():
                    raise StopIteration
                if self._call is None:
                    self._call = self._client._stub.Observe(
                        self._client._pb2.ObserveRequest(name=self.name))
                call = self._call
            try:
                item = self._received(self._client._pb2, next(call))
                if item is not None:
                    return item
                continue
            except StopIteration:
                failure = "the Observe stream ended"
            except grpc.RpcError as e:
                if self._closed.is_set():
                    raise StopIteration from None
                failure = self._failure_of(e)
            with self._mu:
                self._call = None
            item, delay = self._failed(failure)
            self._closed.wait(delay)
            if item is not None:
                return item

    def close(self) -> None:
        self._closed.set()
        with self._mu:
            call = self._call
        if call is not None:
            call.cancel()

    def __enter__(self) -> "Observation":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def tls_credentials(ca_file: Optional[str] = None, cert_file: Optional[str] = None,
                    key_file: Optional[str] = None) -> Optional[grpc.ChannelCredentials]:
    """Channel credentials from PEM files: None (plaintext) when no file is
    given. ca_file: the CAs the server's certificate must chain to (TLS).
    cert_file + key_file: a client certificate (mutual TLS, for replicas run
    with --tls-client-ca-file; the server knows the caller by it, not by
    owner). With all three None, the TURNSTILE_TLS_CA_FILE,
    TURNSTILE_TLS_CERT_FILE and TURNSTILE_TLS_KEY_FILE variables are used."""
    if ca_file is None and cert_file is None and key_file is None:
        ca_file = os.environ.get("TURNSTILE_TLS_CA_FILE") or None
        cert_file = os.environ.get("TURNSTILE_TLS_CERT_FILE") or None
        key_file = os.environ.get("TURNSTILE_TLS_KEY_FILE") or None
    if (cert_file is None) != (key_file is None):
        raise ValueError("tls_cert_file and tls_key_file go together")
    if ca_file is None:
        if cert_file is not None:
            raise ValueError("tls_cert_file needs tls_ca_file (a client certificate is only "
                             "sent over TLS)")
        return None

    def read(path):
        with open(path, "rb") as f:
            return f.read()
    return grpc.ssl_channel_credentials(
        root_certificates=read(ca_file),
        private_key=read(key_file) if key_file else None,
        certificate_chain=read(cert_file) if cert_file else None)


class Connection:
    """A channel to a replica and the stub on it, made the same way for
    both clients (the options are turnstile.Client's): of grpc's channels,
    or of grpc.aio's for turnstile.aio.Client."""

    _channels = grpc

    def __init__(self, target: str = "127.0.0.1:7400",
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 timeout: float = 10.0, options=None, retry_unavailable: bool = True,
                 tls_ca_file: Optional[str] = None, tls_cert_file: Optional[str] = None,
                 tls_key_file: Optional[str] = None):
        self._pb2, pb2_grpc = load_stubs()
        self.target = target
        self.timeout = timeout
        self.retry_unavailable = retry_unavailable
        if credentials is None:
            credentials = tls_credentials(tls_ca_file, tls_cert_file, tls_key_file)
        if credentials is not None:
            self._channel = self._channels.secure_channel(target, credentials, options=options)
        else:
            self._channel = self._channels.insecure_channel(target, options=options)
        self._stub = pb2_grpc.LockServiceStub(self._channel)
        self._opened()

    def _opened(self) -> None:
        """The end of __init__: the asyncio client's own state."""


class Client(Connection):
    """A connection to one turnstile replica.

    target: "host:port", or any gRPC target, e.g. "ipv4:10.0.0.1:7400,10.0.0.2:7400"
    (several replicas). credentials: optional
    grpc.ChannelCredentials (TLS); insecure otherwise. timeout: deadline in
    seconds for the unary calls (Describe, List, Release, KeepAlive).
    tls_ca_file / tls_cert_file / tls_key_file: PEM files (see
    tls_credentials()); used when credentials is None. With none of them
    given, TURNSTILE_TLS_CA_FILE, TURNSTILE_TLS_CERT_FILE and
    TURNSTILE_TLS_KEY_FILE are read (unset: plaintext), like the CLI.
    retry_unavailable: an acquire whose wait ends UNAVAILABLE (its replica
    drains, loses ZooKeeper or cannot be reached; or CANCELLED by a replica
    shutting down) is opened again with backoff
    (0.05 s doubling to 1 s) until its wait_timeout; through a target naming
    several replicas the retry reaches a live one. The retry joins the queue
    again at its end. Try-once (wait_timeout 0) is never retried.
    """

    def close(self) -> None:
        """Closes the channel; open Acquire streams are cancelled (their
        locks are released by the server)."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def acquire(self, name: str, wait_timeout: float = 60.0, ttl: float = 0.0,
                owner: str = "", metadata: Optional[Dict[str, str]] = None,
                grace: float = 15.0, shared: bool = False,
                on_revoke: Optional[Callable[[str, str], None]] = None,
                revoke_holders: bool = False, revoke_reason: str = "",
                lock_delay: float = 0.0, max_holders: int = 0,
                on_queued: Optional[Callable[[int], None]] = None,
                on_state: Optional[Callable[["Lock", str, str], None]] = None) -> Lock:
        """Takes the lock `name`, waiting up to `wait_timeout` seconds
        (0 = try once). ttl > 0: a lease that this Lock renews by itself.
        shared=True: a read hold (LOCK_KIND_SHARED), together with other
        shared holders, FIFO behind any writer queued earlier.
        on_revoke(requester, reason): called when someone asks this holder to
        let go (Client.revoke, or a waiter's revoke_holders); it decides.
        revoke_holders=True: once queued, ask the holders ahead to let go.
        lock_delay (0..60 s): if this hold ends involuntarily, the next
        grant waits this long; a clean release hands over at once.
        on_queued(position): called while waiting, with the queue position
        (1 = next in line) whenever it changes.
        on_state(lock, state, reason): called when the hold changes state,
        in order, at once when the library learns it, on a library thread
        (do not block in it): 'held' (reason ACQUIRED, or RESUMED after a
        doubt), 'suspended' (SUSPENDED from the replica, or IN_DOUBT: the
        replica fell silent past refresh_within), 'lost' (the loss reason:
        SESSION_EXPIRED, LEASE_EXPIRED, DELETED, SHUTDOWN, STREAM_BROKEN,
        REFRESH_OVERDUE), 'released' (RELEASED). A wait that fails calls
        nothing.
        max_holders=N > 0: one of an N-holder semaphore (LOCK_KIND_SEMAPHORE):
        at most N hold at once, FIFO; every contender of the name must ask
        the same N (FAILED_PRECONDITION otherwise).
        Returns a held Lock, or raises TurnstileError with the status code
        the stream ended with (FAILED_PRECONDITION: try-once on a held lock;
        DEADLINE_EXCEEDED: the wait timed out; ...). If the server does not
        answer within wait_timeout + grace, the wait is cancelled and
        DEADLINE_EXCEEDED raised. UNAVAILABLE is retried until wait_timeout
        (see Client's retry_unavailable)."""
        validate_acquire_options(name, wait_timeout, ttl, lock_delay, max_holders, shared)
        # CANCELLED from the server side (a replica that shuts down cancels
        # the calls it still has) is retried like UNAVAILABLE.
        return retry_until(
            wait_timeout,
            lambda left: self._acquire_once(name, left, ttl, owner, metadata, grace, shared,
                                            on_revoke, revoke_holders, revoke_reason,
                                            lock_delay, max_holders, on_queued, on_state),
            enabled=self.retry_unavailable)

    def _acquire_once(self, name, wait_timeout, ttl, owner, metadata, grace,
                      shared=False, on_revoke=None, revoke_holders=False,
                      revoke_reason="", lock_delay=0.0, max_holders=0,
                      on_queued=None, on_state=None) -> Lock:
        open_msg = acquire_open(self._pb2, name, wait_timeout, ttl, owner, metadata, shared,
                                revoke_holders, revoke_reason, lock_delay, max_holders)
        lock = Lock(self, name, open_msg, on_revoke, on_queued, on_state)
        deadline = time.monotonic() + max(wait_timeout, 0.0) + grace
        try:
            with lock._cond:
                answered = lock._cond.wait_for(
                    lambda: lock._state != WAITING or lock._ended,
                    max(deadline - time.monotonic(), 0.0))
                state = lock._state
        except BaseException:
            lock._call.cancel()  # e.g. KeyboardInterrupt: abandon the wait
            lock._requests.put(_CLOSE)
            raise
        if state != WAITING:
            # The reader holds _notify_mu from the event until its on_state
            # call returns: once we get it, on_state(ACQUIRED) has been said.
            with lock._notify_mu:
                pass
            return lock  # held (or, rarely, already lost again: see lock.state)
        lock._call.cancel()
        lock._requests.put(_CLOSE)
        raise TurnstileError(*lock._wait_error(answered, self.target, wait_timeout + grace))

    def proclaim(self, lease_id: str, fencing_token: int,
                 metadata: Dict[str, str]) -> None:
        """Replaces the metadata of a hold (by lease id and fencing token),
        keeping the hold. Raises TurnstileError: NOT_FOUND (the lease is
        gone), FAILED_PRECONDITION (the token is not this lease's: stale),
        INVALID_ARGUMENT (malformed id, token 0, metadata limits)."""
        try:
            self._stub.Proclaim(self._pb2.ProclaimRequest(
                lease_id=lease_id, fencing_token=fencing_token, metadata=dict(metadata)),
                timeout=self.timeout)
        except grpc.RpcError as e:
            raise TurnstileError.from_rpc(e) from None

    def observe(self, name: str, changes_only: bool = True) -> Observation:
        """Follows the leader (the first holder) of lock `name`: an iterator
        of LeaderEvent, re-observing by itself after UNAVAILABLE; see
        Observation. Close it (or use `with`) when done."""
        check_name(name)
        return Observation(self, name, changes_only)

    def leader(self, name: str, timeout: Optional[float] = None) -> Optional[Leader]:
        """The current leader of `name` once: the first CURRENT event of an
        Observe stream (None: nobody holds it). Waits through UNKNOWN
        states up to `timeout` (default: the client's) and raises
        TurnstileError DEADLINE_EXCEEDED if the state stays unknown."""
        timeout = self.timeout if timeout is None else timeout
        obs = self.observe(name)
        timer = threading.Timer(timeout, obs.close)
        timer.daemon = True
        timer.start()
        search = LeaderSearch(name, timeout)
        try:
            for item in obs:
                if search.answers(item):
                    return item.leader
        finally:
            timer.cancel()
            obs.close()
        raise search.timed_out()

    def acquire_all(self, names: List[str], wait_timeout: float = 60.0,
                    on_state: Optional[Callable[[str, str, str], None]] = None,
                    **acquire_options) -> "MultiLock":  # noqa: F821 (turnstile.multilock)
        """Takes every lock of `names` all-or-nothing under one deadline, in
        canonical (UTF-8 byte) order; see turnstile.multilock.acquire_all.
        acquire_options are Client.acquire's (owner, metadata, ttl, ...)."""
        from . import multilock
        for key in ("on_state", "wait_timeout"):
            acquire_options.pop(key, None)

        def acquire(name, wait, cb):
            return self.acquire(name, wait_timeout=wait, on_state=cb, **acquire_options)
        return multilock.acquire_all(acquire, names, wait_timeout, on_state=on_state)

    def release(self, lease_id: str) -> bool:
        """Releases a lease by id (any replica). True if it was released,
        False if it was already gone (NOT_FOUND)."""
        return self._unary_found(self._stub.Release,
                                 self._pb2.ReleaseRequest(lease_id=lease_id))

    def _unary_found(self, method, request) -> bool:
        """Calls a unary RPC on a lease: True if done, False on NOT_FOUND."""
        try:
            method(request, timeout=self.timeout)
            return True
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                return False
            raise TurnstileError.from_rpc(e) from None

    def revoke(self, lease_id: str, reason: str = "", requester: str = "") -> bool:
        """Asks the holder of a lease to let go (any replica); it decides.
        True if asked, False if the lease is gone (NOT_FOUND)."""
        return self._unary_found(self._stub.Revoke, self._pb2.RevokeRequest(
            lease_id=lease_id, reason=reason, requester=requester))

    def keep_alive(self, lease_ids: List[str],
                   timeout: Optional[float] = None) -> List[LeaseStatus]:
        """Renews leases (opened with ttl > 0) once; one status per id."""
        req = self._pb2.KeepAliveRequest(lease_ids=list(lease_ids))
        call = self._stub.KeepAlive(iter([req]), timeout=timeout or self.timeout)
        try:
            resp = next(call)
        except grpc.RpcError as e:
            raise TurnstileError.from_rpc(e) from None
        except StopIteration:
            raise TurnstileError(grpc.StatusCode.UNKNOWN,
                                 "KeepAlive ended without a response") from None
        finally:
            call.cancel()
        return lease_statuses_from(resp)

    def describe(self, name: str) -> Optional[Description]:
        """Holders and waiters of `name` in queue order; None if nobody
        holds or waits for it."""
        try:
            r = self._stub.Describe(self._pb2.DescribeRequest(name=name),
                                    timeout=self.timeout)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise TurnstileError.from_rpc(e) from None
        return description_from(self._pb2, r)

    def check_token(self, name: str, fencing_token: int,
                    allow_stale: bool = False) -> TokenCheck:
        """For a resource server that cannot remember the highest token it
        has seen: whether `fencing_token` (from a holder's grant) still
        belongs to a hold of `name`. Apply a write only when the answer is
        `current`. Linearizable (the replica syncs ZooKeeper first) unless
        `allow_stale`. Raises TurnstileError: INVALID_ARGUMENT (bad name,
        token 0), PERMISSION_DENIED (the policy's `describe` action),
        UNAVAILABLE (the answer is unknown: refuse the write)."""
        try:
            r = self._stub.CheckToken(
                self._pb2.CheckTokenRequest(name=name, fencing_token=fencing_token,
                                            allow_stale=allow_stale),
                timeout=self.timeout)
        except grpc.RpcError as e:
            raise TurnstileError.from_rpc(e) from None
        return token_check_from(self._pb2, r)

    def list(self, prefix: str = "", limit: int = 0) -> LockNames:
        """Names of locks with holders or waiters, in byte order."""
        try:
            r = self._stub.List(self._pb2.ListRequest(prefix=prefix, limit=limit),
                                timeout=self.timeout)
        except grpc.RpcError as e:
            raise TurnstileError.from_rpc(e) from None
        return lock_names_from(r)
