package service

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/convert"
	"github.com/completiond/completiond/provider/sim"
	"github.com/completiond/completiond/recovery"
)

// conversation is a request with n alternating messages of size bytes each,
// the first a short task; bulky puts one large block in the old middle.
func conversation(n, size int, bulky bool, md map[string]string) *completionv1.CompleteRequest {
	req := prompt("Summarise the incident.", md)
	for i := 1; i < n; i++ {
		role := completionv1.Role_ROLE_ASSISTANT
		if i%2 == 0 {
			role = completionv1.Role_ROLE_USER
		}
		text := strings.Repeat("word ", size/5)
		if bulky && i == 2 {
			text = strings.Repeat("log line ", 1000)
		}
		req.Messages = append(req.Messages, &completionv1.Message{Role: role, Content: []*completionv1.ContentBlock{convert.TextBlock(text)}})
	}
	return req
}

func withImage(req *completionv1.CompleteRequest) *completionv1.CompleteRequest {
	req.Messages[0].Content = append(req.Messages[0].Content, &completionv1.ContentBlock{Block: &completionv1.ContentBlock_Image{
		Image: &completionv1.ImageBlock{MediaType: "image/png", Data: []byte("\x89PNG fake")}}})
	return req
}

func onRoute(route string, req *completionv1.CompleteRequest) *completionv1.CompleteRequest {
	req.Route = route
	return req
}

// grpcReasonCase is one case of TestEveryReasonOverGRPC.
type grpcReasonCase struct {
	name    string
	req     *completionv1.CompleteRequest
	want    []string // the transitions' reasons, in order
	code    codes.Code
	calls   int64 // upstream calls, including summaries; 0 = do not check
	discard []int32
	check   func(t *testing.T, res *completionv1.Result)
}

// grpcReasonCases is the table TestEveryReasonOverGRPC runs, built afresh
// for each caller; TestEveryReasonIsCovered reads the reasons it shows.
func grpcReasonCases() []grpcReasonCase {
	return []grpcReasonCase{
		{name: "completed", req: faults(""), want: []string{"COMPLETED"}, calls: 1},
		{name: "retry", req: faults("server_error=502"), want: []string{"RETRY", "COMPLETED"}, calls: 2},
		{name: "model fallback after three overloads", req: faults("overload*3"),
			want: []string{"RETRY", "RETRY", "MODEL_FALLBACK", "COMPLETED"}, calls: 4},
		{name: "stream resume keeps the partial", req: faults("cut=4"), want: []string{"STREAM_RESUME", "COMPLETED"}, calls: 2},
		{name: "clean restart without prefill", req: onRoute("sim-noprefill", faults("cut=4")),
			want: []string{"RETRY", "COMPLETED"}, discard: []int32{1}, calls: 2},
		{name: "escalate discards the truncated output", req: faults("max_tokens=3"),
			want: []string{"MAX_OUTPUT_TOKENS_ESCALATE", "COMPLETED"}, discard: []int32{1}, calls: 2},
		{name: "recovery continues the truncated output", req: faults("max_tokens=3,max_tokens=3"),
			want: []string{"MAX_OUTPUT_TOKENS_ESCALATE", "MAX_OUTPUT_TOKENS_RECOVERY", "COMPLETED"}, discard: []int32{1}, calls: 3},
		{name: "still truncated after three continuations", req: faults("max_tokens=2*5"),
			want: []string{"MAX_OUTPUT_TOKENS_ESCALATE", "MAX_OUTPUT_TOKENS_RECOVERY", "MAX_OUTPUT_TOKENS_RECOVERY",
				"MAX_OUTPUT_TOKENS_RECOVERY", "COMPLETED"}, discard: []int32{1}, calls: 5,
			check: func(t *testing.T, res *completionv1.Result) {
				if !res.GetTruncated() || res.GetStopReason() != completionv1.StopReason_STOP_REASON_MAX_TOKENS {
					t.Errorf("stop %v truncated %v, want MAX_TOKENS and truncated", res.GetStopReason(), res.GetTruncated())
				}
			}},
		{name: "context limit adjust", req: faults("context_limit"), want: []string{"CONTEXT_LIMIT_ADJUST", "COMPLETED"}, calls: 2},
		{name: "collapse drain", req: conversation(10, 40, true, map[string]string{sim.MetaFaults: "prompt_too_long"}),
			want: []string{"COLLAPSE_DRAIN_RETRY", "COMPLETED"}, calls: 2},
		{name: "reactive compaction", req: conversation(10, 40, false, map[string]string{sim.MetaFaults: "prompt_too_long"}),
			want: []string{"REACTIVE_COMPACT_RETRY", "COMPLETED"}, calls: 3},
		{name: "larger-context fallback", req: faults("prompt_too_long"), want: []string{"MODEL_FALLBACK", "COMPLETED"}, calls: 2,
			check: func(t *testing.T, res *completionv1.Result) {
				if res.GetRoute() != "sim-large" {
					t.Errorf("answered by %s, want sim-large", res.GetRoute())
				}
			}},
		{name: "prompt too long", req: onRoute("sim-large", faults("prompt_too_long*3")), want: []string{"PROMPT_TOO_LONG"},
			code: codes.FailedPrecondition, calls: 1},
		{name: "auto compact", req: onRoute("sim-small", conversation(10, 2500, false, nil)),
			want: []string{"AUTO_COMPACT", "COMPLETED"}, calls: 2},
		{name: "blocking limit", req: onRoute("sim-small", prompt(strings.Repeat("huge prompt ", 2500), nil)), want: []string{"BLOCKING_LIMIT"},
			code: codes.FailedPrecondition},
		{name: "image error", req: withImage(faults("media,media")), want: []string{"REACTIVE_COMPACT_RETRY", "IMAGE_ERROR"},
			code: codes.FailedPrecondition, calls: 2},
		{name: "image stripped and answered", req: withImage(faults("media")), want: []string{"REACTIVE_COMPACT_RETRY", "COMPLETED"}, calls: 2},
		{name: "token budget continuation", req: budget(faults(""), 100),
			want: []string{"TOKEN_BUDGET_CONTINUATION", "TOKEN_BUDGET_CONTINUATION", "TOKEN_BUDGET_CONTINUATION", "COMPLETED"}, calls: 4},
		{name: "model error", req: faults("invalid"), want: []string{"MODEL_ERROR"}, code: codes.FailedPrecondition, calls: 1},
	}
}

// TestEveryReasonOverGRPC drives each TransitionReason that a Stream can
// show through the real API on the sim provider. The Session-only reasons
// are in session_test.go; TestEveryReasonIsCovered checks the union.
func TestEveryReasonOverGRPC(t *testing.T) {
	for _, tt := range grpcReasonCases() {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t)
			evs, st := env.streamAll(t, tt.req)
			if got := transitions(evs); !slices.Equal(got, tt.want) {
				t.Fatalf("transitions %v, want %v", got, tt.want)
			}
			res := checkContract(t, evs, st)
			if st.Code() != tt.code {
				t.Errorf("status %v, want %v", st.Code(), tt.code)
			}
			if n := env.upstream.calls.Load(); tt.calls != 0 && n != tt.calls || tt.calls == 0 && n != 0 && tt.code != codes.OK {
				t.Errorf("%d upstream calls, want %d", n, tt.calls)
			}
			if got := discardedAttempts(evs); !slices.Equal(got, tt.discard) {
				t.Errorf("discarded attempts %v, want %v", got, tt.discard)
			}
			if tt.check != nil {
				tt.check(t, res)
			}
		})
	}
}

func budget(req *completionv1.CompleteRequest, n int32) *completionv1.CompleteRequest {
	req.TokenBudget = n
	return req
}

func discardedAttempts(evs []*completionv1.CompletionEvent) []int32 {
	var out []int32
	for _, ev := range evs {
		for _, a := range ev.GetTransition().GetDiscardedAttempts() {
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// reasonsShownElsewhere names, for each reason no case of grpcReasonCases
// can show (the Session-only ones), the test of this package that checks it.
var reasonsShownElsewhere = map[string]string{
	"NEXT_TURN":           "TestSessionToolLoopCompletes",
	"MAX_TURNS":           "TestSessionMaxTurns",
	"ABORTED_TOOLS":       "TestSessionCancelDuringTools",
	"ABORTED_STREAMING":   "TestSessionCancelDuringStreamingStopsTheUpstream",
	"STOP_HOOK_BLOCKING":  "TestSessionStopHookVerdicts",
	"STOP_HOOK_PREVENTED": "TestSessionStopHookVerdicts",
	"HOOK_STOPPED":        "TestSessionHaltingToolResult",
	"BUDGET_EXCEEDED":     "TestBudgetExceededWhileRunning",
}

// TestEveryReasonIsCovered keeps the end-to-end tests honest: every reason
// of the proto is shown by a case of grpcReasonCases, which
// TestEveryReasonOverGRPC runs, or checked by the test reasonsShownElsewhere
// names. It reads only the table and the package's test sources, so it
// holds under any -run filter.
func TestEveryReasonIsCovered(t *testing.T) {
	known := map[string]bool{}
	for _, r := range recovery.AllReasons() {
		known[r.String()] = true
	}
	funcs := testFuncs(t)
	shownBy := map[string][]string{}

	if fn := funcs["TestEveryReasonOverGRPC"]; !isTestFunc(fn) || !rangesOverCall(fn, "grpcReasonCases") || skips(fn) {
		t.Error("no TestEveryReasonOverGRPC ranging over all of grpcReasonCases() without skipping: the table is not run")
	}
	names := map[string]bool{}
	for _, c := range grpcReasonCases() {
		if names[c.name] {
			t.Errorf("two cases named %q", c.name)
		}
		names[c.name] = true
		for _, r := range c.want {
			if !known[r] {
				t.Errorf("case %q wants %q, which is no reason", c.name, r)
			}
			shownBy[r] = append(shownBy[r], "TestEveryReasonOverGRPC/"+c.name)
		}
	}
	for r, test := range reasonsShownElsewhere {
		fn := funcs[test]
		switch {
		case !known[r]:
			t.Errorf("reasonsShownElsewhere names %q, which is no reason", r)
		case !isTestFunc(fn):
			t.Errorf("%s is said to be checked by %s, which is no test of this package", r, test)
		case skips(fn):
			t.Errorf("%s is said to check %s but may skip", test, r)
		case !mentionsReason(fn, r):
			t.Errorf("%s is said to check %s but never names it", test, r)
		default:
			shownBy[r] = append(shownBy[r], test)
		}
	}
	for _, r := range recovery.AllReasons() {
		if len(shownBy[r.String()]) == 0 {
			t.Errorf("no end-to-end test shows %v", r)
		}
	}
	for n := range completionv1.TransitionReason_name {
		if n != 0 && convert.FromReason(recovery.Reason(n)) != completionv1.TransitionReason(n) {
			t.Errorf("proto reason %d has no recovery reason", n)
		}
	}
}

// testFuncs parses the package's _test.go files and returns their
// top-level functions by name.
func testFuncs(t *testing.T) map[string]*ast.FuncDecl {
	t.Helper()
	files, err := filepath.Glob("*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test sources: %v", err)
	}
	fset := token.NewFileSet()
	funcs := map[string]*ast.FuncDecl{}
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil {
				funcs[fn.Name.Name] = fn
			}
		}
	}
	return funcs
}

// isTestFunc reports whether fn is a test: TestXxx(t *testing.T).
func isTestFunc(fn *ast.FuncDecl) bool {
	if fn == nil || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Type.Params == nil || len(fn.Type.Params.List) != 1 {
		return false
	}
	star, ok := fn.Type.Params.List[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "testing" && sel.Sel.Name == "T"
}

// rangesOverCall reports whether fn's body has a range loop over a call of
// the function named name, which runs every element it returns.
func rangesOverCall(fn *ast.FuncDecl, name string) bool {
	found := false
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		if loop, ok := n.(*ast.RangeStmt); ok {
			if call, ok := loop.X.(*ast.CallExpr); ok {
				if id, ok := call.Fun.(*ast.Ident); ok && id.Name == name {
					found = true
				}
			}
		}
		return !found
	})
	return found
}

// skips reports whether fn's body calls a Skip method (t.Skip, t.Skipf,
// t.SkipNow), which would make the coverage it is credited with vacuous.
func skips(fn *ast.FuncDecl) bool {
	found := false
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && strings.HasPrefix(sel.Sel.Name, "Skip") {
				found = true
			}
		}
		return !found
	})
	return found
}

// mentionsReason reports whether fn's body names reason, as the string a
// transitions list holds ("MAX_TURNS") or as the proto enum value
// (TransitionReason_TRANSITION_REASON_MAX_TURNS).
func mentionsReason(fn *ast.FuncDecl, reason string) bool {
	found := false
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			if v, err := strconv.Unquote(n.Value); n.Kind == token.STRING && err == nil && v == reason {
				found = true
			}
		case *ast.Ident:
			if n.Name == "TransitionReason_TRANSITION_REASON_"+reason {
				found = true
			}
		}
		return !found
	})
	return found
}
