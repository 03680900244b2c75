package guard

import (
	"container/heap"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/completiond/completiond/config"
)

func TestSpreadGrowsWithTheWaiting(t *testing.T) {
	base, spacing := 50*time.Millisecond, 50*time.Millisecond
	for _, c := range []struct {
		waiting int
		u       float64
		want    time.Duration
	}{
		{0, 0, base},
		{0, 0.5, base + 25*time.Millisecond},
		{9, 0.5, base + 250*time.Millisecond},
		{199, 0.99, base + 9900*time.Millisecond},
		{1 << 30, 0.5, base + MaxRetrySpread/2}, // capped
		{-3, 1.5, base + spacing},               // out-of-range inputs are clamped
	} {
		if got := Spread(base, spacing, c.waiting, c.u); got != c.want {
			t.Errorf("Spread(%v, %v, %d, %g) = %v, want %v", base, spacing, c.waiting, c.u, got, c.want)
		}
	}
	if got := Spread(base, 0, 100, 0.7); got != base {
		t.Errorf("without a spacing, Spread = %v, want the base %v", got, base)
	}
}

// TestObeyingClientsDoNotStampede: 200 clients of one key, each starting
// completions one after another and obeying every RetryInfo exactly, on a
// simulated clock, against a key rate of 20/s with bursts of 40 (per-key
// limits are opt-in: this is a server that sets them). With one
// delay for all (the next token's), they are refused about 190 times per
// completion; spread by Waiting, a few times at most.
func TestObeyingClientsDoNotStampede(t *testing.T) {
	spread, flat := stampede(t, true), stampede(t, false)
	t.Logf("1000 completions, 200 obeying clients: %d refusals spread, %d with one delay for all", spread, flat)
	if spread > 3*1000 {
		t.Errorf("%d refusals for 1000 completions with spread RetryInfo, want at most 3000", spread)
	}
	if flat < 20*1000 {
		t.Errorf("the simulation does not show the stampede it guards against: %d refusals with one delay for all", flat)
	}
}

// stampede simulates 200 obeying clients until 1000 completions started,
// and returns the refusals they met.
func stampede(t *testing.T, spread bool) (refusals int) {
	t.Helper()
	var now time.Time
	l := config.DefaultLimits()
	l.KeyMaxConcurrent, l.KeyRate, l.KeyBurst = 0, 20, 40
	keys := NewKeyLimits(l, func() time.Time { return now }, nil)
	w, r := NewWaiting(), rand.New(rand.NewPCG(1, 2))
	q := &retries{}
	for range 200 {
		heap.Push(q, time.Duration(0))
	}
	for started := 0; started < 1000; {
		at := heap.Pop(q).(time.Duration)
		now = time.Unix(0, 0).Add(at)
		release, err := keys.Admit("k")
		if err == nil {
			release()
			started++
			heap.Push(q, at) // the next completion, at once
			continue
		}
		refusals++
		ref := err.(*Refusal)
		if spread {
			w.Spread(ref, now, r.Float64())
		}
		heap.Push(q, at+ref.RetryAfter)
	}
	return refusals
}

// retries are the simulated clients' next attempts, soonest first.
type retries []time.Duration

func (q retries) Len() int           { return len(q) }
func (q retries) Less(i, j int) bool { return q[i] < q[j] }
func (q retries) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *retries) Push(x any)        { *q = append(*q, x.(time.Duration)) }
func (q *retries) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}
