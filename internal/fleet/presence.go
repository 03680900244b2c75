package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"
)

// Presence keeps a replica's process known to the fleet for as long as it
// runs: a lease named after the process (PresenceID), which it takes and
// renews as an owner renews a completion's. A completion without a resume
// grace has no lease of its own and is never taken over; its log names the
// process that runs it (Meta.Instance), so that a follower on another
// replica can tell, by this lease lapsing, that the completion ended with
// its process instead of waiting on a log that looks live until LiveTTL.
//
// One lease per process, not per completion: its cost does not grow with
// the completions it runs. A store that does not answer is retried at each
// renewal; a lease that lapsed meanwhile is taken again (Leases.Renew).
type Presence struct {
	leases   Leases
	instance string

	mu     sync.Mutex
	lease  Lease
	held   bool
	halted bool

	stop chan struct{}
	done chan struct{}
}

// NewInstance is a name for this process, unique in the fleet: the
// replica's name (which a restarted process may reuse) and a random part.
func NewInstance(replica string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return replica + "/" + hex.EncodeToString(b[:])
}

// PresenceID is the id whose lease says that process instance runs.
func PresenceID(instance string) string { return "process:" + instance }

// NewPresence starts keeping instance present in leases, until Close.
func NewPresence(leases Leases, instance string) *Presence {
	p := &Presence{leases: leases, instance: instance, stop: make(chan struct{}), done: make(chan struct{})}
	p.keep() // at once, so that a completion started now is covered
	go p.run()
	return p
}

// Instance is the name of the process the presence keeps.
func (p *Presence) Instance() string { return p.instance }

func (p *Presence) run() {
	defer close(p.done)
	t := time.NewTicker(TimingOf(p.leases).RenewEvery())
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.keep()
		}
	}
}

// keep takes the presence's lease, or renews it.
func (p *Presence) keep() {
	p.mu.Lock()
	l, held, halted := p.lease, p.held, p.halted
	p.mu.Unlock()
	if halted {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), TimingOf(p.leases).StoreCall())
	defer cancel()
	if held {
		if err := p.leases.Renew(ctx, l); errors.Is(err, errLeaseLost) {
			held = false // taken again at the next tick
		}
	} else if nl, err := p.leases.Acquire(ctx, PresenceID(p.instance), p.instance); err == nil {
		l, held = nl, true
	}
	p.mu.Lock()
	p.lease, p.held = l, held
	p.mu.Unlock()
}

// Halt stops renewing without releasing, as the death of the process
// would (in-process tests kill a replica with it).
func (p *Presence) Halt() {
	p.mu.Lock()
	p.halted = true
	p.mu.Unlock()
}

// Close stops renewing and releases the lease: the process is gone.
func (p *Presence) Close() {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	l, held, halted := p.lease, p.held, p.halted
	p.mu.Unlock()
	if held && !halted {
		ctx, cancel := context.WithTimeout(context.Background(), TimingOf(p.leases).StoreCall())
		defer cancel()
		_ = p.leases.Release(ctx, l)
	}
}

// Present reports whether process instance runs, as far as leases know:
// false once its presence lapsed (it died, or was cut from the store for a
// lease's length); the error of a store that does not answer.
func Present(ctx context.Context, leases Leases, instance string) (bool, error) {
	_, held, err := leases.Holder(ctx, PresenceID(instance))
	return held, err
}
