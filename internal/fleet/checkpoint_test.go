package fleet

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// TestCheckpointLogs: each log a fleet uses keeps the last checkpoint of
// a live completion, answers none for a completion without one, and
// forgets it at the end (nothing is taken over once ended). In Redis the
// write is fenced by the writer's lease, and the checkpoint's bytes count
// in the log's size and go with it at the end.
func TestCheckpointLogs(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	rl := NewRedisLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(rl.Close)
	for name, l := range map[string]Log{"memory": NewMemLog(config.EventLogLimits{}, time.Now), "redis": rl} {
		t.Run(name, func(t *testing.T) {
			cl := l
			id := "ck-" + name
			open(t, l, id, "k")
			appendRun(l, id, 3, false)
			if seq, data, err := cl.Checkpoint(id); err != nil || seq != 0 || data != nil {
				t.Fatalf("before any: %d %q %v", seq, data, err)
			}
			cl.SaveCheckpoint(id, 2, []byte("first"))
			cl.SaveCheckpoint(id, 3, []byte(`{"machine": 1} two words`))
			if seq, data, err := cl.Checkpoint(id); err != nil || seq != 3 || string(data) != `{"machine": 1} two words` {
				t.Fatalf("the last saved: %d %q %v", seq, data, err)
			}
			l.End(id, nil, logEvent(4, true), nil)
			if _, data, err := cl.Checkpoint(id); err != nil || data != nil {
				t.Fatalf("after the end: %q %v", data, err)
			}
		})
	}
	t.Run("redis fenced and counted", func(t *testing.T) {
		ctx := context.Background()
		ls := NewRedisLeases(rdb, time.Minute)
		open(t, rl, "ck-f", "k")
		appendRun(rl, "ck-f", 1, false)
		size := func() int64 {
			n, err := rdb.HGet(ctx, redisLogSizes, "ck-f").Int64()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		events := size()
		a, err := ls.Acquire(ctx, "ck-f", "A")
		if err != nil {
			t.Fatal(err)
		}
		rl.Fence("ck-f", a)
		rl.SaveCheckpoint("ck-f", 1, []byte("by A"))
		if got := size(); got != events+int64(len("1 by A")) {
			t.Fatalf("size %d, want the events' %d and the checkpoint's", got, events)
		}
		if err := ls.Release(ctx, a); err != nil {
			t.Fatal(err)
		}
		if _, err := ls.Acquire(ctx, "ck-f", "B"); err != nil {
			t.Fatal(err)
		}
		rl.SaveCheckpoint("ck-f", 1, []byte("by A, after B took it"))
		if _, data, _ := rl.Checkpoint("ck-f"); string(data) != "by A" {
			t.Fatalf("a fenced writer replaced the checkpoint: %q", data)
		}
		rl.Unfence("ck-f")
		rl.End("ck-f", nil, logEvent(2, true), nil)
		if _, data, _ := rl.Checkpoint("ck-f"); data != nil {
			t.Fatalf("after the end: %q", data)
		}
		if got, want := size(), events+int64(len(mustMarshal(t, logEvent(2, true)))); got != want {
			t.Fatalf("size after the end %d, want %d: the checkpoint's bytes went with it", got, want)
		}
	})
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
