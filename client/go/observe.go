package turnstile

import (
	"context"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "turnstile/client/go/turnstilepb"
)

// LockState is one state of an observed lock (Observe).
type LockState struct {
	Name string
	// Unknown: the replica has no ZooKeeper connection (state UNKNOWN), or
	// the stream to it broke and the library is observing again; Holders
	// is then empty and means nothing.
	Unknown bool
	// Holders in grant order (a mutex: at most one, the leader).
	Holders    []Contender
	Waiters    int64
	MaxHolders int32
	// Sequence of the event on its stream (a gap: states were skipped);
	// it starts again at each re-observe.
	Sequence uint64
	Message  string // why, when Unknown
	// Err ends the channel: the observe failed for good (INVALID_ARGUMENT,
	// PERMISSION_DENIED, an Unimplemented Observe, ...). Nothing follows.
	Err error
}

// reobservable says whether an Observe stream that ended with err is opened
// again: a replica that drains (UNAVAILABLE), is at --max-streams
// (RESOURCE_EXHAUSTED), shuts down (CANCELLED while ours is live), or
// ended the stream without a status (never sent by a replica, but a proxy
// may).
func reobservable(err error) bool {
	if err == nil || err == io.EOF {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted, codes.Canceled:
		return true
	}
	return false
}

// Observe streams the states of the lock `name` (LockService.Observe): the
// current one at once, then one after every change. When the stream fails
// with UNAVAILABLE (the replica drains), RESOURCE_EXHAUSTED or CANCELLED,
// it sends a state with Unknown set and observes again through the
// Client's target (with backoff: 50 ms doubling to 1 s), so a
// multi-replica target reaches another replica. It stops, closing the
// channel, when ctx ends, or after a state carrying Err. The channel is
// unbuffered: a reader that falls behind gets the latest state, not every
// one (the replica skips states for slow readers).
func (c *Client) Observe(ctx context.Context, name string) <-chan LockState {
	out := make(chan LockState)
	go c.observeLoop(ctx, name, out)
	return out
}

func (c *Client) observeLoop(ctx context.Context, name string, out chan<- LockState) {
	defer close(out)
	send := func(s LockState) bool {
		select {
		case out <- s:
			return true
		case <-ctx.Done():
			return false
		}
	}
	o := lockOptions{}
	if err := o.validate(name); err != nil {
		send(LockState{Name: name, Err: err})
		return
	}
	backoff := time.Duration(0)
	unknownSent := false
	for {
		delivered, err := c.observeOnce(ctx, name, func(s LockState) bool {
			unknownSent = s.Unknown
			return send(s)
		})
		if ctx.Err() != nil {
			return
		}
		if !reobservable(err) {
			send(LockState{Name: name, Err: err})
			return
		}
		if !unknownSent {
			msg := "the Observe stream ended; observing again"
			if err != nil && err != io.EOF {
				msg = "the Observe stream ended (" + err.Error() + "); observing again"
			}
			if !send(LockState{Name: name, Unknown: true, Message: msg}) {
				return
			}
			unknownSent = true
		}
		if delivered {
			backoff = 0
		}
		backoff = nextBackoff(backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// observeOnce runs one Observe stream until it ends; delivered says
// whether it gave at least one state.
func (c *Client) observeOnce(ctx context.Context, name string, send func(LockState) bool) (delivered bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.stub.Observe(sctx, &pb.ObserveRequest{Name: name})
	if err != nil {
		return false, err
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			return delivered, err
		}
		s := LockState{Name: ev.Name, Sequence: ev.Sequence, Waiters: ev.Waiters,
			MaxHolders: ev.MaxHolders, Message: ev.Message}
		if s.Name == "" {
			s.Name = name
		}
		switch ev.State {
		case pb.ObserveEvent_CURRENT:
			for _, h := range ev.Holders {
				s.Holders = append(s.Holders, contender(h))
			}
		case pb.ObserveEvent_UNKNOWN:
			s.Unknown = true
		default:
			continue // a state this library does not know: ignored
		}
		delivered = true
		if !send(s) {
			return delivered, ctx.Err()
		}
	}
}

// validMetadata checks AcquireOpen.metadata's limits (which Proclaim
// shares) before a call.
func validMetadata(md map[string]string) error {
	o := lockOptions{metadata: md}
	return o.validate("-")
}

// Proclaim replaces the metadata of a hold, by lease id and fencing token,
// without giving up the hold (LockService.Proclaim). Codes:
// INVALID_ARGUMENT (bad lease id, token 0, metadata beyond the limits:
// checked here before any call), NOT_FOUND (the lease is gone),
// FAILED_PRECONDITION (the token is not this lease's: a stale token),
// PERMISSION_DENIED. Retried on UNAVAILABLE (it is idempotent).
func (c *Client) Proclaim(ctx context.Context, leaseID string, fencingToken uint64, metadata map[string]string) error {
	if leaseID == "" {
		return invalid("lease_id: empty")
	}
	if fencingToken == 0 {
		return invalid("fencing_token: 0")
	}
	if err := validMetadata(metadata); err != nil {
		return err
	}
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	return c.retryUnary(ctx, func(ctx context.Context) error {
		_, err := c.stub.Proclaim(ctx, &pb.ProclaimRequest{LeaseId: leaseID, FencingToken: fencingToken, Metadata: metadata})
		return err
	})
}
