package turnstile

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestCheckTokenAgainstFakeReplica(t *testing.T) {
	t.Setenv("TURNSTILE_TLS_CA_FILE", "")
	f, addr := startFake(t, nil)
	c, err := New(addr, WithCallTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		token uint64
		want  TokenVerdict
	}{{7, TokenCurrent}, {5, TokenSuperseded}, {9, TokenWaiting}} {
		r, err := c.CheckToken(ctx, "L", tc.token)
		if err != nil || r.Verdict != tc.want || r.HighestHolderToken != 7 || !r.Linearizable {
			t.Fatalf("check %d: %+v %v, want %v", tc.token, r, err, tc.want)
		}
	}
	r, err := c.CheckToken(ctx, "L", 7, AllowStale())
	if err != nil || r.Verdict != TokenCurrent || r.Linearizable {
		t.Fatalf("stale check: %+v %v", r, err)
	}
	f.mu.Lock()
	last := f.checks[len(f.checks)-1]
	f.mu.Unlock()
	if last.Name != "L" || last.FencingToken != 7 || !last.AllowStale {
		t.Fatalf("request %v", last)
	}
	for _, bad := range []struct {
		name  string
		token uint64
		code  codes.Code
	}{{"L", 0, codes.InvalidArgument}, {"", 7, codes.InvalidArgument},
		{"denied", 7, codes.PermissionDenied}, {"future", 7, codes.Unknown}} {
		if r, err := c.CheckToken(ctx, bad.name, bad.token); status.Code(err) != bad.code || r != nil {
			t.Fatalf("check %q %d: %+v %v, want %v", bad.name, bad.token, r, err, bad.code)
		}
	}
	// UNAVAILABLE is retried within the call's deadline, like Describe.
	r, err = c.CheckToken(ctx, "flaky", 7)
	if err != nil || r.Verdict != TokenCurrent || atomic.LoadInt32(&f.attempts) != 3 {
		t.Fatalf("flaky: %+v %v after %d attempts", r, err, f.attempts)
	}
	if TokenSuperseded.String() != "SUPERSEDED" {
		t.Fatalf("String %q", TokenSuperseded)
	}
}
