// Command example takes a turnstile lock with the Go client, prints its
// fencing token, holds it until the work is done (or the hold is lost) and
// releases it.
//
//	example --server 127.0.0.1:7400 [--ttl 10s] [--hold 2s] my-lock
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc/status"

	turnstile "turnstile/client/go"
)

func main() {
	server := flag.String("server", "127.0.0.1:7400", "turnstile target")
	wait := flag.Duration("wait", 30*time.Second, "how long to wait for the lock (0 = try once)")
	ttl := flag.Duration("ttl", 0, "lease TTL, renewed by the library (0 = while connected)")
	hold := flag.Duration("hold", 2*time.Second, "how long to hold it")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: example [--server T] [--wait D] [--ttl D] [--hold D] LOCK")
		os.Exit(2)
	}
	// TLS: TURNSTILE_TLS_CA_FILE (+ _CERT_FILE, _KEY_FILE), like the CLI.
	c, err := turnstile.New(*server, turnstile.WithDefaultOwner("go-example"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()
	ctx := context.Background()
	h, err := c.Lock(ctx, flag.Arg(0), turnstile.WithWaitTimeout(*wait), turnstile.WithTTL(*ttl),
		turnstile.OnQueued(func(pos int64) { fmt.Println("queued at", pos) }))
	if err != nil {
		fmt.Fprintf(os.Stderr, "lock: %v (code %v)\n", err, status.Code(err))
		os.Exit(1)
	}
	fmt.Printf("held %s: fencing token %d, lease %s\n", flag.Arg(0), h.FencingToken(), h.LeaseID())
	select {
	case <-time.After(*hold): // the work, which passes h.FencingToken() to the resource
	case <-h.Done():
		fmt.Fprintln(os.Stderr, "lost:", h.Lost())
		os.Exit(1)
	}
	if err := h.Unlock(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "unlock:", err)
		os.Exit(1)
	}
	fmt.Println("released")
}
