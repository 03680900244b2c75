package fleet

import (
	"embed"

	"github.com/completiond/completiond/internal/redisscript"
)

// The fleet's Redis keys on one Redis (keyspace lays them out on a Redis
// Cluster). Every key is prefixed completiond: and names its kind. A
// completion's own keys carry its id as a hash tag ({id}); the keys that
// count every log (completiond:logs:*) are the whole fleet's (on a
// Cluster, each shard's: name:{sN}).
const (
	// redisLogsLive is a sorted set of the live logs' ids, scored by the
	// time (Unix ms) their log lapses unless an event comes: a replica that
	// died leaves no live log behind for longer than RedisLog.LiveTTL.
	redisLogsLive = "completiond:logs:live"
	// redisLogsEnded is a sorted set of the ended logs' ids, scored by the
	// time (Unix ms) they ended, times 1000, plus a counter of the ends
	// modulo 1000 (redisLogsEndSeq), so that logs ended within the same
	// millisecond keep their order: the oldest is evicted first.
	redisLogsEnded = "completiond:logs:ended"
	// redisLogsEndSeq counts the ends of logs, for redisLogsEnded.
	redisLogsEndSeq = "completiond:logs:endseq"
	// redisLogSizes is a hash of each log's encoded bytes kept.
	redisLogSizes = "completiond:logs:bytes"
	// redisLogBytes is the encoded bytes kept by every log.
	redisLogBytes = "completiond:logs:total"
	// redisLogChanged is the Pub/Sub channel on which the changes of the
	// logs that a replica follows are published: "id seq" lines for the
	// appends of a flush, "id" for a log dropped (a channel, not a key).
	redisLogChanged = "completiond:logchanged"
	// redisCancelChannel is the Pub/Sub channel on which a Cancel names
	// the completion it asks the fleet to end (lua/cancel.lua): the
	// replica that runs it ends it (a channel, not a key).
	redisCancelChannel = "completiond:cancel"
)

// redisLogKey is the Redis Stream of completion id's events: entry 0-N is
// the event of seq N, so that XRANGE from 0-(after+1) is exactly the events
// after a seq.
func redisLogKey(id string) string { return "completiond:log:{" + id + "}" }

// redisMetaKey is the hash of completion id's log: m (the encoded Meta),
// ck (its checkpoint, "seq data"), and once ended, ended (Unix ms) and
// status (a google.rpc.Status).
func redisMetaKey(id string) string { return "completiond:meta:{" + id + "}" }

// redisFollowedKey is set while a replica follows completion id's log in
// Redis (every Read sets it, for redisFollowedFor): the appends notify
// the replicas of the logs so marked only.
func redisFollowedKey(id string) string { return "completiond:followed:{" + id + "}" }

// The cancel mark of completion id (keyspace.cancel,
// completiond:cancel:{id} on one Redis) is set once a Cancel asked for it
// to end (lua/cancel.lua), for as long as its live log is kept: a replica
// that takes the completion over finds it there and ends it, and a
// replica whose subscription missed the notice finds it when it
// subscribes again.

// LeaseKey is the Redis key of completion id's lease ("token replica").
// The id is a hash tag, so that in a Redis Cluster the lease, its token
// counter and the completion's log live in one slot, and one script may
// check the lease and write the log atomically.
func LeaseKey(id string) string { return "completiond:lease:{" + id + "}" }

// leaseTokenKey counts the tokens granted for id. It outlives the lease by
// far (leaseTokenTTL), so that tokens keep growing while the completion
// may still be running or taken over.
func leaseTokenKey(id string) string { return "completiond:lease:token:{" + id + "}" }

// RedisIdemKey is the Redis key of an idempotency record (Idempotency):
// scope is the digest of the caller's key name and key the digest of its
// idempotency key, never the raw names, so that no caller's key or
// idempotency key is readable from Redis's key space. Hash-tagged on its
// own: the record is not in its completion's slot, which it names.
func RedisIdemKey(scope, key string) string { return "completiond:idem:{" + scope + ":" + key + "}" }

//go:embed lua/*.lua
var luaFiles embed.FS

// idemScript is lua/idem.lua: an idempotency record is its own slot
// (RedisIdemKey), on one Redis and on a Cluster alike.
var idemScript = redisscript.Load(luaFiles, "lua/idem.lua", redisscript.Table{
	"IDEM": func(subject string) string { return subject }, // the script runs on the record's key (RedisIdemKey)
})
