package service

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/provider"
)

// unavailableTranscript is the golden transcript of every UNAVAILABLE the
// server sends.
const unavailableTranscript = "testdata/unavailable.txt"

// TestStatusUnavailableTranscript replays testdata/unavailable.txt: one
// command per way the server ends a call UNAVAILABLE, each run through the
// real server over gRPC. The output says what the caller receives: the
// ErrorInfo reason — the server's answer — or "none → reconnect" — a
// dropped connection, which the clients (client/, clients/python,
// clients/node) follow by Attach or a Session resume. It also checks what
// lets the clients tell the two apart by position alone: an UNAVAILABLE
// with ErrorInfo comes before the started event or after the result,
// never between them, so that one between them is always a reconnect
// (clients/testdata/reconnect.json).
//
// Each command names the function whose status it ends with (site=); the
// sites are every function of the package that names codes.Unavailable
// (TestStatusUnavailableSitesAreInTheTranscript), and "transport" for
// grpc-go's own UNAVAILABLE when the server cuts a connection.
//
// Rewrite the expected outputs with go test -run TestStatusUnavailableTranscript -rewrite.
func TestStatusUnavailableTranscript(t *testing.T) {
	ran := map[string]bool{}
	datadriven.RunTest(t, unavailableTranscript, func(t *testing.T, d *datadriven.TestData) string {
		run, ok := unavailablePaths[d.Cmd]
		if !ok {
			t.Fatalf("%s: unknown path %q", d.Pos, d.Cmd)
		}
		var site string
		d.ScanArgs(t, "site", &site)
		ran[d.Cmd] = true
		evs, st := run(t)
		return describeUnavailable(t, evs, st, site == "transport")
	})
	for name := range unavailablePaths {
		if !ran[name] {
			t.Errorf("path %q is not in %s", name, unavailableTranscript)
		}
	}
}

// describeUnavailable is what the transcript shows of a call that ended
// st after events evs; the transport's message is grpc-go's, and not shown.
func describeUnavailable(t *testing.T, evs []*completionv1.CompletionEvent, st *status.Status, transport bool) string {
	t.Helper()
	if st.Code() != codes.Unavailable {
		t.Fatalf("the call ended %v, want UNAVAILABLE", st)
	}
	started, result := false, false
	for _, ev := range evs {
		started = started || ev.GetStarted() != nil
		result = result || ev.GetResult() != nil
	}
	info := errorInfo(st)
	if info != nil && started && !result {
		t.Errorf("UNAVAILABLE %s came after the started event and before the result: a client that goes by the position alone reconnects", info.GetReason())
	}
	var b strings.Builder
	if info == nil {
		b.WriteString("UNAVAILABLE none → reconnect\n")
	} else {
		fmt.Fprintf(&b, "UNAVAILABLE %s → the server's answer\n", info.GetReason())
	}
	if transport {
		b.WriteString("message: (the transport's)\n")
	} else {
		fmt.Fprintf(&b, "message: %q\n", completionIDs.ReplaceAllString(st.Message(), "cmpl_…"))
	}
	var details []string
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			details = append(details, "ErrorInfo")
		case *errdetails.RetryInfo:
			details = append(details, "RetryInfo")
		default:
			details = append(details, fmt.Sprintf("%T", d))
		}
	}
	if len(details) == 0 {
		details = []string{"none"}
	}
	fmt.Fprintf(&b, "details: %s\n", strings.Join(details, ", "))
	switch {
	case result:
		b.WriteString("events: started … result\n")
	case started:
		b.WriteString("events: started, no result\n")
	default:
		b.WriteString("events: none\n")
	}
	return b.String()
}

// completionIDs match the ids the server gives completions.
var completionIDs = regexp.MustCompile(`cmpl_[0-9a-f]{24}`)

// unavailablePaths are the ways a call ends UNAVAILABLE, by the name the
// transcript gives each: a path returns the events the caller received and
// the status its call ended with.
var unavailablePaths = map[string]func(t *testing.T) ([]*completionv1.CompletionEvent, *status.Status){
	// A completion ends MODEL_ERROR after an outage, with no retry left
	// and no fallback.
	"model-error-outage": func(t *testing.T) ([]*completionv1.CompletionEvent, *status.Status) {
		return newTestEnv(t).streamAll(t, noRetryNorFallback("server_error"))
	},
	// A completion ends MODEL_ERROR because its route's circuit is open
	// (one failure opens it here).
	"model-error-circuit-open": func(t *testing.T) ([]*completionv1.CompletionEvent, *status.Status) {
		e := newTestEnv(t, func(c *Config) { c.Breaker.Failures = 1 })
		e.streamAll(t, noRetryNorFallback("server_error"))
		return e.streamAll(t, noRetryNorFallback(""))
	},
	// The server aborts its completions (a drain that timed out) while a
	// Stream streams.
	"abort-streaming": func(t *testing.T) ([]*completionv1.CompletionEvent, *status.Status) {
		e, _ := gatedEnv(t)
		st, err := e.client.Stream(t.Context(), prompt("Tell me about recovery.", nil))
		if err != nil {
			t.Fatal(err)
		}
		seen := recvUntilDelta(t, st)
		e.grpc.Completion.Abort()
		rest, end := recvAll(st.Recv)
		return append(seen, rest...), end
	},
	// The server aborts its completions while a Session awaits its
	// caller's tool results.
	"abort-awaiting-tools": func(t *testing.T) ([]*completionv1.CompletionEvent, *status.Status) {
		e := newTestEnv(t)
		s := e.session(t, sessionStart("tool_use"))
		s.toolCall()
		e.grpc.Completion.Abort()
		s.until(func(*completionv1.CompletionEvent) bool { return false })
		return s.events, statusOf(s.status)
	},
	// The server aborts its completions before a Session sent its start.
	"abort-before-start": func(t *testing.T) ([]*completionv1.CompletionEvent, *status.Status) {
		e := newTestEnv(t)
		st, err := e.client.Session(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		e.grpc.Completion.Abort()
		return recvAll(st.Recv)
	},
	// A new completion while the server drains.
	"draining": func(t *testing.T) ([]*completionv1.CompletionEvent, *status.Status) {
		e := newTestEnv(t)
		e.grpc.Completion.running.drain() // what Drain does first
		return e.streamAll(t, prompt("Tell me about recovery.", nil))
	},
	// A Stream with a resume grace that the event log has no room for.
	"event-log-full": func(t *testing.T) ([]*completionv1.CompletionEvent, *status.Status) {
		e := newTestEnv(t, func(c *Config) { c.EventLog.MaxCompletions = 1 })
		if err := e.grpc.Completion.log.Open("cmpl_running", fleet.Meta{}); err != nil { // a live log fills it
			t.Fatal(err)
		}
		return e.streamAll(t, resumable(time.Minute))
	},
	// A new completion while the server runs as many as it may.
	"overloaded": func(t *testing.T) ([]*completionv1.CompletionEvent, *status.Status) {
		e, _ := gatedEnv(t, func(c *Config) { c.Limits.MaxInFlight, c.Limits.KeyMaxConcurrent = 1, 0 })
		st, err := e.client.Stream(t.Context(), prompt("Tell me about recovery.", nil))
		if err != nil {
			t.Fatal(err)
		}
		recvUntilDelta(t, st) // it runs, and holds
		return e.streamAll(t, prompt("Tell me about recovery.", nil))
	},
	// An Attach whose replica cannot read the shared event log (Redis
	// does not answer).
	"attach-log-unreachable": func(t *testing.T) ([]*completionv1.CompletionEvent, *status.Status) {
		e := newTestEnv(t, func(c *Config) { c.Log = unreachableLog{fleet.NewMemLog(config.EventLogLimits{}, time.Now)} })
		return attachAll(t.Context(), e.client, "cmpl_elsewhere", 0)
	},
	// A Cancel whose completion did not end within its wait (its upstream
	// call ignores the cancellation): the cancel stands.
	"cancel-pending": func(t *testing.T) ([]*completionv1.CompletionEvent, *status.Status) {
		_, _, _, _, st := cancelStuck(t, t.Context())
		return nil, st
	},
	// A Session resume that reaches a server which does not run the
	// Session, without leases to take it over: two servers share a log,
	// the Session runs on the first, the resume reaches the second.
	"resume-not-here": func(t *testing.T) ([]*completionv1.CompletionEvent, *status.Status) {
		shared := fleet.NewMemLog(config.EventLogLimits{}, time.Now)
		a := newTestEnv(t, func(c *Config) { c.Log = shared })
		b := newTestEnv(t, func(c *Config) { c.Log = shared })
		s := openSession(t, t.Context(), a.client, startMsg(resumableStart("tool_use", time.Minute)))
		s.toolCall()
		id, seq := last(s.events)
		r := openSession(t, t.Context(), b.client, resumeMsg(id, seq))
		r.until(func(*completionv1.CompletionEvent) bool { return false })
		return r.events, statusOf(r.status)
	},
	// A Stream whose replica lost the completion's lease (here: the
	// replica halted, as a dead one would, its gRPC server left up so that
	// its status is seen): another replica runs it on.
	"lease-lost": func(t *testing.T) ([]*completionv1.CompletionEvent, *status.Status) {
		e, _ := gatedEnv(t, func(c *Config) { c.Leases, c.Replica = fleet.NewMemLeases(time.Minute), "A" })
		st, err := e.client.Stream(t.Context(), resumable(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		seen := recvUntilDelta(t, st)
		e.grpc.Completion.halt()
		rest, end := recvAll(st.Recv)
		return append(seen, rest...), end
	},
	// The server cuts its connections: a drain past its abort grace, with
	// a handler stuck in an upstream call that ignores cancellation after
	// its first tokens went out.
	"hard-stop": func(t *testing.T) ([]*completionv1.CompletionEvent, *status.Status) {
		var stuck *deafProvider
		e := newTestEnv(t, func(c *Config) {
			c.AbortGrace = time.Nanosecond
			for _, r := range c.Routes {
				if stuck == nil {
					stuck = &deafProvider{Provider: r.Upstream, entered: make(chan struct{}), release: make(chan struct{})}
				}
				r.Upstream = stuck
			}
		})
		defer close(stuck.release) // goleak: the handler ends once its call returns
		st, err := e.client.Stream(t.Context(), prompt("Tell me about recovery.", nil))
		if err != nil {
			t.Fatal(err)
		}
		seen := recvUntilDelta(t, st)
		<-stuck.entered
		over, cancel := context.WithCancel(t.Context())
		cancel() // the drain timeout has passed
		e.grpc.Drain(over)
		rest, end := recvAll(st.Recv)
		return append(seen, rest...), end
	},
}

// deafProvider streams its first chunks, then holds the call until
// release is closed, whatever its context says.
type deafProvider struct {
	provider.Provider
	entered, release chan struct{}
	once             sync.Once
}

func (p *deafProvider) Stream(ctx context.Context, req *provider.Request, emit func(provider.Chunk) error) (provider.Finish, error) {
	n := 0
	return p.Provider.Stream(ctx, req, func(ch provider.Chunk) error {
		if n++; n > 3 {
			p.once.Do(func() { close(p.entered) })
			<-p.release
			return context.Canceled
		}
		return emit(ch)
	})
}

// noRetryNorFallback is a request with the sim's fault script that ends
// at its first failure.
func noRetryNorFallback(script string) *completionv1.CompleteRequest {
	r := faults(script)
	r.Policy = &completionv1.Policy{MaxRetries: ptr(int32(0)), DisableFallback: true}
	return r
}

// unreachableLog is an event log whose store does not answer reads, as the
// Redis log's when Redis is down.
type unreachableLog struct{ fleet.Log }

func (unreachableLog) Read(string, uint64) (fleet.Page, error) {
	return fleet.Page{}, fmt.Errorf("%w: %w", fleet.ErrUnavailable, errors.New("dial tcp 127.0.0.1:6379: connect: connection refused"))
}

// TestStatusUnavailableSitesAreInTheTranscript: every function of the
// package that names codes.Unavailable — every place an UNAVAILABLE can
// come from — is the site of a command of testdata/unavailable.txt, and
// every site the transcript names is one of them (or the transport's).
func TestStatusUnavailableSitesAreInTheTranscript(t *testing.T) {
	_, files := serviceSources(t)
	sites := map[string]bool{}
	for _, f := range files {
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if e, ok := n.(ast.Expr); ok && isSelector(e, "codes", "Unavailable") {
					sites[fn.Name.Name] = true
				}
				return true
			})
		}
	}
	if len(sites) == 0 {
		t.Fatal("no function names codes.Unavailable: the scan lost track of the sources")
	}
	named := map[string]bool{}
	data, err := os.ReadFile(unavailableTranscript)
	if err != nil {
		t.Fatal(err)
	}
	datadriven.RunTestFromString(t, string(data), func(t *testing.T, d *datadriven.TestData) string {
		var site string
		d.ScanArgs(t, "site", &site)
		named[site] = true
		return d.Expected
	})
	for site := range sites {
		if !named[site] {
			t.Errorf("%s can end a call UNAVAILABLE, and no command of %s runs it", site, unavailableTranscript)
		}
	}
	for site := range named {
		if !sites[site] && site != "transport" {
			t.Errorf("%s names site %s, which does not name codes.Unavailable", unavailableTranscript, site)
		}
	}
}
