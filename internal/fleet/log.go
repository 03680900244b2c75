package fleet

import (
	"errors"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// Errors of a Log.
var (
	// ErrNotFound: no log for this completion (never opened, expired or evicted).
	ErrNotFound = errors.New("no such completion")
	// ErrOutOfRange: after_seq is beyond the last event of an ended log,
	// or before the first event the log still keeps.
	ErrOutOfRange = errors.New("seq out of range")
	// ErrFenced: a write refused, since another replica holds the
	// completion's lease (a fenced Log): the event is not in the log, and
	// must not reach a caller either.
	ErrFenced = errors.New("the completion's lease is another replica's")
	// errLogFull: Open found no room for one more live completion.
	errLogFull = errors.New("event log full: too many live completions")
)

// EndWith is the most events a log's end carries before its result
// (Log.End): the finishing step's last, its tool calls and transitions.
const EndWith = 64

// Log keeps the events of every completion, keyed by completion id,
// from started to the result, so that a caller may attach to a completion
// and receive what it missed (Attach, Session resume). It is narrow so that
// a shared store (Redis Streams) can implement it: open with what is known
// of the completion, append, end with the result and the status, read
// after a seq (which also gives the way to follow), expire. Implementations
// are safe for concurrent use.
//
// The status travels with the log's end as the bytes of a google.rpc.Status
// (what a status-details trailer carries), so that every reader ends with
// the status the completion's own stream ended with, whichever process
// serves it: empty bytes are OK.
type Log interface {
	// Open starts the log of completion id. It fails (errLogFull) when the
	// store has no room for it: the completion then runs without a log,
	// unless it needs one to be resumed.
	Open(id string, meta Meta) error
	// Append adds ev, already numbered and not the result, to the log of
	// id. The events of a log are appended in seq order without a gap.
	// When it returns, ev is in the log as far as the log can keep it
	// (a shared store acknowledged it, or the log degraded to memory
	// and says so): the caller may send it. ErrFenced means the log
	// refused it, as another replica owns the completion now: the
	// caller must not send it.
	Append(id string, ev *completionv1.CompletionEvent) error
	// End adds before (the events numbered just before the result,
	// EndWith at most: the finishing step's, its terminal transition
	// among them), the result event and the encoded google.rpc.Status the
	// completion ended with, and ends the log of id: its retention
	// starts. The events go in one
	// write: a shared store holds all of them or none, so that a log
	// never holds a terminal transition without its result (a replica
	// that died between the two would leave a log that looks live, and
	// another would take the finished completion over and run it again).
	// It answers as Append does.
	End(id string, before []*completionv1.CompletionEvent, result *completionv1.CompletionEvent, status []byte) error
	// Read returns the events of id with a seq above after: a page of them
	// at most, whose More is closed already when more are kept. Following
	// is reading again once the page's More channel is closed.
	Read(id string, after uint64) (Page, error)
	// Expire drops the ended logs whose retention has passed by now.
	Expire(now time.Time)

	// The capabilities a fleet's logs have; the in-memory log answers
	// them as a log no other replica reads: it keeps checkpoints for the
	// completions of this process, is never fenced, keeps nothing apart
	// and adopts nothing.

	// SaveCheckpoint replaces the checkpoint of the live log of id with
	// data, taken after the event of seq: what a takeover continues from.
	SaveCheckpoint(id string, seq uint64, data []byte)
	// Checkpoint returns the last checkpoint of id and its seq (nil data
	// when it has none).
	Checkpoint(id string) (seq uint64, data []byte, err error)
	// Fenced reports whether the log's writes can be fenced by leases:
	// a store other replicas share. Fence and Unfence are no-ops where
	// it is not.
	Fenced() bool
	// Fence makes the writes of id happen only while l is its lease,
	// checked by the store atomically with each write; a write refused is
	// dropped. The server calls it once it holds the lease of id (at the
	// start, or at a takeover), and Unfence when it lets the lease go. The
	// owner's own deadline stops it before that in the normal course; the
	// store's check is what holds when the owner's clock or scheduling
	// misleads it (a long pause).
	Fence(id string, l Lease)
	// Unfence ends the fencing of id's writes, and reports whether the
	// fenced write that ended id's log gave its lease up already (the
	// store deleted it with the end), so that its owner need not release
	// it (Ownership.EndReleased).
	Unfence(id string) (released bool)
	// KeptHere reports whether id runs logged in this replica's memory
	// only: its shared log lacks events its callers here may have seen.
	KeptHere(id string) bool
	// Adopt starts logging here completion id, which this replica takes
	// over, with what the shared log kept of it (meta, evs and the
	// checkpoint ck of seq ckSeq, read for the rebuild), so that its
	// writes reach the shared log and its copy here is whole.
	Adopt(id string, meta Meta, evs []*completionv1.CompletionEvent, ckSeq uint64, ck []byte)
}

// Meta is what a log knows of its completion besides its events: what
// Attach and Session resume check before they serve a caller.
type Meta struct {
	// Owner is the name of the caller that started the completion ("" when
	// authentication is off).
	Owner string
	// Resumable is set for a Session started with a resume grace: the only
	// completions a Session resume may take control of.
	Resumable bool
	// Request is the encoded CompleteRequest of a Stream started with a
	// resume grace by a replica of a fleet (Config.Leases), or the encoded
	// SessionStart of such a Session (Resumable): what another replica
	// runs again when it takes the completion over. Empty for the others,
	// which are never taken over.
	Request []byte
	// Replica names the replica that started the completion.
	Replica string
	// Instance names the process that runs the completion (a Presence);
	// empty without leases, and in the logs of older versions. A follower
	// of a completion that is never taken over ends once it is gone.
	Instance string `json:",omitempty"`
}

// Page is one Read of a Log.
type Page struct {
	// Events are the events after the seq asked for, in seq order.
	Events []*completionv1.CompletionEvent
	// Meta is what Open was given.
	Meta Meta
	// Ended is set once the log has ended: the result is in it, last.
	// Events reach it when Done says so.
	Ended bool
	// Status is the encoded google.rpc.Status the completion ended with,
	// when Ended; empty for OK.
	Status []byte
	// Last is the seq of the last event the log keeps, as of this read
	// (0 when it keeps none): a reader that wants the end only (Cancel)
	// reads after it, or after Last-1 for the result of an ended log.
	Last uint64
	// More is closed when the log changes after this read (an event is
	// appended, or the log is dropped), or already when the log keeps more
	// events than the page holds. Followers wait on it: one channel per
	// log, replaced on each append, and no goroutine per follower.
	More <-chan struct{}
}

// Done reports whether the page ends its log: the log has ended and the
// page holds its last event, the result (or nothing is kept after the seq
// read). A follower stops there.
func (p Page) Done() bool {
	return p.Ended && (len(p.Events) == 0 || p.Events[len(p.Events)-1].GetResult() != nil)
}

// logPageSize bounds the events of one Read of the in-memory log, so that
// a follower far behind decodes and sends a page at a time.
const logPageSize = 64

// closed is the More of a page that does not reach the end of its log.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// MemLog is the embedded Log: everything in this process's memory.
// Bounds evict the ended logs that ended first; a live log is never
// evicted (one over its own bounds drops its oldest events instead).
//
// Events are kept encoded: a delta's few bytes rather than the objects
// that were sent (several times the size, see BenchmarkEventLogMemory), so
// that MaxBytes, which counts the encoded size, is close to the memory the
// log takes; a Read decodes its page outside the lock.
type MemLog struct {
	limits config.EventLogLimits
	now    func() time.Time

	mu    sync.Mutex
	logs  map[string]*completionLog
	ended []*completionLog // in the order they ended
	Bytes int64
}

type completionLog struct {
	id     string
	meta   Meta
	events [][]byte // encoded, in seq order from first
	first  uint64   // the seq of events[0]
	bytes  int64
	status []byte    // set by End
	ended  time.Time // zero while live
	// ckpt is the last checkpoint saved (checkpoint.go), taken after the
	// event of ckptSeq; nil when none was.
	ckpt    []byte
	ckptSeq uint64
	// more is the channel of the pages handed out since the last change,
	// made when a page needs it (watched): a log nobody follows, most of
	// them, never has one. The next change closes it to wake the readers,
	// and the next page makes a new one — an event nobody waits for costs
	// no channel.
	more    chan struct{}
	watched bool
}

// NewMemLog returns an in-memory Log with limits (zero fields take
// their defaults) reading the time from now.
func NewMemLog(limits config.EventLogLimits, now func() time.Time) *MemLog {
	limits.FillDefaults()
	return &MemLog{limits: limits, now: now, logs: map[string]*completionLog{}}
}

// Open implements Log. When MaxCompletions live logs exist already,
// the completion is not logged (errLogFull).
func (m *MemLog) Open(id string, meta Meta) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire(m.now())
	if _, ok := m.logs[id]; ok {
		return nil
	}
	for len(m.logs) >= m.limits.MaxCompletions && len(m.ended) > 0 {
		m.drop(m.ended[0])
	}
	if len(m.logs) >= m.limits.MaxCompletions {
		return errLogFull
	}
	m.logs[id] = &completionLog{id: id, meta: meta}
	return nil
}

// Append implements Log: nothing fences it.
func (m *MemLog) Append(id string, ev *completionv1.CompletionEvent) error {
	m.add(id, ev, nil, false)
	return nil
}

// End implements Log: nothing fences it.
func (m *MemLog) End(id string, before []*completionv1.CompletionEvent, result *completionv1.CompletionEvent, status []byte) error {
	for _, ev := range before {
		m.add(id, ev, nil, false)
	}
	m.add(id, result, status, true)
	return nil
}

// add appends ev to the live log of id, within the bounds, and wakes its
// followers; end ends the log with status.
func (m *MemLog) add(id string, ev *completionv1.CompletionEvent, status []byte, end bool) {
	b, err := proto.Marshal(ev)
	if err != nil {
		return // cannot happen: the service builds every event
	}
	m.AddEncoded(id, ev.GetSeq(), b, status, end)
}

// AddEncoded appends (or with end, ends the log with) an event already encoded, b, whose seq is seq. The
// log keeps b: it must not change afterwards.
func (m *MemLog) AddEncoded(id string, seq uint64, b, status []byte, end bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.logs[id]
	if !ok || !l.ended.IsZero() {
		return
	}
	if len(l.events) == 0 {
		l.first = seq
	}
	l.events = append(l.events, b)
	size := int64(len(b) + len(status))
	l.bytes += size
	m.Bytes += size
	for m.Bytes > m.limits.MaxBytes && len(m.ended) > 0 {
		m.drop(m.ended[0])
	}
	for len(l.events) > 1 && (len(l.events) > m.limits.MaxEvents || m.Bytes > m.limits.MaxBytes) {
		l.bytes -= int64(len(l.events[0]))
		m.Bytes -= int64(len(l.events[0]))
		l.events[0] = nil // no longer kept alive by the array
		l.events, l.first = l.events[1:], l.first+1
	}
	if end {
		l.status = status
		l.ended = m.now()
		l.ckpt = nil // nothing is taken over once ended
		m.ended = append(m.ended, l)
	}
	if l.watched {
		close(l.more)
		l.more, l.watched = nil, false
	}
}

// Read implements Log: the page is copied under the lock and decoded
// outside it.
func (m *MemLog) Read(id string, after uint64) (Page, error) {
	page, raw, err := m.read(id, after)
	if err != nil {
		return Page{}, err
	}
	page.Events = make([]*completionv1.CompletionEvent, len(raw))
	for i, b := range raw {
		page.Events[i] = &completionv1.CompletionEvent{}
		if err := proto.Unmarshal(b, page.Events[i]); err != nil {
			return Page{}, err // cannot happen: the log encoded it
		}
	}
	return page, nil
}

// read is Read's page with its events still encoded.
func (m *MemLog) read(id string, after uint64) (Page, [][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire(m.now())
	l, ok := m.logs[id]
	if !ok {
		return Page{}, nil, ErrNotFound
	}
	first, last := l.first, l.first+uint64(len(l.events))-1
	if len(l.events) == 0 {
		first, last = 1, 0
	}
	if after+1 < first || after > last {
		return Page{}, nil, &RangeError{First: first}
	}
	i := int(after + 1 - first)
	n := min(len(l.events)-i, logPageSize)
	page := Page{Meta: l.meta, Ended: !l.ended.IsZero(), Status: l.status, Last: last, More: closed}
	if i+n == len(l.events) {
		if l.more == nil {
			l.more = make(chan struct{})
		}
		page.More, l.watched = l.more, true
	}
	return page, append([][]byte(nil), l.events[i:i+n]...), nil
}

// Expire implements Log.
func (m *MemLog) Expire(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire(now)
}

// Fenced implements Log: no other replica writes this process's
// memory.
func (m *MemLog) Fenced() bool { return false }

// Fence implements Log: a no-op.
func (m *MemLog) Fence(string, Lease) {}

// Unfence implements Log: a no-op.
func (m *MemLog) Unfence(string) bool { return false }

// KeptHere implements Log: there is no shared log to lack anything.
func (m *MemLog) KeptHere(string) bool { return false }

// Adopt implements Log: a no-op, no other replica logged anything
// here.
func (m *MemLog) Adopt(string, Meta, []*completionv1.CompletionEvent, uint64, []byte) {}

func (m *MemLog) expire(now time.Time) {
	for len(m.ended) > 0 && now.Sub(m.ended[0].ended) >= m.limits.Retention {
		m.drop(m.ended[0])
	}
}

// RangeError is ErrOutOfRange with the first seq the log keeps (a
// takeover of a log whose oldest events were dropped starts there).
type RangeError struct{ First uint64 }

// Error is ErrOutOfRange's.
func (e *RangeError) Error() string { return ErrOutOfRange.Error() }

// Is makes errors.Is(err, ErrOutOfRange) hold.
func (e *RangeError) Is(target error) bool { return target == ErrOutOfRange }

// logCopy is the whole of one completion's log as MemLog keeps it: what
// a replica publishes again to the shared log (PairLog.reshare).
type logCopy struct {
	meta   Meta
	events [][]byte // encoded, from the first kept, in seq order
	seqs   []uint64 // the seq of each event
	ended  bool
	status []byte
	// endedAt is when it ended here (zero while it runs).
	endedAt time.Time
	// ckpt is the last checkpoint, taken after the event of ckptSeq.
	ckpt    []byte
	ckptSeq uint64
}

// copyOf copies the log of id: its meta, its encoded events and their
// seqs, and its end.
func (m *MemLog) copyOf(id string) (logCopy, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.logs[id]
	if !ok {
		return logCopy{}, false
	}
	c := logCopy{meta: l.meta, events: append([][]byte(nil), l.events...), ended: !l.ended.IsZero(), status: l.status,
		endedAt: l.ended, ckpt: l.ckpt, ckptSeq: l.ckptSeq}
	c.seqs = make([]uint64, len(l.events))
	for i := range c.seqs {
		c.seqs[i] = l.first + uint64(i)
	}
	return c, true
}

// forgetLive drops the log of id if it is live, and wakes its followers
// (a fleet replica's copy of a completion another replica owns now). It
// reports whether it did.
func (m *MemLog) forgetLive(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.logs[id]
	if !ok || !l.ended.IsZero() {
		return false
	}
	m.drop(l)
	return true
}

// drop removes a log (an ended one, or one forgetLive gives up) and wakes
// its followers. The log that ended first, the one the bounds and the
// retention drop, leaves m.ended without a copy: a full log drops one per
// new completion, and copying the others (a thousand by default) each time
// was a good part of what a short completion cost.
func (m *MemLog) drop(l *completionLog) {
	delete(m.logs, l.id)
	if len(m.ended) > 0 && m.ended[0] == l {
		m.ended[0] = nil // no longer kept alive by the array
		m.ended = m.ended[1:]
	} else if i := slices.Index(m.ended, l); i >= 0 {
		m.ended = slices.Delete(m.ended, i, i+1)
	}
	m.Bytes -= l.bytes
	if l.more != nil {
		close(l.more)
	}
}

// clearRequest forgets the request in the meta of id's log: a completion
// that runs without a lease is never taken over (OpenLeased).
func (m *MemLog) clearRequest(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.logs[id]; ok {
		c.meta.Request = nil
	}
}
