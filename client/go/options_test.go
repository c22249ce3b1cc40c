package turnstile

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestOptionValidation(t *testing.T) {
	ok := func(opts ...LockOption) *lockOptions {
		o := &lockOptions{}
		for _, f := range opts {
			f(o)
		}
		return o
	}
	cases := []struct {
		name string
		lock string
		o    *lockOptions
		want string // "" = valid, else a substring of the message
	}{
		{"plain", "L", ok(), ""},
		{"empty name", "", ok(), "name"},
		{"long name", strings.Repeat("x", 257), ok(), "name"},
		{"256-byte name", strings.Repeat("x", 256), ok(), ""},
		{"control char", "a\nb", ok(), "control"},
		{"C1 control", "a\u0085b", ok(), "control"},
		{"bad utf8", "a\xffb", ok(), "UTF-8"},
		{"slash is fine", "/", ok(), ""},
		{"negative wait", "L", ok(WithWaitTimeout(-time.Second)), "wait_timeout"},
		{"try once", "L", ok(TryOnce()), ""},
		{"short ttl", "L", ok(WithTTL(100 * time.Millisecond)), "ttl"},
		{"ttl", "L", ok(WithTTL(time.Second)), ""},
		{"long owner", "L", ok(WithOwner(strings.Repeat("o", 129))), "owner"},
		{"metadata key", "L", ok(WithMetadata(map[string]string{"": "v"})), "metadata"},
		{"metadata value", "L", ok(WithMetadata(map[string]string{"k": strings.Repeat("v", 257)})), "metadata"},
		{"lock delay", "L", ok(WithLockDelay(61 * time.Second)), "lock_delay"},
		{"semaphore", "L", ok(Semaphore(3)), ""},
		{"semaphore without N", "L", ok(WithKind(KindSemaphore)), "max_holders"},
		{"N without semaphore", "L", ok(WithMaxHolders(2)), "max_holders"},
		{"shared with N", "L", ok(Shared(), WithMaxHolders(2)), "max_holders"},
		{"semaphore lock delay", "L", ok(Semaphore(2), WithLockDelay(time.Second)), "lock_delay"},
		{"semaphore revoke", "L", ok(Semaphore(2), WithRevokeHolders("x")), "revoke_holders"},
		{"revoke reason", "L", ok(WithRevokeHolders(strings.Repeat("r", 257))), "revoke_reason"},
		// Limits that are replica flags are the replica's to check.
		{"huge semaphore", "L", ok(Semaphore(100000)), ""},
		{"long wait", "L", ok(WithWaitTimeout(48 * time.Hour)), ""},
	}
	for _, c := range cases {
		err := c.o.validate(c.lock)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v (code %v), want INVALID_ARGUMENT naming %q", c.name, err, status.Code(err), c.want)
		}
	}
	if len(ok(WithMetadata(map[string]string{"a": "1"})).metadata) != 1 {
		t.Error("metadata not copied")
	}
	many := map[string]string{}
	for i := 0; i < 17; i++ {
		many[strings.Repeat("k", i+1)] = ""
	}
	if err := ok(WithMetadata(many)).validate("L"); status.Code(err) != codes.InvalidArgument {
		t.Errorf("17 metadata entries: %v", err)
	}
}

func TestRetryBackoff(t *testing.T) {
	want := []time.Duration{50, 100, 200, 400, 800, 1000, 1000}
	d := time.Duration(0)
	for i, w := range want {
		d = nextBackoff(d)
		if d != w*time.Millisecond {
			t.Fatalf("step %d: %v, want %v", i, d, w*time.Millisecond)
		}
	}
}

func TestRetryable(t *testing.T) {
	for code, want := range map[codes.Code]bool{
		codes.Unavailable: true, codes.Canceled: true, codes.FailedPrecondition: false,
		codes.DeadlineExceeded: false, codes.InvalidArgument: false, codes.ResourceExhausted: false,
	} {
		if got := retryable(status.Error(code, "x")); got != want {
			t.Errorf("%v: retryable %v, want %v", code, got, want)
		}
	}
}

func TestLostErrorCarriesACode(t *testing.T) {
	var err error = &LostError{Reason: "DELETED", Message: "released by lease id"}
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "DELETED") {
		t.Fatalf("%v: code %v", err, status.Code(err))
	}
}

func TestStaticTargets(t *testing.T) {
	got := staticAddresses("ipv4:127.0.0.1:1,127.0.0.1:2")
	if len(got) != 2 || got[0] != "127.0.0.1:1" || got[1] != "127.0.0.1:2" {
		t.Fatalf("ipv4 list: %v", got)
	}
	if got := staticAddresses("ipv6:[::1]:7400"); len(got) != 1 || got[0] != "[::1]:7400" {
		t.Fatalf("ipv6: %v", got)
	}
	if staticAddresses("127.0.0.1:7400") != nil || staticAddresses("dns:///x:1") != nil {
		t.Fatal("a plain target is not a static list")
	}
}

func TestTLSFromEnv(t *testing.T) {
	t.Setenv("TURNSTILE_TLS_CA_FILE", "")
	t.Setenv("TURNSTILE_TLS_CERT_FILE", "")
	t.Setenv("TURNSTILE_TLS_KEY_FILE", "")
	if TLSFromEnv() != nil {
		t.Fatal("TLS without variables")
	}
	t.Setenv("TURNSTILE_TLS_CERT_FILE", "/c.pem")
	if _, err := New("127.0.0.1:1"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a certificate without key: %v", err)
	}
	t.Setenv("TURNSTILE_TLS_KEY_FILE", "/k.pem")
	if _, err := New("127.0.0.1:1"); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "CA") {
		t.Fatalf("a client certificate without CA: %v", err)
	}
	t.Setenv("TURNSTILE_TLS_CA_FILE", "/nonexistent/ca.pem")
	if _, err := New("127.0.0.1:1"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a missing CA file: %v", err)
	}
}

func TestLockWithoutServer(t *testing.T) {
	// Nothing listens on port 1: every attempt fails UNAVAILABLE.
	c, err := New("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Lock(ctx, "", TryOnce()); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty name: %v", err)
	}
	start := time.Now()
	if _, err := c.Lock(ctx, "L", TryOnce()); status.Code(err) != codes.Unavailable {
		t.Fatalf("try-once: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("try-once took %v (retried?)", d)
	}
	// A wait retries UNAVAILABLE with backoff until its wait timeout.
	start = time.Now()
	if _, err := c.Lock(ctx, "L", WithWaitTimeout(400*time.Millisecond)); status.Code(err) != codes.Unavailable {
		t.Fatalf("wait: %v", err)
	}
	if d := time.Since(start); d < 140*time.Millisecond || d > 5*time.Second {
		t.Fatalf("retrying for a 400ms wait took %v", d)
	}
	// The caller's context ends the retries.
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = c.Lock(cctx, "L", WithWaitTimeout(time.Minute))
	if code := status.Code(err); code != codes.DeadlineExceeded && code != codes.Unavailable {
		t.Fatalf("ctx deadline: %v", err)
	}
	if _, err := New("127.0.0.1:1", WithTLSFiles(TLSFiles{})); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("TLS without a CA file: %v", err)
	}
}
