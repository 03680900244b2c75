package providertest

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// runLimit bounds Run, so that a provider that hangs fails its test. It
// is a hang guard, not a timing: long enough that an attempt of the
// largest event under -race on a machine at load 10 finishes within it (5 s
// did not: TestFraming's event over the limit took longer on CI).
const runLimit = time.Minute

// Result is what one Stream call produced.
type Result struct {
	// Chunks are the chunks emitted, in order.
	Chunks []provider.Chunk
	// Finish and Err are what Stream returned.
	Finish provider.Finish
	Err    error
	// Took is how long the call took.
	Took time.Duration
}

// Run streams req through p, collecting every chunk. It fails t if the call
// is still running after runLimit (a hang).
func Run(t testing.TB, p provider.Provider, req *provider.Request) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	var r Result
	start := time.Now()
	r.Finish, r.Err = p.Stream(ctx, req, func(c provider.Chunk) error {
		r.Chunks = append(r.Chunks, c)
		return nil
	})
	r.Took = time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("providertest: the attempt was still running after %v", runLimit)
	}
	return r
}

// Text is the concatenated text chunks.
func (r Result) Text() string { return r.join(provider.ChunkText) }

// Thinking is the concatenated thinking chunks.
func (r Result) Thinking() string { return r.join(provider.ChunkThinking) }

func (r Result) join(kind provider.ChunkKind) string {
	var b strings.Builder
	for _, c := range r.Chunks {
		if c.Kind == kind {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// ToolCalls are the tool calls emitted.
func (r Result) ToolCalls() []recovery.ToolCall {
	var calls []recovery.ToolCall
	for _, c := range r.Chunks {
		if c.Kind == provider.ChunkToolCall {
			calls = append(calls, c.ToolCall)
		}
	}
	return calls
}

// ThinkingBlocks are the complete thinking blocks emitted.
func (r Result) ThinkingBlocks() []recovery.Block {
	var blocks []recovery.Block
	for _, c := range r.Chunks {
		if c.Kind == provider.ChunkThinkingBlock {
			blocks = append(blocks, c.Block)
		}
	}
	return blocks
}

// Failure is the *recovery.Failure the call ended with; it fails t if there
// is none.
func (r Result) Failure(t testing.TB) *recovery.Failure {
	t.Helper()
	f, ok := provider.AsFailure(r.Err)
	if !ok {
		t.Fatalf("providertest: err = %v (%T), want a *recovery.Failure", r.Err, r.Err)
	}
	return f
}

// AssertJSON fails t unless got and want are the same JSON value (key order
// and spacing aside).
func AssertJSON(t testing.TB, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("providertest: got is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("providertest: want is not JSON: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("JSON differs\n got: %s\nwant: %s", got, want)
	}
}

// RunMany streams requests through p from workers goroutines, each making
// each calls one after the other (req builds each request), and fails t if
// any of them fails. With the server's Conns it shows whether p reuses its
// connections.
func RunMany(t testing.TB, p provider.Provider, req func() *provider.Request, workers, each int) {
	t.Helper()
	errs := make(chan error, workers*each)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				ctx, cancel := context.WithTimeout(context.Background(), runLimit)
				_, err := p.Stream(ctx, req(), func(provider.Chunk) error { return nil })
				cancel()
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// drainWait is how long a provider waits, at most, for the end of a
// complete answer's body before it gives the connection up (classify's
// Drain).
const drainWait = 50 * time.Millisecond

// CheckConnectionsReused is the connection-reuse test of a provider built
// without an HTTP client: serve starts a wire-faithful server for a
// script, build makes the provider for its URL. The provider must read each
// body to its end — the answer's terminator comes a little after its usage,
// as a real upstream's may — and keep more idle connections than
// net/http's default of two, so that its transport reuses them: one
// connection for answers one after the other, about one per worker for
// answers from 16 goroutines.
//
// It holds on a loaded machine (a load of 10 on two cores) by telling apart
// what load can do from what a defect does. A provider gives a connection
// up in one legitimate way: its drain of the body's end outlasted drainWait,
// which a machine too busy to run its goroutines can make happen, and never
// sooner than drainWait after the request. A body it did not read to its end,
// an idle pool too small for the workers, a new transport per request close
// a connection, or leave one behind, at every request and at once: so the
// test fails on any connection closed sooner than drainWait after its last
// request, and on more connections or late closes than half the answers.
func CheckConnectionsReused(t *testing.T, serve func(testing.TB, Script) *Server, build func(url string) (provider.Provider, error), req func() *provider.Request) {
	answer := OK(Answer{Text: []string{"a", "b"}, Usage: Usage{Input: 3, Output: 2}})
	answer.TailDelay = 2 * time.Millisecond // the stream's end comes after the usage, as a real upstream's may
	for _, tc := range []struct {
		name          string
		workers, each int
	}{
		{"sequential", 1, 20},
		{"concurrent", 16, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := serve(t, Always(answer))
			p, err := build(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			RunMany(t, p, req, tc.workers, tc.each)
			calls := tc.workers * tc.each
			if n := srv.Count(); n != calls {
				t.Fatalf("server saw %d requests, want %d", n, calls)
			}
			conns, closes := srv.Conns(), srv.Closes()
			t.Logf("%d answers, %d connections, %d given up", calls, conns, len(closes))
			for _, c := range closes {
				if c.Requests == 0 || c.AfterRequest < drainWait {
					t.Errorf("a connection was given up %s after its request (%d carried), sooner than a drain of %s could end: the provider does not keep its connections",
						c.AfterRequest, c.Requests, drainWait)
				}
			}
			// A quiet machine gives up none, and needs no more connections
			// than workers; a given-up one is replaced by a dial.
			if len(closes) > calls/2 || conns > tc.workers+calls/2 {
				t.Errorf("%d answers from %d workers took %d connections and gave up %d: not reused", calls, tc.workers, conns, len(closes))
			}
		})
	}
}
