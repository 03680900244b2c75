package driver

import (
	"slices"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// maxCacheBreakpoints is how many cache breakpoints one call may carry
// (Anthropic's limit).
const maxCacheBreakpoints = 4

// cachePlan is where one call's prompt is marked for the provider's cache.
type cachePlan struct {
	// system marks the end of the system prompt, with the tools before it.
	system bool
	// messages are the indexes of the messages whose last markable block
	// is marked.
	messages []int
}

// planCache places the cache breakpoints of a call whose prompt holds
// msgs, under the request's prompt_cache. The caller's own marks (on
// blocks, on tools, PromptCache.system) always go and count against the
// limit of 4; in AUTO mode completiond adds, while room is left and in
// this order of worth:
//
//  1. the end of this call's prompt: a retry, an escalation or a stream
//     resume sends the same prompt again, and a continuation or a Session
//     turn extends it, which the provider finds by looking back from the
//     next call's breakpoints;
//  2. the end of the caller's conversation (callerLen messages): every call
//     of the completion starts with it, however much the machine appended;
//  3. the end of the previous call's prompt (prevLen messages), for a turn
//     that appended more blocks than the provider looks back over;
//  4. the system prompt and the tools, which completions share.
//
// A mark costs nothing by itself: the provider bills a cache write for the
// prompt from its longest cached prefix up to the last breakpoint, however
// many breakpoints lie between.
func planCache(pc *completionv1.PromptCache, hasSystem bool, tools []provider.Tool, msgs []recovery.Message, callerLen, prevLen int) cachePlan {
	mode := pc.GetMode()
	if mode == completionv1.PromptCacheMode_PROMPT_CACHE_MODE_OFF {
		return cachePlan{}
	}
	plan := cachePlan{system: pc.GetSystem() && (hasSystem || len(tools) > 0)}
	used := callerMarks(tools, msgs)
	if plan.system {
		used++
	}
	if mode == completionv1.PromptCacheMode_PROMPT_CACHE_MODE_CALLER {
		return plan
	}
	for _, end := range []int{len(msgs), callerLen, prevLen} {
		i := end - 1
		if used >= maxCacheBreakpoints || i < 0 || i >= len(msgs) || slices.Contains(plan.messages, i) || markable(msgs[i]) < 0 || marked(msgs[i]) {
			continue
		}
		plan.messages = append(plan.messages, i)
		used++
	}
	if !plan.system && used < maxCacheBreakpoints && (hasSystem || len(tools) > 0) {
		plan.system = true
	}
	return plan
}

// apply marks the blocks of the plan on copies of msgs (the machine's own
// messages are never written) and returns them.
func (p cachePlan) apply(msgs []recovery.Message) []recovery.Message {
	if len(p.messages) == 0 {
		return msgs
	}
	out := append([]recovery.Message(nil), msgs...)
	for _, i := range p.messages {
		blocks := append([]recovery.Block(nil), out[i].Blocks...)
		blocks[markable(out[i])].CacheBreakpoint = true
		out[i].Blocks = blocks
	}
	return out
}

// applyTools marks the last tool when the plan marks the system prompt and
// there is none: the breakpoint then ends the tools, which come first in
// the prompt.
func (p cachePlan) applyTools(tools []provider.Tool, hasSystem bool) []provider.Tool {
	if !p.system || hasSystem || len(tools) == 0 || tools[len(tools)-1].CacheBreakpoint {
		return tools
	}
	out := append([]provider.Tool(nil), tools...)
	out[len(out)-1].CacheBreakpoint = true
	return out
}

// callerMarks counts the caller's own breakpoints in a call's prompt.
func callerMarks(tools []provider.Tool, msgs []recovery.Message) int {
	n := 0
	for _, t := range tools {
		if t.CacheBreakpoint {
			n++
		}
	}
	for _, m := range msgs {
		for _, b := range m.Blocks {
			if b.CacheBreakpoint {
				n++
			}
		}
	}
	return n
}

// markable is the index of m's last block that can carry a breakpoint (a
// thinking block cannot), or -1.
func markable(m recovery.Message) int {
	for i := len(m.Blocks) - 1; i >= 0; i-- {
		if m.Blocks[i].Kind != recovery.BlockThinking {
			return i
		}
	}
	return -1
}

// marked reports whether the caller marked m's last markable block already.
func marked(m recovery.Message) bool {
	i := markable(m)
	return i >= 0 && m.Blocks[i].CacheBreakpoint
}
