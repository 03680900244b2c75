package guard

import (
	"container/heap"
	"sync"
	"time"
)

// MaxRetrySpread bounds the window Spread draws a refused caller's
// RetryInfo from, however many wait.
const MaxRetrySpread = time.Minute

// Spread is the RetryInfo delay of a caller refused with base when waiting
// callers refused alike are already waiting out theirs: base plus u (a
// uniform draw in [0, 1), passed in so that the caller picks the source
// and tests pick the values) of a window of spacing for each of them and
// this one, at most MaxRetrySpread. With the same delay for all, callers
// that obey it come back together, one of them succeeds and the others are
// refused again: a stampede. Spread over the window they come back about
// as fast as the limit admits them.
func Spread(base, spacing time.Duration, waiting int, u float64) time.Duration {
	if spacing <= 0 {
		return base
	}
	window := MaxRetrySpread
	if n := time.Duration(max(waiting, 0) + 1); spacing < MaxRetrySpread/n {
		window = spacing * n
	}
	return base + time.Duration(min(max(u, 0), 1)*float64(window))
}

// Waiting knows, for each reason and key, when each caller it refused was
// told to come back: those whose time has not come yet are the ones that
// wait. It keeps one time per waiting caller, at most maxWaiting per reason
// and key (past it, the count stays there). Its methods are safe for
// concurrent use.
type Waiting struct {
	mu    sync.Mutex
	until map[waitKey]*waitTimes
}

// maxWaiting bounds the times Waiting keeps for one reason and key.
const maxWaiting = 1 << 16

type waitKey struct{ reason, key string }

// NewWaiting returns an empty Waiting.
func NewWaiting() *Waiting { return &Waiting{until: map[waitKey]*waitTimes{}} }

// Spread sets r's RetryAfter, for a refusal at now, to Spread of it by its
// spacing, the callers refused alike still waiting and u; and counts r's
// caller among those waiting until then.
func (w *Waiting) Spread(r *Refusal, now time.Time, u float64) {
	if r.Spacing <= 0 {
		return
	}
	k := waitKey{r.Reason, r.Key}
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.until[k]
	if q == nil {
		q = &waitTimes{}
		w.until[k] = q
	}
	for q.Len() > 0 && (*q)[0] <= now.UnixNano() {
		heap.Pop(q) // came back: no longer waiting
	}
	r.RetryAfter = Spread(r.RetryAfter, r.Spacing, q.Len(), u)
	if q.Len() < maxWaiting {
		heap.Push(q, now.Add(r.RetryAfter).UnixNano())
	}
}

// waitTimes is a min-heap of the times, in Unix nanoseconds, refused
// callers were told to come back.
type waitTimes []int64

func (q waitTimes) Len() int           { return len(q) }
func (q waitTimes) Less(i, j int) bool { return q[i] < q[j] }
func (q waitTimes) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *waitTimes) Push(x any)        { *q = append(*q, x.(int64)) }
func (q *waitTimes) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}
