package turnstile

import (
	"context"
	"regexp"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ValueKey is the metadata key under which the election helpers keep the
// leader's value (the convention of lock.proto's ProclaimRequest).
const ValueKey = "value"

// DefaultCampaignWait is the longest single wait a Campaign asks a replica
// for (the replicas' default --max-wait-timeout); a longer campaign queues
// again when it runs out.
const DefaultCampaignWait = time.Hour

// Election is a leader election on one lock name, in the style of etcd's
// concurrency.Election: the leader is the holder of the exclusive lock
// `name`, its value the hold's metadata "value", its term the hold's
// fencing token. Observers (ObserveLeader, Leader) need no Election.
//
// One Election is one candidate: at most one Campaign at a time. Its
// methods are safe for concurrent use. OnLeadership callbacks run in order
// (per term) on a goroutine of the hold, never under the Election's lock.
type Election struct {
	c    *Client
	name string
	o    electionOptions

	mu          sync.Mutex
	campaigning bool   // GUARDED_BY(mu)
	hold        *Hold  // GUARDED_BY(mu): the latest term's hold (nil before any)
	value       string // GUARDED_BY(mu)
	stepDownWhy string // GUARDED_BY(mu): why the hold was released, for the callback
	granted     *Hold  // GUARDED_BY(mu): the hold whose grant was told to OnLeadership
}

type electionOptions struct {
	owner        string
	ownerSet     bool
	metadata     map[string]string
	ttl          time.Duration
	maxWait      time.Duration
	stayOnRevoke bool
	onLeadership func(isLeader bool, reason string)
	onRevoke     func(requester, reason string)
	lockDelay    time.Duration
	grace        time.Duration
}

// ElectionOption configures NewElection.
type ElectionOption func(*electionOptions)

// CandidateOwner is the owner of the campaign's hold (shown by Describe
// and to observers); default: the Client's WithDefaultOwner.
func CandidateOwner(owner string) ElectionOption {
	return func(o *electionOptions) { o.owner, o.ownerSet = owner, true }
}

// CandidateMetadata adds metadata kept next to "value" on every Campaign
// and Proclaim (at most 15 more entries).
func CandidateMetadata(md map[string]string) ElectionOption {
	return func(o *electionOptions) {
		o.metadata = make(map[string]string, len(md))
		for k, v := range md {
			o.metadata[k] = v
		}
	}
}

// CandidateTTL makes the leader's hold a lease of this TTL, renewed by the
// library (WithTTL).
func CandidateTTL(d time.Duration) ElectionOption { return func(o *electionOptions) { o.ttl = d } }

// CandidateLockDelay sets the hold's lock-delay (WithLockDelay): after a
// leader is lost involuntarily the next one is elected this much later.
func CandidateLockDelay(d time.Duration) ElectionOption {
	return func(o *electionOptions) { o.lockDelay = d }
}

// CampaignWait caps each single wait of a Campaign (default
// DefaultCampaignWait). A replica whose --max-wait-timeout is lower is
// learnt from its answer; this is only needed to avoid that round trip.
func CampaignWait(d time.Duration) ElectionOption { return func(o *electionOptions) { o.maxWait = d } }

// OnLeadership is called with true when this candidate becomes leader
// ("elected") and again when it is leader again after an in-doubt period
// ("resumed"), and with false as soon as the library knows it may not be:
// in doubt ("suspended: ..." when the replica lost ZooKeeper, "in doubt:
// ..." when the replica fell silent), lost ("lost: REASON: ..."), or
// released ("resigned", "stepped down: revoke requested by ..."). false may
// come twice in a row (in doubt, then lost).
func OnLeadership(f func(isLeader bool, reason string)) ElectionOption {
	return func(o *electionOptions) { o.onLeadership = f }
}

// StayOnRevoke keeps leadership when someone asks the leader to let go
// (Revoke, a waiter's revoke_holders). By default the leader steps down:
// it resigns at once (OnLeadership false, "stepped down: ...") and the next
// candidate in line is elected. f (may be nil) is told of the request.
func StayOnRevoke(f func(requester, reason string)) ElectionOption {
	return func(o *electionOptions) { o.stayOnRevoke, o.onRevoke = true, f }
}

// NewElection is a candidate (or a handle to observe) for the election
// `name`. It makes no call.
func (c *Client) NewElection(name string, opts ...ElectionOption) *Election {
	o := electionOptions{maxWait: DefaultCampaignWait, grace: DefaultGrace}
	for _, f := range opts {
		f(&o)
	}
	if !o.ownerSet {
		o.owner = c.opts.owner
	}
	return &Election{c: c, name: name, o: o}
}

// Name is the election's lock name.
func (e *Election) Name() string { return e.name }

// Leadership is one term of this candidate as leader.
type Leadership struct {
	Name string
	// Value as last campaigned or proclaimed.
	Value string
	// FencingToken is the term: strictly greater than every earlier
	// leader's. Pass it to what the leader writes to.
	FencingToken uint64
	LeaseID      string
	// Hold is the underlying hold (Done, State, ValidFor).
	Hold *Hold
}

func (e *Election) metadata(value string) map[string]string {
	md := make(map[string]string, len(e.o.metadata)+1)
	for k, v := range e.o.metadata {
		md[k] = v
	}
	md[ValueKey] = value
	return md
}

// waitCapRE reads a replica's wait limit from its INVALID_ARGUMENT
// ("wait_timeout is 3600000ms; it must be 0..60000ms").
var waitCapRE = regexp.MustCompile(`wait_timeout\b.*\b0\.\.(\d+)ms`)

// replicaWaitCap returns the replica's --max-wait-timeout named by err.
func replicaWaitCap(err error) (time.Duration, bool) {
	if status.Code(err) != codes.InvalidArgument {
		return 0, false
	}
	m := waitCapRE.FindStringSubmatch(status.Convert(err).Message())
	if m == nil {
		return 0, false
	}
	ms, perr := strconv.ParseInt(m[1], 10, 64)
	if perr != nil || ms <= 0 {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// Campaign waits until this candidate is leader: an exclusive hold of the
// election's lock with metadata {"value": value}. It waits until ctx ends
// (no deadline: until it is elected). Invisibly it queues again when a
// wait ends because the replica caps waits (--max-wait-timeout: a
// DEADLINE_EXCEEDED before ctx's deadline, or the INVALID_ARGUMENT naming
// the cap), and, with backoff, when the replica refuses for now
// (RESOURCE_EXHAUSTED, UNAVAILABLE, CANCELLED by a replica shutting down).
// Each new wait joins the queue at its end.
//
// Errors: CANCELLED / DEADLINE_EXCEEDED when ctx ends; INVALID_ARGUMENT
// (bad name, owner, value or metadata: checked before any call);
// PERMISSION_DENIED; FAILED_PRECONDITION when this Election is already
// campaigning or leader (Resign first) or the lock is used as a semaphore.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	md := e.metadata(value)
	base := lockOptions{owner: e.o.owner, metadata: md, ttl: e.o.ttl, lockDelay: e.o.lockDelay, grace: e.o.grace}
	if err := base.validate(e.name); err != nil {
		return nil, err
	}
	e.mu.Lock()
	if e.campaigning {
		e.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "election %q: a Campaign is already running", e.name)
	}
	if e.hold != nil && !ended(e.hold.State()) {
		e.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "election %q: already leader (Resign first)", e.name)
	}
	e.campaigning = true
	e.hold = nil
	e.value = value
	e.stepDownWhy = ""
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.campaigning = false
		e.mu.Unlock()
	}()

	slice := e.o.maxWait
	if slice <= 0 {
		slice = DefaultCampaignWait
	}
	backoff := time.Duration(0)
	for {
		if ctx.Err() != nil {
			return nil, ctxError(ctx, "campaigning for "+e.name)
		}
		wait := slice
		if dl, ok := ctx.Deadline(); ok {
			if left := time.Until(dl); left < wait {
				wait = left
			}
		}
		if wait < time.Millisecond {
			wait = time.Millisecond // never a try-once
		}
		started := time.Now()
		h, err := e.c.Lock(ctx, e.name, WithOwner(e.o.owner), WithMetadata(md), WithTTL(e.o.ttl),
			WithLockDelay(e.o.lockDelay), WithGrace(e.o.grace), WithWaitTimeout(wait),
			func(o *lockOptions) { o.onHold = e.onHold },
			OnRevoke(e.onRevoke))
		if err == nil {
			e.mu.Lock()
			e.hold = h
			e.mu.Unlock()
			return &Leadership{Name: e.name, Value: value, FencingToken: h.FencingToken(), LeaseID: h.LeaseID(), Hold: h}, nil
		}
		if ctx.Err() != nil {
			return nil, ctxError(ctx, "campaigning for "+e.name)
		}
		switch status.Code(err) {
		case codes.DeadlineExceeded:
			// The replica's cap (or its silence) ended this wait, not ctx.
		case codes.InvalidArgument:
			limit, ok := replicaWaitCap(err)
			if !ok || limit >= wait {
				return nil, err
			}
			slice = limit
			continue
		case codes.ResourceExhausted, codes.Unavailable, codes.Canceled, codes.Aborted:
		default:
			return nil, err
		}
		// A wait that lasted long queues again at once; quick refusals back off.
		if time.Since(started) > time.Second {
			backoff = 0
			continue
		}
		backoff = nextBackoff(backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctxError(ctx, "campaigning for "+e.name)
		case <-t.C:
		}
	}
}

func ended(s State) bool { return s == StateLost || s == StateReleased }

// onHold maps the hold's states onto leadership (on the hold's callback
// goroutine, in order, from the grant on).
func (e *Election) onHold(h *Hold, ch StateChange) {
	f := e.o.onLeadership
	if f == nil {
		return
	}
	switch ch.State {
	case StateHeld:
		// The grant is always the first call for a hold.
		e.mu.Lock()
		first := e.granted != h
		e.granted = h
		e.mu.Unlock()
		if first {
			f(true, "elected")
		} else {
			f(true, "resumed")
		}
	case StateSuspended:
		if ch.Reason == "REFRESH_OVERDUE" {
			f(false, "in doubt: "+ch.Message)
		} else {
			f(false, "suspended: "+ch.Message)
		}
	case StateLost:
		f(false, "lost: "+ch.Reason+": "+ch.Message)
	case StateReleased:
		e.mu.Lock()
		why := e.stepDownWhy
		e.mu.Unlock()
		if why == "" {
			why = "resigned"
		}
		f(false, why)
	}
}

func (e *Election) onRevoke(requester, reason string) {
	if e.o.stayOnRevoke {
		if e.o.onRevoke != nil {
			e.o.onRevoke(requester, reason)
		}
		return
	}
	go e.stepDown(context.Background(), "stepped down: revoke requested by "+requester+": "+reason)
}

// IsLeader is true only while this candidate's hold is granted and not in
// doubt (false while suspended, after loss or Resign).
func (e *Election) IsLeader() bool {
	e.mu.Lock()
	h := e.hold
	e.mu.Unlock()
	return h != nil && h.State() == StateHeld
}

// Leadership is the current (or last) term, nil before the first.
func (e *Election) Leadership() *Leadership {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.hold == nil {
		return nil
	}
	return &Leadership{Name: e.name, Value: e.value, FencingToken: e.hold.FencingToken(), LeaseID: e.hold.LeaseID(), Hold: e.hold}
}

// Proclaim changes the leader's value without an election (Proclaim by
// the term's lease id and fencing token). Errors: FAILED_PRECONDITION when
// this candidate never won a term (or, from the replica, the token is not
// the lease's), NOT_FOUND when the term is over (lost or resigned), and
// as Client.Proclaim.
func (e *Election) Proclaim(ctx context.Context, value string) error {
	e.mu.Lock()
	h := e.hold
	e.mu.Unlock()
	if h == nil {
		return status.Errorf(codes.FailedPrecondition, "election %q: not leader (no Campaign won)", e.name)
	}
	if err := h.Proclaim(ctx, e.metadata(value)); err != nil {
		return err
	}
	e.mu.Lock()
	if e.hold == h {
		e.value = value
	}
	e.mu.Unlock()
	return nil
}

// Resign gives up leadership (releases the hold), so the next candidate is
// elected at once. nil also when this candidate is not leader (never was,
// or the term was lost).
func (e *Election) Resign(ctx context.Context) error {
	return e.stepDown(ctx, "resigned")
}

func (e *Election) stepDown(ctx context.Context, why string) error {
	e.mu.Lock()
	h := e.hold
	if h == nil || ended(h.State()) {
		e.mu.Unlock()
		return nil
	}
	if e.stepDownWhy == "" {
		e.stepDownWhy = why
	}
	e.mu.Unlock()
	if err := h.Unlock(ctx); err != nil {
		if _, lost := err.(*LostError); lost {
			return nil
		}
		return err
	}
	return nil
}

// Observe streams this election's leader changes (Client.ObserveLeader).
func (e *Election) Observe(ctx context.Context) <-chan LeaderEvent {
	return e.c.ObserveLeader(ctx, e.name)
}

// Leader is an election's leader, as observers see it.
type Leader struct {
	Name     string
	Value    string // metadata "value"
	Owner    string
	Identity string // verified (mutual TLS), "" without
	// FencingToken is the leader's term.
	FencingToken uint64
	// Granted: when it became leader, where the replica knows it (zero
	// otherwise); Since: when it queued.
	Granted, Since time.Time
	Metadata       map[string]string
}

// LeaderEvent is one change seen by ObserveLeader.
type LeaderEvent struct {
	// Leader is nil when there is no leader, or it is unknown.
	Leader *Leader
	// Unknown: the replica cannot tell (no ZooKeeper connection), or the
	// library is observing again after the stream broke.
	Unknown bool
	Message string
	// Err ends the channel (see LockState.Err).
	Err error
}

func leaderOf(s LockState) *Leader {
	if s.Unknown || len(s.Holders) == 0 {
		return nil
	}
	h := s.Holders[0]
	return &Leader{Name: s.Name, Value: h.Metadata[ValueKey], Owner: h.Owner, Identity: h.Identity,
		FencingToken: h.FencingToken, Granted: h.Granted, Since: h.Since, Metadata: h.Metadata}
}

func sameLeader(a, b *Leader) bool {
	if a == nil || b == nil {
		return a == b
	}
	// One term (token) has one owner and identity; its value may change.
	return a.FencingToken == b.FencingToken && a.Value == b.Value
}

// ObserveLeader streams the leader of the election `name`: the current
// one at once (or "no leader", or unknown), then one event per change of
// leader or of its value (changes of the waiters alone are not sent). It
// observes again by itself as Observe does; it stops, closing the channel,
// when ctx ends or after an event carrying Err.
func (c *Client) ObserveLeader(ctx context.Context, name string) <-chan LeaderEvent {
	out := make(chan LeaderEvent)
	in := c.Observe(ctx, name)
	go func() {
		defer close(out)
		first := true
		var last LeaderEvent
		for s := range in {
			ev := LeaderEvent{Leader: leaderOf(s), Unknown: s.Unknown, Message: s.Message, Err: s.Err}
			if !first && ev.Err == nil && ev.Unknown == last.Unknown && sameLeader(ev.Leader, last.Leader) {
				continue
			}
			first, last = false, ev
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// Leader returns the election's current leader once; NOT_FOUND when there
// is none. While the replica cannot tell (unknown) it waits for a known
// state until ctx ends (a deadline of WithCallTimeout if ctx has none).
func (c *Client) Leader(ctx context.Context, name string) (*Leader, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	for ev := range c.ObserveLeader(ctx, name) {
		if ev.Err != nil {
			return nil, ev.Err
		}
		if ev.Unknown {
			continue
		}
		if ev.Leader == nil {
			return nil, status.Errorf(codes.NotFound, "election %q has no leader", name)
		}
		return ev.Leader, nil
	}
	return nil, ctxError(ctx, "asking for the leader of "+name)
}
