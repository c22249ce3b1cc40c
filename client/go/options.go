package turnstile

import (
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Kind is the kind of a contender (turnstile.v1.LockKind).
type Kind int

const (
	// KindExclusive is a mutex / writer: holds alone (the default).
	KindExclusive Kind = iota
	// KindShared is a reader: holds together with other shared holders.
	KindShared
	// KindSemaphore is one of an N-holder semaphore (see Semaphore).
	KindSemaphore
)

func (k Kind) String() string {
	switch k {
	case KindShared:
		return "SHARED"
	case KindSemaphore:
		return "SEMAPHORE"
	}
	return "EXCLUSIVE"
}

// DefaultWait is the wait timeout of a Lock call given neither WithWaitTimeout
// nor TryOnce, when its context has no deadline.
const DefaultWait = 60 * time.Second

// DefaultGrace is how long past the wait timeout Lock waits for the
// replica's answer before it gives up with DEADLINE_EXCEEDED.
const DefaultGrace = 15 * time.Second

// StateChange is passed to OnStateChange: the hold's new state, and for
// StateLost why (Reason: SESSION_EXPIRED, LEASE_EXPIRED, DELETED, SHUTDOWN,
// CONNECTION, REFRESH_OVERDUE) with a human-readable Message. For
// StateSuspended, Reason is SUSPENDED (the replica said so) or
// REFRESH_OVERDUE (the library's watchdog heard nothing in time).
type StateChange struct {
	State   State
	Reason  string
	Message string
}

type lockOptions struct {
	wait          time.Duration
	waitSet       bool
	ttl           time.Duration
	owner         string
	ownerSet      bool
	metadata      map[string]string
	kind          Kind
	maxHolders    int32
	lockDelay     time.Duration
	revokeHolders bool
	revokeReason  string
	grace         time.Duration
	onQueued      func(position int64)
	onRevoke      func(requester, reason string)
	onChange      func(StateChange)
	// onHold (library-internal: Election, AcquireAll) is told of the grant
	// (StateHeld) and of every later state change, in order, on the hold's
	// callback goroutine.
	onHold func(*Hold, StateChange)
}

// LockOption configures one Lock call.
type LockOption func(*lockOptions)

// WithWaitTimeout sets how long to wait for the lock (0 = try once:
// FAILED_PRECONDITION if it is held). Without it the wait is the time left
// on Lock's context, or DefaultWait if the context has no deadline.
func WithWaitTimeout(d time.Duration) LockOption {
	return func(o *lockOptions) { o.wait, o.waitSet = d, true }
}

// TryOnce takes the lock only if it is free now (wait timeout 0); a held
// lock fails with FAILED_PRECONDITION. Never retried.
func TryOnce() LockOption { return WithWaitTimeout(0) }

// WithTTL makes the hold a lease of this TTL (0 or at least 500 ms) that the
// library renews with KeepAlive every ttl/3 until Unlock or loss.
func WithTTL(d time.Duration) LockOption { return func(o *lockOptions) { o.ttl = d } }

// WithOwner sets who is asking (shown by Describe, and the requester of
// revoke_holders); default: the Client's WithDefaultOwner.
func WithOwner(owner string) LockOption {
	return func(o *lockOptions) { o.owner, o.ownerSet = owner, true }
}

// WithMetadata sets key/value pairs shown by Describe (at most 16; keys
// 1..64 bytes, values 0..256 bytes).
func WithMetadata(md map[string]string) LockOption {
	return func(o *lockOptions) {
		o.metadata = make(map[string]string, len(md))
		for k, v := range md {
			o.metadata[k] = v
		}
	}
}

// Shared asks for a shared (read) hold (LOCK_KIND_SHARED).
func Shared() LockOption { return func(o *lockOptions) { o.kind = KindShared } }

// WithKind sets the contender's kind; KindSemaphore needs WithMaxHolders
// (or use Semaphore).
func WithKind(k Kind) LockOption { return func(o *lockOptions) { o.kind = k } }

// WithMaxHolders sets a semaphore's N.
func WithMaxHolders(n int32) LockOption { return func(o *lockOptions) { o.maxHolders = n } }

// Semaphore makes this one of an n-holder semaphore (LOCK_KIND_SEMAPHORE):
// at most n hold at once, FIFO; every contender of the name must ask the
// same n (FAILED_PRECONDITION otherwise).
func Semaphore(n int32) LockOption {
	return func(o *lockOptions) { o.kind, o.maxHolders = KindSemaphore, n }
}

// WithLockDelay (0..60 s): if this hold ends involuntarily, the next grant
// waits this long. A clean Unlock hands over at once.
func WithLockDelay(d time.Duration) LockOption { return func(o *lockOptions) { o.lockDelay = d } }

// WithRevokeHolders asks, once queued, the holders ahead to let go (they get
// REVOKE_REQUESTED with this call's owner as requester and reason).
func WithRevokeHolders(reason string) LockOption {
	return func(o *lockOptions) { o.revokeHolders, o.revokeReason = true, reason }
}

// WithGrace sets how long past the wait timeout to wait for the replica's
// answer (default DefaultGrace).
func WithGrace(d time.Duration) LockOption { return func(o *lockOptions) { o.grace = d } }

// OnQueued is called with the queue position (1 = next in line) while
// waiting, whenever the replica reports it.
func OnQueued(f func(position int64)) LockOption { return func(o *lockOptions) { o.onQueued = f } }

// OnRevoke is called when someone asks this holder to let go (Revoke, or a
// waiter's revoke_holders). The holder decides: Unlock, or keep the lock.
func OnRevoke(f func(requester, reason string)) LockOption {
	return func(o *lockOptions) { o.onRevoke = f }
}

// OnStateChange is called on every state change after the grant:
// StateSuspended, StateHeld again (resumed), StateLost, StateReleased.
func OnStateChange(f func(StateChange)) LockOption { return func(o *lockOptions) { o.onChange = f } }

func invalid(format string, args ...interface{}) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// validate checks what the proto fixes for every replica; limits that are
// replica flags (--max-wait-timeout, --max-ttl, --max-semaphore-holders)
// are left to the replica.
func (o *lockOptions) validate(name string) error {
	if len(name) == 0 || len(name) > 256 {
		return invalid("name: %d bytes, must be 1..256", len(name))
	}
	if !utf8.ValidString(name) {
		return invalid("name: not valid UTF-8")
	}
	for _, r := range name {
		if r <= 0x1f || (r >= 0x7f && r <= 0x9f) {
			return invalid("name: control character U+%04X", r)
		}
	}
	if len(o.owner) > 128 {
		return invalid("owner: %d bytes, at most 128", len(o.owner))
	}
	if o.wait < 0 {
		return invalid("wait_timeout: %v, must not be negative", o.wait)
	}
	if o.ttl < 0 || (o.ttl > 0 && o.ttl < 500*time.Millisecond) {
		return invalid("ttl: %v, must be 0 or at least 500ms", o.ttl)
	}
	if len(o.metadata) > 16 {
		return invalid("metadata: %d entries, at most 16", len(o.metadata))
	}
	for k, v := range o.metadata {
		if len(k) == 0 || len(k) > 64 {
			return invalid("metadata key %q: %d bytes, must be 1..64", k, len(k))
		}
		if len(v) > 256 {
			return invalid("metadata value of %q: %d bytes, at most 256", k, len(v))
		}
	}
	if o.lockDelay < 0 || o.lockDelay > 60*time.Second {
		return invalid("lock_delay: %v, must be 0..60s", o.lockDelay)
	}
	if len(o.revokeReason) > 256 {
		return invalid("revoke_reason: %d bytes, at most 256", len(o.revokeReason))
	}
	if o.maxHolders < 0 {
		return invalid("max_holders: %d, must not be negative", o.maxHolders)
	}
	switch o.kind {
	case KindExclusive, KindShared:
		if o.maxHolders != 0 {
			return invalid("max_holders: %d given with kind %v (only for SEMAPHORE)", o.maxHolders, o.kind)
		}
	case KindSemaphore:
		if o.maxHolders < 1 {
			return invalid("max_holders: %d, a SEMAPHORE needs 1..N", o.maxHolders)
		}
		if o.lockDelay != 0 {
			return invalid("lock_delay is not supported for a SEMAPHORE")
		}
		if o.revokeHolders {
			return invalid("revoke_holders is not supported for a SEMAPHORE")
		}
	default:
		return invalid("kind: unknown %d", int(o.kind))
	}
	if o.grace < 0 {
		return invalid("grace: %v, must not be negative", o.grace)
	}
	return nil
}

// nextBackoff is the retry backoff after d: 50 ms doubling to 1 s.
func nextBackoff(d time.Duration) time.Duration {
	if d <= 0 {
		return 50 * time.Millisecond
	}
	d *= 2
	if d > time.Second {
		d = time.Second
	}
	return d
}

// retryable says whether an Acquire that ended with err may be opened
// again: UNAVAILABLE (replica draining, without ZooKeeper, unreachable) and
// CANCELLED from a replica shutting down (the caller's own cancellation is
// checked separately).
func retryable(err error) bool {
	c := status.Code(err)
	return c == codes.Unavailable || c == codes.Canceled
}
