package turnstile

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "turnstile/client/go/turnstilepb"
)

// LostError says why a hold was lost. Its gRPC status code is NOT_FOUND
// (the lease is gone), so status.Code works on it.
type LostError struct {
	Reason  string // SESSION_EXPIRED, LEASE_EXPIRED, DELETED, SHUTDOWN, CONNECTION, REFRESH_OVERDUE
	Message string
}

func (e *LostError) Error() string { return fmt.Sprintf("hold lost: %s: %s", e.Reason, e.Message) }

// GRPCStatus makes status.Code(err) == codes.NotFound.
func (e *LostError) GRPCStatus() *status.Status { return status.New(codes.NotFound, e.Error()) }

// Hold is one granted Acquire stream (a held lock). Its methods are safe
// for concurrent use. Callbacks (OnQueued, OnRevoke, OnStateChange) run in
// order on a goroutine of the hold, never under its lock; they should not
// block for long. OnStateChange may run before Lock has returned.
type Hold struct {
	c      *Client
	name   string
	opts   lockOptions
	clock  Clock
	stream pb.LockService_AcquireClient
	cancel context.CancelFunc

	sendMu sync.Mutex

	mu           sync.Mutex
	t            tracker
	leaseID      string
	token        uint64
	validForTTL  time.Duration
	sessionTO    time.Duration
	position     int64
	releasing    bool
	ended        bool
	endErr       error
	doneClosed   bool
	acquiredOnce bool

	acquiredCh chan struct{}
	endedCh    chan struct{}
	done       chan struct{}
	kick       chan struct{}
	disp       dispatcher
}

func newHold(c *Client, name string, o *lockOptions, stream pb.LockService_AcquireClient, cancel context.CancelFunc) *Hold {
	h := &Hold{c: c, name: name, opts: *o, clock: c.opts.clock, stream: stream, cancel: cancel,
		acquiredCh: make(chan struct{}), endedCh: make(chan struct{}), done: make(chan struct{}),
		kick: make(chan struct{}, 1)}
	h.disp.wake = make(chan struct{}, 1)
	return h
}

func (h *Hold) start(open *pb.AcquireOpen) {
	go h.disp.run()
	// A failed Send means the stream already ended: Recv reports why.
	h.send(&pb.AcquireRequest{Request: &pb.AcquireRequest_Open{Open: open}})
	go h.read()
}

func (h *Hold) send(req *pb.AcquireRequest) {
	h.sendMu.Lock()
	defer h.sendMu.Unlock()
	_ = h.stream.Send(req)
}

// abandon gives up a wait (the replica deletes the node).
func (h *Hold) abandon() {
	h.mu.Lock()
	h.releasing = true
	h.mu.Unlock()
	h.cancel()
	h.disp.close()
}

func (h *Hold) waitError() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.disp.close()
	if h.endErr == nil {
		return status.Error(codes.Unknown, "Acquire stream ended without ACQUIRED")
	}
	return h.endErr
}

// Name is the lock's name.
func (h *Hold) Name() string { return h.name }

// FencingToken is the hold's fencing token: pass it to the protected
// resource, which rejects requests with a smaller one.
func (h *Hold) FencingToken() uint64 { h.mu.Lock(); defer h.mu.Unlock(); return h.token }

// LeaseID names the held contender (for Release, Revoke, KeepAlive).
func (h *Hold) LeaseID() string { h.mu.Lock(); defer h.mu.Unlock(); return h.leaseID }

// SessionTimeout is the replica's ZooKeeper session timeout.
func (h *Hold) SessionTimeout() time.Duration { h.mu.Lock(); defer h.mu.Unlock(); return h.sessionTO }

// State is the hold's current state.
func (h *Hold) State() State { h.mu.Lock(); defer h.mu.Unlock(); return h.t.state }

// ValidFor is how long the hold is still certainly valid (0 once lost or
// released; very large against a server without refreshes).
func (h *Hold) ValidFor() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.t.validFor(h.clock.Now())
}

// Done is closed when the hold ends: lost, or released.
func (h *Hold) Done() <-chan struct{} { return h.done }

// Lost is why the hold was lost (SESSION_EXPIRED, LEASE_EXPIRED, DELETED,
// SHUTDOWN, CONNECTION, REFRESH_OVERDUE), "" if it was not.
func (h *Hold) Lost() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.t.state != StateLost {
		return ""
	}
	return h.t.reason
}

// Err is a *LostError once the hold is lost, nil otherwise.
func (h *Hold) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lostErrLocked()
}

func (h *Hold) lostErrLocked() error {
	if h.t.state != StateLost {
		return nil
	}
	return &LostError{Reason: h.t.reason, Message: h.t.message}
}

// changed records a state change (h.mu held): callback, Done.
func (h *Hold) changedLocked(s State) {
	ch := StateChange{State: s}
	switch s {
	case StateLost:
		ch.Reason, ch.Message = h.t.reason, h.t.message
	case StateSuspended:
		ch.Reason, ch.Message = "SUSPENDED", "the replica lost its ZooKeeper connection"
		if h.t.silent {
			ch.Reason, ch.Message = "REFRESH_OVERDUE", "no refresh from the replica within refresh_within"
		}
	}
	if f := h.opts.onChange; f != nil {
		h.disp.push(func() { f(ch) })
	}
	if f := h.opts.onHold; f != nil {
		h.disp.push(func() { f(h, ch) })
	}
	if (s == StateLost || s == StateReleased) && !h.doneClosed {
		h.doneClosed = true
		close(h.done)
		h.disp.close()
	}
	h.poke()
}

func (h *Hold) poke() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

func (h *Hold) read() {
	for {
		ev, err := h.stream.Recv()
		if err != nil {
			h.streamEnded(err)
			return
		}
		h.onEvent(ev)
	}
}

func (h *Hold) streamEnded(err error) {
	if err == io.EOF {
		err = nil
	}
	h.mu.Lock()
	h.ended = true
	h.endErr = err
	if h.t.state == StateHeld || h.t.state == StateSuspended {
		if h.releasing {
			h.t.state = StateReleased
			h.changedLocked(StateReleased)
		} else {
			msg := "the Acquire stream ended without RELEASED or LOST"
			if err != nil {
				msg = fmt.Sprintf("the stream to the replica broke: %v", err)
			}
			h.t.lose("CONNECTION", msg)
			h.changedLocked(StateLost)
		}
	}
	h.mu.Unlock()
	close(h.endedCh)
}

func (h *Hold) onEvent(ev *pb.AcquireEvent) {
	now := h.clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	switch ev.Type {
	case pb.AcquireEvent_QUEUED:
		if q := ev.GetQueued(); q != nil {
			h.position = q.Position
			if f := h.opts.onQueued; f != nil {
				pos := q.Position
				h.disp.push(func() { f(pos) })
			}
		}
	case pb.AcquireEvent_ACQUIRED:
		a := ev.GetAcquired()
		if a == nil || h.acquiredOnce {
			return
		}
		h.acquiredOnce = true
		h.leaseID, h.token = a.LeaseId, a.FencingToken
		h.sessionTO = a.SessionTimeout.AsDuration()
		h.t.acquired(now, a.SafeFor.AsDuration(), a.RefreshWithin.AsDuration())
		if a.ValidFor != nil && h.opts.ttl > 0 {
			h.t.renewed(now, a.ValidFor.AsDuration())
		}
		close(h.acquiredCh)
		if f := h.opts.onHold; f != nil {
			h.disp.push(func() { f(h, StateChange{State: StateHeld}) })
		}
		go h.watchdog()
		if h.opts.ttl > 0 {
			go h.renew()
		}
	case pb.AcquireEvent_STILL_HELD:
		if s := ev.GetStillHeld(); s != nil {
			if h.t.stillHeld(now, s.SafeFor.AsDuration(), s.RefreshWithin.AsDuration()) {
				h.changedLocked(StateHeld)
			}
			h.poke()
		}
	case pb.AcquireEvent_SUSPENDED:
		var safe time.Duration
		if s := ev.GetSuspended(); s != nil {
			safe = s.SafeFor.AsDuration()
		}
		if h.t.state == StateHeld || h.t.state == StateSuspended {
			if h.t.suspended(now, safe) {
				h.changedLocked(StateSuspended)
			}
			h.poke()
		}
	case pb.AcquireEvent_RESUMED:
		if h.t.state == StateHeld || h.t.state == StateSuspended {
			s := ev.GetStillHeld()
			var safe, within time.Duration
			if s != nil {
				safe, within = s.SafeFor.AsDuration(), s.RefreshWithin.AsDuration()
			}
			if h.t.resumed(now, s != nil, safe, within) {
				h.changedLocked(StateHeld)
			}
			h.poke()
		}
	case pb.AcquireEvent_LOST:
		reason, msg := "REASON_UNSPECIFIED", ""
		if l := ev.GetLost(); l != nil {
			reason, msg = l.Reason.String(), l.Message
		}
		if h.t.lose(reason, msg) {
			h.changedLocked(StateLost)
		}
	case pb.AcquireEvent_RELEASED:
		if h.t.state != StateLost && h.t.state != StateReleased {
			h.t.state = StateReleased
			h.changedLocked(StateReleased)
		}
	case pb.AcquireEvent_REVOKE_REQUESTED:
		if r := ev.GetRevokeRequested(); r != nil && (h.t.state == StateHeld || h.t.state == StateSuspended) {
			if f := h.opts.onRevoke; f != nil {
				req, why := r.Requester, r.Reason
				h.disp.push(func() { f(req, why) })
			}
		}
	default:
		// RELEASING and unknown types: ignored.
	}
}

// watchdog notices a silent replica (see tracker).
func (h *Hold) watchdog() {
	for {
		h.mu.Lock()
		if h.t.state != StateHeld && h.t.state != StateSuspended {
			h.mu.Unlock()
			return
		}
		if h.releasing {
			h.mu.Unlock()
			return
		}
		now := h.clock.Now()
		changes, next := h.t.check(now)
		lost := false
		for _, s := range changes {
			h.changedLocked(s)
			lost = lost || s == StateLost
		}
		h.mu.Unlock()
		if lost {
			h.cancel() // a live replica deletes the node
			return
		}
		var tc <-chan time.Time
		var timer Timer
		if !next.IsZero() {
			timer = h.clock.NewTimer(next.Sub(now))
			tc = timer.C()
		}
		select {
		case <-tc:
		case <-h.kick:
		case <-h.done:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// renew keeps a TTL lease alive with KeepAlive every ttl/3.
func (h *Hold) renew() {
	interval := h.opts.ttl / 3
	if interval < 100*time.Millisecond {
		interval = 100 * time.Millisecond
	}
	h.mu.Lock()
	lease := h.leaseID
	h.mu.Unlock()
	for {
		t := time.NewTimer(interval)
		select {
		case <-h.done:
			t.Stop()
			return
		case <-h.endedCh:
			t.Stop()
			return
		case <-t.C:
		}
		h.mu.Lock()
		stop := h.releasing
		h.mu.Unlock()
		if stop {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), interval)
		st, err := h.c.KeepAlive(ctx, lease)
		cancel()
		if err != nil || len(st) != 1 {
			continue // transient; the replica says LOST if the lease expires
		}
		if st[0].Code == codes.NotFound {
			return // gone: the Acquire stream reports LOST
		}
		if st[0].Code == codes.OK {
			h.mu.Lock()
			h.t.renewed(h.clock.Now(), st[0].ValidFor)
			h.mu.Unlock()
		}
	}
}

// Unlock releases the hold and waits (until ctx ends, at most 10 s without
// a deadline) for RELEASED; if it does not come the stream is cancelled,
// which also deletes the node. Returns nil once released, the *LostError
// if the hold had been lost (status.Code NOT_FOUND). Idempotent.
func (h *Hold) Unlock(ctx context.Context) error {
	h.mu.Lock()
	switch h.t.state {
	case StateReleased:
		h.mu.Unlock()
		return nil
	case StateLost:
		err := h.lostErrLocked()
		h.mu.Unlock()
		return err
	}
	already := h.releasing
	h.releasing = true
	h.poke()
	h.mu.Unlock()
	if !already {
		h.send(&pb.AcquireRequest{Request: &pb.AcquireRequest_Release{Release: &pb.AcquireRelease{}}})
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	select {
	case <-h.done:
	case <-h.endedCh:
	case <-ctx.Done():
	}
	h.cancel()
	<-h.endedCh
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.t.state == StateHeld || h.t.state == StateSuspended {
		h.t.state = StateReleased
		h.changedLocked(StateReleased)
	}
	if h.t.state == StateLost {
		return h.lostErrLocked()
	}
	return nil
}

// Proclaim replaces the hold's metadata (all of it) by its lease id and
// fencing token, keeping the hold (Client.Proclaim).
func (h *Hold) Proclaim(ctx context.Context, metadata map[string]string) error {
	return h.c.Proclaim(ctx, h.LeaseID(), h.FencingToken(), metadata)
}

// dispatcher runs a hold's callbacks in order on one goroutine.
type dispatcher struct {
	mu     sync.Mutex
	q      []func()
	closed bool
	wake   chan struct{}
}

func (d *dispatcher) push(f func()) {
	d.mu.Lock()
	if !d.closed {
		d.q = append(d.q, f)
	}
	d.mu.Unlock()
	d.signal()
}

func (d *dispatcher) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *dispatcher) close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.signal()
}

func (d *dispatcher) run() {
	for {
		d.mu.Lock()
		if len(d.q) == 0 {
			closed := d.closed
			d.mu.Unlock()
			if closed {
				return
			}
			<-d.wake
			continue
		}
		f := d.q[0]
		d.q = d.q[1:]
		d.mu.Unlock()
		f()
	}
}
