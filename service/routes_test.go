package service

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/recovery"
)

// withThinkingRoute adds sim-thinking: a sim route whose model thinks on
// every call, whose capabilities are narrowed as a thinking route's.
func withThinkingRoute(c *Config) {
	r := *c.Routes["sim-large"]
	r.Spec.Name, r.Spec.Thinking, r.ThinkingBudget, r.Fallbacks = "sim-thinking", true, 4096, nil
	c.Routes["sim-thinking"] = &r
}

// listRoutes calls ListRoutes and returns the routes by name, in order.
func listRoutes(t *testing.T, ctx context.Context, client completionv1.CompletionClient) ([]*completionv1.RouteInfo, []string) {
	t.Helper()
	resp, err := client.ListRoutes(ctx, &completionv1.ListRoutesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range resp.GetRoutes() {
		names = append(names, r.GetName())
	}
	return resp.GetRoutes(), names
}

// TestListRoutes: the routes a caller may use, sorted by name — every
// route without auth, a key's allowed routes with it —, each with the
// fallbacks the caller's completions would use, the default flagged.
func TestListRoutes(t *testing.T) {
	all := []string{"sim", "sim-fallback", "sim-large", "sim-noprefill", "sim-small", "sim-thinking"}
	for _, tc := range []struct {
		name      string
		auth      bool
		key       string
		want      []string
		fallbacks map[string][]string
		dflt      string
	}{
		{name: "no auth", want: all, dflt: "sim",
			fallbacks: map[string][]string{"sim": {"sim-fallback", "sim-large"}, "sim-small": {"sim-large"}, "sim-thinking": nil}},
		{name: "a key for every route", auth: true, key: "Bearer ops-secret-key", want: all, dflt: "sim",
			fallbacks: map[string][]string{"sim": {"sim-fallback", "sim-large"}}},
		{name: "a key for sim only: no fallback it may not use", auth: true, key: "Bearer narrow-secret-key", want: []string{"sim"}, dflt: "sim",
			fallbacks: map[string][]string{"sim": nil}},
		{name: "a key without the default route", auth: true, key: "Bearer large-secret-key", want: []string{"sim-large"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e *testEnv
			if tc.auth {
				e, _ = authEnv(t, withThinkingRoute)
			} else {
				e = newTestEnv(t, withThinkingRoute)
			}
			routes, names := listRoutes(t, bearer(t.Context(), tc.key), e.client)
			if !slices.Equal(names, tc.want) {
				t.Fatalf("routes %v, want %v", names, tc.want)
			}
			for _, r := range routes {
				if r.GetIsDefault() != (r.GetName() == tc.dflt) {
					t.Errorf("%s: is_default %v", r.GetName(), r.GetIsDefault())
				}
				if want, ok := tc.fallbacks[r.GetName()]; ok && !slices.Equal(r.GetFallbackRoutes(), want) {
					t.Errorf("%s: fallbacks %v, want %v", r.GetName(), r.GetFallbackRoutes(), want)
				}
				if r.GetProvider() != "sim" || r.GetModel() == "" || r.GetContextWindow() <= 0 || r.GetMaxOutputTokens() <= 0 || r.GetCircuitOpen() {
					t.Errorf("%s: %v", r.GetName(), r)
				}
			}
		})
	}
	t.Run("no key", func(t *testing.T) {
		e, _ := authEnv(t)
		if _, err := e.client.ListRoutes(t.Context(), &completionv1.ListRoutesRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("ListRoutes without a key: %v", err)
		}
	})
}

// TestListRoutesCapabilities: a route's capabilities are the ones the
// request validation checks against — a thinking route's narrowed (no
// temperature, no top_k, top_p from 0.95, no forced tool, no prefill) —,
// so that a request within what ListRoutes says passes and one just past
// it is refused, naming the field.
func TestListRoutesCapabilities(t *testing.T) {
	e := newTestEnv(t, withThinkingRoute)
	routes, _ := listRoutes(t, t.Context(), e.client)
	byName := map[string]*completionv1.RouteInfo{}
	for _, r := range routes {
		byName[r.GetName()] = r
	}
	think := byName["sim-thinking"]
	want := &completionv1.RouteCapabilities{
		TopP: true, MinTopP: 0.95, Seed: true, MaxStopSequences: 16, NamesStopSequence: true,
		ToolChoiceModes:        []completionv1.ToolChoiceMode{completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO, completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE},
		DisableParallelToolUse: true, ThinkingBudget: true, MaxThinkingBudget: 32_000, ReasoningEffort: true,
		MaxReasoningEffort: completionv1.ReasoningEffort_REASONING_EFFORT_HIGH, InterleavedThinking: true,
		StructuredOutput: completionv1.StructuredOutputMode_STRUCTURED_OUTPUT_MODE_STOP_HOOK,
		CacheBreakpoints: true, ImageUrl: true, Documents: true,
	}
	if !think.GetThinking() || think.GetThinkingBudget() != 4096 || !proto.Equal(think.GetCapabilities(), want) {
		t.Errorf("sim-thinking: thinking %v, budget %d, capabilities %v; want %v", think.GetThinking(), think.GetThinkingBudget(), think.GetCapabilities(), want)
	}
	if c := byName["sim"].GetCapabilities(); c.GetMaxTemperature() != 2 || !c.GetTopK() || !c.GetPrefill() || len(c.GetToolChoiceModes()) != 4 {
		t.Errorf("sim: %v", c)
	}
	if byName["sim-noprefill"].GetCapabilities().GetPrefill() {
		t.Error("sim-noprefill takes a prefill")
	}

	cfg := &e.grpc.Completion.cfg
	for _, r := range routes {
		c := r.GetCapabilities()
		on := func(mut func(*completionv1.CompleteRequest)) *completionv1.CompleteRequest {
			req := prompt("hi", nil)
			req.Route, req.Policy = r.GetName(), &completionv1.Policy{DisableFallback: true}
			req.Tools = []*completionv1.Tool{{Name: "search"}}
			mut(req)
			return req
		}
		for _, tc := range []struct {
			name  string
			req   *completionv1.CompleteRequest
			field string // "" when the capabilities say it passes
		}{
			{"temperature at its max", on(func(q *completionv1.CompleteRequest) { q.Temperature = proto.Float64(max(c.GetMaxTemperature(), 0.5)) }),
				map[bool]string{true: "", false: "temperature"}[c.GetMaxTemperature() > 0]},
			{"top_p at its min", on(func(q *completionv1.CompleteRequest) { q.TopP = proto.Float64(max(c.GetMinTopP(), 0.5)) }), ""},
			{"top_p under its min", on(func(q *completionv1.CompleteRequest) { q.TopP = proto.Float64(max(c.GetMinTopP()-0.01, 0.5)) }),
				map[bool]string{true: "top_p", false: ""}[c.GetMinTopP() > 0]},
			{"top_k", on(func(q *completionv1.CompleteRequest) { q.TopK = proto.Int32(5) }), map[bool]string{true: "", false: "top_k"}[c.GetTopK()]},
			{"tool_choice ANY", on(func(q *completionv1.CompleteRequest) {
				q.ToolChoice = &completionv1.ToolChoice{Mode: completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_ANY}
			}), map[bool]string{true: "", false: "tool_choice.mode"}[slices.Contains(c.GetToolChoiceModes(), completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_ANY)]},
			{"thinking budget at its max", on(func(q *completionv1.CompleteRequest) {
				q.Reasoning = &completionv1.Reasoning{BudgetTokens: c.GetMaxThinkingBudget()}
				q.MaxOutputTokens = proto.Int32(64_000)
			}), ""},
			{"thinking budget past its max", on(func(q *completionv1.CompleteRequest) {
				q.Reasoning = &completionv1.Reasoning{BudgetTokens: c.GetMaxThinkingBudget() + 1}
				q.MaxOutputTokens = proto.Int32(64_000)
			}), "reasoning.budget_tokens"},
		} {
			t.Run(r.GetName()+"/"+tc.name, func(t *testing.T) {
				v, _ := cfg.validate(tc.req)
				switch {
				case tc.field == "" && len(v) > 0:
					t.Errorf("refused within what ListRoutes says: %v", v)
				case tc.field != "" && !hasViolation(detailsOf(v), tc.field):
					t.Errorf("not refused on %s past what ListRoutes says: %v", tc.field, v)
				}
			})
		}
	}
}

// detailsOf is v as the details of its status.
func detailsOf(v violations) []any { return status.Convert(invalidArgument(v)).Details() }

// TestListRoutesOpenCircuit: a route whose circuit is open says so, with
// how long until it lets a call through; the others do not.
func TestListRoutesOpenCircuit(t *testing.T) {
	e := newTestEnv(t, func(c *Config) { c.Breaker = config.BreakerSettings{Failures: 2, Cooldown: time.Hour} })
	b := e.grpc.Completion.breakers
	for range 2 {
		report, ok := b.Allow("sim-fallback")
		if !ok {
			t.Fatal("the circuit opened early")
		}
		report(recovery.Event{Kind: recovery.EvAttemptFailed, Failure: &recovery.Failure{Kind: recovery.FailServer}})
	}
	routes, _ := listRoutes(t, t.Context(), e.client)
	for _, r := range routes {
		open := r.GetName() == "sim-fallback"
		if r.GetCircuitOpen() != open {
			t.Errorf("%s: circuit_open %v, want %v", r.GetName(), r.GetCircuitOpen(), open)
		}
		if d := r.GetCircuitRetryAfter(); open && d.AsDuration() < 59*time.Minute || !open && d != nil {
			t.Errorf("%s: circuit_retry_after %v", r.GetName(), d)
		}
	}
}
