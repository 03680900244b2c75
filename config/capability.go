package config

import (
	"fmt"
	"strings"

	"github.com/completiond/completiond/provider"
)

// Capabilities is what a route can honour of a request's parameters. The
// table of them per provider kind (KindCapabilities) is the one place that
// says it: the request validation refuses a parameter some route of the
// completion's chain cannot honour, before any upstream call, and the
// README's table is printed from it (TestCapabilityTableInREADME).
type Capabilities struct {
	// MaxTemperature is the largest temperature the route accepts (its
	// range starts at 0); 0 when it takes none.
	MaxTemperature float64
	// TopP reports whether the route takes top_p; MinTopP is the smallest it
	// accepts, when it bounds it from below (0: any value in (0, 1]).
	TopP    bool
	MinTopP float64
	// TopK reports whether the route takes top_k.
	TopK bool
	// Seed reports whether the route takes a sampling seed.
	Seed bool
	// MaxStopSequences is how many stop sequences the route takes; 0 when
	// it takes none.
	MaxStopSequences int
	// NamesStopSequence reports whether the route's upstream says which
	// stop sequence ended an answer. Where it does not (OpenAI's API ends
	// with finish_reason "stop" both at a stop sequence and at a natural
	// end), a stop sequence still ends the answer there, reported as
	// STOP_REASON_END_TURN.
	NamesStopSequence bool
	// ToolChoiceAny, ToolChoiceNone and ToolChoiceTool report whether the
	// route can be made to call some tool, no tool, or a named tool; auto
	// is always honoured.
	ToolChoiceAny, ToolChoiceNone, ToolChoiceTool bool
	// DisableParallelToolUse reports whether the route can be held to one
	// tool call per answer.
	DisableParallelToolUse bool
	// ThinkingBudget reports whether the kind thinks with a token budget
	// (Anthropic extended thinking); MaxThinkingBudget is the largest a
	// request may ask of the route (its max_thinking_budget), 0 where the
	// route takes none.
	ThinkingBudget    bool
	MaxThinkingBudget int
	// ReasoningEffort reports whether the kind reasons with an effort
	// (OpenAI reasoning_effort); MaxReasoningEffort is the most a request
	// may ask of the route (its max_reasoning_effort), "" where it takes
	// none.
	ReasoningEffort    bool
	MaxReasoningEffort string
	// InterleavedThinking reports whether the route's model can think
	// between tool calls.
	InterleavedThinking bool
	// StructuredOutput is how the kind (StructuredNativeOrTool,
	// StructuredNatively, StructuredByStopHook), or the route
	// (StructuredNatively, StructuredByTool, StructuredByStopHook), asks for
	// an answer that satisfies output_json_schema.
	StructuredOutput string
	// CacheBreakpoints reports whether the kind takes prompt cache
	// breakpoints (Anthropic cache_control); OpenAI caches long prompts by
	// itself, so a mark asks nothing it does not do anyway.
	CacheBreakpoints bool
	// CachesByItself reports whether the upstream caches long prompts
	// without being told (OpenAI): there a breakpoint asks nothing more.
	CachesByItself bool
	// ImageURL reports whether the route takes an image by URL, which the
	// provider fetches.
	ImageURL bool
	// Documents reports whether the route takes PDF document blocks.
	Documents bool
}

// StructuredToolName is the tool a route whose structured_output is tool
// declares and forces to get an answer that satisfies the output schema;
// a request's own tools may not take its name there.
const StructuredToolName = provider.StructuredToolName

// The ways of Capabilities.StructuredOutput, as the capability table
// shows them.
const (
	StructuredNatively     = "native"
	StructuredNativeOrTool = "native or tool"
	StructuredByTool       = "tool"
	StructuredByStopHook   = "stop hook"
)

// Reasons reports whether the route can be asked to reason at all.
func (c Capabilities) Reasons() bool { return c.MaxThinkingBudget > 0 || c.MaxReasoningEffort != "" }

// ProviderKinds are the provider kinds, in the order the capability table lists
// them.
var ProviderKinds = []string{"anthropic", "openai", "sim"}

// KindCapabilities is the capability table: what a route of provider kind
// kind can honour, before anything particular to the route (see
// WithThinking). An unknown kind honours nothing beyond the defaults.
func KindCapabilities(kind string) Capabilities {
	switch kind {
	case "anthropic":
		return Capabilities{MaxTemperature: 1, TopP: true, TopK: true, MaxStopSequences: 16, NamesStopSequence: true,
			ToolChoiceAny: true, ToolChoiceNone: true, ToolChoiceTool: true, DisableParallelToolUse: true,
			ThinkingBudget: true, InterleavedThinking: true, StructuredOutput: StructuredNativeOrTool,
			CacheBreakpoints: true, ImageURL: true, Documents: true}
	case "openai":
		return Capabilities{MaxTemperature: 2, TopP: true, Seed: true, MaxStopSequences: 4,
			ToolChoiceAny: true, ToolChoiceNone: true, ToolChoiceTool: true, DisableParallelToolUse: true,
			ReasoningEffort: true, StructuredOutput: StructuredNatively, CacheBreakpoints: true, CachesByItself: true, ImageURL: true}
	case "sim":
		return Capabilities{MaxTemperature: 2, TopP: true, TopK: true, Seed: true, MaxStopSequences: 16, NamesStopSequence: true,
			ToolChoiceAny: true, ToolChoiceNone: true, ToolChoiceTool: true, DisableParallelToolUse: true,
			ThinkingBudget: true, ReasoningEffort: true, InterleavedThinking: true, StructuredOutput: StructuredByStopHook,
			CacheBreakpoints: true, ImageURL: true, Documents: true}
	}
	return Capabilities{}
}

// WithThinking is c for a route whose model thinks (Anthropic extended
// thinking): such a call takes neither a temperature other than the
// default nor top_k, top_p only from 0.95, and no forced tool use (any, or
// a named tool).
func (c Capabilities) WithThinking() Capabilities {
	c.MaxTemperature, c.TopK = 0, false
	if c.TopP {
		c.MinTopP = max(c.MinTopP, 0.95)
	}
	c.ToolChoiceAny, c.ToolChoiceTool = false, false
	return c
}

// CapabilityTable is the capability table in Markdown, as the README shows
// it: a row per parameter, a column per provider kind, and the thinking
// route's limits in a column of its own.
func CapabilityTable() string {
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "—"
	}
	temp := func(c Capabilities) string {
		if c.MaxTemperature == 0 {
			return "—"
		}
		return fmt.Sprintf("0 – %g", c.MaxTemperature)
	}
	topP := func(c Capabilities) string {
		switch {
		case !c.TopP:
			return "—"
		case c.MinTopP > 0:
			return fmt.Sprintf("%g – 1", c.MinTopP)
		}
		return "(0, 1]"
	}
	stops := func(c Capabilities) string {
		if c.MaxStopSequences == 0 {
			return "—"
		}
		return fmt.Sprintf("up to %d", c.MaxStopSequences)
	}
	reasoning := func(c Capabilities) string {
		switch {
		case c.ThinkingBudget && c.ReasoningEffort:
			return "budget or effort"
		case c.ThinkingBudget:
			return "budget (an effort mapped)"
		case c.ReasoningEffort:
			return "effort (a budget mapped)"
		}
		return "—"
	}
	cols := []Capabilities{}
	head := "| parameter |"
	for _, k := range ProviderKinds {
		cols = append(cols, KindCapabilities(k))
		head += " " + k + " |"
	}
	cols = append(cols, KindCapabilities("anthropic").WithThinking())
	head += " anthropic, thinking route |"
	rows := []struct {
		name string
		cell func(Capabilities) string
	}{
		{"`temperature`", temp},
		{"`top_p`", topP},
		{"`top_k`", func(c Capabilities) string { return yes(c.TopK) }},
		{"`seed`", func(c Capabilities) string { return yes(c.Seed) }},
		{"`stop_sequences`", stops},
		{"`stop_sequence` named in the result", func(c Capabilities) string { return yes(c.NamesStopSequence) }},
		{"`tool_choice` ANY", func(c Capabilities) string { return yes(c.ToolChoiceAny) }},
		{"`tool_choice` NONE", func(c Capabilities) string { return yes(c.ToolChoiceNone) }},
		{"`tool_choice` TOOL", func(c Capabilities) string { return yes(c.ToolChoiceTool) }},
		{"`disable_parallel_tool_use`", func(c Capabilities) string { return yes(c.DisableParallelToolUse) }},
		{"`reasoning`", reasoning},
		{"`reasoning.interleaved`", func(c Capabilities) string { return yes(c.InterleavedThinking) }},
		{"`output_json_schema`", func(c Capabilities) string {
			if c.StructuredOutput == StructuredByStopHook {
				return "the stop hook"
			}
			return c.StructuredOutput + ", then the stop hook"
		}},
		{"`cache_breakpoint`, `prompt_cache`", func(c Capabilities) string {
			if c.CachesByItself {
				return "caches by itself"
			}
			return yes(c.CacheBreakpoints)
		}},
		{"image `url`", func(c Capabilities) string { return yes(c.ImageURL) }},
		{"`document` (PDF)", func(c Capabilities) string { return yes(c.Documents) }},
	}
	var b strings.Builder
	b.WriteString(head + "\n|---|" + strings.Repeat("---|", len(cols)) + "\n")
	for _, r := range rows {
		b.WriteString("| " + r.name + " |")
		for _, c := range cols {
			b.WriteString(" " + r.cell(c) + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}
