package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider/sim"
	"github.com/completiond/completiond/service"
)

var update = flag.Bool("update", false, "record clients/testdata/transcripts from the real server")

const transcriptDir = "../clients/testdata/transcripts"

// transcript is one file of clients/testdata/transcripts (format:
// clients/testdata/README.md).
type transcript struct {
	Name    string          `json:"name"`
	About   string          `json:"about"`
	RPC     string          `json:"rpc"`
	Request json.RawMessage `json:"request"`
	Events  []wireJSON      `json:"events"`
	Sent    []sentJSON      `json:"sent,omitempty"`
	Status  statusJSON      `json:"status"`
	Expect  expectJSON      `json:"expect"`
}

type wireJSON struct {
	Wire string          `json:"wire"`
	JSON json.RawMessage `json:"json"`
}

type sentJSON struct {
	AfterSeq uint64          `json:"after_seq"`
	Wire     string          `json:"wire"`
	JSON     json.RawMessage `json:"json"`
}

type statusJSON struct {
	Code       codes.Code        `json:"code"`
	Name       string            `json:"name"`
	Message    string            `json:"message"`
	DetailsBin string            `json:"details_bin"`
	Details    []json.RawMessage `json:"details"`
}

type expectJSON struct {
	CompletionID      string     `json:"completion_id"`
	LastSeq           uint64     `json:"last_seq"`
	Reason            string     `json:"reason"`
	Transitions       []string   `json:"transitions"`
	DiscardedAttempts []int32    `json:"discarded_attempts"`
	StrippedBlocks    []string   `json:"stripped_blocks"`
	Turns             []turnJSON `json:"turns"`
	Text              string     `json:"text"`
	Thinking          string     `json:"thinking"`
	ToolCalls         []callJSON `json:"tool_calls"`
	StopReason        string     `json:"stop_reason"`
	StopSequence      string     `json:"stop_sequence"`
	Truncated         bool       `json:"truncated"`
	Error             *errorJSON `json:"error"`
}

type turnJSON struct {
	Turn      int32      `json:"turn"`
	Text      string     `json:"text"`
	Thinking  string     `json:"thinking"`
	ToolCalls []callJSON `json:"tool_calls"`
}

type callJSON struct {
	ID    string         `json:"id"`
	Name  string         `json:"name"`
	Input map[string]any `json:"input"`
}

type errorJSON struct {
	Code              string            `json:"code"`
	Message           string            `json:"message"`
	Reason            string            `json:"reason"`
	TerminalReason    string            `json:"terminal_reason"`
	Domain            string            `json:"domain"`
	Metadata          map[string]string `json:"metadata"`
	Retryable         bool              `json:"retryable"`
	RetryDelaySeconds *float64          `json:"retry_delay_seconds"`
	FieldViolations   []violationJSON   `json:"field_violations"`
}

type violationJSON struct {
	Field       string `json:"field"`
	Description string `json:"description"`
}

// expectOf is what the library computes from a transcript: its Fold of
// the events and its Error of the status.
func expectOf(f *Fold, st *status.Status) expectJSON {
	x := expectJSON{CompletionID: f.CompletionID(), LastSeq: f.LastSeq(), Transitions: []string{},
		DiscardedAttempts: f.DiscardedAttempts(), StrippedBlocks: append([]string{}, f.StrippedBlocks()...), Turns: []turnJSON{}, Text: f.Text(), Thinking: f.Thinking(),
		ToolCalls: callsJSON(f.ToolCalls())}
	if f.Reason() != 0 {
		x.Reason = f.Reason().String()
	}
	for _, t := range f.Transitions() {
		x.Transitions = append(x.Transitions, t.GetReason().String())
	}
	for _, t := range f.Turns() {
		x.Turns = append(x.Turns, turnJSON{t.Turn, t.Text, t.Thinking, callsJSON(t.ToolCalls)})
	}
	if r := f.Result(); r != nil {
		x.StopReason, x.StopSequence, x.Truncated = r.GetStopReason().String(), r.GetStopSequence(), r.GetTruncated()
	}
	if e := FromStatus(st); e != nil {
		x.Error = errorOf(e)
	}
	return x
}

func callsJSON(calls []*completionv1.ToolCall) []callJSON {
	out := []callJSON{}
	for _, c := range calls {
		out = append(out, callJSON{c.GetId(), c.GetName(), c.GetInput().AsMap()})
	}
	return out
}

func errorOf(e *Error) *errorJSON {
	x := &errorJSON{Code: codeName(e.Code), Message: e.Message, Reason: e.Reason, TerminalReason: e.TerminalReason.String(),
		Domain: e.Domain, Metadata: e.Metadata, Retryable: e.Retryable, FieldViolations: []violationJSON{}}
	if e.Retryable {
		s := e.RetryDelay.Seconds()
		x.RetryDelaySeconds = &s
	}
	for _, v := range e.FieldViolations {
		x.FieldViolations = append(x.FieldViolations, violationJSON(v))
	}
	return x
}

// codeName is the canonical name of c, as google.rpc.Code spells it
// (CANCELLED, not Go's Canceled) and the other languages name it.
func codeName(c codes.Code) string { return rpccode.Code_name[int32(c)] }

// TestTranscripts is the library's golden test, the same as the Python
// and TypeScript ones: from each committed transcript's events (wire
// bytes) and status (grpc-status-details-bin), Fold and FromStatus must
// compute exactly its expect object.
func TestTranscripts(t *testing.T) {
	files := transcriptFiles(t)
	for _, file := range files {
		tr := readTranscript(t, file)
		t.Run(tr.Name, func(t *testing.T) {
			var f Fold
			for _, ev := range decodeEvents(t, tr) {
				f.Add(ev)
			}
			if got := expectOf(&f, decodeStatus(t, tr.Status)); !sameJSON(t, got, tr.Expect) {
				t.Errorf("the library computes\n%s\nthe file expects\n%s", indent(t, got), indent(t, tr.Expect))
			}
		})
	}
}

// TestTranscriptsCoverTheScenarios: one file per scenario, no stray ones,
// and every transition reason in some transcript.
func TestTranscriptsCoverTheScenarios(t *testing.T) {
	var names []string
	for _, s := range scenarios() {
		names = append(names, s.name+".json")
	}
	var files []string
	for _, f := range transcriptFiles(t) {
		files = append(files, filepath.Base(f))
	}
	slices.Sort(names)
	if !slices.Equal(names, files) {
		t.Errorf("transcripts %v, scenarios %v: run make transcripts", files, names)
	}
	seen := map[string]bool{}
	for _, s := range scenarios() {
		for _, r := range s.want {
			seen["TRANSITION_REASON_"+r] = true
		}
	}
	for v, name := range completionv1.TransitionReason_name {
		if v != 0 && !seen[name] {
			t.Errorf("no transcript shows %s", name)
		}
	}
}

// TestRecordTranscripts runs every scenario against the real server. With
// -update it writes the transcripts; without, it checks that the server
// still produces what is committed (ids, trace ids and timings aside).
func TestRecordTranscripts(t *testing.T) {
	for _, s := range scenarios() {
		t.Run(s.name, func(t *testing.T) {
			conn := serve(t) // a server each: breakers and logs start afresh
			if s.budgeted {
				conn = dial(t, serveAddr(t, withBudgetKey))
			}
			tr := record(t, conn, s)
			file := filepath.Join(transcriptDir, s.name+".json")
			if *update {
				writeTranscript(t, file, tr)
				return
			}
			old := readTranscript(t, file)
			if now := withoutIDs(tr.Expect); !sameJSON(t, now, withoutIDs(old.Expect)) {
				t.Errorf("the server no longer produces %s; run make transcripts. Now:\n%s\ncommitted:\n%s", file, indent(t, now), indent(t, withoutIDs(old.Expect)))
			}
			if len(old.Events) != len(tr.Events) || len(old.Sent) != len(tr.Sent) {
				t.Errorf("%d events and %d sent now, %d and %d committed; run make transcripts", len(tr.Events), len(tr.Sent), len(old.Events), len(old.Sent))
			}
		})
	}
}

// withoutIDs drops what differs from run to run: the completion id, and
// the RetryInfo delay of an open circuit (its remaining cool-down).
func withoutIDs(x expectJSON) expectJSON {
	x.CompletionID = ""
	if x.Error != nil && x.Error.Metadata["error_kind"] == "circuit_open" {
		e := *x.Error
		e.RetryDelaySeconds = nil
		x.Error = &e
	}
	return x
}

// serve runs the server as make run does, on loopback, with fixed jitter
// and short backoffs so that the transcripts are reproducible and quick.
func serve(t *testing.T) *grpc.ClientConn {
	t.Helper()
	return dial(t, serveAddr(t))
}

// dial connects to addr for the rest of the test.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// The key of the budgeted scenarios, its budget, and the server's clock.
const (
	budgetKey    = "budgeted-secret-key"
	budgetTokens = 5
)

var budgetNow = time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)

// withBudgetKey requires the key budgetKey, with a budget of budgetTokens
// tokens a day, on a clock that stands at budgetNow.
func withBudgetKey(c *service.Config) {
	c.Now = func() time.Time { return budgetNow }
	c.Auth = config.Auth{Keys: []config.APIKey{{Name: "budgeted", SHA256: config.HashKey(budgetKey),
		Budget: &config.Budget{Tokens: budgetTokens, Period: config.BudgetPeriod{Calendar: "day"}}}}}
}

// serveAddr runs the server, changed by mutate, and returns its loopback
// address.
func serveAddr(t *testing.T, mutate ...func(*service.Config)) string {
	t.Helper()
	cfg := service.DefaultConfig()
	cfg.Routes = config.SimRoutes(sim.New(sim.Config{}))
	cfg.Policy.Retry.BackoffBase = 10 * time.Millisecond
	cfg.Policy.Retry.BackoffMax = 80 * time.Millisecond
	cfg.Rand = func() float64 { return 0.5 }
	for _, m := range mutate {
		m(&cfg)
	}
	srv, err := service.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := service.NewGRPC(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Server.Serve(lis)
	t.Cleanup(func() {
		// As the process does on SIGTERM, without waiting: a completion
		// kept running for a caller that may come back ends now.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		g.Drain(ctx)
	})
	return lis.Addr().String()
}

// record runs s and returns its transcript, its expect computed by this
// library, after checking the contract and the scenario's transitions.
func record(t *testing.T, conn *grpc.ClientConn, s scenario) transcript {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if s.budgeted {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+budgetKey)
	}
	rpc := completionv1.NewCompletionClient(conn)
	tr := transcript{Name: s.name, About: s.about, RPC: "Stream", Events: []wireJSON{}}
	var evs []*completionv1.CompletionEvent
	var err error
	if s.session != nil {
		tr.RPC, tr.Request = "Session", protoJSON(t, s.session)
		evs, tr.Sent, err = recordSession(ctx, t, rpc, s)
	} else {
		tr.Request = protoJSON(t, s.stream)
		evs, err = recordStream(ctx, rpc, s.stream)
	}
	st := status.Convert(err)
	var f Fold
	for _, ev := range evs {
		tr.Events = append(tr.Events, wireJSON{wire(t, ev), protoJSON(t, ev)})
		f.Add(ev)
	}
	tr.Status = statusOf(t, st)
	tr.Expect = expectOf(&f, st)
	checkRecorded(t, s, &f, st)
	return tr
}

func recordStream(ctx context.Context, rpc completionv1.CompletionClient, req *completionv1.CompleteRequest) ([]*completionv1.CompletionEvent, error) {
	stream, err := rpc.Stream(ctx, req)
	if err != nil {
		return nil, err
	}
	var evs []*completionv1.CompletionEvent
	for {
		ev, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return evs, err
		}
		evs = append(evs, ev)
	}
}

func recordSession(ctx context.Context, t *testing.T, rpc completionv1.CompletionClient, s scenario) ([]*completionv1.CompletionEvent, []sentJSON, error) {
	stream, err := rpc.Session(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := stream.Send(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_Start{Start: s.session}}); err != nil {
		return nil, nil, err
	}
	var evs []*completionv1.CompletionEvent
	var sent []sentJSON
	var c caller
	for {
		ev, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return evs, sent, err
		}
		evs = append(evs, ev)
		if req := s.answer(ev, &c); req != nil {
			sent = append(sent, sentJSON{ev.GetSeq(), wire(t, req), protoJSON(t, req)})
			if err := stream.Send(req); err != nil && !errors.Is(err, io.EOF) {
				return evs, sent, err
			}
		}
	}
}

// checkRecorded holds the server to the scenario and the contract: the
// transitions it names, and an answer the fold reproduces.
func checkRecorded(t *testing.T, s scenario, f *Fold, st *status.Status) {
	t.Helper()
	var got []string
	for _, tr := range f.Transitions() {
		got = append(got, strings.TrimPrefix(tr.GetReason().String(), "TRANSITION_REASON_"))
	}
	if !slices.Equal(got, s.want) {
		t.Errorf("transitions %v, want %v (status %v)", got, s.want, st)
	}
	if r := f.Result(); r != nil {
		var want strings.Builder
		for _, c := range r.GetMessage().GetContent() {
			want.WriteString(c.GetText().GetText())
		}
		if f.Text() != want.String() {
			t.Errorf("folded text %q, result's %q", f.Text(), want.String())
		}
	}
	if (st.Code() == codes.OK) != (f.Reason() == completionv1.TransitionReason_TRANSITION_REASON_COMPLETED) {
		t.Errorf("status %v after terminal %v", st.Code(), f.Reason())
	}
}

func statusOf(t *testing.T, st *status.Status) statusJSON {
	t.Helper()
	out := statusJSON{Code: st.Code(), Name: codeName(st.Code()), Message: st.Message(), Details: []json.RawMessage{}}
	if len(st.Proto().GetDetails()) > 0 {
		bin, err := proto.Marshal(st.Proto())
		if err != nil {
			t.Fatal(err)
		}
		out.DetailsBin = base64.StdEncoding.EncodeToString(bin)
	}
	for _, d := range st.Proto().GetDetails() {
		out.Details = append(out.Details, anyJSON(t, d))
	}
	return out
}

func anyJSON(t *testing.T, a *anypb.Any) json.RawMessage {
	t.Helper()
	b, err := protojson.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func protoJSON(t *testing.T, m proto.Message) json.RawMessage {
	t.Helper()
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func wire(t *testing.T, m proto.Message) string {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func transcriptFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(transcriptDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 && !*update {
		t.Fatalf("no transcripts in %s: run make transcripts", transcriptDir)
	}
	return files
}

func readTranscript(t *testing.T, file string) transcript {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var tr transcript
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return tr
}

func writeTranscript(t *testing.T, file string, tr transcript) {
	t.Helper()
	b, err := json.MarshalIndent(tr, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

func decodeEvents(t *testing.T, tr transcript) []*completionv1.CompletionEvent {
	t.Helper()
	var evs []*completionv1.CompletionEvent
	for _, w := range tr.Events {
		ev := &completionv1.CompletionEvent{}
		unwire(t, w.Wire, ev)
		evs = append(evs, ev)
	}
	return evs
}

func unwire(t *testing.T, s string, m proto.Message) {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(b, m); err != nil {
		t.Fatal(err)
	}
}

// decodeStatus is what a client gets: the code, the message and the
// grpc-status-details-bin trailer.
func decodeStatus(t *testing.T, s statusJSON) *status.Status {
	t.Helper()
	if s.DetailsBin == "" {
		return status.New(s.Code, s.Message)
	}
	p := &spb.Status{}
	unwire(t, s.DetailsBin, p)
	return status.FromProto(p)
}

// sameJSON compares a and b as JSON sees them (nil and empty lists alike,
// numbers as numbers), as the other languages' tests do.
func sameJSON(t *testing.T, a, b expectJSON) bool {
	t.Helper()
	return reflect.DeepEqual(generic(t, a), generic(t, b))
}

func generic(t *testing.T, x expectJSON) any {
	t.Helper()
	b, err := json.Marshal(x)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return normalize(out)
}

// normalize makes nil lists and maps empty ones.
func normalize(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = normalize(e)
		}
	case []any:
		for i, e := range v {
			v[i] = normalize(e)
		}
	}
	return v
}

func indent(t *testing.T, x expectJSON) string {
	t.Helper()
	b, err := json.MarshalIndent(x, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
