package service

import (
	"errors"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// Errors of an EventLog's Read.
var (
	// errLogNotFound: no log for this completion (never opened, expired or evicted).
	errLogNotFound = errors.New("no such completion")
	// errLogOutOfRange: after_seq is beyond the last event of an ended log,
	// or before the first event the log still keeps.
	errLogOutOfRange = errors.New("seq out of range")
)

// EventLog keeps the events of every completion, keyed by completion id,
// from started to the result, so that a caller may attach to a completion
// and receive what it missed (Attach). It is narrow so that a shared store
// (Redis Streams) can implement it: open, append, read after a seq (which
// also gives the way to follow), expire. Implementations are safe for
// concurrent use.
type EventLog interface {
	// Open starts the log of completion id, started by the caller named
	// owner ("" when authentication is off).
	Open(id, owner string)
	// Append adds ev, already numbered, to the log of id. The result event
	// ends the log: its retention starts.
	Append(id string, ev *completionv1.CompletionEvent)
	// Read returns the events of id with a seq above after. Following is
	// reading again once the page's More channel is closed.
	Read(id string, after uint64) (LogPage, error)
	// Expire drops the ended logs whose retention has passed by now.
	Expire(now time.Time)
}

// LogPage is one Read of an EventLog.
type LogPage struct {
	// Events are the events after the seq asked for, in seq order.
	Events []*completionv1.CompletionEvent
	// Owner is the name of the caller that started the completion.
	Owner string
	// Ended is set once the result is in the log: Events then end with it.
	Ended bool
	// More is closed when the log changes after this read (an event is
	// appended, or the log is dropped). Followers wait on it: one channel
	// per log, replaced on each append, and no goroutine per follower.
	More <-chan struct{}
}

// EventLogLimits bound the in-memory event log.
type EventLogLimits struct {
	// MaxEvents bounds the events kept per completion (default 10 000);
	// past it the oldest events are dropped, and an attach that would need
	// them is OUT_OF_RANGE.
	MaxEvents int
	// MaxCompletions bounds the completions kept (default 1 000).
	MaxCompletions int
	// MaxBytes bounds the encoded size of all events kept (default 256 MiB).
	MaxBytes int64
	// Retention is how long a completion's log is kept after its result
	// (default 5 min).
	Retention time.Duration
}

// DefaultEventLogLimits returns the limits used when the configuration sets none.
func DefaultEventLogLimits() EventLogLimits {
	return EventLogLimits{MaxEvents: 10_000, MaxCompletions: 1_000, MaxBytes: 256 << 20, Retention: 5 * time.Minute}
}

func (l *EventLogLimits) fillDefaults() {
	d := DefaultEventLogLimits()
	if l.MaxEvents <= 0 {
		l.MaxEvents = d.MaxEvents
	}
	if l.MaxCompletions <= 0 {
		l.MaxCompletions = d.MaxCompletions
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = d.MaxBytes
	}
	if l.Retention <= 0 {
		l.Retention = d.Retention
	}
}

// memLog is the embedded EventLog: everything in this process's memory.
// Bounds evict the ended logs that ended first; a live log is never
// evicted (one over its own bounds drops its oldest events instead).
type memLog struct {
	limits EventLogLimits
	now    func() time.Time

	mu    sync.Mutex
	logs  map[string]*completionLog
	ended []*completionLog // in the order they ended
	bytes int64
}

type completionLog struct {
	id     string
	owner  string
	events []*completionv1.CompletionEvent
	sizes  []int64
	bytes  int64
	ended  time.Time // zero while live
	more   chan struct{}
}

// newMemLog returns an in-memory EventLog with limits (zero fields take
// their defaults) reading the time from now.
func newMemLog(limits EventLogLimits, now func() time.Time) *memLog {
	limits.fillDefaults()
	return &memLog{limits: limits, now: now, logs: map[string]*completionLog{}}
}

// Open implements EventLog. When MaxCompletions live logs exist already,
// the completion is not logged (and cannot be attached to).
func (m *memLog) Open(id, owner string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire(m.now())
	if _, ok := m.logs[id]; ok {
		return
	}
	for len(m.logs) >= m.limits.MaxCompletions && len(m.ended) > 0 {
		m.drop(m.ended[0])
	}
	if len(m.logs) >= m.limits.MaxCompletions {
		return
	}
	m.logs[id] = &completionLog{id: id, owner: owner, more: make(chan struct{})}
}

// Append implements EventLog.
func (m *memLog) Append(id string, ev *completionv1.CompletionEvent) {
	size := int64(proto.Size(ev))
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.logs[id]
	if !ok || !l.ended.IsZero() {
		return
	}
	l.events = append(l.events, ev)
	l.sizes = append(l.sizes, size)
	l.bytes += size
	m.bytes += size
	for m.bytes > m.limits.MaxBytes && len(m.ended) > 0 {
		m.drop(m.ended[0])
	}
	for len(l.events) > 1 && (len(l.events) > m.limits.MaxEvents || m.bytes > m.limits.MaxBytes) {
		l.bytes -= l.sizes[0]
		m.bytes -= l.sizes[0]
		l.events, l.sizes = l.events[1:], l.sizes[1:]
	}
	if ev.GetResult() != nil {
		l.ended = m.now()
		m.ended = append(m.ended, l)
	}
	close(l.more)
	l.more = make(chan struct{})
}

// Read implements EventLog.
func (m *memLog) Read(id string, after uint64) (LogPage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire(m.now())
	l, ok := m.logs[id]
	if !ok {
		return LogPage{}, errLogNotFound
	}
	page := LogPage{Owner: l.owner, Ended: !l.ended.IsZero(), More: l.more}
	first, last := uint64(1), uint64(0)
	if len(l.events) > 0 {
		first, last = l.events[0].GetSeq(), l.events[len(l.events)-1].GetSeq()
	}
	if after+1 < first || after > last {
		return LogPage{}, errLogOutOfRange
	}
	if after < last {
		i := int(after + 1 - first)
		page.Events = append([]*completionv1.CompletionEvent(nil), l.events[i:]...)
	}
	return page, nil
}

// Expire implements EventLog.
func (m *memLog) Expire(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire(now)
}

func (m *memLog) expire(now time.Time) {
	for len(m.ended) > 0 && now.Sub(m.ended[0].ended) >= m.limits.Retention {
		m.drop(m.ended[0])
	}
}

// drop removes an ended log and wakes its followers.
func (m *memLog) drop(l *completionLog) {
	delete(m.logs, l.id)
	for i, e := range m.ended {
		if e == l {
			m.ended = append(m.ended[:i:i], m.ended[i+1:]...)
			break
		}
	}
	m.bytes -= l.bytes
	close(l.more)
}
