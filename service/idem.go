package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/fleet"
)

// Idempotent starts (CompleteRequest.idempotency_key). A start with a key
// claims it (a record: key → a new completion id, the request's digest),
// atomically, in the fleet's Redis or in this process's memory; a start
// that finds the key claimed by an identical request attaches to that
// completion instead of calling the upstream again, one with another
// request is refused (IDEMPOTENCY_KEY_REUSED). The record stays valid
// while the completion's log is kept: once the log is gone (expired,
// evicted), the key is free again, whatever the record's own TTL says.

// maxIdempotencyKey bounds an idempotency key.
const maxIdempotencyKey = 128

// reasonIdempotencyKeyReused: a start named an idempotency key its caller
// used already for another request.
const reasonIdempotencyKeyReused = "IDEMPOTENCY_KEY_REUSED"

const (
	// idemPendingTTL is how long a claim may stay pending, its log not yet
	// open: admit's calls to the store are bounded by far less. A claimer
	// that dies in between blocks its key this long at most.
	idemPendingTTL = 30 * time.Second
	// idemRunningTTL is how long the record of a running completion lives:
	// far longer than a completion runs. Its end sets the log's retention
	// instead; a record outliving its log is found stale anyway.
	idemRunningTTL = 24 * time.Hour
	// idemPoll is how often a start that found a pending claim (another
	// start of the same key, under way) looks again for its log.
	idemPoll = 10 * time.Millisecond
)

// checkIdempotencyKey refuses a key that is too long or not printable
// ASCII, without echoing it: it may be anything the caller sent.
func checkIdempotencyKey(key string, v *violations) {
	if len(key) > maxIdempotencyKey {
		v.add("idempotency_key", "is %d bytes, over the limit of %d", len(key), maxIdempotencyKey)
		return
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			v.add("idempotency_key", "byte %d is not printable ASCII (0x20 to 0x7e)", i)
			return
		}
	}
}

// digest is a hex SHA-256 of b, cut to n bytes (0: whole).
func digest(b []byte, n int) string {
	sum := sha256.Sum256(b)
	if n > 0 {
		return hex.EncodeToString(sum[:n])
	}
	return hex.EncodeToString(sum[:])
}

// idemKey is the store's key of an idempotency key of the caller of ctx:
// digests of both (16 bytes each), never the raw names, so that two
// callers' keys never meet and neither is readable from the store.
func idemKey(ctx context.Context, key string) string {
	return fleet.RedisIdemKey(digest([]byte(CallerName(ctx)), 16), digest([]byte(key), 16))
}

// requestDigest is the digest of m, a CompleteRequest or a SessionStart,
// whose idempotency key is req's (cleared for the digest): two starts are
// identical when their digests are.
func requestDigest(m proto.Message, req *completionv1.CompleteRequest) string {
	// Cleared in place and put back rather than cloned: the request is the
	// handler's alone here, and may be as big as MaxRequestBytes.
	key := req.GetIdempotencyKey()
	req.IdempotencyKey = ""
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	req.IdempotencyKey = key
	return digest(b, 0)
}

// idemClaim is the claim of a start that won its idempotency key: its
// completion's id, and the store that keeps it.
type idemClaim struct {
	store fleet.Idempotency
	// shared is the fleet's store when the claim fell back to this
	// replica's memory (store) while Redis did not answer: the record is
	// published there once Redis answers (RedisIdempotency.PublishFrom),
	// so each later swap goes there too.
	shared fleet.Idempotency
	key    string
	rec    fleet.IdemRecord
}

type idemClaimKey struct{}

func withClaim(ctx context.Context, c *idemClaim) context.Context {
	if c == nil {
		return ctx
	}
	return context.WithValue(ctx, idemClaimKey{}, c)
}

func claimFrom(ctx context.Context) *idemClaim {
	c, _ := ctx.Value(idemClaimKey{}).(*idemClaim)
	return c
}

// swap moves the claim's record to rec for ttl, logging a store that
// fails: the record then expires with the TTL it has (a record Redis did
// not free is freed once it answers again: RedisIdempotency.Swap). A
// claim kept in memory moves its record in Redis too, where it holds
// there (published since).
func (c *idemClaim) swap(ctx context.Context, s *Server, rec fleet.IdemRecord, ttl time.Duration) {
	if c == nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	old := c.rec
	if _, err := c.store.Swap(ctx, c.key, old, rec, ttl); err != nil {
		s.cfg.Logger.WarnContext(ctx, "idempotency record not updated", "completion_id", c.rec.ID, "error", err.Error())
		if c.shared == nil {
			s.redisFailed(err)
		}
		return
	}
	c.rec = rec
	if c.shared != nil {
		if _, err := c.shared.Swap(ctx, c.key, old, rec, ttl); err != nil {
			s.redisFailed(err)
		}
	}
}

// redisFailed tells the fleet's Redis health that a command failed: its
// watchers share what this replica kept to itself once a PING finds Redis
// up again (fleet.Health.WatchBack).
func (s *Server) redisFailed(err error) {
	if s.redis != nil && errors.Is(err, fleet.ErrUnavailable) {
		s.redis.Failed(err)
	}
}

// opened marks the claim's completion logged: a start of its key attaches
// to it from now on.
func (c *idemClaim) opened(ctx context.Context, s *Server) {
	rec := c.rec
	rec.Opened = true
	c.swap(ctx, s, rec, idemRunningTTL)
}

// forget frees the claim's key: its completion did not start, or ran
// unlogged, or was cancelled by its caller's leaving (a retry starts it
// afresh).
func (c *idemClaim) forget(ctx context.Context, s *Server) {
	c.swap(ctx, s, fleet.IdemRecord{}, 0)
}

// ended keeps the record as long as the completion's log: its retention.
func (c *idemClaim) ended(ctx context.Context, s *Server) {
	c.swap(ctx, s, c.rec, s.cfg.EventLog.Retention)
}

// errAttach is a start that found its idempotency key claimed by an
// identical one: it attaches to completion id.
type errAttach struct{ id string }

func (e *errAttach) Error() string { return "attach to " + e.id }

// claimKey claims req's idempotency key for the caller of ctx, with
// digest the digest of the start: it returns the claim (nil without a
// key), an *errAttach when an identical start holds the key, or the
// refusal. A pending claim of an identical start (its log not open yet)
// is waited for; a record whose log is gone is stale and taken over.
func (s *Server) claimKey(ctx context.Context, req *completionv1.CompleteRequest, digest string) (*idemClaim, error) {
	if req.GetIdempotencyKey() == "" {
		return nil, nil
	}
	key := idemKey(ctx, req.GetIdempotencyKey())
	mine := fleet.IdemRecord{ID: newID(), Digest: digest}
	store, old := s.idem, fleet.IdemRecord{}
	var shared fleet.Idempotency
	var tick *time.Ticker
	for {
		cur, err := store.Swap(ctx, key, old, mine, idemPendingTTL)
		if err != nil {
			if store == fleet.Idempotency(s.idemMem) {
				return nil, fmt.Errorf("idempotency store: %w", err)
			}
			// As the log degrades to memory while Redis does not answer,
			// so does the key: it holds on this replica alone until a PING
			// finds Redis up again, which shares it (a failure marks Redis
			// down, though the PINGs pass: WatchBack).
			s.cfg.Logger.WarnContext(ctx, "idempotency record kept in memory (redis unreachable?)", "error", err.Error())
			s.redisFailed(err)
			store, shared, old = s.idemMem, store, fleet.IdemRecord{}
			continue
		}
		if cur == mine {
			return &idemClaim{store: store, shared: shared, key: key, rec: mine}, nil
		}
		if cur.IsZero() { // freed meanwhile
			old = cur
			continue
		}
		kept, err := s.logKept(ctx, cur.ID)
		if err != nil {
			return nil, logStatus(err, cur.ID, 0)
		}
		switch {
		case kept && cur.Digest != digest:
			return nil, idemReusedStatus()
		case kept:
			return nil, &errAttach{id: cur.ID}
		case cur.Opened: // its log is gone, or its completion with its replica: the key is free again
			old = cur
			continue
		case cur.Digest != digest: // a start of another request, under way
			return nil, idemReusedStatus()
		}
		// An identical start under way, whose log is not open yet: its
		// claimer opens it within idemPendingTTL, or its claim expires.
		if tick == nil {
			tick = time.NewTicker(idemPoll)
			defer tick.Stop()
		}
		select {
		case <-ctx.Done():
			return nil, contextStatus(ctx.Err())
		case <-tick.C:
		}
		old = fleet.IdemRecord{}
	}
}

// logKept reports whether the log of id is kept, of a completion that
// was not lost with its replica (lost).
func (s *Server) logKept(ctx context.Context, id string) (bool, error) {
	page, err := s.log.Read(id, 0)
	switch {
	case errors.Is(err, fleet.ErrOutOfRange):
		return true, nil
	case errors.Is(err, fleet.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return !s.lost(ctx, page), nil
}

// lost reports whether the live completion whose log page reads ended
// with its replica: it is never taken over (its log holds no request: no
// resume grace) and the process that ran it on another replica is gone
// (Presence), found gone twice a follower's check apart, as a follower
// finds it (lookAtOwner), so that a presence the store lost for a moment
// frees no running completion's key. Its followers end COMPLETION_LOST;
// a start under its idempotency key starts it anew rather than attach to
// it until its log lapses.
func (s *Server) lost(ctx context.Context, page fleet.Page) bool {
	m := page.Meta
	if s.cfg.Leases == nil || page.Ended || len(m.Request) > 0 || m.Instance == "" || m.Instance == s.instance() {
		return false
	}
	for look := range 2 {
		if look > 0 {
			t := time.NewTimer(fleet.TimingOf(s.cfg.Leases).CheckEvery())
			select {
			case <-ctx.Done():
				t.Stop()
				return false
			case <-t.C:
			}
		}
		if present, err := fleet.Present(ctx, s.cfg.Leases, m.Instance); err != nil || present {
			return false
		}
	}
	return true
}

// attachStart serves a start that found its idempotency key claimed by an
// identical one: exactly as Attach with after_seq 0.
func (s *Server) attachStart(ctx context.Context, id string, send func(*completionv1.CompletionEvent) error) error {
	return s.attach(ctx, id, 0, send)
}

// completeAttached is Complete for a request whose idempotency key an
// identical start holds: it waits for that completion's result.
func (s *Server) completeAttached(ctx context.Context, id string) (*completionv1.CompleteResponse, error) {
	resp := &completionv1.CompleteResponse{CompletionId: id}
	err := s.attachStart(ctx, id, func(ev *completionv1.CompletionEvent) error {
		if t := ev.GetTransition(); t != nil {
			resp.Transitions = append(resp.Transitions, t)
		}
		if r := ev.GetResult(); r != nil {
			resp.Result = r
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// claimStream is a Session's stream whose context carries the claim of
// its start's idempotency key, for admit.
type claimStream struct {
	sessionStream
	ctx context.Context
}

func (c claimStream) Context() context.Context { return c.ctx }

// attachSession serves a Session start whose idempotency key an identical
// start holds. A Session started with a resume grace is resumed from seq
// 1, as a SessionResume with after_seq 0 does: the retry takes control of
// it (the caller that started it, if still there, ends
// SESSION_TAKEN_OVER), so that it answers the tool calls. One without a
// grace stays its starter's: the retry follows its events as Attach does,
// and what it sends is not read.
func (s *Server) attachSession(stream sessionStream, id string) error {
	page, err := s.readFor(stream.Context(), id, 0)
	if err != nil {
		return err
	}
	if page.Meta.Resumable {
		return s.resumeSession(stream, &completionv1.SessionResume{CompletionId: id})
	}
	return s.attach(stream.Context(), id, 0, stream.Send)
}
