package sim

import (
	"fmt"
	"strings"
	"testing"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// The sim's 10-token answer to req's prompt, token by token:
//
//	`Simulated answer to "What is recovery?":`, " falls", " back", " to",
//	" another", " route", " after", " repeated", " overloads", " continues."
const head = `Simulated answer to "What is recovery?":`

// TestStopSequences: the sim stops where its new output first writes a stop
// sequence, mid-token if need be, as a real model does, and a stop sequence
// reached first wins over the script's cut or break.
func TestStopSequences(t *testing.T) {
	tests := []struct {
		name    string
		script  string
		maxTok  int
		prefill string
		seqs    []string
		text    string // what streams
		stop    recovery.StopReason
		seq     string
		tokens  int64
		broken  bool // the stream breaks instead
	}{
		{name: "inside one token", seqs: []string{"oute"},
			text: head + " falls back to another r", stop: recovery.StopSequence, seq: "oute", tokens: 6},
		{name: "spanning two tokens", seqs: []string{"ck t"},
			text: head + " falls ba", stop: recovery.StopSequence, seq: "ck t", tokens: 3},
		{name: "at a token's start", seqs: []string{" another"},
			text: head + " falls back to", stop: recovery.StopSequence, seq: " another", tokens: 4},
		{name: "at the very start", seqs: []string{"Simulated"},
			text: "", stop: recovery.StopSequence, seq: "Simulated", tokens: 0},
		{name: "not present", seqs: []string{"zebra"},
			text: head + " falls back to another route after repeated overloads continues.", stop: recovery.StopEndTurn, tokens: 10},
		{name: "only inside the prefill", prefill: head + " falls", seqs: []string{"falls"},
			text: " back to another route after repeated overloads continues.", stop: recovery.StopEndTurn, tokens: 8},
		{name: "from the prefill into new output", prefill: head + " falls", seqs: []string{"falls back"},
			text: " back to another route after repeated overloads continues.", stop: recovery.StopEndTurn, tokens: 8},
		{name: "in the prefill and again in new output", prefill: head + " falls", seqs: []string{" to"},
			text: " back", stop: recovery.StopSequence, seq: " to", tokens: 1},
		{name: "the later-listed matches earlier", seqs: []string{"another", "back"},
			text: head + " falls ", stop: recovery.StopSequence, seq: "back", tokens: 3},
		{name: "a tie goes to the first listed", seqs: []string{"falls back", "falls"},
			text: head + " ", stop: recovery.StopSequence, seq: "falls back", tokens: 2},
		{name: "before a scripted max_tokens cut", script: "max_tokens=5", seqs: []string{"back"},
			text: head + " falls ", stop: recovery.StopSequence, seq: "back", tokens: 3},
		{name: "after a scripted max_tokens cut", script: "max_tokens=5", seqs: []string{"route"},
			text: head + " falls back to another", stop: recovery.StopMaxTokens, tokens: 5},
		{name: "across the max_tokens cut", script: "max_tokens=5", seqs: []string{"another route"},
			text: head + " falls back to another", stop: recovery.StopMaxTokens, tokens: 5},
		{name: "before the call's max_tokens", maxTok: 5, seqs: []string{"to an"},
			text: head + " falls back ", stop: recovery.StopSequence, seq: "to an", tokens: 4},
		{name: "before a short answer's end", script: "short=4", seqs: []string{"ck"},
			text: head + " falls ba", stop: recovery.StopSequence, seq: "ck", tokens: 3},
		{name: "after a short answer's end", script: "short=4", seqs: []string{"another"},
			text: head + " falls back to", stop: recovery.StopEndTurn, tokens: 4},
		{name: "before a scripted break", script: "cut=7", seqs: []string{"back"},
			text: head + " falls ", stop: recovery.StopSequence, seq: "back", tokens: 3},
		{name: "before a scripted stall", script: "stall=7", seqs: []string{"back"},
			text: head + " falls ", stop: recovery.StopSequence, seq: "back", tokens: 3},
		{name: "before a scripted stream overload", script: "stream_overload=7", seqs: []string{"back"},
			text: head + " falls ", stop: recovery.StopSequence, seq: "back", tokens: 3},
		{name: "after a scripted break", script: "cut=3", seqs: []string{"route"},
			text: head + " falls back", tokens: 3, broken: true},
		{name: "in the words before a tool call", script: "tool_use", seqs: []string{"check"},
			text: "Let me ", stop: recovery.StopSequence, seq: "check", tokens: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := req(tt.script, 1)
			r.Tools = []provider.Tool{{Name: "search"}}
			r.Prefill, r.StopSequences = tt.prefill, tt.seqs
			if tt.maxTok > 0 {
				r.MaxTokens = tt.maxTok
			}
			var text strings.Builder
			chunks := 0
			fin, err := New(Config{Words: 10}).Stream(t.Context(), r, func(c provider.Chunk) error {
				if c.Kind != provider.ChunkText || c.Text == "" {
					t.Errorf("chunk %+v, want text only, never empty", c)
				}
				chunks++
				text.WriteString(c.Text)
				return nil
			})
			if tt.broken {
				if f, ok := provider.AsFailure(err); !ok || f.Kind != recovery.FailStreamBroken {
					t.Fatalf("err %v, want a broken stream", err)
				}
			} else if err != nil || fin.StopReason != tt.stop || fin.StopSequence != tt.seq {
				t.Fatalf("finish %v %q, err %v; want %v %q", fin.StopReason, fin.StopSequence, err, tt.stop, tt.seq)
			}
			if text.String() != tt.text || int64(chunks) != tt.tokens || fin.Usage.OutputTokens != tt.tokens {
				t.Errorf("streamed %q in %d chunks (usage %d), want %q in %d", text.String(), chunks, fin.Usage.OutputTokens, tt.text, tt.tokens)
			}
		})
	}
}

// TestStopSequenceLeavesTheAnswerIntact: cutting a token for a stop sequence
// does not write into the answer it came from.
func TestStopSequenceLeavesTheAnswerIntact(t *testing.T) {
	r := req("", 1)
	r.StopSequences = []string{"ck t"}
	a := New(Config{Words: 10}).newAttempt(r, Step{})
	before := strings.Join(a.words, "|")
	cut, _, _ := a.stopIn(a.words)
	_ = append(cut, "x") // an append to the cut must not write into the answer
	if after := strings.Join(a.words, "|"); after != before {
		t.Errorf("answer %q became %q", before, after)
	}
}

// TestNoStopSequencesCostNothing guards the common path: without stop
// sequences the sim looks at nothing and allocates nothing.
func TestNoStopSequencesCostNothing(t *testing.T) {
	a := New(Config{Words: 100}).newAttempt(req("", 1), Step{})
	allocs := testing.AllocsPerRun(100, func() {
		if _, _, ok := a.stopIn(a.words); ok {
			t.Fatal("matched without stop sequences")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per attempt, want 0", allocs)
	}
}

// TestToolChoice: the sim obeys the request's tool choice as a real model
// must — "any" and "tool" make a plain answer call a tool, "tool" makes
// every call the named tool's, "none" turns a scripted call into a plain
// answer — and leaves every other scripted step as it is.
func TestToolChoice(t *testing.T) {
	full, _, _ := collect(t, New(Config{Words: 10}), req("", 1))
	tests := []struct {
		name   string
		choice provider.ToolChoice
		script string
		call   string // the tool called, "" if none
		stop   recovery.StopReason
		text   string // the text, when it must be the plain answer
	}{
		{name: "default, plain", script: "", stop: recovery.StopEndTurn, text: full},
		{name: "default, tool_use", script: "tool_use", call: "search", stop: recovery.StopToolUse},
		{name: "auto, plain", choice: provider.ToolChoice{Mode: provider.ToolChoiceAuto}, stop: recovery.StopEndTurn, text: full},
		{name: "auto, tool_use", choice: provider.ToolChoice{Mode: provider.ToolChoiceAuto}, script: "tool_use=fetch", call: "fetch", stop: recovery.StopToolUse},
		{name: "any, plain", choice: provider.ToolChoice{Mode: provider.ToolChoiceAny}, call: "search", stop: recovery.StopToolUse},
		{name: "any, tool_use", choice: provider.ToolChoice{Mode: provider.ToolChoiceAny}, script: "tool_use=fetch", call: "fetch", stop: recovery.StopToolUse},
		{name: "any, short", choice: provider.ToolChoice{Mode: provider.ToolChoiceAny}, script: "short=10", stop: recovery.StopEndTurn, text: full},
		{name: "any, disable parallel", choice: provider.ToolChoice{Mode: provider.ToolChoiceAny, DisableParallel: true}, call: "search", stop: recovery.StopToolUse},
		{name: "tool, plain", choice: provider.ToolChoice{Mode: provider.ToolChoiceTool, Name: "fetch"}, call: "fetch", stop: recovery.StopToolUse},
		{name: "tool, tool_use of another", choice: provider.ToolChoice{Mode: provider.ToolChoiceTool, Name: "fetch"}, script: "tool_use=search", call: "fetch", stop: recovery.StopToolUse},
		{name: "tool, tool_cut", choice: provider.ToolChoice{Mode: provider.ToolChoiceTool, Name: "fetch"}, script: "tool_cut", stop: recovery.StopMaxTokens},
		{name: "none, plain", choice: provider.ToolChoice{Mode: provider.ToolChoiceNone}, stop: recovery.StopEndTurn, text: full},
		{name: "none, tool_use", choice: provider.ToolChoice{Mode: provider.ToolChoiceNone}, script: "tool_use=search", stop: recovery.StopEndTurn, text: full},
		{name: "none, tool_cut", choice: provider.ToolChoice{Mode: provider.ToolChoiceNone}, script: "tool_cut", stop: recovery.StopEndTurn, text: full},
		{name: "none, tool_reset", choice: provider.ToolChoice{Mode: provider.ToolChoiceNone}, script: "tool_reset", stop: recovery.StopEndTurn, text: full},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := req(tt.script, 1)
			r.Tools = []provider.Tool{{Name: "search"}, {Name: "fetch"}}
			r.ToolChoice = tt.choice
			var calls []recovery.ToolCall
			var text strings.Builder
			fin, err := New(Config{Words: 10}).Stream(t.Context(), r, func(c provider.Chunk) error {
				switch c.Kind {
				case provider.ChunkToolCall:
					calls = append(calls, c.ToolCall)
				case provider.ChunkText:
					text.WriteString(c.Text)
				}
				return nil
			})
			if err != nil || fin.StopReason != tt.stop {
				t.Fatalf("finish %v, err %v; want %v", fin.StopReason, err, tt.stop)
			}
			switch {
			case tt.call == "" && len(calls) != 0:
				t.Errorf("calls %+v, want none", calls)
			case tt.call != "" && (len(calls) != 1 || calls[0].Name != tt.call):
				t.Errorf("calls %+v, want one of %q", calls, tt.call)
			}
			if tt.text != "" && text.String() != tt.text {
				t.Errorf("text %q, want %q", text.String(), tt.text)
			}
		})
	}
}

// TestSamplingIsIgnored: the sim is deterministic, so temperature, top_p,
// top_k and seed are accepted and change nothing it streams or reports.
func TestSamplingIsIgnored(t *testing.T) {
	temp, topP, seed := 1.7, 0.3, int64(42)
	sampling := provider.Sampling{Temperature: &temp, TopP: &topP, TopK: 5, Seed: &seed}
	for _, script := range []string{"", "cut=4", "max_tokens=3", "tool_use", "overload"} {
		t.Run(script, func(t *testing.T) {
			run := func(s provider.Sampling) string {
				r := req(script, 1)
				r.Tools = []provider.Tool{{Name: "search"}}
				r.Sampling = s
				var b strings.Builder
				fin, err := New(Config{Words: 10}).Stream(t.Context(), r, func(c provider.Chunk) error {
					b.WriteString(c.Text + "|" + c.ToolCall.Name + string(c.ToolCall.Input) + "\n")
					return nil
				})
				return fmt.Sprintf("%s%+v %v", b.String(), fin, err)
			}
			if with, without := run(sampling), run(provider.Sampling{}); with != without {
				t.Errorf("with sampling:\n%s\nwithout:\n%s", with, without)
			}
		})
	}
}
