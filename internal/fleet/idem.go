package fleet

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// IdemRecord is what an idempotency key maps to: the completion started
// with it, the digest of the request it was started with, and whether its
// log is open yet. A record is pending between its claim and the opening
// of its completion's log: a start that finds it waits for the log rather
// than taking the record for stale.
type IdemRecord struct {
	// ID is the completion's id.
	ID string
	// Digest is the hex digest of the request, its idempotency key cleared.
	Digest string
	// Opened is set once the completion's log is open.
	Opened bool
}

// IsZero reports whether r is no record.
func (r IdemRecord) IsZero() bool { return r.ID == "" }

// encode is r as the store keeps it: "o|p id digest" ("" for no record).
// Ids and digests hold no space.
func (r IdemRecord) encode() string {
	if r.IsZero() {
		return ""
	}
	state := "p"
	if r.Opened {
		state = "o"
	}
	return state + " " + r.ID + " " + r.Digest
}

// errBadIdemRecord: a stored record that is not one encode wrote.
var errBadIdemRecord = errors.New("malformed idempotency record")

func decodeIdemRecord(s string) (IdemRecord, error) {
	if s == "" {
		return IdemRecord{}, nil
	}
	f := strings.Fields(s)
	if len(f) != 3 || (f[0] != "o" && f[0] != "p") {
		return IdemRecord{}, errBadIdemRecord
	}
	return IdemRecord{ID: f[1], Digest: f[2], Opened: f[0] == "o"}, nil
}

// Idempotency maps idempotency keys (already scoped to their caller and
// digested: never raw) to the completion each started. Its one operation
// is a compare and swap, so that two starts with one key, at once, on one
// replica or two, agree on one completion: a claim is a swap from no
// record, the opening of the log a swap from pending to opened, a stale
// record (its log gone) replaced by a swap from it. Safe for concurrent
// use.
type Idempotency interface {
	// Swap sets the record of key to rec, for ttl (deleting it when rec is
	// zero), if key's record is old (zero: none), atomically; it returns
	// the record key has after: rec when it swapped.
	Swap(ctx context.Context, key string, old, rec IdemRecord, ttl time.Duration) (IdemRecord, error)
}

// MemIdempotency is an Idempotency in this process's memory, bounded: at
// most max records; when full, an expired record goes first, else the one
// that would expire soonest (an ended completion's, kept for the log's
// retention, before a running one's).
type MemIdempotency struct {
	mu  sync.Mutex
	m   map[string]memIdem
	max int
	now func() time.Time
}

type memIdem struct {
	rec      IdemRecord
	deadline time.Time
}

// NewMemIdempotency returns an empty MemIdempotency of at most limit
// records (at least 1), on the clock now (time.Now when nil).
func NewMemIdempotency(limit int, now func() time.Time) *MemIdempotency {
	if now == nil {
		now = time.Now
	}
	return &MemIdempotency{m: map[string]memIdem{}, max: max(limit, 1), now: now}
}

// Swap implements Idempotency.
func (m *MemIdempotency) Swap(_ context.Context, key string, old, rec IdemRecord, ttl time.Duration) (IdemRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	cur, ok := m.m[key]
	if ok && !now.Before(cur.deadline) {
		delete(m.m, key)
		cur, ok = memIdem{}, false
	}
	if cur.rec != old {
		return cur.rec, nil
	}
	if rec.IsZero() {
		delete(m.m, key)
		return rec, nil
	}
	if !ok {
		m.makeRoom(now)
	}
	m.m[key] = memIdem{rec: rec, deadline: now.Add(ttl)}
	return rec, nil
}

// makeRoom drops records until one more fits.
func (m *MemIdempotency) makeRoom(now time.Time) {
	if len(m.m) < m.max {
		return
	}
	for k, e := range m.m {
		if !now.Before(e.deadline) {
			delete(m.m, k)
		}
	}
	for len(m.m) >= m.max {
		var first string
		var at time.Time
		for k, e := range m.m {
			if first == "" || e.deadline.Before(at) {
				first, at = k, e.deadline
			}
		}
		delete(m.m, first)
	}
}

// set sets the record of key to rec for ttl, whatever it was (deleting
// it when rec is zero).
func (m *MemIdempotency) set(key string, rec IdemRecord, ttl time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rec.IsZero() {
		delete(m.m, key)
		return
	}
	now := m.now()
	if _, ok := m.m[key]; !ok {
		m.makeRoom(now)
	}
	m.m[key] = memIdem{rec: rec, deadline: now.Add(ttl)}
}

// get is the record of key, with what is left of its TTL, unless it has
// none or its TTL passed.
func (m *MemIdempotency) get(key string) (liveIdem, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[key]
	if left := e.deadline.Sub(m.now()); ok && left > 0 {
		return liveIdem{rec: e.rec, ttl: left}, true
	}
	return liveIdem{}, false
}

// liveIdem is a record whose TTL has not passed, with what is left of it.
type liveIdem struct {
	rec IdemRecord
	ttl time.Duration
}

// live copies the records whose TTL has not passed, by key.
func (m *MemIdempotency) live() map[string]liveIdem {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	out := make(map[string]liveIdem, len(m.m))
	for k, e := range m.m {
		if left := e.deadline.Sub(now); left > 0 {
			out[k] = liveIdem{rec: e.rec, ttl: left}
		}
	}
	return out
}

// Len is the number of records kept, expired ones included.
func (m *MemIdempotency) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.m)
}

// RedisIdempotency is an Idempotency in the Redis a fleet shares, so that
// one idempotency key through any replica starts one completion: each
// record is a string key (RedisIdemKey) with the record's ttl, swapped by
// lua/idem.lua. It keeps a copy of the records it opened (its replica's
// completions, while their records live), which Restore puts back in a
// Redis that lost them.
type RedisIdempotency struct {
	rdb redis.UniversalClient
	// OpTimeout bounds each call.
	OpTimeout time.Duration
	// opened copies the opened records this replica set in Redis, until
	// their TTL: bounded as its logs are.
	opened *MemIdempotency
	// unfreed are the records this replica freed (a swap to none) while
	// Redis did not answer, by key, to be freed when it answers again
	// (publish): bounded as opened is.
	unfreed map[string]IdemRecord
	mu      sync.Mutex // unfreed's
	log     *slog.Logger
}

// NewRedisIdempotency returns the Idempotency of rdb, which keeps a copy
// of at most limit of the records it opens (at least 1), on the clock
// now (time.Now when nil), for Restore; log tells what Restore does.
func NewRedisIdempotency(rdb redis.UniversalClient, limit int, now func() time.Time, log *slog.Logger) *RedisIdempotency {
	return &RedisIdempotency{rdb: rdb, OpTimeout: DefaultRedisOpTimeout, opened: NewMemIdempotency(limit, now),
		unfreed: map[string]IdemRecord{}, log: log}
}

// Swap implements Idempotency. key is the record's Redis key
// (RedisIdemKey). A Redis that does not answer is ErrUnavailable; when
// the swap freed old (rec zero), it is freed again once Redis answers
// (Restore, PublishFrom).
func (r *RedisIdempotency) Swap(ctx context.Context, key string, old, rec IdemRecord, ttl time.Duration) (IdemRecord, error) {
	got, err := r.swap(ctx, key, old, rec, ttl)
	if err != nil {
		if rec.IsZero() && !old.IsZero() {
			r.noteUnfreed(key, old)
		}
		return got, err
	}
	if got == rec {
		r.keep(key, rec, ttl)
	} else if mine, ok := r.opened.get(key); ok && mine.rec != got {
		// Another record holds the key: this replica's copy of an older
		// one is not its to put back.
		r.opened.set(key, IdemRecord{}, 0)
	}
	r.settled(key, got)
	return got, nil
}

// noteUnfreed remembers that old, the record of key, is to be freed when
// Redis answers again.
func (r *RedisIdempotency) noteUnfreed(key string, old IdemRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.unfreed[key]; ok || len(r.unfreed) < r.opened.max {
		r.unfreed[key] = old
	}
}

// settled forgets a record of key to free that Redis no longer holds:
// got is what it holds now.
func (r *RedisIdempotency) settled(key string, got IdemRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.unfreed[key]; ok && old != got {
		delete(r.unfreed, key)
	}
}

func (r *RedisIdempotency) swap(ctx context.Context, key string, old, rec IdemRecord, ttl time.Duration) (IdemRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, r.OpTimeout)
	defer cancel()
	got, err := idemScript.Run(ctx, r.rdb, key, old.encode(), rec.encode(), max(ttl.Milliseconds(), 1)).Text()
	if err != nil && !errors.Is(err, redis.Nil) {
		return IdemRecord{}, errors.Join(ErrUnavailable, err)
	}
	return decodeIdemRecord(got)
}

// keep copies the record key was swapped to, rec for ttl: an opened one
// is kept, any other forgotten (a pending claim lives seconds; a record
// deleted or replaced is not this replica's to put back).
func (r *RedisIdempotency) keep(key string, rec IdemRecord, ttl time.Duration) {
	if !rec.Opened {
		rec = IdemRecord{}
	}
	r.opened.set(key, rec, ttl)
}

// Restore puts back in Redis the opened records this replica set whose
// TTL has not passed and that Redis no longer holds (a restart that came
// back empty, a replica promoted without them), for what is left of
// their TTL: a start retried with its key through any replica attaches
// to its completion again rather than starting it twice. A record
// another start set meanwhile is left alone (a swap from none). It
// answers false when Redis failed a swap (to be tried again): a watcher
// of Health.WatchReplaced.
func (r *RedisIdempotency) Restore() (done bool) {
	return r.publish(r.opened, "a new Redis process: this replica's idempotency records put back where it lacked them")
}

// PublishFrom publishes in Redis the opened records of mem whose TTL has
// not passed, as Restore does: mem is the replica's own store while Redis
// did not answer (a start then claims its key there, as its log degrades
// to memory), so that once Redis answers again a start retried with its
// key through any replica attaches to that completion. A key another
// replica claimed meanwhile keeps that replica's record. It answers false
// when Redis failed a swap (to be tried again): a watcher of
// Health.WatchBack.
func (r *RedisIdempotency) PublishFrom(mem *MemIdempotency) (done bool) {
	return r.publish(mem, "Redis answers again: the idempotency records claimed in this replica's memory meanwhile are shared where no other replica claimed the key")
}

// publish frees the records this replica freed while Redis did not
// answer (Swap), then swaps each opened record of from into Redis from
// none, for what is left of its TTL, and logs said with how many it
// looked at (a swap from none cannot tell a record it set from the same
// one there). A record from moved on from meanwhile (its start freed it,
// or it ended) moves on in Redis too, after the swap.
func (r *RedisIdempotency) publish(from *MemIdempotency, said string) (done bool) {
	if err := r.freeAll(); err != nil {
		r.log.Warn("redis: could not free in Redis the idempotency keys this replica freed while it did not answer", "error", err)
		return false
	}
	looked := 0
	for key, e := range from.live() {
		if !e.rec.Opened {
			continue // a claim under way: its start opens it, or it lapses
		}
		got, err := r.Swap(context.Background(), key, IdemRecord{}, e.rec, e.ttl)
		if err == nil && got == e.rec {
			err = r.follow(from, key, e.rec)
		}
		if err != nil {
			r.log.Warn("redis: could not share this replica's idempotency records with Redis", "error", err)
			return false
		}
		looked++
	}
	if looked > 0 {
		r.log.Info("redis: "+said, "records", looked)
	}
	return true
}

// follow swaps the record of key in Redis from rec, just published from
// from, to what from holds now, if that moved on meanwhile: the swap of
// its start (freed, ended) that came between publish's look and its
// swap, and found nothing in Redis to swap.
func (r *RedisIdempotency) follow(from *MemIdempotency, key string, rec IdemRecord) error {
	now, ok := from.get(key)
	if ok && now.rec == rec {
		return nil
	}
	var to IdemRecord
	var ttl time.Duration
	if ok && now.rec.Opened {
		to, ttl = now.rec, now.ttl
	}
	_, err := r.Swap(context.Background(), key, rec, to, ttl)
	return err
}

// freeAll frees in Redis the records this replica freed while Redis did
// not answer, unless another took their key since.
func (r *RedisIdempotency) freeAll() error {
	r.mu.Lock()
	unfreed := maps.Clone(r.unfreed)
	r.mu.Unlock()
	for key, old := range unfreed {
		// Swap forgets it once Redis answers, whatever the key holds.
		if _, err := r.Swap(context.Background(), key, old, IdemRecord{}, 0); err != nil {
			return err
		}
	}
	return nil
}
