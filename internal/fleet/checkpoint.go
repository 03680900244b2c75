package fleet

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// SaveCheckpoint implements Log.
func (m *MemLog) SaveCheckpoint(id string, seq uint64, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.logs[id]; l != nil && l.ended.IsZero() {
		l.ckptSeq, l.ckpt = seq, data
	}
}

// Checkpoint implements Log.
func (m *MemLog) Checkpoint(id string) (uint64, []byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.logs[id]
	if l == nil {
		return 0, nil, ErrNotFound
	}
	return l.ckptSeq, l.ckpt, nil
}

// SaveCheckpoint implements Log; failures are saveCheckpoint's.
func (l *RedisLog) SaveCheckpoint(id string, seq uint64, data []byte) {
	_, _ = l.saveCheckpoint(id, seq, data, l.fence(id))
}

// saveCheckpoint saves a checkpoint of id (lua/checkpoint.lua), fenced by
// the lease value fence unless it is empty; it answers as the script does,
// or fenced.
func (l *RedisLog) saveCheckpoint(id string, seq uint64, data []byte, fence string) (string, error) {
	ctx, cancel := l.ctx()
	defer cancel()
	res, err := fenced(l.ks.scripts.checkpoint.Run(ctx, l.rdb, id, fence, id, seq, data))
	l.countFenced(res, err)
	return res[0], err
}

// Checkpoint implements Log.
func (l *RedisLog) Checkpoint(id string) (uint64, []byte, error) {
	ctx, cancel := l.ctx()
	defer cancel()
	v, err := l.rdb.HGet(ctx, l.ks.meta(id), "ck").Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	seq, data, ok := strings.Cut(v, " ")
	n, perr := strconv.ParseUint(seq, 10, 64)
	if !ok || perr != nil {
		return 0, nil, fmt.Errorf("a checkpoint that does not parse in the log of %q", id) // id is one of the server's own: a checkpoint exists
	}
	return n, []byte(data), nil
}

// SaveCheckpoint implements Log: kept here, and in Redis while
// the completion is shared there (a completion apart publishes its
// checkpoint with its events when it is shared again).
func (f *PairLog) SaveCheckpoint(id string, seq uint64, data []byte) {
	f.mem.SaveCheckpoint(id, seq, data)
	f.mu.Lock()
	shared := f.shared[id]
	f.mu.Unlock()
	if !shared {
		return
	}
	switch res, err := f.redis.saveCheckpoint(id, seq, data, f.redis.fence(id)); {
	case err != nil:
		f.degrade(id, err)
	case res == "fenced":
		f.fencedOut(id)
	case res == "missing":
		f.setApart(id, "its Redis log is gone", nil)
	}
}

// Checkpoint implements Log: this replica's copy first, as Read.
func (f *PairLog) Checkpoint(id string) (uint64, []byte, error) {
	seq, data, err := f.mem.Checkpoint(id)
	if !errors.Is(err, ErrNotFound) {
		return seq, data, err
	}
	return f.redis.Checkpoint(id)
}

// publishCheckpoint saves the checkpoint of the copy c of id's log in
// Redis, fenced by fence, after a reshare published its events.
func (l *RedisLog) publishCheckpoint(id string, c logCopy, fence string) error {
	if c.ckpt == nil || c.ended {
		return nil
	}
	switch res, err := l.saveCheckpoint(id, c.ckptSeq, c.ckpt, fence); {
	case err != nil:
		return err
	case res == "fenced":
		return errLogFenced
	}
	return nil
}
