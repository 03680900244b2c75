package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// CancelState is what a cancel request found of the completion's log in
// Redis.
type CancelState string

// The states a cancel request answers.
const (
	// CancelLive: the log is live; the completion is marked cancelled and
	// the replicas were told.
	CancelLive CancelState = "live"
	// CancelEnded: the log has ended; nothing was marked.
	CancelEnded CancelState = "ended"
	// CancelMissing: Redis keeps no log of the completion (never shared,
	// dropped, or kept in its replica's memory only while Redis was away);
	// nothing was marked.
	CancelMissing CancelState = "missing"
)

// DefaultCancelMarkTTL is the least a cancel mark lives: the mark of a
// completion whose log has no expiry (it cannot be, but a mark must never
// outlive nothing) lives this long.
const DefaultCancelMarkTTL = time.Hour

// cancelRecheckChunk bounds the ids of one EXISTS a recheck sends.
const cancelRecheckChunk = 256

// RedisCancels carry a Cancel call from the replica it reached to the
// replica that runs the completion, through the Redis the fleet shares.
// A request (lua/cancel.lua) marks the completion cancelled, atomically
// with a look at its log (only a live log is marked), and names it on a
// Pub/Sub channel every replica listens to: the replica that runs it
// hears it and cancels it there, through deliver. The mark
// (keyspace.cancel, in the slot of the completion's other keys)
// lives as long as the log's meta: it is what a replica that takes the
// completion over checks (Requested), so that a cancel whose owner died
// before it heard it still ends the completion, and what this replica
// checks for each completion it runs (watched) whenever its subscription
// is (re)established, since a notice published while it was down is lost.
//
// One subscription per process, as the log's; no goroutine or connection
// per completion. Safe for concurrent use.
type RedisCancels struct {
	rdb redis.UniversalClient
	ks  *keyspace
	// OpTimeout bounds each command.
	OpTimeout time.Duration
	deliver   func(id string)
	watched   func() []string

	ps     *redis.PubSub
	stop   context.CancelFunc // cancels the rechecks under way
	closed chan struct{}
}

// NewRedisCancels returns the cancels of the fleet that shares rdb.
// deliver is called with the id of each completion the fleet asks to end
// (any completion: it ignores those that do not run here); watched lists
// the completions that run here, whose marks are checked when the
// subscription is (re)established. It subscribes at once, awaiting the
// confirmation within OpTimeout, so that a completion that starts once it
// returns hears its cancel; Close ends that.
//
// The subscription is go-redis's channel, which pings Redis while no
// message comes and subscribes again on a connection that broke: each
// subscription (the first included) is a *redis.Subscription message,
// on which the marks are checked.
func NewRedisCancels(rdb redis.UniversalClient, deliver func(id string), watched func() []string) *RedisCancels {
	ctx, cancel := context.WithCancel(context.Background())
	c := &RedisCancels{rdb: rdb, ks: keyspaceOf(rdb), OpTimeout: DefaultRedisOpTimeout, deliver: deliver, watched: watched,
		stop: cancel, closed: make(chan struct{})}
	c.ps = rdb.Subscribe(ctx, redisCancelChannel)
	ch := c.ps.ChannelWithSubscriptions()
	t := time.NewTimer(c.OpTimeout)
	select {
	case msg, ok := <-ch:
		if ok {
			c.handle(ctx, msg)
		}
	case <-t.C: // Redis is away: the channel subscribes once it answers
	}
	t.Stop()
	go c.listen(ctx, ch)
	return c
}

// Close stops listening.
func (c *RedisCancels) Close() {
	c.stop()
	_ = c.ps.Close() // closes the channel
	<-c.closed
}

// Request asks the fleet to cancel completion id (lua/cancel.lua) and
// answers what it found of its log.
func (c *RedisCancels) Request(ctx context.Context, id string) (CancelState, error) {
	ctx, cancel := context.WithTimeout(ctx, c.OpTimeout)
	defer cancel()
	res, err := c.ks.scripts.cancel.Run(ctx, c.rdb, id, id, redisCancelChannel, DefaultCancelMarkTTL.Milliseconds()).Text()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return CancelState(res), nil
}

// Requested reports whether a cancel of completion id was requested and
// its mark still lives.
func (c *RedisCancels) Requested(ctx context.Context, id string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, c.OpTimeout)
	defer cancel()
	n, err := c.rdb.Exists(ctx, c.ks.cancel(id)).Result()
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return n > 0, nil
}

// listen delivers each notice, and rechecks the marks of the completions
// that run here on each (re)subscription, until the channel closes.
func (c *RedisCancels) listen(ctx context.Context, ch <-chan any) {
	defer close(c.closed)
	for msg := range ch {
		c.handle(ctx, msg)
	}
}

// handle acts on one message of the subscription.
func (c *RedisCancels) handle(ctx context.Context, msg any) {
	switch m := msg.(type) {
	case *redis.Message:
		c.deliver(m.Payload)
	case *redis.Subscription:
		c.recheck(ctx)
	}
}

// recheck delivers the completions running here whose mark is set: the
// notices published while the subscription was down are lost, the marks
// are not. A Redis that does not answer is skipped: the next
// resubscription checks again.
func (c *RedisCancels) recheck(ctx context.Context) {
	ids := c.watched()
	for len(ids) > 0 {
		n := min(len(ids), cancelRecheckChunk)
		chunk := ids[:n]
		ids = ids[n:]
		cmds := make([]*redis.IntCmd, len(chunk))
		rctx, cancel := context.WithTimeout(ctx, c.OpTimeout)
		_, err := c.rdb.Pipelined(rctx, func(p redis.Pipeliner) error {
			for i, id := range chunk {
				cmds[i] = p.Exists(rctx, c.ks.cancel(id))
			}
			return nil
		})
		cancel()
		if err != nil && !errors.Is(err, redis.Nil) {
			return
		}
		for i, cmd := range cmds {
			if cmd.Val() > 0 {
				c.deliver(chunk[i])
			}
		}
	}
}
