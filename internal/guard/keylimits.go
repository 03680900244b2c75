package guard

import (
	"sync"
	"time"

	"github.com/completiond/completiond/config"
	"golang.org/x/time/rate"
)

// KeyLimits are the concurrency and rate limits of each authenticated key.
// With Config.Redis they hold across the fleet (limits_shared.go), and fall
// back to this replica's own counts while Redis cannot answer.
type KeyLimits struct {
	l   config.Limits
	now func() time.Time

	mu   sync.Mutex
	keys map[string]*keyLimit // by caller name; as many as there are keys

	// shared, with Config.Redis, are the per-key limits of the fleet; the
	// local ones answer whenever Redis cannot.
	shared *sharedLimits
}

// keyLimit is the state of one key.
type keyLimit struct {
	running int
	rate    *rate.Limiter
}

// NewKeyLimits returns the per-key limits of l, shared through shared when
// it is not nil.
func NewKeyLimits(l config.Limits, now func() time.Time, shared *sharedLimits) *KeyLimits {
	return &KeyLimits{l: l, now: now, keys: map[string]*keyLimit{}, shared: shared}
}

// On reports whether any per-key limit is set.
func (k *KeyLimits) On() bool { return k.l.KeyMaxConcurrent > 0 || k.l.KeyRate > 0 }

// Admit counts one more completion of key, or refuses it with a *Refusal.
// An admitted completion calls release when it ends.
func (k *KeyLimits) Admit(key string) (release func(), err error) {
	if k.shared != nil && k.shared.g.usable() {
		release, shared, err := k.shared.Admit(key, k.l)
		if shared {
			return release, err
		}
	}
	if err := k.admitKey(key); err != nil {
		return nil, err
	}
	return func() {
		k.mu.Lock()
		k.keys[key].running--
		k.mu.Unlock()
	}, nil
}

// admitKey counts one more completion of key locally, or refuses it.
func (k *KeyLimits) admitKey(key string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	kl := k.keys[key]
	if kl == nil {
		kl = &keyLimit{rate: rate.NewLimiter(rate.Inf, 0)}
		if k.l.KeyRate > 0 {
			kl.rate = rate.NewLimiter(rate.Limit(k.l.KeyRate), max(k.l.KeyBurst, 1))
		}
		k.keys[key] = kl
	}
	if k.l.KeyMaxConcurrent > 0 && kl.running >= k.l.KeyMaxConcurrent {
		return concurrencyRefusal(key, kl.running)
	}
	now := k.now()
	r := kl.rate.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return rateRefusal(key, k.l.KeyRate, d)
	}
	kl.running++
	return nil
}
