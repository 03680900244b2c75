package service

import (
	"slices"
	"strconv"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// The bounds on the request's model parameters that hold whatever the route.
const (
	// maxStopSequenceBytes bounds one stop sequence.
	maxStopSequenceBytes = 256
	// maxTotalOutputTokens bounds max_total_output_tokens.
	maxTotalOutputTokens = 10_000_000
)

// validateParameters checks the request's model parameters: each on its
// own, then against every route of the completion's chain, since each
// attempt sends them unchanged to whichever route it calls (a parameter a
// fallback cannot honour is refused now, not dropped there). A violation
// names the field and the route.
func (c *Config) validateParameters(req *completionv1.CompleteRequest, v *violations) {
	validateSampling(req, v)
	validateStopSequences(req.GetStopSequences(), v)
	validateToolChoice(req, v)
	validateReasoning(req.GetReasoning(), v)
	need := needsOf(req)
	validatePromptCache(req.GetPromptCache(), need.cacheMarks, v)
	if req.MaxTotalOutputTokens != nil {
		if n := req.GetMaxTotalOutputTokens(); n <= 0 || n > maxTotalOutputTokens {
			v.add("max_total_output_tokens", "must be between 1 and %d, got %d", maxTotalOutputTokens, n)
		}
	}
	for _, r := range c.chainOf(req) {
		capa := r.Capabilities()
		checkRoute(req, r.Spec.Name, capa, v)
		checkRouteNeeds(req, need, r.Spec.Name, capa, v)
	}
}

// chainOf is the routes the request may call, as it calls them (with its
// reasoning, see reasoned): its chain, without the fallbacks when its
// policy turns them off.
func (c *Config) chainOf(req *completionv1.CompleteRequest) []*config.Route {
	routes := c.Chain(req.GetRoute(), req.GetFallbackRoutes())
	if req.GetPolicy().GetDisableFallback() && len(routes) > 1 {
		routes = routes[:1]
	}
	return reasoned(routes, req.GetReasoning())
}

// reasoned is the chain as a completion with reasoning r calls it: each
// route that reasons asked to think with r's budget or effort
// (config.Route.Reasoning), a copy of the server's route.
func reasoned(routes []*config.Route, r *completionv1.Reasoning) []*config.Route {
	if !reasoningAsked(r) {
		return routes
	}
	out := make([]*config.Route, len(routes))
	for i, rt := range routes {
		out[i] = rt.Reasoning(int(r.GetBudgetTokens()), effortName(r.GetEffort()), r.GetInterleaved())
	}
	return out
}

// reasoningAsked reports whether the request asks for reasoning at all.
func reasoningAsked(r *completionv1.Reasoning) bool {
	return r.GetBudgetTokens() != 0 || r.GetEffort() != completionv1.ReasoningEffort_REASONING_EFFORT_UNSPECIFIED || r.GetInterleaved()
}

// effortName is the effort's name in config.ReasoningEfforts ("" for
// unspecified or unknown).
func effortName(e completionv1.ReasoningEffort) string {
	switch e {
	case completionv1.ReasoningEffort_REASONING_EFFORT_MINIMAL:
		return "minimal"
	case completionv1.ReasoningEffort_REASONING_EFFORT_LOW:
		return "low"
	case completionv1.ReasoningEffort_REASONING_EFFORT_MEDIUM:
		return "medium"
	case completionv1.ReasoningEffort_REASONING_EFFORT_HIGH:
		return "high"
	}
	return ""
}

func validateSampling(req *completionv1.CompleteRequest, v *violations) {
	if t := req.GetTemperature(); req.Temperature != nil && !validTemperature(t) {
		v.add("temperature", "must be between 0 and 2, got %s", number(t))
	}
	if p := req.GetTopP(); req.TopP != nil && !validTopP(p) {
		v.add("top_p", "must be in (0, 1], got %s", number(p))
	}
	if req.TopK != nil && req.GetTopK() < 1 {
		v.add("top_k", "must be at least 1, got %d", req.GetTopK())
	}
}

// validTemperature and validTopP report whether a value is in the range
// some route takes (NaN is in none).
func validTemperature(t float64) bool { return t >= 0 && t <= 2 }
func validTopP(p float64) bool        { return p > 0 && p <= 1 }

// number formats a caller's float for a violation: short, and NaN or an
// infinity by name.
func number(f float64) string { return strconv.FormatFloat(f, 'g', 6, 64) }

func validateStopSequences(seqs []string, v *violations) {
	most := 0 // the most any provider kind takes; routes may take fewer
	for _, k := range config.ProviderKinds {
		most = max(most, config.KindCapabilities(k).MaxStopSequences)
	}
	if len(seqs) > most {
		v.add("stop_sequences", "%d stop sequences, over the limit of %d", len(seqs), most)
		return
	}
	for i, s := range seqs {
		field := "stop_sequences[" + strconv.Itoa(i) + "]"
		switch {
		case s == "":
			v.add(field, "a stop sequence must not be empty")
		case len(s) > maxStopSequenceBytes:
			v.add(field, "%d bytes, over the limit of %d", len(s), maxStopSequenceBytes)
		case slices.Contains(seqs[:i], s):
			v.add(field, "duplicate stop sequence %s", quote(s))
		}
	}
}

func validateToolChoice(req *completionv1.CompleteRequest, v *violations) {
	tc := req.GetToolChoice()
	if tc == nil {
		return
	}
	mode := tc.GetMode()
	if _, ok := completionv1.ToolChoiceMode_name[int32(mode)]; !ok {
		v.add("tool_choice.mode", "unknown tool choice mode %d", mode)
		return
	}
	named := mode == completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL
	switch {
	case named && !slices.ContainsFunc(req.GetTools(), func(t *completionv1.Tool) bool { return t.GetName() == tc.GetName() }):
		v.add("tool_choice.name", "%s is not one of the request's tools", quote(tc.GetName()))
	case !named && tc.GetName() != "":
		v.add("tool_choice.name", "a name goes with TOOL_CHOICE_MODE_TOOL only")
	}
	if forcing(mode) && len(req.GetTools()) == 0 {
		v.add("tool_choice.mode", "%s needs tools: the request has none", mode)
	}
}

// forcing reports whether mode makes the model call a tool.
func forcing(mode completionv1.ToolChoiceMode) bool {
	return mode == completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_ANY || mode == completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL
}

// checkRoute adds a violation for each parameter of req the route cannot
// honour (the capability table, provider.KindCapabilities).
func checkRoute(req *completionv1.CompleteRequest, route string, capa config.Capabilities, v *violations) {
	on := "route " + quote(route)
	// A value already refused on its own is not refused again per route.
	if req.Temperature != nil && validTemperature(req.GetTemperature()) {
		if t := req.GetTemperature(); capa.MaxTemperature == 0 {
			v.add("temperature", "%s does not take a temperature", on)
		} else if t > capa.MaxTemperature {
			v.add("temperature", "%s takes a temperature between 0 and %s, got %s", on, number(capa.MaxTemperature), number(t))
		}
	}
	if req.TopP != nil && validTopP(req.GetTopP()) {
		if !capa.TopP {
			v.add("top_p", "%s does not take top_p", on)
		} else if p := req.GetTopP(); p < capa.MinTopP {
			v.add("top_p", "%s takes top_p from %s, got %s", on, number(capa.MinTopP), number(p))
		}
	}
	if req.TopK != nil && req.GetTopK() >= 1 && !capa.TopK {
		v.add("top_k", "%s does not take top_k", on)
	}
	if req.Seed != nil && !capa.Seed {
		v.add("seed", "%s does not take a seed", on)
	}
	if n := len(req.GetStopSequences()); n > capa.MaxStopSequences {
		v.add("stop_sequences", "%s takes at most %d stop sequences, got %d", on, capa.MaxStopSequences, n)
	}
	tc := req.GetToolChoice()
	switch mode := tc.GetMode(); {
	case mode == completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_ANY && !capa.ToolChoiceAny,
		mode == completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE && !capa.ToolChoiceNone,
		mode == completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL && !capa.ToolChoiceTool:
		v.add("tool_choice.mode", "%s cannot honour %s", on, mode)
	}
	if tc.GetDisableParallelToolUse() && !capa.DisableParallelToolUse {
		v.add("tool_choice.disable_parallel_tool_use", "%s cannot be held to one tool call per answer", on)
	}
}
