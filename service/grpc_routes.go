package service

import (
	"context"
	"maps"
	"slices"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/recovery"
)

// ListRoutes lists the routes the caller may use (every route without
// authentication), sorted by name, each with its capabilities from the
// table the request validation checks against (config.Route.Capabilities)
// and its circuit as the breakers see it now (shared in a fleet).
func (s *Server) ListRoutes(ctx context.Context, _ *completionv1.ListRoutesRequest) (*completionv1.ListRoutesResponse, error) {
	may := func(string) bool { return true }
	if c, ok := callerFrom(ctx); ok {
		may = c.may
	}
	var routes []*config.Route
	for _, name := range slices.Sorted(maps.Keys(s.cfg.Routes)) {
		if may(name) {
			routes = append(routes, s.cfg.Routes[name])
		}
	}
	specs := make([]recovery.Route, len(routes))
	for i, r := range routes {
		specs[i] = r.Spec
	}
	open := s.breakers.Open(specs) // one read of the shared breakers for them all
	out := &completionv1.ListRoutesResponse{Routes: make([]*completionv1.RouteInfo, len(routes))}
	for i, r := range routes {
		info := routeInfo(r, may, r.Spec.Name == s.cfg.DefaultRoute)
		if slices.Contains(open, r.Spec.Name) {
			info.CircuitOpen = true
			info.CircuitRetryAfter = durationpb.New(s.breakers.RetryAfter(r.Spec.Name))
		}
		out.Routes[i] = info
	}
	return out, nil
}

// routeInfo describes route r to a caller who may use the routes may
// allows: its configured fallbacks are listed less the others, which a
// completion of that caller skips too (permit).
func routeInfo(r *config.Route, may func(string) bool, isDefault bool) *completionv1.RouteInfo {
	var fallbacks []string
	for _, fb := range r.Fallbacks {
		if may(fb) {
			fallbacks = append(fallbacks, fb)
		}
	}
	info := &completionv1.RouteInfo{
		Name: r.Spec.Name, Provider: r.Spec.Provider, Model: r.Spec.Model,
		ContextWindow: int32(r.Spec.ContextWindow), MaxOutputTokens: int32(r.Spec.MaxOutputTokens),
		FallbackRoutes: fallbacks, IsDefault: isDefault,
		Capabilities: capabilitiesOf(r.Capabilities(), r.Spec.Prefill && !r.Spec.Thinking),
	}
	if r.Spec.Thinking {
		info.Thinking, info.ThinkingBudget = true, int32(r.ThinkingBudget)
	}
	return info
}

// capabilitiesOf is c on the wire; prefill says whether the route
// continues a broken stream by prefill.
func capabilitiesOf(c config.Capabilities, prefill bool) *completionv1.RouteCapabilities {
	modes := []completionv1.ToolChoiceMode{completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO}
	for _, m := range []struct {
		ok   bool
		mode completionv1.ToolChoiceMode
	}{
		{c.ToolChoiceAny, completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_ANY},
		{c.ToolChoiceNone, completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE},
		{c.ToolChoiceTool, completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL},
	} {
		if m.ok {
			modes = append(modes, m.mode)
		}
	}
	return &completionv1.RouteCapabilities{
		MaxTemperature: c.MaxTemperature, TopP: c.TopP, MinTopP: c.MinTopP, TopK: c.TopK, Seed: c.Seed,
		MaxStopSequences: int32(c.MaxStopSequences), NamesStopSequence: c.NamesStopSequence,
		ToolChoiceModes: modes, DisableParallelToolUse: c.DisableParallelToolUse,
		ThinkingBudget: c.ThinkingBudget, MaxThinkingBudget: int32(c.MaxThinkingBudget),
		ReasoningEffort: c.ReasoningEffort, MaxReasoningEffort: effortOf(c.MaxReasoningEffort),
		InterleavedThinking: c.InterleavedThinking, StructuredOutput: structuredOutputOf(c.StructuredOutput),
		CacheBreakpoints: c.CacheBreakpoints, CachesByItself: c.CachesByItself,
		ImageUrl: c.ImageURL, Documents: c.Documents, Prefill: prefill,
	}
}

// effortOf is a route's max_reasoning_effort on the wire (the inverse of
// effortName); unspecified for none.
func effortOf(e string) completionv1.ReasoningEffort {
	for _, x := range []completionv1.ReasoningEffort{
		completionv1.ReasoningEffort_REASONING_EFFORT_MINIMAL, completionv1.ReasoningEffort_REASONING_EFFORT_LOW,
		completionv1.ReasoningEffort_REASONING_EFFORT_MEDIUM, completionv1.ReasoningEffort_REASONING_EFFORT_HIGH,
	} {
		if effortName(x) == e && e != "" {
			return x
		}
	}
	return completionv1.ReasoningEffort_REASONING_EFFORT_UNSPECIFIED
}

// structuredOutputOf is config.Capabilities.StructuredOutput on the wire.
func structuredOutputOf(mode string) completionv1.StructuredOutputMode {
	switch mode {
	case config.StructuredNatively:
		return completionv1.StructuredOutputMode_STRUCTURED_OUTPUT_MODE_NATIVE
	case config.StructuredNativeOrTool:
		return completionv1.StructuredOutputMode_STRUCTURED_OUTPUT_MODE_NATIVE_OR_TOOL
	case config.StructuredByTool:
		return completionv1.StructuredOutputMode_STRUCTURED_OUTPUT_MODE_TOOL
	case config.StructuredByStopHook:
		return completionv1.StructuredOutputMode_STRUCTURED_OUTPUT_MODE_STOP_HOOK
	}
	return completionv1.StructuredOutputMode_STRUCTURED_OUTPUT_MODE_UNSPECIFIED
}
