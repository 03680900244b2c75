package service

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/convert"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/sim"
)

// countingProvider counts the attempts that reach an upstream.
type countingProvider struct {
	provider.Provider
	calls atomic.Int64
}

func (p *countingProvider) Stream(ctx context.Context, req *provider.Request, emit func(provider.Chunk) error) (provider.Finish, error) {
	p.calls.Add(1)
	return p.Provider.Stream(ctx, req, emit)
}

// testEnv is a Completion server on bufconn with a fast sim behind a counter.
type testEnv struct {
	client   completionv1.CompletionClient
	upstream *countingProvider
	grpc     *GRPC
}

// newTestEnv starts a server whose sim answers with words tokens and whose
// backoff is short (1 ms base) so that retries do not slow tests down.
func newTestEnv(t *testing.T, mutate ...func(*Config)) *testEnv {
	t.Helper()
	up := &countingProvider{Provider: sim.New(sim.Config{Words: 12, StallLimit: 200 * time.Millisecond})}
	cfg := DefaultConfig()
	cfg.Routes = config.SimRoutes(sim.New(sim.Config{}))
	for _, r := range cfg.Routes {
		r.Upstream = up
		r.Timeouts.Idle = 200 * time.Millisecond
	}
	cfg.Policy.Retry.BackoffBase = time.Millisecond
	cfg.Policy.Retry.BackoffMax = 8 * time.Millisecond
	cfg.Rand = func() float64 { return 0.5 }
	for _, m := range mutate {
		m(&cfg)
	}
	client, g := grpcClient(t, cfg)
	return &testEnv{client: client, upstream: up, grpc: g}
}

// grpcClient serves cfg through NewGRPC on bufconn and returns a client and
// the assembled server. Both stop when t ends.
func grpcClient(t testing.TB, cfg Config, opts ...grpc.ServerOption) (completionv1.CompletionClient, *GRPC) {
	t.Helper()
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := NewGRPC(srv, opts...)
	conn := serveBufconn(t, g)
	t.Cleanup(func() {
		conn.Close()
		g.Server.Stop()
		srv.Abort() // completions that outlive their RPCs (a resume grace) end too
		srv.Close()
	})
	return completionv1.NewCompletionClient(conn), g
}

// serveBufconn serves g on an in-memory listener and returns a connection
// to it; the caller stops both.
func serveBufconn(t testing.TB, g *GRPC) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	go func() { _ = g.Server.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// streamAll runs a Stream call and returns its events and final status.
func (e *testEnv) streamAll(t *testing.T, req *completionv1.CompleteRequest) ([]*completionv1.CompletionEvent, *status.Status) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return e.streamAllCtx(t, ctx, req)
}

// streamAllCtx is streamAll under ctx.
func (e *testEnv) streamAllCtx(t *testing.T, ctx context.Context, req *completionv1.CompleteRequest) ([]*completionv1.CompletionEvent, *status.Status) {
	t.Helper()
	st, err := e.client.Stream(ctx, req)
	if err != nil {
		return nil, status.Convert(err)
	}
	return recvAll(st.Recv)
}

// recvAll receives events until the stream ends, and returns them with the
// stream's final status.
func recvAll(recv func() (*completionv1.CompletionEvent, error)) ([]*completionv1.CompletionEvent, *status.Status) {
	var evs []*completionv1.CompletionEvent
	for {
		ev, err := recv()
		if errors.Is(err, io.EOF) {
			return evs, status.New(codes.OK, "")
		}
		if err != nil {
			return evs, status.Convert(err)
		}
		evs = append(evs, ev)
	}
}

// prompt is a request with one user message.
func prompt(text string, md map[string]string) *completionv1.CompleteRequest {
	return &completionv1.CompleteRequest{
		Messages: []*completionv1.Message{{Role: completionv1.Role_ROLE_USER, Content: []*completionv1.ContentBlock{convert.TextBlock(text)}}},
		Metadata: md,
	}
}

// faults is a request whose sim attempts follow script.
func faults(script string) *completionv1.CompleteRequest {
	return prompt("Tell me about recovery.", map[string]string{sim.MetaFaults: script})
}

// checkContract asserts the stream promises of docs/api.md ("The stream contract"): seq 1..n without
// gaps, started first, exactly one terminal transition followed by the
// result, the non-discarded text deltas concatenating to the final answer,
// and a status that agrees with the terminal reason.
func checkContract(t *testing.T, evs []*completionv1.CompletionEvent, st *status.Status) *completionv1.Result {
	t.Helper()
	return checkDelivery(t, evs, st, false)
}

// checkDelivery is checkContract for a stream in either delivery mode. On
// top of the promises of every stream, it checks the ones of docs/api.md for
// numbering and tool calls: turn never goes backwards, nor does attempt on
// the events that are not an attempt's output (settled output arrives when
// it is settled, under its own attempt); no tool call belongs to an attempt
// a transition discards, and without a NEXT_TURN the tool calls sent are
// exactly the result's. Settled: no delta belongs to an attempt a transition
// discards, before or after it was sent.
func checkDelivery(t *testing.T, evs []*completionv1.CompletionEvent, st *status.Status, settled bool) *completionv1.Result {
	t.Helper()
	res := checkStream(t, evs, st)
	discarded, turns := map[int32]bool{}, false
	for _, ev := range evs {
		for _, a := range ev.GetTransition().GetDiscardedAttempts() {
			discarded[a] = true
		}
		turns = turns || ev.GetTransition().GetReason() == completionv1.TransitionReason_TRANSITION_REASON_NEXT_TURN
	}
	var turn, attempt int32
	var sent []string
	for _, ev := range evs {
		if ev.GetTurn() < turn {
			t.Errorf("event seq %d at turn %d after turn %d", ev.GetSeq(), ev.GetTurn(), turn)
		}
		turn = ev.GetTurn()
		output := ev.GetDelta() != nil || ev.GetToolCall() != nil
		if !output {
			if ev.GetAttempt() < attempt {
				t.Errorf("event seq %d of attempt %d after attempt %d", ev.GetSeq(), ev.GetAttempt(), attempt)
			}
			attempt = ev.GetAttempt()
		}
		if tc := ev.GetToolCall(); tc != nil {
			sent = append(sent, tc.GetId())
			if discarded[ev.GetAttempt()] {
				t.Errorf("tool call %s of attempt %d, which a transition discards", tc.GetId(), ev.GetAttempt())
			}
		}
		if settled && ev.GetDelta() != nil && discarded[ev.GetAttempt()] {
			t.Errorf("settled delivery sent a delta of attempt %d, which a transition discards", ev.GetAttempt())
		}
	}
	var calls []string
	for _, c := range res.GetMessage().GetContent() {
		if u := c.GetToolUse(); u != nil {
			calls = append(calls, u.GetId())
		}
	}
	if !turns && !slices.Equal(sent, calls) {
		t.Errorf("tool calls sent %v, result's %v", sent, calls)
	}
	return res
}

// checkStream checks the promises of every stream: seq, one terminal
// transition then the result, kept deltas equal the answer, a status that
// agrees.
func checkStream(t *testing.T, evs []*completionv1.CompletionEvent, st *status.Status) *completionv1.Result {
	t.Helper()
	if len(evs) < 3 {
		t.Fatalf("only %d events; status %v", len(evs), st)
	}
	if evs[0].GetStarted() == nil {
		t.Errorf("first event is %v, want started", evs[0])
	}
	terminals := 0
	discarded := map[int32]bool{}
	for i, ev := range evs {
		if ev.GetSeq() != uint64(i+1) {
			t.Errorf("event %d has seq %d", i, ev.GetSeq())
		}
		if tr := ev.GetTransition(); tr != nil {
			if tr.GetTerminal() {
				terminals++
				if i != len(evs)-2 {
					t.Errorf("terminal transition at %d of %d events", i, len(evs))
				}
			}
			if tr.GetDiscardOutput() {
				discarded[ev.GetAttempt()] = true
				if !slices.Contains(tr.GetDiscardedAttempts(), ev.GetAttempt()) {
					t.Errorf("discard_output set but discarded_attempts %v lacks attempt %d", tr.GetDiscardedAttempts(), ev.GetAttempt())
				}
			}
			for _, a := range tr.GetDiscardedAttempts() {
				discarded[a] = true
			}
		}
	}
	if terminals != 1 {
		t.Errorf("%d terminal transitions, want 1", terminals)
	}
	res := evs[len(evs)-1].GetResult()
	if res == nil {
		t.Fatalf("last event is %v, want result", evs[len(evs)-1])
	}
	if got, want := keptText(evs, discarded), resultText(res); got != want {
		t.Errorf("kept deltas %q\n!= final answer %q", got, want)
	}
	term := evs[len(evs)-2].GetTransition()
	if term.GetReason() != res.GetReason() {
		t.Errorf("terminal %v but result says %v", term.GetReason(), res.GetReason())
	}
	checkStatusAgrees(t, res.GetReason(), st)
	return res
}

func keptText(evs []*completionv1.CompletionEvent, discarded map[int32]bool) string {
	var b strings.Builder
	for _, ev := range evs {
		if d := ev.GetDelta(); d != nil && d.GetKind() == completionv1.DeltaKind_DELTA_KIND_TEXT && !discarded[ev.GetAttempt()] {
			b.WriteString(d.GetText())
		}
	}
	return b.String()
}

func resultText(r *completionv1.Result) string {
	var b strings.Builder
	for _, c := range r.GetMessage().GetContent() {
		b.WriteString(c.GetText().GetText())
	}
	return b.String()
}

func checkStatusAgrees(t *testing.T, reason completionv1.TransitionReason, st *status.Status) {
	t.Helper()
	if reason == completionv1.TransitionReason_TRANSITION_REASON_COMPLETED {
		if st.Code() != codes.OK {
			t.Errorf("COMPLETED but status %v", st)
		}
		return
	}
	if st.Code() == codes.OK {
		t.Fatalf("terminal %v but status OK", reason)
	}
	info := errorInfo(st)
	if info == nil || "TRANSITION_REASON_"+info.GetReason() != reason.String() {
		t.Errorf("status %v has ErrorInfo %v, want reason %v", st.Code(), info, reason)
	}
}

func errorInfo(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

func retryInfo(st *status.Status) *errdetails.RetryInfo {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.RetryInfo); ok {
			return info
		}
	}
	return nil
}

// transitions lists the reasons of the transitions in evs.
func transitions(evs []*completionv1.CompletionEvent) []string {
	var out []string
	for _, ev := range evs {
		if tr := ev.GetTransition(); tr != nil {
			out = append(out, strings.TrimPrefix(tr.GetReason().String(), "TRANSITION_REASON_"))
		}
	}
	return out
}

func statusOf(err error) *status.Status { return status.Convert(err) }
