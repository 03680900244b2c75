package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

// fakeFlush is a committer's flush that records each batch and answers
// "ok" to every write; gate, when set, holds each flush until it is
// closed or gives a token, and hold holds a flush that writes holdID
// likewise.
type fakeFlush struct {
	mu      sync.Mutex
	batches [][]commitWrite
	started int
	gate    chan struct{}
	once    sync.Once
	holdID  string
	hold    chan struct{}
	// seen, when set, sees each flush's writes first.
	seen func([]commitWrite)
}

// open lets every flush through from now on.
func (f *fakeFlush) open() {
	if f.gate != nil {
		f.once.Do(func() { close(f.gate) })
	}
}

// flushing is the number of flushes started.
func (f *fakeFlush) flushing() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.started
}

func (f *fakeFlush) flush(ws []commitWrite) ([]string, []string, error) {
	if f.seen != nil {
		f.seen(ws)
	}
	f.mu.Lock()
	f.started++
	f.mu.Unlock()
	if f.gate != nil {
		<-f.gate
	}
	if f.hold != nil && slices.ContainsFunc(ws, func(w commitWrite) bool { return w.id == f.holdID }) {
		<-f.hold
	}
	f.mu.Lock()
	f.batches = append(f.batches, slices.Clone(ws))
	f.mu.Unlock()
	replies := make([]string, len(ws))
	for i := range replies {
		replies[i] = "ok"
	}
	return replies, nil, nil
}

func (f *fakeFlush) sizes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int
	for _, b := range f.batches {
		out = append(out, len(b))
	}
	return out
}

func newTestCommitter(t *testing.T, f *fakeFlush, wait time.Duration) *committer {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) }) // after c.close

	c := newCommitter(f.flush, func([]string) {}, func() time.Duration { return wait }, func(int) {}, func(time.Duration) {})
	t.Cleanup(c.close)
	t.Cleanup(f.open) // first: a test that failed leaves no flush at the gate
	return c
}

// TestCommitterIdleAddsNoWait: one writer's appends go one per flush,
// each at once, however long a flush may wait under load (an hour here:
// the test would hang if a write of an idle replica waited for company).
func TestCommitterIdleAddsNoWait(t *testing.T) {
	f := &fakeFlush{}
	c := newTestCommitter(t, f, time.Hour)
	for seq := range uint64(50) {
		if res, err := c.write(commitWrite{id: "a", seq: seq + 1}); res != "ok" || err != nil {
			t.Fatalf("write %d: %q %v", seq+1, res, err)
		}
	}
	if got := f.sizes(); len(got) != 50 || slices.Max(got) != 1 {
		t.Fatalf("batches %v, want 50 of one write", got)
	}
}

// TestCommitterIdleWriterFlushesItself: a write that finds the committer
// idle is flushed on its writer's goroutine, without a hand-off; one that
// arrives while a flush is in flight goes with the next batch, which a
// flusher writes; and after a flush of several writes (a replica under
// load), the next write waits for company rather than going alone.
func TestCommitterIdleWriterFlushesItself(t *testing.T) {
	var mu sync.Mutex
	byWriter := map[string]bool{}
	f := &fakeFlush{gate: make(chan struct{}), seen: func(ws []commitWrite) {
		buf := make([]byte, 64<<10)
		here := strings.Contains(string(buf[:runtime.Stack(buf, false)]), "(*committer).write")
		mu.Lock()
		defer mu.Unlock()
		for _, w := range ws {
			byWriter[w.id] = here
		}
	}}
	c := newTestCommitter(t, f, time.Hour)

	idle := make(chan error, 1)
	go func() { _, err := c.write(commitWrite{id: "idle"}); idle <- err }()
	waitFor(t, func() bool { return f.flushing() == 1 }) // held at the gate
	beside := make(chan error, 2)
	for _, id := range []string{"b1", "b2"} {
		go func() { _, err := c.write(commitWrite{id: id}); beside <- err }()
	}
	waitFor(t, func() bool { return c.pending() == 2 })
	f.open()
	for _, ch := range []chan error{idle, beside, beside} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	// The last flush carried two: the next write is not alone, but waits
	// (an hour here) for company, until an urgent one comes.
	after := make(chan error, 1)
	go func() { _, err := c.write(commitWrite{id: "after"}); after <- err }()
	waitFor(t, func() bool { return c.pending() == 1 })
	if _, err := c.write(commitWrite{id: "urgent", urgent: true}); err != nil {
		t.Fatal(err)
	}
	if err := <-after; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]bool{"idle": true, "b1": false, "b2": false, "after": false, "urgent": false}
	if !maps.Equal(byWriter, want) {
		t.Fatalf("flushed by their writers: %v, want %v", byWriter, want)
	}
}

// TestCommitterAlone: when a writer may flush alone — never beside a
// flush in flight, a batch pending or taken to launch (it would go ahead
// of their writes of its log), or after a flush of several writes.
func TestCommitterAlone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state func(c *committer)
		alone bool
	}{
		{"idle", func(*committer) {}, true},
		{"after a flush of one", func(c *committer) { c.last = 1 }, true},
		{"after a flush of several", func(c *committer) { c.last = 2 }, false},
		{"a flush in flight", func(c *committer) { c.flights = 1 }, false},
		{"a batch pending", func(c *committer) { c.next.writes = []commitWrite{{id: "a"}} }, false},
		{"a batch taken, not launched", func(c *committer) { c.taken = true }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &committer{next: newCommitBatch(), writing: map[string]int{}}
			tc.state(c)
			flights := c.flights
			b := c.alone(commitWrite{id: "w"})
			if (b != nil) != tc.alone {
				t.Fatalf("alone: %v, want %v", b != nil, tc.alone)
			}
			if b == nil {
				return
			}
			if len(b.writes) != 1 || b.writes[0].id != "w" || c.flights != flights+1 || c.writing["w"] != 1 || c.last != 1 {
				t.Fatalf("batch %v, flights %d, writing %v, last %d: want w alone, counted in flight", b.writes, c.flights, c.writing, c.last)
			}
		})
	}
}

// TestCommitterPartialFlush: a flush that answers some writes and fails
// the others (on a Cluster, one node's calls) gives each write its own
// outcome: a reply, or the flush's error for a write without one.
func TestCommitterPartialFlush(t *testing.T) {
	failed := errors.New("node down")
	flush := func(ws []commitWrite) ([]string, []string, error) {
		replies := make([]string, len(ws))
		for i, w := range ws {
			if w.id != "down" {
				replies[i] = "ok"
			}
		}
		return replies, nil, failed
	}
	c := newCommitter(flush, func([]string) {}, func() time.Duration { return time.Millisecond }, func(int) {}, func(time.Duration) {})
	t.Cleanup(c.close)
	ids := []string{"up", "down", "up2"}
	res, errs := make([]string, len(ids)), make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { res[i], errs[i] = c.write(commitWrite{id: id}) })
	}
	wg.Wait()
	for i, id := range ids {
		if want := id == "down"; (errs[i] != nil) != want || !want && res[i] != "ok" || want && !errors.Is(errs[i], failed) {
			t.Errorf("%s: %q, %v", id, res[i], errs[i])
		}
	}
}

// TestCommitterGroupsWhatArrivesDuringAFlush: the writes that arrive
// while a flush is in flight go together in the next one, each released
// with its own reply, in arrival order. (The flush in flight lands within
// the committer's wait, an hour here: no second flight.)
func TestCommitterGroupsWhatArrivesDuringAFlush(t *testing.T) {
	f := &fakeFlush{gate: make(chan struct{})}
	c := newTestCommitter(t, f, time.Hour)
	var wg sync.WaitGroup
	first := make(chan error, 1)
	go func() { _, err := c.write(commitWrite{id: "first"}); first <- err }()
	waitFor(t, func() bool { return f.flushing() == 1 }) // its flush waits at the gate
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res, err := c.write(commitWrite{id: fmt.Sprint("c", i)}); err != nil || res != "ok" {
				errs <- fmt.Errorf("write c%d: %q %v", i, res, err)
			}
		}()
	}
	waitFor(t, func() bool { return c.pending() == 100 })
	f.open()
	waitGroup(t, &wg)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := f.sizes(); !slices.Equal(got, []int{1, 100}) {
		t.Fatalf("batches %v, want [1 100]", got)
	}
}

// TestCommitterWaitsUnderLoadAtMostItsWait: after a flush of several
// writes, the next waits for more, up to the committer's wait after its
// first write; a full batch does not wait. Each flush here waits for a
// token on the gate; past its wait, or full, a batch goes beside the one
// in flight, so the two may take their tokens in either order.
func TestCommitterWaitsUnderLoadAtMostItsWait(t *testing.T) {
	f := &fakeFlush{gate: make(chan struct{})}
	c := newTestCommitter(t, f, time.Hour) // until [b c] is in flight: nothing goes beside [a]
	var wg sync.WaitGroup
	write := func(id string) {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = c.write(commitWrite{id: id}) }()
	}
	write("a")
	waitFor(t, func() bool { return f.flushing() == 1 }) // [a] at the gate
	write("b")
	write("c")
	waitFor(t, func() bool { return c.pending() == 2 })
	f.gate <- struct{}{} // [a] flushed; [b c] goes at once (the last had one), to the gate
	waitFor(t, func() bool { return f.flushing() == 2 })
	c.wait = func() time.Duration { return 50 * time.Millisecond } // read under mu, after the next write's
	start := time.Now()
	write("d")
	// The last had two: [d] waits 50ms for more, then goes beside [b c].
	waitFor(t, func() bool { return f.flushing() == 3 })
	f.gate <- struct{}{}
	f.gate <- struct{}{}
	waitGroup(t, &wg)
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Errorf("a write under load went after %v, want it to wait 50ms for more", waited)
	}

	// A full batch goes at once, however long the wait.
	c.wait = func() time.Duration { return time.Hour }
	write("x")
	waitFor(t, func() bool { return f.flushing() == 4 })
	write("y1")
	write("y2")
	waitFor(t, func() bool { return c.pending() == 2 })
	f.gate <- struct{}{} // [x] flushed; [y1 y2] at the gate
	waitFor(t, func() bool { return f.flushing() == 5 })
	for i := range commitMaxEvents {
		write(fmt.Sprint("full", i))
	}
	// The next would wait an hour, but it is full: it goes at once,
	// beside [y1 y2] at the gate.
	waitFor(t, func() bool { return f.flushing() == 6 })
	f.gate <- struct{}{}
	f.gate <- struct{}{}
	waitGroup(t, &wg)
	if got := f.sizes(); !slices.Equal(slices.Sorted(slices.Values(got)), []int{1, 1, 1, 2, 2, commitMaxEvents}) {
		t.Fatalf("batches %v, want 1, 2, 1, 1, 2 and %d in some order", got, commitMaxEvents)
	}
}

// TestCommitterUrgentWriteWaitsLittle: a batch that holds an urgent write
// (an event a caller waits on) waits for more at most urgentWait, however
// long the committer waits for more under load (an hour here): beside the
// flush in flight, and with none in flight.
func TestCommitterUrgentWriteWaitsLittle(t *testing.T) {
	f := &fakeFlush{gate: make(chan struct{})}
	c := newTestCommitter(t, f, time.Hour)
	var wg sync.WaitGroup
	write := func(id string, urgent bool) {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = c.write(commitWrite{id: id, urgent: urgent}) }()
	}
	write("a", false)
	waitFor(t, func() bool { return f.flushing() == 1 }) // [a] at the gate
	write("b", false)
	write("c", false)
	waitFor(t, func() bool { return c.pending() == 2 })
	f.gate <- struct{}{} // [a] lands; [b c] goes at once (the last had one), to the gate
	waitFor(t, func() bool { return f.flushing() == 2 })

	// The last had two: [d] would wait an hour for more; the urgent write
	// brings its time to go forward, and it goes beside [b c].
	write("d", false)
	waitFor(t, func() bool { return c.pending() == 1 })
	write("u", true)
	waitFor(t, func() bool { return f.flushing() == 3 })
	f.open()
	waitGroup(t, &wg)

	// The last had two, none is in flight: an urgent write alone lingers
	// urgentWait, not an hour.
	write("v", true)
	waitGroup(t, &wg)
	got := f.batchesCopy()
	ids := func(b []commitWrite) string {
		var s []string
		for _, w := range b {
			s = append(s, w.id)
		}
		slices.Sort(s) // b and c arrive in either order
		return strings.Join(s, " ")
	}
	var all []string
	for _, b := range got {
		all = append(all, ids(b))
	}
	slices.Sort(all)
	if want := []string{"a", "b c", "d u", "v"}; !slices.Equal(all, want) {
		t.Fatalf("batches %q, want %q", all, want)
	}
}

// TestCommitterSecondFlight: while a flush is in flight, the next batch
// goes beside it once its first write has waited the committer's wait,
// not before; with two in flight, a third waits for one to land; and a
// batch that writes a log a flush in flight writes waits for that one,
// so that a log's events are appended in order.
func TestCommitterSecondFlight(t *testing.T) {
	const wait = 30 * time.Millisecond
	f := &fakeFlush{holdID: "slow", hold: make(chan struct{})}
	c := newTestCommitter(t, f, wait)
	t.Cleanup(func() { close(f.hold) })
	slow := make(chan error, 2)
	go func() { _, err := c.write(commitWrite{id: "slow", seq: 1}); slow <- err }()
	waitFor(t, func() bool { return f.flushing() == 1 }) // held
	start := time.Now()
	beside := make(chan error, 1)
	go func() {
		res, err := c.write(commitWrite{id: "b"})
		if err == nil && res != "ok" {
			err = fmt.Errorf("reply %q", res)
		}
		beside <- err
	}()
	select {
	case err := <-beside:
		if err != nil {
			t.Fatalf("a write beside a held flush: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a write of another log waits for the held flush: no second flight")
	}
	if waited := time.Since(start); waited < wait {
		t.Errorf("the second flight started after %v, want it to wait %v for the first to land", waited, wait)
	}

	// The same log as the held flush: it waits for it, however long.
	again := make(chan error, 1)
	go func() { _, err := c.write(commitWrite{id: "slow", seq: 2}); again <- err }()
	waitFor(t, func() bool { return c.pending() == 0 }) // taken, waiting to launch
	time.Sleep(3 * wait)
	if n := f.flushing(); n != 2 {
		t.Fatalf("%d flushes started, want 2: the second write of the held log must wait for the first", n)
	}
	// Meanwhile, the other logs' writes wait too: launches go in order.
	other := make(chan error, 1)
	go func() { _, err := c.write(commitWrite{id: "c"}); other <- err }()
	f.hold <- struct{}{} // the first write of slow lands
	for _, ch := range []chan error{slow, again, other} {
		if ch == again {
			f.hold <- struct{}{} // its own flush holds it too
		}
		select {
		case err := <-ch:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a write still waits")
		}
	}
	var slowSeqs []uint64
	for _, b := range f.batchesCopy() {
		for _, w := range b {
			if w.id == "slow" {
				slowSeqs = append(slowSeqs, w.seq)
			}
		}
	}
	if !slices.Equal(slowSeqs, []uint64{1, 2}) {
		t.Fatalf("the held log's writes flushed as %v, want [1 2]", slowSeqs)
	}
}

func (f *fakeFlush) batchesCopy() [][]commitWrite {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.batches)
}

// waitGroup waits for wg, for at most 30 s.
func waitGroup(t *testing.T, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("writes still waiting after 30s")
	}
}

// TestCommitterClose: what is pending is flushed; a write after Close
// fails as a Redis that does not answer.
func TestCommitterClose(t *testing.T) {
	f := &fakeFlush{gate: make(chan struct{})}
	c := newCommitter(f.flush, func([]string) {}, func() time.Duration { return time.Hour }, func(int) {}, func(time.Duration) {}) // b waits for a
	done := make(chan error, 2)
	go func() { _, err := c.write(commitWrite{id: "a"}); done <- err }()
	waitFor(t, func() bool { return f.flushing() == 1 })
	go func() { _, err := c.write(commitWrite{id: "b"}); done <- err }()
	waitFor(t, func() bool { return c.pending() == 1 })
	closed := make(chan struct{})
	go func() { c.close(); close(closed) }()
	f.open()
	<-closed
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("a write pending at Close: %v", err)
		}
	}
	if _, err := c.write(commitWrite{id: "c"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a write after Close: %v, want ErrUnavailable", err)
	}
}

// TestCommitterReusesEmptiedBatches: the slice of a flush that landed
// serves a later batch, emptied first (no event of it kept), and never
// while a flush still reads it: every write, among many at once, gets
// its own reply, which the flush reads from its batch.
func TestCommitterReusesEmptiedBatches(t *testing.T) {
	echo := func(ws []commitWrite) ([]string, []string, error) {
		replies := make([]string, len(ws))
		for i, w := range ws {
			time.Sleep(time.Microsecond) // a flush in flight while the next batch fills
			replies[i] = w.id + "/" + string(w.event)
		}
		return replies, nil, nil
	}
	before := goleak.IgnoreCurrent()
	c := newCommitter(echo, func([]string) {}, func() time.Duration { return 100 * time.Microsecond }, func(int) {}, func(time.Duration) {})
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for w := range 50 {
		wg.Go(func() {
			for seq := range 40 {
				id, ev := fmt.Sprint("c", w), strconv.Itoa(seq)
				if res, err := c.write(commitWrite{id: id, event: []byte(ev)}); err != nil || res != id+"/"+ev {
					select {
					case errs <- fmt.Errorf("write %s %s: %q %v", id, ev, res, err):
					default:
					}
					return
				}
			}
		})
	}
	waitGroup(t, &wg)
	c.close()
	goleak.VerifyNone(t, before)
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.spare) == 0 || len(c.spare) > commitFlights+1 {
		t.Fatalf("%d spare slices, want 1 to %d", len(c.spare), commitFlights+1)
	}
	for _, ws := range c.spare {
		if len(ws) != 0 || slices.ContainsFunc(ws[:cap(ws)], func(w commitWrite) bool { return w.event != nil || w.id != "" }) {
			t.Fatalf("a spare slice of %d writes, or holding one: %v", len(ws), ws[:cap(ws)])
		}
	}
}

// TestCommitCallAllocations: the call of a flush is built in one slice,
// from the keys and id its writers keep, so that a write adds only the
// boxing of its own values (its event, seq and fence): about a dozen
// allocations per write when each call built its keys and its groups.
func TestCommitCallAllocations(t *testing.T) {
	const n = 64
	writes := make([]commitWrite, n)
	for i := range writes {
		id := fmt.Sprint("c", i)
		writes[i] = commitWrite{id: id, seq: 1000, event: []byte("event"), fence: "7 r1", args: newCommitArgs(oneRedis, id), size: 5}
	}
	args := []any{"now", "retention", "maxe", "maxb", "ttl", redisLogChanged}
	if got := testing.AllocsPerRun(20, func() { commitCall(oneRedis, args, writes) }); got > 3*n+8 {
		t.Fatalf("%.0f allocations for a call of %d writes, want %d at most", got, n, 3*n+8)
	}
}

func TestCommitChunks(t *testing.T) {
	big := make([]byte, commitMaxBytes/2+1)
	for _, tc := range []struct {
		name   string
		writes []commitWrite
		want   []int
	}{
		{"one", make([]commitWrite, 1), []int{1}},
		{"at the bound of events", make([]commitWrite, commitMaxEvents), []int{commitMaxEvents}},
		{"past it", make([]commitWrite, 2*commitMaxEvents+1), []int{commitMaxEvents, commitMaxEvents, 1}},
		{"bytes", []commitWrite{{event: big}, {event: big}, {}, {event: big}}, []int{1, 2, 1}},
		{"one write above the bound of bytes goes alone", []commitWrite{{}, {event: make([]byte, 2*commitMaxBytes)}, {}}, []int{1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []int
			for _, ch := range commitChunks(tc.writes) {
				got = append(got, len(ch))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("chunks %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRedisLogGroupCommit: many completions appending at once share
// flushes (fewer Redis commands than events: commandstats counts them),
// each Append returns once Redis holds its event, and every log is whole
// and in order.
func TestRedisLogGroupCommit(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	l := NewRedisLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(l.Close)
	const completions, events = 40, 25
	for i := range completions {
		open(t, l, fmt.Sprint("g", i), "k")
	}
	before := scriptCalls(t, rdb)
	var wg sync.WaitGroup
	errs := make(chan error, completions)
	for i := range completions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprint("g", i)
			for seq := range uint64(events) {
				if err := l.Append(id, logEvent(seq+1, false)); err != nil {
					errs <- err
					return
				}
				// Acknowledged: Redis holds it already.
				if n := rdb.XLen(context.Background(), redisLogKey(id)).Val(); n != int64(seq+1) {
					errs <- fmt.Errorf("%s: Append of seq %d returned with %d events in Redis", id, seq+1, n)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	calls := scriptCalls(t, rdb) - before
	if calls >= completions*events {
		t.Errorf("%d script calls for %d appends: no group commit", calls, completions*events)
	}
	t.Logf("%d appends in %d script calls", completions*events, calls)
	for i := range completions {
		p, err := l.Read(fmt.Sprint("g", i), 0)
		if err != nil || len(p.Events) != events || p.Events[events-1].GetSeq() != events {
			t.Fatalf("g%d: %d events, %v", i, len(p.Events), err)
		}
	}
}

// holdFlush holds the first pipeline sent after arm (a flush of the group
// commit) until release is closed; held is closed once it is held.
type holdFlush struct {
	armed   atomic.Bool
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

func (h *holdFlush) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *holdFlush) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *holdFlush) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.armed.CompareAndSwap(true, false) {
			h.once.Do(func() { close(h.held) })
			<-h.release
		}
		return next(ctx, cmds)
	}
}

// TestRedisLogCommitDelay: CommitDelay is how long the group commit waits
// for company once other completions write (a flush carried several
// appends), config.DefaultRedisCommitDelay when unset.
func TestRedisLogCommitDelay(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	hold := &holdFlush{held: make(chan struct{}), release: make(chan struct{})}
	rdb.AddHook(hold)
	l := NewRedisLog(rdb, config.EventLogLimits{}, nil)
	if got := l.commitDelay(); got != config.DefaultRedisCommitDelay {
		t.Errorf("commit delay %v unset, want %v", got, config.DefaultRedisCommitDelay)
	}
	const delay = 150 * time.Millisecond
	l.CommitDelay = delay
	t.Cleanup(l.Close)
	flushOfTwo(t, l, hold)
	// The last flush carried two: the next append waits for company, up to
	// the delay (a timer: the machine's load can only make it longer).
	start := time.Now()
	if err := l.Append("a", logEvent(3, false)); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < delay {
		t.Errorf("an append after a flush of two went after %v, want it to wait %v for company", waited, delay)
	}
}

// TestRedisLogAwaitedEventsWaitLittle: the events a caller waits on — a
// completion's first output of an attempt (its time to first token), a
// stop-hook request, the end — wait for company at most urgentWait (the
// default commit delay), however long the commit delay, where any other
// append would wait for the delay.
func TestRedisLogAwaitedEventsWaitLittle(t *testing.T) {
	retry := logEvent(3, false)
	retry.Attempt = 1
	hook := &completionv1.CompletionEvent{Seq: 3, Event: &completionv1.CompletionEvent_StopHookRequest{StopHookRequest: &completionv1.StopHookRequest{}}}
	for _, c := range []struct {
		name  string
		write func(l *RedisLog) error
	}{
		{"a retry's first token", func(l *RedisLog) error { return l.Append("a", retry) }},
		{"a stop-hook request", func(l *RedisLog) error { return l.Append("a", hook) }},
		{"the end", func(l *RedisLog) error { return l.End("a", nil, logEvent(3, true), nil) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			rdb := testkit.ServerRedisClient(t, redistest.Start(t))
			hold := &holdFlush{held: make(chan struct{}), release: make(chan struct{})}
			rdb.AddHook(hold)
			l := NewRedisLog(rdb, config.EventLogLimits{}, nil)
			l.CommitDelay = time.Hour
			t.Cleanup(l.Close)
			flushOfTwo(t, l, hold)
			done := make(chan error, 1)
			go func() { done <- c.write(l) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("it waits for company (the commit delay is an hour)")
			}
		})
	}
}

// flushOfTwo opens the logs a, b and c, appends each one's first token
// (seq 1, alone), then makes the group commit flush two appends together
// (seq 2 of b and c, while the flush of a's is held by hold): the next
// append waits for company.
func flushOfTwo(t *testing.T, l *RedisLog, hold *holdFlush) {
	t.Helper()
	for _, id := range []string{"a", "b", "c"} {
		open(t, l, id, "k")
		if err := l.Append(id, logEvent(1, false)); err != nil {
			t.Fatal(err)
		}
	}
	appendAsync := func(id string) <-chan error {
		done := make(chan error, 1)
		go func() { done <- l.Append(id, logEvent(2, false)) }()
		return done
	}
	hold.armed.Store(true)
	a := appendAsync("a")
	<-hold.held // [a] in flight
	b, c := appendAsync("b"), appendAsync("c")
	waitFor(t, func() bool { return l.commit.pending() == 2 })
	close(hold.release) // [a] lands, then [b c] goes at once
	for _, done := range []<-chan error{a, b, c} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestRedisLogGroupCommitFencesEachCompletion: in one call, the append of
// a completion whose lease another replica holds is refused, and the
// others' go in; a log missing or ended says so; one notice wakes the
// followers of every log appended.
func TestRedisLogGroupCommitFencesEachCompletion(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	ctx := context.Background()
	l := NewRedisLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(l.Close)
	for _, id := range []string{"mine", "theirs", "done"} {
		open(t, l, id, "k")
	}
	appendRun(l, "done", 1, true)
	if err := rdb.Set(ctx, LeaseKey("theirs"), "7 B", 0).Err(); err != nil {
		t.Fatal(err)
	}
	follower := NewRedisLog(rdb, config.EventLogLimits{}, nil) // another replica's
	t.Cleanup(follower.Close)
	var more []<-chan struct{}
	for _, id := range []string{"mine", "theirs"} {
		p, err := follower.Read(id, 0)
		if err != nil {
			t.Fatal(err)
		}
		more = append(more, p.More)
	}
	ev := func(seq uint64) []byte { return []byte(fmt.Sprint("event ", seq)) }
	replies, _, err := l.commitWrites(ctx, []commitWrite{
		{id: "mine", seq: 1, event: ev(1), fence: "3 A", renew: true},
		{id: "theirs", seq: 1, event: ev(1), fence: "3 A", renew: true},
		{id: "absent", seq: 1, event: ev(1), renew: true},
		{id: "done", seq: 5, event: ev(5), renew: true},
		{id: "mine", seq: 2, event: ev(2), fence: "3 A"},
		// Without renew: a log that is not there is missing all the same,
		// and a fenced write whose lease is gone finds the log ended.
		{id: "absent", seq: 2, event: ev(2)},
		{id: "done", seq: 6, event: ev(6), fence: "3 A"},
	})
	// The renewal of mine, which a replica follows, answers okf.
	if want := []string{commitOKFollowed, "fenced", "missing", "ended", "ok", "missing", "ended"}; err != nil || !slices.Equal(replies, want) {
		t.Fatalf("replies %v %v, want %v", replies, err, want)
	}
	if n := rdb.XLen(ctx, redisLogKey("theirs")).Val(); n != 0 {
		t.Fatalf("the fenced log holds %d events", n)
	}
	if n := rdb.XLen(ctx, redisLogKey("mine")).Val(); n != 2 {
		t.Fatalf("mine holds %d events, want 2", n)
	}
	select {
	case <-more[0]:
	case <-time.After(10 * time.Second):
		t.Fatal("the follower of a log appended in a group was not woken")
	}
	select {
	case <-more[1]:
		t.Fatal("the follower of the fenced log was woken")
	default:
	}
}

// TestRedisLogGroupCommitJoinsRequests: a write without an event is a
// request joining its log, in the same call as other writes: it replaces
// the log's meta only while the log's lease is the writer's (a lease gone
// refuses it, unlike an event's write), and only in a log there and not
// ended; it adds no entry, and an event of the log after it in the call
// goes in as usual.
func TestRedisLogGroupCommitJoinsRequests(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	ctx := context.Background()
	l := NewRedisLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(l.Close)
	for _, id := range []string{"mine", "theirs", "lapsed", "done"} {
		open(t, l, id, "k")
	}
	appendRun(l, "done", 1, true)
	for id, lease := range map[string]string{"mine": "3 A", "theirs": "7 B", "done": "3 A", "absent": "3 A"} {
		if err := rdb.Set(ctx, LeaseKey(id), lease, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	meta := func(id string) string { return rdb.HGet(ctx, redisMetaKey(id), "m").Val() }
	before := map[string]string{}
	for _, id := range []string{"theirs", "lapsed", "done"} {
		before[id] = meta(id)
	}
	join := func(id string) commitWrite { return commitWrite{id: id, fence: "3 A", meta: "request of " + id} }
	replies, _, err := l.commitWrites(ctx, []commitWrite{
		join("mine"), join("theirs"), join("lapsed"), join("done"), join("absent"),
		{id: "mine", seq: 1, event: []byte("event 1"), fence: "3 A", renew: true},
	})
	if want := []string{"ok", "fenced", "fenced", "missing", "missing", "ok"}; err != nil || !slices.Equal(replies, want) {
		t.Fatalf("replies %v %v, want %v", replies, err, want)
	}
	if got := meta("mine"); got != "request of mine" {
		t.Errorf("mine's meta %q, want its request", got)
	}
	for id, was := range before {
		if got := meta(id); got != was {
			t.Errorf("%s's meta %q after a refused join, want %q", id, got, was)
		}
	}
	if n := rdb.XLen(ctx, redisLogKey("mine")).Val(); n != 1 {
		t.Errorf("mine holds %d entries, want its one event: a join adds none", n)
	}
	if n := rdb.Exists(ctx, redisMetaKey("absent"), redisLogKey("absent")).Val(); n != 0 {
		t.Errorf("a join made %d keys of a log that is not there", n)
	}
}

// TestRedisLogEndGivesTheLeaseUp: the fenced write that ends a log
// deletes the writer's lease with the end, and Unfence says so once, so
// that the owner does not release it in a call of its own; an end without
// a lease, or refused by another's, gives nothing up.
func TestRedisLogEndGivesTheLeaseUp(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	ctx := context.Background()
	l := NewRedisLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(l.Close)
	mine := Lease{ID: "mine", Token: 3, Replica: "A"}
	for _, tc := range []struct {
		id, lease      string // the lease in Redis at the end ("": none)
		fence          bool   // the writer fences its writes with mine
		leaseAfter     string
		released, ends bool
	}{
		{id: "mine", lease: mine.Value(), fence: true, released: true, ends: true},
		{id: "lapsed", fence: true, ends: true}, // nothing was deleted: no release claimed
		{id: "theirs", lease: "7 B", fence: true, leaseAfter: "7 B"},
		{id: "unfenced", lease: "5 C", leaseAfter: "5 C", ends: true},
	} {
		open(t, l, tc.id, "k")
		if tc.fence {
			l.Fence(tc.id, Lease{ID: tc.id, Token: mine.Token, Replica: mine.Replica})
		}
		if tc.lease != "" {
			if err := rdb.Set(ctx, LeaseKey(tc.id), tc.lease, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		err := l.End(tc.id, nil, logEvent(1, true), nil)
		if ended := rdb.HExists(ctx, redisMetaKey(tc.id), "ended").Val(); ended != tc.ends || (err != nil) == tc.ends {
			t.Errorf("%s: ended %t (%v), want %t", tc.id, ended, err, tc.ends)
		}
		if got := rdb.Get(ctx, LeaseKey(tc.id)).Val(); got != tc.leaseAfter {
			t.Errorf("%s: lease %q after the end, want %q", tc.id, got, tc.leaseAfter)
		}
		if released := l.Unfence(tc.id); released != tc.released {
			t.Errorf("%s: Unfence says released %t, want %t", tc.id, released, tc.released)
		}
		if l.Unfence(tc.id) {
			t.Errorf("%s: Unfence says released twice", tc.id)
		}
	}
}

// TestRedisLogGroupCommitLoadsItsScript: a Redis that lost its scripts
// (restarted, SCRIPT FLUSH) is given the commit script again.
func TestRedisLogGroupCommitLoadsItsScript(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	l := NewRedisLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(l.Close)
	open(t, l, "a", "k")
	appendRun(l, "a", 2, false)
	if err := rdb.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if res, err := l.add("a", nil, logEvent(3, false), nil, false); res != "ok" || err != nil {
		t.Fatalf("append after SCRIPT FLUSH: %q %v", res, err)
	}
}

// scriptCalls is the number of script calls (EVALSHA and EVAL) Redis has
// served.
func scriptCalls(t *testing.T, rdb redis.UniversalClient) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	return parseRedisStats(info).calls
}

// pending is the number of writes waiting for the next flush.
func (c *committer) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.next.writes)
}

// waitFor polls cond until it holds, for at most 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRedisLogNotifiesFollowedLogsOnly: an append publishes a notice only
// for a log that a replica's Read marked followed, so that the replicas
// are not woken by every append of every other replica.
func TestRedisLogNotifiesFollowedLogsOnly(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := NewRedisLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(l.Close)
	open(t, l, "quiet", "k")
	open(t, l, "watched", "k")
	if _, err := l.Read("watched", 0); err != nil { // another replica's follower
		t.Fatal(err)
	}
	ps := rdb.Subscribe(ctx, redisLogChanged)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	appendRun(l, "quiet", 2, false)
	appendRun(l, "watched", 1, false)
	msg, err := ps.ReceiveMessage(ctx)
	if err != nil || msg.Payload != "watched 1" {
		t.Fatalf("first notice %v %v, want watched 1 alone", msg, err)
	}
}

// TestRedisLogNotifiesAnnouncedFollowers: a writer looks for followers
// only at a log's renewals and end; a follower that comes in between
// announces itself, and the writer then publishes a notice of each event
// without looking the mark up.
func TestRedisLogNotifiesAnnouncedFollowers(t *testing.T) {
	rdb := testkit.ServerRedisClient(t, redistest.Start(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := NewRedisLog(rdb, config.EventLogLimits{}, nil)
	t.Cleanup(w.Close)
	f := NewRedisLog(rdb, config.EventLogLimits{}, nil) // another replica's follower
	t.Cleanup(f.Close)
	for _, id := range []string{"quiet", "c", "e"} {
		open(t, w, id, "k")
		appendRun(w, id, 1, false) // the first write renews: nobody follows yet
	}
	exists := func() int64 {
		t.Helper()
		info, err := rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_exists:calls="); ok {
				n, _ := strconv.ParseInt(strings.Split(v, ",")[0], 10, 64)
				return n
			}
		}
		return 0
	}
	before := exists()
	appendOne(t, w, "quiet", 2)
	if n := exists() - before; n != 0 {
		t.Fatalf("an append between renewals looked %d keys up, want none", n)
	}

	ps := rdb.Subscribe(ctx, redisLogChanged)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Read("c", 1); err != nil {
		t.Fatal(err)
	}
	if msg, err := ps.ReceiveMessage(ctx); err != nil || msg.Payload != redisFollowedNotice+"c" {
		t.Fatalf("after the follower's first read: %v %v, want its announce", msg, err)
	}
	waitFor(t, func() bool {
		lw, ok := w.writing.Load("c")
		return ok && lw.(*logWriter).followed.Load()
	})
	appendOne(t, w, "c", 2)
	if msg, err := ps.ReceiveMessage(ctx); err != nil || msg.Payload != "c 2" {
		t.Fatalf("the next event of the announced log: %v %v, want its notice", msg, err)
	}

	// An end looks the mark up itself: noticed even if the writer has not
	// heard the announce yet.
	if _, err := rdb.Set(ctx, redisFollowedKey("e"), 1, time.Minute).Result(); err != nil {
		t.Fatal(err)
	}
	if err := w.End("e", nil, logEvent(2, true), nil); err != nil {
		t.Fatal(err)
	}
	if msg, err := ps.ReceiveMessage(ctx); err != nil || msg.Payload != "e 2" {
		t.Fatalf("the end of a marked log: %v %v, want its notice", msg, err)
	}

	// A follower of an ended log has nothing to wait for: no announce.
	if _, err := f.Read("e", 0); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, redisFollowedKey("e")).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Read("e", 0); err != nil { // marks it afresh
		t.Fatal(err)
	}
	if err := rdb.Publish(ctx, redisLogChanged, "sentinel").Err(); err != nil {
		t.Fatal(err)
	}
	if msg, err := ps.ReceiveMessage(ctx); err != nil || msg.Payload != "sentinel" {
		t.Fatalf("after reads of an ended log: %v %v, want no announce", msg, err)
	}
}

// appendOne appends event seq to id, failing the test unless Redis took it.
func appendOne(t *testing.T, l *RedisLog, id string, seq uint64) {
	t.Helper()
	if res, err := l.add(id, nil, logEvent(seq, false), nil, false); res != "ok" || err != nil {
		t.Fatalf("append %d to %s: %q %v", seq, id, res, err)
	}
}
