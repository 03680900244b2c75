package driver

import (
	"slices"
	"testing"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

func TestPlanCache(t *testing.T) {
	user := recovery.UserText
	marked := func(m recovery.Message) recovery.Message {
		m.Blocks = slices.Clone(m.Blocks)
		m.Blocks[len(m.Blocks)-1].CacheBreakpoint = true
		return m
	}
	thinkingOnly := recovery.Message{Role: recovery.RoleAssistant, Blocks: []recovery.Block{{Kind: recovery.BlockThinking, Text: "hm", Signature: "s"}}}
	convo := []recovery.Message{user("a"), recovery.AssistantText("b"), user("c")}
	continued := append(slices.Clone(convo), recovery.AssistantText("partial"), user("Resume."))
	auto := &completionv1.PromptCache{}
	off := &completionv1.PromptCache{Mode: completionv1.PromptCacheMode_PROMPT_CACHE_MODE_OFF}
	caller := &completionv1.PromptCache{Mode: completionv1.PromptCacheMode_PROMPT_CACHE_MODE_CALLER, System: true}
	tools := []provider.Tool{{Name: "t"}}
	for _, tc := range []struct {
		name      string
		pc        *completionv1.PromptCache
		system    bool
		tools     []provider.Tool
		msgs      []recovery.Message
		callerLen int
		prevLen   int
		want      cachePlan
	}{
		{name: "first call: the prompt's end and the system", pc: auto, system: true, msgs: convo, callerLen: 3,
			want: cachePlan{system: true, messages: []int{2}}},
		{name: "unset is auto", pc: nil, msgs: convo, callerLen: 3, want: cachePlan{messages: []int{2}}},
		{name: "no system, tools: the tools' end", pc: auto, tools: tools, msgs: convo, callerLen: 3,
			want: cachePlan{system: true, messages: []int{2}}},
		{name: "a continuation: its end, the caller's end, the previous call's end", pc: auto, system: true, msgs: continued,
			callerLen: 3, prevLen: 3, want: cachePlan{system: true, messages: []int{4, 2}}},
		{name: "a second continuation reaches 4", pc: auto, system: true,
			msgs:      append(slices.Clone(continued), recovery.AssistantText("more"), user("Resume.")),
			callerLen: 3, prevLen: 5, want: cachePlan{system: true, messages: []int{6, 2, 4}}},
		{name: "the caller's marks come first", pc: auto, system: true,
			msgs:      []recovery.Message{marked(user("a")), marked(recovery.AssistantText("b")), marked(user("c")), recovery.AssistantText("d"), user("e")},
			callerLen: 3, prevLen: 3, want: cachePlan{messages: []int{4}}},
		{name: "a block the caller marked is not marked twice", pc: auto, msgs: []recovery.Message{user("a"), marked(user("b"))},
			callerLen: 2, want: cachePlan{}},
		{name: "off marks nothing", pc: off, system: true, tools: tools, msgs: convo, callerLen: 3, want: cachePlan{}},
		{name: "caller mode: the caller's system mark only", pc: caller, system: true, msgs: convo, callerLen: 3,
			want: cachePlan{system: true}},
		{name: "caller mode without a system or tools: nothing to mark", pc: caller, msgs: convo, callerLen: 3, want: cachePlan{}},
		{name: "a thinking-only message is not markable", pc: auto, msgs: []recovery.Message{user("a"), thinkingOnly},
			callerLen: 1, want: cachePlan{messages: []int{0}}},
		{name: "a compacted prompt shorter than the caller's", pc: auto, msgs: []recovery.Message{user("summary")},
			callerLen: 3, prevLen: 3, want: cachePlan{messages: []int{0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := planCache(tc.pc, tc.system, tc.tools, tc.msgs, tc.callerLen, tc.prevLen)
			if got.system != tc.want.system || !slices.Equal(got.messages, tc.want.messages) {
				t.Errorf("planCache = %+v, want %+v", got, tc.want)
			}
			if n := callerMarks(tc.tools, tc.msgs) + len(got.messages) + b2i(got.system); n > maxCacheBreakpoints {
				t.Errorf("%d breakpoints, over the limit of %d", n, maxCacheBreakpoints)
			}
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestCachePlanApplyLeavesTheMachinesMessagesAlone(t *testing.T) {
	msgs := []recovery.Message{recovery.UserText("a"), {Role: recovery.RoleAssistant, Blocks: []recovery.Block{
		recovery.TextBlock("b"), {Kind: recovery.BlockThinking, Text: "t", Signature: "s"}}}}
	out := cachePlan{messages: []int{0, 1}}.apply(msgs)
	if msgs[0].Blocks[0].CacheBreakpoint || msgs[1].Blocks[0].CacheBreakpoint {
		t.Fatal("apply wrote the machine's messages")
	}
	if !out[0].Blocks[0].CacheBreakpoint || !out[1].Blocks[0].CacheBreakpoint || out[1].Blocks[1].CacheBreakpoint {
		t.Errorf("apply marked %+v, want the last non-thinking block of each", out)
	}
	tools := []provider.Tool{{Name: "a"}, {Name: "b"}}
	if got := (cachePlan{system: true}).applyTools(tools, false); !got[1].CacheBreakpoint || tools[1].CacheBreakpoint {
		t.Errorf("applyTools without a system: %+v (given %+v), want a copy with the last tool marked", got, tools)
	}
	if got := (cachePlan{system: true}).applyTools(tools, true); got[1].CacheBreakpoint {
		t.Error("applyTools with a system marked a tool: the system's mark covers them")
	}
}
