package fleet

import (
	"hash/crc32"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/completiond/completiond/internal/redisscript"
)

// ClusterShards is how many shards a fleet on a Redis Cluster spreads its
// logs over. Each shard is one hash slot ({sN}): its completions' own keys
// and its counts of the bounds (completiond:logs:*:{sN}), so that every
// script still runs on one slot, atomically. A completion's shard is the
// CRC-32 of its id modulo ClusterShards, the same on every replica; the
// bounds of EventLogLimits over the whole fleet become each shard's share
// (MaxCompletions and MaxBytes divided by ClusterShards, rounded up).
// Sixteen spreads the logs over as many as sixteen primaries, and keeps
// a flush of the group commit to sixteen script calls at most (one per
// shard it writes, pipelined: one round trip per node).
const ClusterShards = 16

// keyspace lays the fleet's keys out: on one Redis (standalone, or a
// primary behind Sentinel), a completion's keys are tagged with its id and
// the bounds are counted once (keys.go); on a Redis Cluster (shards > 0),
// a completion's keys are tagged with its shard, and each shard counts its
// own bounds. Its scripts are lua/ bound to its keys.
type keyspace struct {
	shards int
	// subjects holds, per shard, a subject whose shard it is: what the
	// calls that run on a shard rather than on a completion (expired.lua)
	// pass as their subject.
	subjects []string
	scripts  scripts
	// commitFixed are lua/commit.lua's keys declared once (the shard's
	// counts), per shard, as command arguments.
	commitFixed [][]any
}

// scripts are the fleet's scripts bound to one keyspace; each file says
// what it does, its keys and its arguments.
type scripts struct {
	open, commit, checkpoint, drop, expired, reshare, restore, acquire, renew, release, cancel *redisscript.Script
}

// all are the scripts, each once.
func (s scripts) all() []*redisscript.Script {
	return []*redisscript.Script{s.open, s.commit, s.checkpoint, s.drop, s.expired, s.reshare, s.restore, s.acquire, s.renew, s.release, s.cancel}
}

// The two layouts.
var (
	oneRedis     = newKeyspace(0)
	clusterRedis = newKeyspace(ClusterShards)
)

// newKeyspace is the layout of shards shards (0: one Redis).
func newKeyspace(shards int) *keyspace {
	k := &keyspace{shards: shards}
	k.subjects = make([]string, max(shards, 1))
	for n, found := 0, 0; found < shards; n++ {
		s := "shard-" + strconv.Itoa(n)
		if i := k.shard(s); k.subjects[i] == "" {
			k.subjects[i] = s
			found++
		}
	}
	t := k.table()
	load := func(name string) *redisscript.Script { return redisscript.Load(luaFiles, "lua/"+name+".lua", t) }
	k.scripts = scripts{open: load("open"), commit: load("commit"), checkpoint: load("checkpoint"), drop: load("drop"),
		expired: load("expired"), reshare: load("reshare"), restore: load("restore"), acquire: load("acquire"), renew: load("renew"),
		release: load("release"), cancel: load("cancel")}
	for _, s := range k.subjects {
		k.commitFixed = append(k.commitFixed, k.scripts.commit.FixedKeys(s))
	}
	return k
}

// keyspaceOf is the layout of rdb's keys: the Cluster's when rdb is a
// cluster client (or one Instrument wraps), one Redis's otherwise.
func keyspaceOf(rdb redis.UniversalClient) *keyspace {
	if clusterClient(rdb) != nil {
		return clusterRedis
	}
	return oneRedis
}

// clusterClient is rdb's cluster client (under Instrument's wrapper), or
// nil when rdb is not one.
func clusterClient(rdb redis.UniversalClient) *redis.ClusterClient {
	if in, ok := rdb.(*instrumented); ok {
		rdb = in.UniversalClient
	}
	cc, _ := rdb.(*redis.ClusterClient)
	return cc
}

// shard is the shard of subject (a completion's id): 0 on one Redis.
func (k *keyspace) shard(subject string) int {
	if k.shards == 0 {
		return 0
	}
	return int(crc32.ChecksumIEEE([]byte(subject)) % uint32(k.shards))
}

// own is the key of kind of completion id: completiond:KIND:{id} on one
// Redis, completiond:KIND:{sN}:id on a Cluster.
func (k *keyspace) own(kind, id string) string {
	if k.shards == 0 {
		return "completiond:" + kind + ":{" + id + "}"
	}
	return "completiond:" + kind + ":{s" + strconv.Itoa(k.shard(id)) + "}:" + id
}

// counted is the key of one of the bounds' counts (completiond:logs:*)
// that subject's script updates: the fleet's on one Redis, its shard's
// (name:{sN}) on a Cluster.
func (k *keyspace) counted(name, subject string) string {
	if k.shards == 0 {
		return name
	}
	return name + ":{s" + strconv.Itoa(k.shard(subject)) + "}"
}

// The keys of completion id (keys.go says what each holds).
func (k *keyspace) log(id string) string      { return k.own("log", id) }
func (k *keyspace) meta(id string) string     { return k.own("meta", id) }
func (k *keyspace) followed(id string) string { return k.own("followed", id) }
func (k *keyspace) cancel(id string) string   { return k.own("cancel", id) }
func (k *keyspace) lease(id string) string    { return k.own("lease", id) }
func (k *keyspace) token(id string) string    { return k.own("lease:token", id) }

// table is the one table of the keys the fleet's scripts declare, by the
// names the scripts (lua/*.lua) read them by; a script runs on one
// completion's id, or on one shard's subject.
func (k *keyspace) table() redisscript.Table {
	counted := func(name string) func(string) string {
		return func(subject string) string { return k.counted(name, subject) }
	}
	return redisscript.Table{
		"LIVE":     counted(redisLogsLive),
		"ENDED":    counted(redisLogsEnded),
		"ENDSEQ":   counted(redisLogsEndSeq),
		"SIZES":    counted(redisLogSizes),
		"BYTES":    counted(redisLogBytes),
		"META":     k.meta,
		"LOG":      k.log,
		"LEASE":    k.lease,
		"FOLLOWED": k.followed,
		"TOKEN":    k.token,
		"CANCEL":   k.cancel,
	}
}

// share is a shard's share of a bound of the whole fleet: the bound
// itself on one Redis, divided by the shards (rounded up) on a Cluster.
func (k *keyspace) share(bound int64) int64 {
	if k.shards == 0 {
		return bound
	}
	return (bound + int64(k.shards) - 1) / int64(k.shards)
}

// byShard splits n items, whose subjects subject gives, by shard, in
// order: the indexes of each shard's items, shards with none left out
// (one group on one Redis).
func (k *keyspace) byShard(n int, subject func(i int) string) [][]int {
	if n == 0 {
		return nil
	}
	if k.shards == 0 {
		return [][]int{indexes(n)}
	}
	return groupBy(indexes(n), func(i int) int { return k.shard(subject(i)) })
}

// groupBy splits the indexes of which by their key, in order: the groups
// in the order of their first index.
func groupBy[K comparable](which []int, key func(i int) K) [][]int {
	at := make(map[K]int)
	var out [][]int
	for _, i := range which {
		k := key(i)
		j, ok := at[k]
		if !ok {
			j = len(out)
			at[k] = j
			out = append(out, nil)
		}
		out[j] = append(out[j], i)
	}
	return out
}
