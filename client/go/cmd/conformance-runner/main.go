// Command conformance-runner drives the Go client library for the
// cross-language conformance suite (issue 22): JSON commands on stdin, JSON
// events on stdout, as tests/conformance/README.md describes.
//
//	conformance-runner --server TARGET --owner NAME
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/status"

	turnstile "turnstile/client/go"
)

var outMu sync.Mutex

func say(obj map[string]interface{}) {
	b, err := json.Marshal(obj)
	if err != nil {
		b = []byte(fmt.Sprintf(`{"event":"error","code":"INTERNAL","message":%q}`, err.Error()))
	}
	outMu.Lock()
	os.Stdout.Write(append(b, '\n'))
	outMu.Unlock()
}

func codeName(err error) string {
	// codes.Code's String is "FailedPrecondition"; the suite wants the
	// canonical name.
	return canonical[status.Code(err)]
}

type hold struct {
	mu        sync.Mutex
	h         *turnstile.Hold
	announced bool
	pending   []map[string]interface{}
}

// emit writes an event of a hold after its "acquired" line.
func (x *hold) emit(ev map[string]interface{}) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.announced {
		x.pending = append(x.pending, ev)
		return
	}
	say(ev)
}

type runner struct {
	c     *turnstile.Client
	owner string
	mu    sync.Mutex
	holds map[string]*hold
	wg    sync.WaitGroup
}

type command struct {
	Cmd           string            `json:"cmd"`
	Hold          string            `json:"hold"`
	Lock          *string           `json:"lock"`
	WaitMs        *int64            `json:"wait_ms"`
	TTLMs         int64             `json:"ttl_ms"`
	Owner         *string           `json:"owner"`
	Kind          string            `json:"kind"`
	MaxHolders    int32             `json:"max_holders"`
	LockDelayMs   int64             `json:"lock_delay_ms"`
	RevokeHolders bool              `json:"revoke_holders"`
	RevokeReason  string            `json:"revoke_reason"`
	Metadata      map[string]string `json:"metadata"`
	Req           interface{}       `json:"req"`
	Prefix        string            `json:"prefix"`
	LeaseID       string            `json:"lease_id"`
	Reason        string            `json:"reason"`
	Token         uint64            `json:"token"`
	Stale         bool              `json:"stale"`
}

func (r *runner) acquire(cmd command) {
	name := cmd.Hold
	x := &hold{}
	wait := int64(10000)
	if cmd.WaitMs != nil {
		wait = *cmd.WaitMs
	}
	lock := ""
	if cmd.Lock != nil {
		lock = *cmd.Lock
	}
	opts := []turnstile.LockOption{
		turnstile.WithWaitTimeout(time.Duration(wait) * time.Millisecond),
		turnstile.WithTTL(time.Duration(cmd.TTLMs) * time.Millisecond),
		turnstile.WithLockDelay(time.Duration(cmd.LockDelayMs) * time.Millisecond),
		turnstile.OnQueued(func(pos int64) {
			say(map[string]interface{}{"hold": name, "event": "queued", "position": pos})
		}),
		turnstile.OnRevoke(func(requester, reason string) {
			x.emit(map[string]interface{}{"hold": name, "event": "revoke_requested",
				"requester": requester, "reason": reason})
		}),
		turnstile.OnStateChange(func(ch turnstile.StateChange) {
			switch ch.State {
			case turnstile.StateSuspended:
				x.emit(map[string]interface{}{"hold": name, "event": "suspended"})
			case turnstile.StateHeld:
				x.emit(map[string]interface{}{"hold": name, "event": "resumed"})
			case turnstile.StateLost:
				x.emit(map[string]interface{}{"hold": name, "event": "lost", "reason": ch.Reason,
					"message": ch.Message})
			case turnstile.StateReleased:
				x.emit(map[string]interface{}{"hold": name, "event": "released"})
			}
		}),
	}
	if cmd.Owner != nil {
		opts = append(opts, turnstile.WithOwner(*cmd.Owner))
	}
	switch cmd.Kind {
	case "shared":
		opts = append(opts, turnstile.Shared())
	case "semaphore":
		opts = append(opts, turnstile.Semaphore(cmd.MaxHolders))
	}
	if cmd.RevokeHolders {
		opts = append(opts, turnstile.WithRevokeHolders(cmd.RevokeReason))
	}
	if cmd.Metadata != nil {
		opts = append(opts, turnstile.WithMetadata(cmd.Metadata))
	}
	h, err := r.c.Lock(context.Background(), lock, opts...)
	if err != nil {
		say(map[string]interface{}{"hold": name, "event": "error", "code": codeName(err),
			"message": err.Error()})
		return
	}
	x.h = h
	r.mu.Lock()
	r.holds[name] = x
	r.mu.Unlock()
	x.mu.Lock()
	say(map[string]interface{}{"hold": name, "event": "acquired", "token": h.FencingToken(),
		"lease_id": h.LeaseID()})
	for _, ev := range x.pending {
		say(ev)
	}
	x.pending = nil
	x.announced = true
	x.mu.Unlock()
}

func (r *runner) release(cmd command) {
	r.mu.Lock()
	x := r.holds[cmd.Hold]
	r.mu.Unlock()
	if x == nil {
		say(map[string]interface{}{"hold": cmd.Hold, "event": "error", "code": "NOT_HELD",
			"message": "release of a hold this client does not have"})
		return
	}
	// The state callback reports RELEASED (or LOST).
	_ = x.h.Unlock(context.Background())
}

func (r *runner) unary(cmd command) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fail := func(err error) {
		say(map[string]interface{}{"req": cmd.Req, "error": codeName(err), "message": err.Error()})
	}
	switch cmd.Cmd {
	case "describe":
		lock := ""
		if cmd.Lock != nil {
			lock = *cmd.Lock
		}
		d, err := r.c.Describe(ctx, lock)
		if err != nil {
			fail(err)
			return
		}
		if d == nil { // a free lock: the protocol's reply for it, as every runner's
			say(map[string]interface{}{"req": cmd.Req, "error": "NOT_FOUND"})
			return
		}
		holders, waiters, identities := []string{}, []string{}, []string{}
		for _, c := range d.Holders {
			holders = append(holders, c.Owner)
			identities = append(identities, c.Identity)
		}
		for _, c := range d.Waiters {
			waiters = append(waiters, c.Owner)
		}
		say(map[string]interface{}{"req": cmd.Req, "holders": holders, "waiters": waiters,
			"holder_identities": identities, "max_holders": d.MaxHolders})
	case "list":
		names, _, err := r.c.List(ctx, cmd.Prefix, 0)
		if err != nil {
			fail(err)
			return
		}
		if names == nil {
			names = []string{}
		}
		say(map[string]interface{}{"req": cmd.Req, "names": names})
	case "revoke":
		if err := r.c.Revoke(ctx, cmd.LeaseID, r.owner, cmd.Reason); err != nil {
			fail(err)
			return
		}
		say(map[string]interface{}{"req": cmd.Req, "ok": true})
	case "check":
		lock := ""
		if cmd.Lock != nil {
			lock = *cmd.Lock
		}
		var opts []turnstile.CheckOption
		if cmd.Stale {
			opts = append(opts, turnstile.AllowStale())
		}
		res, err := r.c.CheckToken(ctx, lock, cmd.Token, opts...)
		if err != nil {
			fail(err)
			return
		}
		say(map[string]interface{}{"req": cmd.Req, "verdict": res.Verdict.String(),
			"highest_holder_token": res.HighestHolderToken, "linearizable": res.Linearizable})
	}
}

func main() {
	server := flag.String("server", "", "turnstile target")
	owner := flag.String("owner", "", "owner (also the requester of revokes)")
	flag.Parse()
	if *server == "" {
		fmt.Fprintln(os.Stderr, "usage: conformance-runner --server TARGET --owner NAME")
		os.Exit(2)
	}
	c, err := turnstile.New(*server, turnstile.WithDefaultOwner(*owner))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	r := &runner{c: c, owner: *owner, holds: map[string]*hold{}}
	say(map[string]interface{}{"event": "ready", "lang": "go"})
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for in.Scan() {
		line := in.Bytes()
		if len(line) == 0 {
			continue
		}
		var cmd command
		if err := json.Unmarshal(line, &cmd); err != nil {
			say(map[string]interface{}{"event": "error", "code": "BAD_COMMAND", "message": string(line)})
			continue
		}
		if cmd.Cmd == "quit" {
			break
		}
		switch cmd.Cmd {
		case "acquire":
			go r.acquire(cmd)
		case "release":
			go r.release(cmd)
		case "describe", "list", "revoke", "check":
			go r.unary(cmd)
		default:
			say(map[string]interface{}{"event": "error", "code": "UNKNOWN_COMMAND", "message": string(line)})
		}
	}
	r.mu.Lock()
	var holds []*turnstile.Hold
	for _, x := range r.holds {
		holds = append(holds, x.h)
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, h := range holds {
		wg.Add(1)
		go func(h *turnstile.Hold) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = h.Unlock(ctx)
		}(h)
	}
	wg.Wait()
	c.Close()
	os.Exit(0)
}
