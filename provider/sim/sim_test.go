package sim

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

func collect(t *testing.T, p *Provider, req *provider.Request) (string, provider.Finish, error) {
	t.Helper()
	var b strings.Builder
	fin, err := p.Stream(t.Context(), req, func(c provider.Chunk) error {
		if c.Kind == provider.ChunkText {
			b.WriteString(c.Text)
		}
		return nil
	})
	return b.String(), fin, err
}

func req(script string, attempt int) *provider.Request {
	return &provider.Request{Attempt: attempt, Model: "sim-1", MaxTokens: 8000,
		Messages: []recovery.Message{recovery.UserText("What is recovery?")},
		Metadata: map[string]string{MetaFaults: script}}
}

func TestParseScript(t *testing.T) {
	tests := []struct {
		in      string
		want    []Step
		wantErr string
	}{
		{"", nil, ""},
		{"ok", []Step{{Kind: StepOK}}, ""},
		{"rate_limit=2s, overload*2, cut=7", []Step{{Kind: StepRateLimit, Delay: 2 * time.Second},
			{Kind: StepOverload}, {Kind: StepOverload}, {Kind: StepCut, N: 7}}, ""},
		{"server_error=503,tool_use=search", []Step{{Kind: StepServerError, N: 503}, {Kind: StepToolUse, Name: "search"}}, ""},
		{"tool_cut,tool_reset=search", []Step{{Kind: StepToolCut}, {Kind: StepToolReset, Name: "search"}}, ""},
		{"media,media=0.1,media=2.0+0.3", []Step{{Kind: StepMedia}, {Kind: StepMedia, Blocks: []recovery.BlockRef{{Message: 0, Block: 1}}},
			{Kind: StepMedia, Blocks: []recovery.BlockRef{{Message: 2, Block: 0}, {Message: 0, Block: 3}}}}, ""},
		{"media=1", nil, "M.B"},
		{"media=0.x", nil, "M.B"},
		{"media=-1.0", nil, "M.B"},
		{"explode", nil, "unknown step"},
		{"overload=3", nil, "takes no argument"},
		{"cut=x", nil, "count"},
		{"ok*0", nil, "repeat"},
		{"ok*100,ok", nil, "longer than 100"},
		{"rate_limit=-1s", nil, "duration"},
	}
	for _, tt := range tests {
		got, err := ParseScript(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseScript(%q) error %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || len(got) != len(tt.want) {
			t.Errorf("ParseScript(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			continue
		}
		for i := range got {
			if !reflect.DeepEqual(got[i], tt.want[i]) {
				t.Errorf("ParseScript(%q)[%d] = %+v, want %+v", tt.in, i, got[i], tt.want[i])
			}
		}
	}
}

func TestAnswerIsDeterministic(t *testing.T) {
	p := New(Config{Words: 10})
	a, fin, err := collect(t, p, req("", 1))
	b, _, _ := collect(t, p, req("", 1))
	if err != nil || a != b || fin.StopReason != recovery.StopEndTurn || fin.Usage.OutputTokens != 10 {
		t.Fatalf("answers %q / %q, finish %+v, err %v", a, b, fin, err)
	}
}

func TestFaults(t *testing.T) {
	tests := []struct {
		script string
		kind   recovery.FailureKind
		status int
	}{
		{"rate_limit=3s", recovery.FailRateLimit, 429},
		{"overload", recovery.FailOverloaded, 529},
		{"server_error=502", recovery.FailServer, 502},
		{"reset", recovery.FailConnection, 0},
		{"cut=3", recovery.FailStreamBroken, 200},
		{"stream_overload=2", recovery.FailOverloaded, 200},
		{"prompt_too_long", recovery.FailPromptTooLong, 400},
		{"context_limit", recovery.FailContextLimit, 400},
		{"media", recovery.FailMedia, 400},
		{"content_filter", recovery.FailContentFilter, 400},
		{"auth", recovery.FailAuth, 401},
		{"not_found", recovery.FailNotFound, 404},
		{"quota", recovery.FailQuota, 429},
		{"invalid", recovery.FailInvalidRequest, 400},
	}
	p := New(Config{Words: 10})
	for _, tt := range tests {
		_, _, err := collect(t, p, req(tt.script, 1))
		f, ok := provider.AsFailure(err)
		if !ok || f.Kind != tt.kind || f.HTTPStatus != tt.status || f.Provider != "sim" {
			t.Errorf("%s: failure %+v, want kind %v status %d", tt.script, f, tt.kind, tt.status)
		}
	}
	_, _, err := collect(t, p, req("rate_limit=3s", 1))
	if f, _ := provider.AsFailure(err); f.RetryAfter != 3*time.Second {
		t.Errorf("Retry-After %v, want 3s", f.RetryAfter)
	}
	_, _, err = collect(t, p, req("context_limit", 1))
	if f, _ := provider.AsFailure(err); f.InputTokens+f.MaxTokens <= f.ContextWindow || f.MaxTokens != 8000 {
		t.Errorf("context limit %+v does not describe X + Y > Z", f)
	}
}

func TestScriptStepsFollowAttempts(t *testing.T) {
	p := New(Config{Words: 5})
	if _, _, err := collect(t, p, req("overload,ok", 1)); err == nil {
		t.Error("attempt 1 should overload")
	}
	if _, _, err := collect(t, p, req("overload,ok", 2)); err != nil {
		t.Errorf("attempt 2: %v", err)
	}
	if _, _, err := collect(t, p, req("overload", 3)); err != nil {
		t.Errorf("attempts past the script answer normally: %v", err)
	}
}

func TestCutThenPrefillFinishesTheSameAnswer(t *testing.T) {
	p := New(Config{Words: 10})
	full, _, _ := collect(t, p, req("", 1))
	part, _, err := collect(t, p, req("cut=4", 1))
	if !errors.Is(err, err) || !strings.HasPrefix(full, part) || part == full {
		t.Fatalf("cut gave %q, want a strict prefix of %q", part, full)
	}
	r := req("", 2)
	r.Prefill = part
	rest, fin, err := collect(t, p, r)
	if err != nil || part+rest != full || fin.Usage.OutputTokens != 6 {
		t.Errorf("resume gave %q (+%q), want %q; finish %+v err %v", rest, part, full, fin, err)
	}
}

func TestMaxTokensTruncatesAndContinuationFinishes(t *testing.T) {
	p := New(Config{Words: 10})
	full, _, _ := collect(t, p, req("", 1))
	r := req("", 1)
	r.MaxTokens = 4
	part, fin, _ := collect(t, p, r)
	if fin.StopReason != recovery.StopMaxTokens {
		t.Fatalf("stop %v, want max_tokens", fin.StopReason)
	}
	r = req("", 2)
	r.Messages = append(r.Messages, recovery.AssistantText(part), recovery.UserText("Output token limit hit. Resume directly"))
	rest, fin, _ := collect(t, p, r)
	if part+rest != full || fin.StopReason != recovery.StopEndTurn {
		t.Errorf("continuation %q + %q != %q (stop %v)", part, rest, full, fin.StopReason)
	}
}

func TestStallEndsWithIdleTimeout(t *testing.T) {
	p := New(Config{Words: 10})
	r := req("stall=2", 1)
	r.Timeouts.Idle = 20 * time.Millisecond
	_, _, err := collect(t, p, r)
	if f, ok := provider.AsFailure(err); !ok || f.Kind != recovery.FailTimeout || f.Timeout != recovery.TimeoutIdle {
		t.Errorf("stall ended %v, want an idle timeout", err)
	}
}

func TestCancelStopsAtOnce(t *testing.T) {
	p := New(Config{Words: 1000, Pace: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	n := 0
	_, err := p.Stream(ctx, req("", 1), func(provider.Chunk) error {
		if n++; n == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || n != 3 {
		t.Errorf("err %v after %d chunks, want Canceled after 3", err, n)
	}
}

func TestToolUseAndRefusal(t *testing.T) {
	p := New(Config{Words: 10})
	r := req("tool_use=search", 1)
	var calls []recovery.ToolCall
	fin, err := p.Stream(t.Context(), r, func(c provider.Chunk) error {
		if c.Kind == provider.ChunkToolCall {
			calls = append(calls, c.ToolCall)
		}
		return nil
	})
	if err != nil || fin.StopReason != recovery.StopToolUse || len(calls) != 1 || calls[0].Name != "search" {
		t.Errorf("tool use: %+v %v %v", fin, calls, err)
	}
	_, fin, err = collect(t, p, req("refusal", 1))
	if err != nil || fin.StopReason != recovery.StopRefusal {
		t.Errorf("refusal: %+v %v", fin, err)
	}
}

func TestReplyOverridesTheAnswerPerAttempt(t *testing.T) {
	p := New(Config{})
	r := req("", 1)
	r.Metadata = map[string]string{MetaReply: "not json", MetaReply + ".2": `{"ok": true}`}
	got, _, _ := collect(t, p, r)
	r.Attempt = 2
	got2, fin, _ := collect(t, p, r)
	if got != "not json" || got2 != `{"ok": true}` || fin.Usage.OutputTokens != 2 {
		t.Errorf("replies %q, %q (%d tokens)", got, got2, fin.Usage.OutputTokens)
	}
}

func TestToolSteps(t *testing.T) {
	for _, tc := range []struct {
		script string
		stop   recovery.StopReason
		kind   recovery.FailureKind // of the failure, if any
		calls  int
	}{
		{script: "tool_use=search", stop: recovery.StopToolUse, calls: 1},
		{script: "tool_cut=search", stop: recovery.StopMaxTokens},
		{script: "tool_reset=search", kind: recovery.FailStreamBroken, calls: 1},
	} {
		t.Run(tc.script, func(t *testing.T) {
			r := req("ok,"+tc.script, 2)
			var calls []recovery.ToolCall
			var text strings.Builder
			fin, err := New(Config{}).Stream(t.Context(), r, func(c provider.Chunk) error {
				switch c.Kind {
				case provider.ChunkToolCall:
					calls = append(calls, c.ToolCall)
				case provider.ChunkText:
					text.WriteString(c.Text)
				}
				return nil
			})
			if tc.kind != 0 {
				f, ok := provider.AsFailure(err)
				if !ok || f.Kind != tc.kind || f.HTTPStatus != 200 {
					t.Fatalf("err %v, want a %v", err, tc.kind)
				}
			} else if err != nil || fin.StopReason != tc.stop {
				t.Fatalf("finish %+v, err %v; want %v", fin, err, tc.stop)
			}
			if text.String() == "" {
				t.Error("no text before the tool call")
			}
			if len(calls) != tc.calls {
				t.Fatalf("calls %+v, want %d", calls, tc.calls)
			}
			for _, c := range calls {
				if c.ID != "toolu_sim_2_1" || c.Name != "search" || string(c.Input) != `{"query":"What is recovery?"}` {
					t.Errorf("call %+v (%s)", c, c.Input)
				}
			}
		})
	}
}

// TestMetadataIsCapped: sim.words and sim.pace beyond MaxWords and MaxPace
// are cut to them, so that no request holds a stream open for days.
func TestMetadataIsCapped(t *testing.T) {
	tests := []struct {
		name      string
		md        map[string]string
		wantWords int
		wantPace  time.Duration
	}{
		{"defaults", nil, 40, 0},
		{"within", map[string]string{MetaWords: "100", MetaPace: "20ms"}, 100, 20 * time.Millisecond},
		{"at the caps", map[string]string{MetaWords: "10000", MetaPace: "1s"}, 10000, time.Second},
		{"beyond", map[string]string{MetaWords: "100000", MetaPace: "5s"}, 10000, time.Second},
		{"far beyond", map[string]string{MetaWords: "999999999", MetaPace: "72h"}, 10000, time.Second},
		{"invalid", map[string]string{MetaWords: "-3", MetaPace: "-1s"}, 40, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := req("", 1)
			r.MaxTokens = 0
			for k, v := range tt.md {
				r.Metadata[k] = v
			}
			a := New(Config{}).newAttempt(r, Step{})
			if len(a.words) != tt.wantWords || a.pace != tt.wantPace {
				t.Errorf("%d words at %v, want %d at %v", len(a.words), a.pace, tt.wantWords, tt.wantPace)
			}
		})
	}
}

// TestTimeoutsBoundTheAttempt: the sim obeys the route's timeouts as a
// real upstream would. It used to ignore Total, so sim.pace=5s and
// sim.words=100000 kept one attempt streaming for days. Fake time
// (synctest): the sim's paces pass at once.
func TestTimeoutsBoundTheAttempt(t *testing.T) {
	slow := map[string]string{MetaPace: "5s", MetaWords: "100000"} // capped to 1 s × 10 000
	tests := []struct {
		name     string
		timeouts provider.Timeouts
		md       map[string]string
		phase    recovery.TimeoutPhase // TimeoutNone: the answer completes
		tokens   int
		took     time.Duration
	}{
		{"total cuts a slow stream", provider.Timeouts{Total: 3500 * time.Millisecond}, slow, recovery.TimeoutTotal, 3, 3500 * time.Millisecond},
		{"total with a fast pace", provider.Timeouts{Total: 1500*time.Millisecond + 500*time.Microsecond}, map[string]string{MetaPace: "1ms", MetaWords: "10000"}, recovery.TimeoutTotal, 1500, 1500*time.Millisecond + 500*time.Microsecond},
		{"first token", provider.Timeouts{FirstToken: 500 * time.Millisecond, Total: time.Hour}, slow, recovery.TimeoutFirstToken, 0, 500 * time.Millisecond},
		{"idle between tokens", provider.Timeouts{Idle: 400 * time.Millisecond}, slow, recovery.TimeoutIdle, 1, 1400 * time.Millisecond},
		{"within every limit", provider.Timeouts{FirstToken: 2 * time.Second, Idle: 2 * time.Second, Total: time.Minute},
			map[string]string{MetaPace: "1s", MetaWords: "5"}, recovery.TimeoutNone, 5, 5 * time.Second},
		{"hang bounded by headers", provider.Timeouts{Headers: 2 * time.Second, Total: time.Hour}, map[string]string{MetaFaults: "hang"},
			recovery.TimeoutHeaders, 0, 2 * time.Second},
		{"hang bounded by total", provider.Timeouts{Total: 3 * time.Second}, map[string]string{MetaFaults: "hang"},
			recovery.TimeoutTotal, 0, 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := req("", 1)
				r.MaxTokens = 0
				r.Timeouts = tt.timeouts
				for k, v := range tt.md {
					r.Metadata[k] = v
				}
				p := New(Config{StallLimit: time.Hour})
				began := time.Now()
				tokens := 0
				fin, err := p.Stream(t.Context(), r, func(c provider.Chunk) error {
					tokens++
					return nil
				})
				took := time.Since(began)
				if tt.phase == recovery.TimeoutNone {
					if err != nil {
						t.Fatalf("err %v, want the answer", err)
					}
				} else if f, ok := provider.AsFailure(err); !ok || f.Kind != recovery.FailTimeout || f.Timeout != tt.phase {
					t.Fatalf("err %v, want a %v timeout", err, tt.phase)
				}
				if tokens != tt.tokens || fin.Usage.OutputTokens != int64(tt.tokens) || took != tt.took {
					t.Errorf("%d tokens (usage %d) in %v, want %d in %v", tokens, fin.Usage.OutputTokens, took, tt.tokens, tt.took)
				}
			})
		})
	}
}
