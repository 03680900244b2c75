// Package fleet keeps what the replicas of completiond share: the event
// logs and the ownership of completions.
//
//   - Log is every completion's events from started to the result, which
//     Attach and Session resume read, with the checkpoints a takeover
//     continues from. One interface holds every capability; the log a
//     single process keeps in memory (MemLog) answers the fleet's ones as a
//     log nobody else reads. RedisLog is the log in Redis Streams, shared
//     by every replica; PairLog is a replica's log with Redis: memory and
//     Redis together, degrading to memory while Redis does not answer and
//     publishing again when it is back.
//   - Leases grant a completion to one replica at a time (in memory, or in
//     Redis with fencing tokens); an Ownership renews one and says when it
//     is lost, and a fenced Log drops the writes of a replica whose lease
//     is another's.
//   - Health follows whether Redis answers; NewRedisClient opens the
//     connection from a redis:// or rediss:// URL, to one Redis or to a
//     Redis Cluster, on which the keys are laid out in ClusterShards shards
//     of one slot each (keyspace), so that every script stays atomic.
//
// The fleet stores and reads; it never decides. What a completion does
// next (run on, take over, give up) is the driver's and the recovery
// machine's. It builds no gRPC status and imports nothing of completiond
// but config, the generated messages and telemetry.
package fleet
