package turnstile

import "time"

// State is a hold's state.
type State int

const (
	// StateWaiting: queued, not granted yet (never seen on a returned Hold).
	StateWaiting State = iota
	// StateHeld: granted and not in doubt.
	StateHeld
	// StateSuspended: in doubt (the replica lost ZooKeeper, or its refresh
	// is overdue); certainly held only until ValidFor runs out.
	StateSuspended
	// StateLost: the hold is gone; stop using the lock (Lost says why).
	StateLost
	// StateReleased: released by Unlock.
	StateReleased
)

func (s State) String() string {
	switch s {
	case StateWaiting:
		return "waiting"
	case StateHeld:
		return "held"
	case StateSuspended:
		return "suspended"
	case StateLost:
		return "lost"
	case StateReleased:
		return "released"
	}
	return "unknown"
}

// Clock is the time source of the watchdog (tests inject a fake one).
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is a stoppable one-shot timer of a Clock.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

type realClock struct{}

type realTimer struct{ t *time.Timer }

func (realClock) Now() time.Time                 { return time.Now() }
func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }
func (t realTimer) C() <-chan time.Time          { return t.t.C }
func (t realTimer) Stop() bool                   { return t.t.Stop() }

// tracker is the careful client's bookkeeping of one hold (lock.proto,
// "A frozen replica..."): it counts on the hold until (time received +
// safe_for) of the latest ACQUIRED or STILL_HELD; silence past
// refresh_within makes it SUSPENDED, and LOST (REFRESH_OVERDUE) once that
// validity has run out; a STILL_HELD in time again resumes it. A server
// SUSPENDED is trusted for its safe_for (then LOST, SESSION_EXPIRED). It is
// a pure state machine: every method takes the current time.
type tracker struct {
	state         State
	refreshWithin time.Duration // 0: a server without refreshes
	refreshDue    time.Time
	validUntil    time.Time // from ACQUIRED / STILL_HELD
	haveValid     bool
	safeUntil     time.Time // while suspended
	haveSafe      bool
	silent        bool // suspended by the watchdog, not by the server
	ttlUntil      time.Time
	haveTTL       bool // a TTL lease: valid until the last renewal's valid_for
	reason        string
	message       string
}

func (t *tracker) acquired(now time.Time, safeFor, refreshWithin time.Duration) {
	t.state = StateHeld
	if refreshWithin > 0 {
		t.refreshWithin = refreshWithin
		t.refreshDue = now.Add(refreshWithin)
		t.validUntil = now.Add(safeFor)
		t.haveValid = true
	}
}

// stillHeld returns true when it ends a watchdog suspension (resumed).
func (t *tracker) stillHeld(now time.Time, safeFor, refreshWithin time.Duration) bool {
	if (t.state != StateHeld && t.state != StateSuspended) || t.refreshWithin <= 0 {
		return false
	}
	if refreshWithin < time.Millisecond {
		refreshWithin = time.Millisecond
	}
	t.refreshWithin = refreshWithin
	t.refreshDue = now.Add(refreshWithin)
	t.validUntil = now.Add(safeFor)
	t.haveValid = true
	if t.state == StateSuspended && t.silent {
		t.state = StateHeld
		t.silent = false
		t.haveSafe = false
		return true
	}
	return false
}

// suspended (a server SUSPENDED) returns true when the state changed.
func (t *tracker) suspended(now time.Time, safeFor time.Duration) bool {
	changed := t.state == StateHeld
	if changed {
		t.state = StateSuspended
	}
	t.silent = false
	t.safeUntil = now.Add(safeFor)
	t.haveSafe = true
	return changed
}

// resumed (a server RESUMED) returns true when the state changed.
func (t *tracker) resumed(now time.Time, haveStill bool, safeFor, refreshWithin time.Duration) bool {
	changed := t.state == StateSuspended
	if changed {
		t.state = StateHeld
	}
	t.silent = false
	t.haveSafe = false
	if t.refreshWithin > 0 && haveStill {
		if refreshWithin < time.Millisecond {
			refreshWithin = time.Millisecond
		}
		t.refreshWithin = refreshWithin
		t.validUntil = now.Add(safeFor)
		t.haveValid = true
	}
	t.refreshDue = now.Add(t.refreshWithin)
	return changed
}

// renewed records a KeepAlive renewal of a TTL lease.
func (t *tracker) renewed(now time.Time, validFor time.Duration) {
	t.ttlUntil = now.Add(validFor)
	t.haveTTL = true
}

func (t *tracker) lose(reason, message string) bool {
	if t.state == StateLost || t.state == StateReleased {
		return false
	}
	t.state = StateLost
	t.reason, t.message = reason, message
	return true
}

// check runs the watchdog at `now`: it returns the state changes it made
// (SUSPENDED, then possibly LOST) and when it must run next (zero: no
// deadline).
func (t *tracker) check(now time.Time) (changes []State, next time.Time) {
	for {
		switch t.state {
		case StateHeld:
			if t.refreshWithin <= 0 {
				return changes, time.Time{}
			}
			if !now.Before(t.refreshDue) {
				t.state = StateSuspended
				t.silent = true
				t.safeUntil = t.validUntil
				if t.haveTTL && t.ttlUntil.Before(t.safeUntil) {
					t.safeUntil = t.ttlUntil
				}
				t.haveSafe = t.haveValid
				changes = append(changes, StateSuspended)
				continue
			}
			return changes, t.refreshDue
		case StateSuspended:
			deadline := now
			if t.haveSafe {
				deadline = t.safeUntil
			}
			if !now.Before(deadline) {
				if t.silent {
					t.lose("REFRESH_OVERDUE", "no refresh from the replica before the hold's validity ran out")
				} else {
					t.lose("SESSION_EXPIRED", "the replica's safe time ran out before its ZooKeeper connection came back")
				}
				changes = append(changes, StateLost)
				return changes, time.Time{}
			}
			return changes, deadline
		default:
			return changes, time.Time{}
		}
	}
}

// validFor is how long the hold is certainly valid from now.
func (t *tracker) validFor(now time.Time) time.Duration {
	switch t.state {
	case StateHeld, StateSuspended:
	default:
		return 0
	}
	var until time.Time
	have := false
	pick := func(u time.Time) {
		if !have || u.Before(until) {
			until, have = u, true
		}
	}
	if t.haveValid {
		pick(t.validUntil)
	}
	if t.state == StateSuspended && t.haveSafe {
		pick(t.safeUntil)
	}
	if t.haveTTL {
		pick(t.ttlUntil)
	}
	if !have {
		return time.Duration(1<<63 - 1)
	}
	if d := until.Sub(now); d > 0 {
		return d
	}
	return 0
}
