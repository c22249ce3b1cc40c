package turnstile

import (
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestTrackerSilenceSuspendsThenLoses(t *testing.T) {
	var tr tracker
	// ACQUIRED: safe for 2.4 s, next refresh within 2.4 s (session 4 s).
	tr.acquired(t0, ms(3000), ms(2400))
	ch, next := tr.check(t0.Add(ms(1000)))
	if len(ch) != 0 || !next.Equal(t0.Add(ms(2400))) || tr.state != StateHeld {
		t.Fatalf("before refresh_within: changes %v next %v state %v", ch, next, tr.state)
	}
	// Silence past refresh_within: SUSPENDED, certainly valid until 3 s.
	ch, next = tr.check(t0.Add(ms(2400)))
	if len(ch) != 1 || ch[0] != StateSuspended || !next.Equal(t0.Add(ms(3000))) {
		t.Fatalf("at refresh_within: changes %v next %v", ch, next)
	}
	if v := tr.validFor(t0.Add(ms(2500))); v != ms(500) {
		t.Fatalf("validFor while suspended = %v, want 500ms", v)
	}
	// Validity runs out: LOST, REFRESH_OVERDUE.
	ch, next = tr.check(t0.Add(ms(3000)))
	if len(ch) != 1 || ch[0] != StateLost || tr.reason != "REFRESH_OVERDUE" || !next.IsZero() {
		t.Fatalf("at safe_for: changes %v reason %q next %v", ch, tr.reason, next)
	}
	if tr.validFor(t0.Add(ms(3000))) != 0 {
		t.Fatal("a lost hold has validity")
	}
}

func TestTrackerStillHeldInTimeResumes(t *testing.T) {
	var tr tracker
	tr.acquired(t0, ms(3000), ms(2400))
	// A refresh in time moves both deadlines.
	if tr.stillHeld(t0.Add(ms(800)), ms(3000), ms(2400)) {
		t.Fatal("a STILL_HELD while held reported a resume")
	}
	ch, next := tr.check(t0.Add(ms(3000)))
	if len(ch) != 0 || !next.Equal(t0.Add(ms(3200))) {
		t.Fatalf("after a refresh: changes %v next %v", ch, next)
	}
	ch, _ = tr.check(t0.Add(ms(3200)))
	if len(ch) != 1 || ch[0] != StateSuspended {
		t.Fatalf("silence: %v", ch)
	}
	// A late STILL_HELD (before the validity ran out) means the hold was fine.
	if !tr.stillHeld(t0.Add(ms(3500)), ms(3000), ms(2400)) || tr.state != StateHeld {
		t.Fatalf("STILL_HELD after a silence did not resume: %v", tr.state)
	}
	if _, next = tr.check(t0.Add(ms(3500))); !next.Equal(t0.Add(ms(5900))) {
		t.Fatalf("next after resume %v", next)
	}
}

func TestTrackerServerSuspendedRunsOutAsSessionExpired(t *testing.T) {
	var tr tracker
	tr.acquired(t0, ms(3000), ms(2400))
	if !tr.suspended(t0.Add(ms(100)), ms(1500)) || tr.state != StateSuspended {
		t.Fatal("SUSPENDED did not suspend")
	}
	// A STILL_HELD does not end a server's suspension: only RESUMED does.
	if tr.stillHeld(t0.Add(ms(200)), ms(3000), ms(2400)) {
		t.Fatal("STILL_HELD ended a server SUSPENDED")
	}
	ch, next := tr.check(t0.Add(ms(1000)))
	if len(ch) != 0 || !next.Equal(t0.Add(ms(1600))) {
		t.Fatalf("suspended: changes %v next %v", ch, next)
	}
	ch, _ = tr.check(t0.Add(ms(1600)))
	if len(ch) != 1 || ch[0] != StateLost || tr.reason != "SESSION_EXPIRED" {
		t.Fatalf("at safe_for: %v %q", ch, tr.reason)
	}
}

func TestTrackerResumed(t *testing.T) {
	var tr tracker
	tr.acquired(t0, ms(3000), ms(2400))
	tr.suspended(t0.Add(ms(100)), ms(1500))
	if !tr.resumed(t0.Add(ms(500)), true, ms(2000), ms(2400)) || tr.state != StateHeld {
		t.Fatal("RESUMED did not resume")
	}
	if _, next := tr.check(t0.Add(ms(600))); !next.Equal(t0.Add(ms(2900))) {
		t.Fatalf("next after RESUMED %v", next)
	}
	if v := tr.validFor(t0.Add(ms(500))); v != ms(2000) {
		t.Fatalf("validFor after RESUMED %v", v)
	}
}

func TestTrackerTTLBoundsValidity(t *testing.T) {
	var tr tracker
	tr.acquired(t0, ms(3000), ms(2400))
	tr.renewed(t0, ms(1000))
	if v := tr.validFor(t0.Add(ms(400))); v != ms(600) {
		t.Fatalf("validFor = %v, want the TTL's 600ms", v)
	}
	// Silent and not renewed: the TTL runs out first.
	ch, next := tr.check(t0.Add(ms(2400)))
	if len(ch) != 2 || ch[1] != StateLost {
		t.Fatalf("changes %v next %v", ch, next)
	}
}

func TestTrackerOldServerNoRefresh(t *testing.T) {
	var tr tracker
	tr.acquired(t0, 0, 0)
	if ch, next := tr.check(t0.Add(time.Hour)); len(ch) != 0 || !next.IsZero() {
		t.Fatalf("a server without refreshes: %v %v", ch, next)
	}
}

// fakeClock is a Clock whose time moves only by Advance.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	added  chan struct{}
}

type fakeTimer struct {
	c    chan time.Time
	at   time.Time
	done bool
	clk  *fakeClock
}

func newFakeClock() *fakeClock { return &fakeClock{now: t0, added: make(chan struct{}, 100)} }

func (f *fakeClock) Now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }

func (f *fakeClock) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	t := &fakeTimer{c: make(chan time.Time, 1), at: f.now.Add(d), clk: f}
	f.timers = append(f.timers, t)
	f.mu.Unlock()
	f.added <- struct{}{}
	return t
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}

func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	for _, t := range f.timers {
		if !t.done && !t.at.After(f.now) {
			t.done = true
			t.c <- f.now
		}
	}
}

// waitTimer waits until the watchdog armed a timer (with a deadline: a
// test never sleeps).
func (f *fakeClock) waitTimer(t *testing.T) {
	select {
	case <-f.added:
	case <-time.After(5 * time.Second):
		t.Fatal("the watchdog armed no timer")
	}
}

// The watchdog goroutine of a Hold, driven by an injected clock: silence
// past refresh_within reports SUSPENDED, then LOST REFRESH_OVERDUE, and
// cancels the stream.
func TestHoldWatchdogWithInjectedClock(t *testing.T) {
	clk := newFakeClock()
	changes := make(chan StateChange, 10)
	cancelled := make(chan struct{})
	c := &Client{opts: clientOptions{clock: clk}}
	o := &lockOptions{onChange: func(ch StateChange) { changes <- ch }}
	var once sync.Once
	h := newHold(c, "L", o, nil, func() { once.Do(func() { close(cancelled) }) })
	go h.disp.run()
	h.mu.Lock()
	h.t.acquired(clk.Now(), ms(3000), ms(2400))
	h.mu.Unlock()
	go h.watchdog()
	clk.waitTimer(t) // armed for refresh_within
	clk.Advance(ms(2400))
	expect := func(s State) StateChange {
		select {
		case ch := <-changes:
			if ch.State != s {
				t.Fatalf("state %v, want %v", ch.State, s)
			}
			return ch
		case <-time.After(5 * time.Second):
			t.Fatalf("no %v", s)
		}
		return StateChange{}
	}
	expect(StateSuspended)
	if h.State() != StateSuspended {
		t.Fatalf("state %v", h.State())
	}
	clk.waitTimer(t) // armed for the validity's end
	clk.Advance(ms(600))
	ch := expect(StateLost)
	if ch.Reason != "REFRESH_OVERDUE" || h.Lost() != "REFRESH_OVERDUE" {
		t.Fatalf("lost %q / %q", ch.Reason, h.Lost())
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream was not cancelled")
	}
	select {
	case <-h.Done():
	default:
		t.Fatal("Done not closed on loss")
	}
	if err := h.Err(); err == nil {
		t.Fatal("Err() nil after loss")
	}
}
