package turnstile

import (
	"context"
	"sort"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MultiHold is a set of locks taken all-or-nothing by AcquireAll. Each
// lock keeps its own hold and fencing token. The set is intact while every
// hold is granted and not in doubt: the first hold that is lost or in
// doubt ends the set (Done closes, Lost says which and why) and the
// library releases all the others at once, so nothing of a broken set is
// kept. Safe for concurrent use.
type MultiHold struct {
	names []string // canonical (byte) order
	holds []*Hold  // holds[i] is names[i]'s

	mu       sync.Mutex
	lost     string // GUARDED_BY(mu): "" while intact
	released bool   // GUARDED_BY(mu)
	done     chan struct{}
	broken   chan struct{} // closed on the first loss (AcquireAll stops waiting)
	brokenMu sync.Once
	doneOnce sync.Once
}

// CanonicalOrder returns names sorted by their bytes, the order in which
// AcquireAll takes them (two sets taken in one order cannot deadlock),
// and INVALID_ARGUMENT if a name repeats.
func CanonicalOrder(names []string) ([]string, error) {
	sorted := append([]string(nil), names...)
	sort.Strings(sorted) // Go strings compare by bytes
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return nil, invalid("names: %q given twice", sorted[i])
		}
	}
	return sorted, nil
}

// AcquireAll takes every lock of names, all or nothing, under one
// deadline: the wait timeout (WithWaitTimeout), else the time left on ctx,
// else DefaultWait. The locks are taken one after the other in canonical
// order (CanonicalOrder), each waiting only for what is left of the
// deadline; with TryOnce (wait 0) each is tried once. opts apply to every
// lock (kind, owner, metadata, TTL ...).
//
// Bad input (no names, a name given twice, a bad name or option) is
// INVALID_ARGUMENT before any call. On failure the locks already taken
// are released before it returns, and the error is the failing lock's
// (e.g. DEADLINE_EXCEEDED, FAILED_PRECONDITION for a try-once, CANCELLED
// when ctx ends), naming it; ABORTED when a lock already taken was lost
// (or fell in doubt) before the set was complete.
func (c *Client) AcquireAll(ctx context.Context, names []string, opts ...LockOption) (*MultiHold, error) {
	o := lockOptions{owner: c.opts.owner, grace: DefaultGrace}
	for _, f := range opts {
		f(&o)
	}
	if len(names) == 0 {
		return nil, invalid("names: none given")
	}
	sorted, err := CanonicalOrder(names)
	if err != nil {
		return nil, err
	}
	for _, n := range sorted {
		if err := o.validate(n); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "lock %q: %s", n, status.Convert(err).Message())
		}
	}
	wait := o.wait
	if !o.waitSet {
		wait = DefaultWait
		if dl, ok := ctx.Deadline(); ok {
			if wait = time.Until(dl); wait < 0 {
				wait = 0
			}
		}
	}
	end := time.Now().Add(wait)
	m := &MultiHold{names: sorted, done: make(chan struct{}), broken: make(chan struct{})}
	// A loss among the locks already held stops the wait for the next one.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-m.broken:
			cancel()
		case <-wctx.Done():
		}
	}()
	for i, n := range sorted {
		left := time.Duration(0)
		if wait > 0 {
			// Never 0 (a try-once) for a set that waits.
			if left = time.Until(end); left < time.Millisecond {
				left = time.Millisecond
			}
		}
		idx := i
		h, err := c.Lock(wctx, n, append(append([]LockOption(nil), opts...), WithWaitTimeout(left),
			func(lo *lockOptions) { lo.onHold = func(h *Hold, ch StateChange) { m.member(idx, ch) } })...)
		if err == nil {
			m.mu.Lock()
			m.holds = append(m.holds, h)
			m.mu.Unlock()
			if m.Lost() == "" {
				continue
			}
		}
		m.releaseAll()
		if lost := m.Lost(); lost != "" {
			return nil, status.Errorf(codes.Aborted, "AcquireAll: %s before the set was complete; released the others", lost)
		}
		if ctx.Err() != nil {
			return nil, ctxError(ctx, "AcquireAll at lock "+n)
		}
		st := status.Convert(err)
		return nil, status.Errorf(st.Code(), "AcquireAll: lock %q: %s (released the %d taken before it)", n, st.Message(), i)
	}
	return m, nil
}

// member notes a state change of names[i]'s hold.
func (m *MultiHold) member(i int, ch StateChange) {
	switch ch.State {
	case StateSuspended, StateLost:
	case StateReleased:
		m.mu.Lock()
		ours := m.released
		m.mu.Unlock()
		if ours {
			return
		}
	default:
		return
	}
	m.mu.Lock()
	first := m.lost == ""
	if first {
		what := "lost (" + ch.Reason + ")"
		if ch.State == StateSuspended {
			what = "in doubt (" + ch.Reason + ")"
		} else if ch.State == StateReleased {
			what = "released"
		}
		m.lost = "lock " + strconv.Quote(m.names[i]) + " " + what
	}
	m.mu.Unlock()
	if first {
		m.brokenMu.Do(func() { close(m.broken) })
		m.doneOnce.Do(func() { close(m.done) })
		go m.releaseAll()
	}
}

// releaseAll releases every hold taken (in reverse order), each waiting
// up to 10 s for the replica's RELEASED.
func (m *MultiHold) releaseAll() error {
	m.mu.Lock()
	m.released = true
	holds := append([]*Hold(nil), m.holds...)
	m.mu.Unlock()
	var first error
	for i := len(holds) - 1; i >= 0; i-- {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := holds[i].Unlock(ctx)
		cancel()
		if _, lost := err.(*LostError); err != nil && !lost && first == nil {
			first = err
		}
	}
	return first
}

// Names are the set's lock names in canonical order.
func (m *MultiHold) Names() []string { return append([]string(nil), m.names...) }

// Holds are the holds, in canonical order.
func (m *MultiHold) Holds() []*Hold { return append([]*Hold(nil), m.holds...) }

// Hold is the hold of one name of the set (nil if not in the set).
func (m *MultiHold) Hold(name string) *Hold {
	for i, n := range m.names {
		if n == name {
			return m.holds[i]
		}
	}
	return nil
}

// FencingToken is one name's fencing token (0 if not in the set).
func (m *MultiHold) FencingToken(name string) uint64 {
	if h := m.Hold(name); h != nil {
		return h.FencingToken()
	}
	return 0
}

// Held is true while the set is intact: every hold granted, none in doubt.
func (m *MultiHold) Held() bool {
	m.mu.Lock()
	bad := m.lost != "" || m.released
	m.mu.Unlock()
	if bad {
		return false
	}
	for _, h := range m.holds {
		if h.State() != StateHeld {
			return false
		}
	}
	return true
}

// Done is closed when the set ends: a hold lost or in doubt, or Release.
func (m *MultiHold) Done() <-chan struct{} { return m.done }

// Lost says which lock broke the set and how, "" while intact or after a
// plain Release.
func (m *MultiHold) Lost() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lost
}

// Release releases every lock of the set (each waits up to 10 s for its
// RELEASED; see Hold.Unlock). nil once released, also when the set had
// been broken (Lost says how); otherwise the first failure. Idempotent.
func (m *MultiHold) Release(ctx context.Context) error {
	m.mu.Lock()
	m.released = true
	holds := append([]*Hold(nil), m.holds...)
	m.mu.Unlock()
	var first error
	for i := len(holds) - 1; i >= 0; i-- {
		err := holds[i].Unlock(ctx)
		if _, lost := err.(*LostError); err != nil && !lost && first == nil {
			first = err
		}
	}
	m.doneOnce.Do(func() { close(m.done) })
	return first
}
