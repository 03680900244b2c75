package anthropic_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/anthropic"
	pt "github.com/completiond/completiond/provider/providertest"
	"github.com/completiond/completiond/recovery"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// apiKey is recognisable, so that a leak of it anywhere is found.
const apiKey = "sk-test-SECRET-123"

func newProvider(t *testing.T, srv *pt.Server) *anthropic.Provider {
	t.Helper()
	p, err := anthropic.New(anthropic.Config{BaseURL: srv.URL, APIKey: apiKey, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newRequest() *provider.Request {
	return &provider.Request{
		Attempt:   1,
		Model:     "claude-test",
		MaxTokens: 1024,
		Messages:  []recovery.Message{recovery.UserText("Say hello.")},
	}
}

// run streams req against a server answering with script.
func run(t *testing.T, script pt.Script, req *provider.Request) (pt.Result, *pt.Server) {
	t.Helper()
	srv := pt.NewAnthropic(t, script)
	return pt.Run(t, newProvider(t, srv), req), srv
}

func TestKind(t *testing.T) {
	p, err := anthropic.New(anthropic.Config{APIKey: apiKey})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Kind(); got != "anthropic" {
		t.Fatalf("Kind() = %q", got)
	}
}

func TestNewRejectsBadBaseURL(t *testing.T) {
	for _, base := range []string{"ftp://example.com", "://nope", "localhost:8080"} {
		if _, err := anthropic.New(anthropic.Config{BaseURL: base}); err == nil {
			t.Errorf("New(%q) succeeded", base)
		}
	}
}

func TestStreamsTextWithUsageAndModel(t *testing.T) {
	answer := pt.Answer{
		Model: "claude-sonnet-test",
		Text:  []string{"Hel", "lo", "!"},
		Usage: pt.Usage{Input: 25, Output: 15, CacheRead: 5, CacheWrite: 3},
	}
	r, srv := run(t, pt.Always(pt.OK(answer)), newRequest())
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := r.Text(); got != "Hello!" {
		t.Errorf("text = %q", got)
	}
	if len(r.Chunks) != 3 {
		t.Errorf("chunks = %d, want one per delta", len(r.Chunks))
	}
	want := provider.Finish{
		StopReason: recovery.StopEndTurn,
		Usage:      recovery.Usage{InputTokens: 25, OutputTokens: 15, CacheReadInputTokens: 5, CacheCreationInputTokens: 3},
		Model:      "claude-sonnet-test",
		ID:         "msg_test_0001",
	}
	if r.Finish != want {
		t.Errorf("finish = %+v, want %+v", r.Finish, want)
	}
	if n := srv.Count(); n != 1 {
		t.Errorf("server saw %d requests, want 1", n)
	}
}

func TestStopReasons(t *testing.T) {
	for wire, want := range map[string]recovery.StopReason{
		"end_turn":                      recovery.StopEndTurn,
		"stop_sequence":                 recovery.StopSequence,
		"max_tokens":                    recovery.StopMaxTokens,
		"tool_use":                      recovery.StopToolUse,
		"pause_turn":                    recovery.StopPauseTurn,
		"refusal":                       recovery.StopRefusal,
		"model_context_window_exceeded": recovery.StopContextWindow,
		"a_reason_from_the_future":      recovery.StopEndTurn,
	} {
		t.Run(wire, func(t *testing.T) {
			answer := pt.Answer{Text: []string{"x"}, Stop: wire}
			r, _ := run(t, pt.Always(pt.OK(answer)), newRequest())
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if r.Finish.StopReason != want {
				t.Errorf("stop = %v, want %v", r.Finish.StopReason, want)
			}
		})
	}
}

func TestThinkingStreamsThenEndsAsABlockWithItsSignature(t *testing.T) {
	answer := pt.Answer{
		Thinking: []string{"Let me ", "think."}, Signature: "sig_EqQBCgIYAhIM", Redacted: []string{"EmwKAhgBEgy3va3p"},
		Text: []string{"Done."},
	}
	r, _ := run(t, pt.Always(pt.OK(answer)), newRequest())
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	want := []provider.Chunk{
		{Kind: provider.ChunkThinking, Text: "Let me "},
		{Kind: provider.ChunkThinking, Text: "think."},
		{Kind: provider.ChunkThinkingBlock, Block: recovery.Block{Kind: recovery.BlockThinking, Text: "Let me think.", Signature: "sig_EqQBCgIYAhIM"}},
		{Kind: provider.ChunkThinkingBlock, Block: recovery.Block{Kind: recovery.BlockThinking, Redacted: true, Data: []byte("EmwKAhgBEgy3va3p")}},
		{Kind: provider.ChunkText, Text: "Done."},
	}
	if !reflect.DeepEqual(r.Chunks, want) {
		t.Errorf("chunks\n got %+v\nwant %+v", r.Chunks, want)
	}
	if r.Text() != "Done." || r.Thinking() != "Let me think." {
		t.Errorf("text %q, thinking %q", r.Text(), r.Thinking())
	}
}

func TestAThinkingBlockCutShortIsNeverEmittedWhole(t *testing.T) {
	answer := pt.Answer{Thinking: []string{"Let me ", "think."}, Signature: "sig_1", Text: []string{"Done."}}
	r, _ := run(t, pt.Always(pt.CutAfter(1, answer)), newRequest())
	if f := r.Failure(t); f.Kind != recovery.FailStreamBroken {
		t.Errorf("kind = %v", f.Kind)
	}
	if r.Thinking() != "Let me " || len(r.ThinkingBlocks()) != 0 {
		t.Errorf("thinking %q, blocks %+v", r.Thinking(), r.ThinkingBlocks())
	}
}

func TestThinkingRequestOnTheWire(t *testing.T) {
	req := newRequest()
	req.MaxTokens, req.ThinkingBudget = 4096, 2048
	req.Messages = append(req.Messages,
		recovery.Message{Role: recovery.RoleAssistant, Blocks: []recovery.Block{
			{Kind: recovery.BlockThinking, Text: "The user wants a greeting.", Signature: "sig_1"},
			{Kind: recovery.BlockThinking, Redacted: true, Data: []byte("EmwKAhgB")},
			recovery.TextBlock("Looking it up."),
			{Kind: recovery.BlockToolUse, ToolUseID: "toolu_01", ToolName: "lookup", ToolInput: []byte(`{"q":"hello"}`)},
		}},
		recovery.Message{Role: recovery.RoleUser, Blocks: []recovery.Block{
			{Kind: recovery.BlockToolResult, ToolUseID: "toolu_01", Text: "Hello!"},
		}},
	)
	r, srv := run(t, pt.Always(pt.OK(pt.Text("Hello!"))), req)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	want := `{"max_tokens":4096,"messages":[` +
		`{"content":[{"text":"Say hello.","type":"text"}],"role":"user"},` +
		`{"content":[{"signature":"sig_1","thinking":"The user wants a greeting.","type":"thinking"},` +
		`{"data":"EmwKAhgB","type":"redacted_thinking"},` +
		`{"text":"Looking it up.","type":"text"},` +
		`{"id":"toolu_01","input":{"q":"hello"},"name":"lookup","type":"tool_use"}],"role":"assistant"},` +
		`{"content":[{"tool_use_id":"toolu_01","is_error":false,"content":[{"text":"Hello!","type":"text"}],"type":"tool_result"}],"role":"user"}],` +
		`"model":"claude-test","thinking":{"budget_tokens":2048,"type":"enabled"},"stream":true}`
	pt.AssertJSON(t, srv.Request(t, 1).Body, want)
}

func TestThinkingBudget(t *testing.T) {
	toolTurn := func(thinking bool) []recovery.Message {
		var blocks []recovery.Block
		if thinking {
			blocks = append(blocks, recovery.Block{Kind: recovery.BlockThinking, Text: "hmm", Signature: "sig"})
		}
		blocks = append(blocks, recovery.Block{Kind: recovery.BlockToolUse, ToolUseID: "toolu_01", ToolName: "f"})
		return []recovery.Message{
			recovery.UserText("Go."),
			{Role: recovery.RoleAssistant, Blocks: blocks},
			{Role: recovery.RoleUser, Blocks: []recovery.Block{{Kind: recovery.BlockToolResult, ToolUseID: "toolu_01", Text: "ok"}}},
		}
	}
	for _, tc := range []struct {
		name        string
		budget, max int
		interleaved bool
		prefill     string
		msgs        []recovery.Message
		want        float64 // budget_tokens sent; 0: no thinking
	}{
		{name: "fits", budget: 2048, max: 4096, want: 2048},
		{name: "off", budget: 0, max: 4096},
		{name: "raised to the minimum", budget: 500, max: 4096, want: 1024},
		{name: "over max_tokens: half of it", budget: 16000, max: 8000, want: 4000},
		{name: "equal to max_tokens: half of it", budget: 8000, max: 8000, want: 4000},
		{name: "half under the minimum", budget: 2000, max: 1800, want: 1024},
		{name: "no room under max_tokens", budget: 2048, max: 1024},
		{name: "with a prefill", budget: 2048, max: 4096, prefill: "Hello"},
		{name: "tool turn with its thinking", budget: 2048, max: 4096, msgs: toolTurn(true), want: 2048},
		{name: "tool turn without its thinking", budget: 2048, max: 4096, msgs: toolTurn(false)},
		{name: "interleaved", budget: 2048, max: 4096, interleaved: true, want: 2048},
		{name: "interleaved over max_tokens: as asked", budget: 16000, max: 8000, interleaved: true, want: 16000},
		{name: "interleaved with max_tokens under the minimum", budget: 500, max: 1000, interleaved: true, want: 1024},
		{name: "interleaved tool turn with its thinking", budget: 2048, max: 4096, interleaved: true, msgs: toolTurn(true), want: 2048},
		{name: "interleaved without a budget", max: 4096, interleaved: true},
		{name: "interleaved with a prefill", budget: 2048, max: 4096, interleaved: true, prefill: "Hello"},
		{name: "interleaved tool turn without its thinking", budget: 2048, max: 4096, interleaved: true, msgs: toolTurn(false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := newRequest()
			req.ThinkingBudget, req.MaxTokens, req.Prefill = tc.budget, tc.max, tc.prefill
			req.Reasoning.Interleaved = tc.interleaved
			if tc.msgs != nil {
				req.Messages = tc.msgs
			}
			r, srv := run(t, pt.Always(pt.OK(pt.Text("ok"))), req)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			// The beta goes with interleaved thinking only, and only when
			// thinking is on.
			beta, wantBeta := srv.Request(t, 1).Header.Values("anthropic-beta"), []string(nil)
			if tc.interleaved && tc.want > 0 {
				wantBeta = []string{"interleaved-thinking-2025-05-14"}
			}
			if !reflect.DeepEqual(beta, wantBeta) {
				t.Errorf("anthropic-beta %q, want %q", beta, wantBeta)
			}
			body := srv.Request(t, 1).JSON(t)
			if body["max_tokens"] != float64(tc.max) {
				t.Errorf("max_tokens = %v, want %d as asked", body["max_tokens"], tc.max)
			}
			if _, ok := body["temperature"]; ok {
				t.Error("temperature sent")
			}
			th, ok := body["thinking"].(map[string]any)
			switch {
			case tc.want == 0 && ok:
				t.Errorf("thinking = %v, want none", th)
			case tc.want > 0 && (!ok || th["type"] != "enabled" || th["budget_tokens"] != tc.want):
				t.Errorf("thinking = %v, want enabled with budget_tokens %v", body["thinking"], tc.want)
			}
		})
	}
}

func TestToolCallsAccumulateInputDeltas(t *testing.T) {
	answer := pt.Answer{
		Text: []string{"Checking."},
		Tools: []pt.ToolCall{
			{ID: "toolu_01", Name: "get_weather", Args: []string{`{"loc`, `ation": "Par`, `is"}`}},
			{ID: "toolu_02", Name: "get_time", Args: nil},
		},
	}
	r, _ := run(t, pt.Always(pt.OK(answer)), newRequest())
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if r.Finish.StopReason != recovery.StopToolUse {
		t.Errorf("stop = %v", r.Finish.StopReason)
	}
	calls := r.ToolCalls()
	if len(calls) != 2 {
		t.Fatalf("tool calls = %+v", calls)
	}
	if c := calls[0]; c.ID != "toolu_01" || c.Name != "get_weather" || string(c.Input) != `{"location": "Paris"}` {
		t.Errorf("call 0 = %+v (input %s)", c, c.Input)
	}
	if c := calls[1]; c.ID != "toolu_02" || c.Name != "get_time" || string(c.Input) != `{}` {
		t.Errorf("call 1 = %+v (input %s)", c, c.Input)
	}
}

func TestAToolCallCutShort(t *testing.T) {
	cut := pt.ToolCall{ID: "toolu_02", Name: "get_weather", Args: []string{`{"city":`, `"Par`}}
	whole := pt.ToolCall{ID: "toolu_01", Name: "get_time", Args: []string{`{}`}}
	text := []string{"Let me ", "check."}
	for _, tc := range []struct {
		name  string
		reply pt.Reply
		stop  recovery.StopReason // 0: a broken stream
		calls int                 // complete calls emitted
	}{
		{name: "by max_tokens is a truncation", reply: pt.ToolCutByLimit(pt.Answer{Text: text, Tools: []pt.ToolCall{cut}, Usage: pt.Usage{Input: 9, Output: 20}}),
			stop: recovery.StopMaxTokens},
		{name: "by model_context_window_exceeded is a truncation", reply: pt.OK(pt.Answer{Text: text, Tools: []pt.ToolCall{cut}, Stop: "model_context_window_exceeded"}),
			stop: recovery.StopContextWindow},
		{name: "by max_tokens after a whole call keeps the whole one", reply: pt.ToolCutByLimit(pt.Answer{Text: text, Tools: []pt.ToolCall{whole, cut}}),
			stop: recovery.StopMaxTokens, calls: 1},
		{name: "by max_tokens without message_stop is a truncation", reply: pt.NoEnd(pt.Answer{Text: text, Tools: []pt.ToolCall{cut}, Limit: true}),
			stop: recovery.StopMaxTokens},
		{name: "with tool_use is a broken stream", reply: pt.OK(pt.Answer{Text: text, Tools: []pt.ToolCall{cut}})},
		{name: "with end_turn is a broken stream", reply: pt.OK(pt.Answer{Text: text, Tools: []pt.ToolCall{cut}, Stop: "end_turn"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := run(t, pt.Always(tc.reply), newRequest())
			if tc.stop == recovery.StopNone {
				if f := r.Failure(t); f.Kind != recovery.FailStreamBroken || !strings.Contains(f.Message, "toolu_02") {
					t.Errorf("failure %+v, want a broken stream naming the call", f)
				}
			} else if r.Err != nil || r.Finish.StopReason != tc.stop {
				t.Fatalf("err %v, stop %v; want no error and %v", r.Err, r.Finish.StopReason, tc.stop)
			}
			if r.Text() != "Let me check." {
				t.Errorf("text %q", r.Text())
			}
			calls := r.ToolCalls()
			if len(calls) != tc.calls {
				t.Fatalf("tool calls %+v, want %d", calls, tc.calls)
			}
			for _, c := range calls {
				if c.ID == "toolu_02" {
					t.Errorf("the cut call was emitted: %+v", c)
				}
			}
		})
	}
}

func TestAToolCallThenAResetIsABrokenStream(t *testing.T) {
	answer := pt.Answer{Text: []string{"Checking."}, Tools: []pt.ToolCall{{ID: "toolu_01", Name: "get_weather", Args: []string{`{"city":`, `"Paris"}`}}}}
	r, _ := run(t, pt.Always(pt.ResetBeforeFinish(answer)), newRequest())
	if f := r.Failure(t); f.Kind != recovery.FailStreamBroken || f.HTTPStatus != 200 {
		t.Errorf("failure %+v", f)
	}
	// The block was whole at its content_block_stop: it was emitted, and the
	// failure tells the machine the attempt did not finish.
	if calls := r.ToolCalls(); len(calls) != 1 || string(calls[0].Input) != `{"city":"Paris"}` {
		t.Errorf("tool calls %+v", calls)
	}
}

func TestPrefillIsTheLastAssistantMessageAndNotReemitted(t *testing.T) {
	req := newRequest()
	req.Prefill = "The answer is "
	r, srv := run(t, pt.Always(pt.OK(pt.Text(" 4", "2."))), req)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	body := srv.Request(t, 1).JSON(t)
	msgs := body["messages"].([]any)
	last := msgs[len(msgs)-1].(map[string]any)
	content := last["content"].([]any)[0].(map[string]any)
	// Anthropic refuses a final assistant message ending in whitespace.
	if last["role"] != "assistant" || content["text"] != "The answer is" {
		t.Errorf("last message = %v", last)
	}
	if got := req.Prefill + r.Text(); got != "The answer is 42." {
		t.Errorf("prefill + continuation = %q", got)
	}
}

func TestTheCallersFinalAssistantMessageLosesItsTrailingWhitespace(t *testing.T) {
	assistant := func(blocks ...recovery.Block) recovery.Message {
		return recovery.Message{Role: recovery.RoleAssistant, Blocks: blocks}
	}
	text := recovery.TextBlock
	user := `{"content":[{"text":"Say hello.","type":"text"}],"role":"user"}`
	for _, tc := range []struct {
		name  string
		final recovery.Message
		reply []string // the model's continuation on the wire
		sent  string   // the last message sent; "" when it was dropped
		want  string   // the text the caller receives
	}{
		{name: "a trailing space", final: assistant(text("The answer is ")), reply: []string{" 4", "2."},
			sent: `{"content":[{"text":"The answer is","type":"text"}],"role":"assistant"}`, want: "42."},
		{name: "a trailing newline and spaces over two blocks", final: assistant(text("Steps:"), text("\n  ")), reply: []string{"\n  1."},
			sent: `{"content":[{"text":"Steps:","type":"text"}],"role":"assistant"}`, want: "1."},
		{name: "nothing but whitespace", final: assistant(text(" \n")), reply: []string{"Hello!"}, want: "Hello!"},
		{name: "no trailing whitespace", final: assistant(text("The answer is")), reply: []string{" 42."},
			sent: `{"content":[{"text":"The answer is","type":"text"}],"role":"assistant"}`, want: " 42."},
		{name: "ending with a tool call", final: assistant(text("Looking. "), recovery.Block{Kind: recovery.BlockToolUse, ToolUseID: "toolu_01", ToolName: "f", ToolInput: []byte(`{}`)}),
			reply: []string{"ok"},
			sent:  `{"content":[{"text":"Looking. ","type":"text"},{"id":"toolu_01","input":{},"name":"f","type":"tool_use"}],"role":"assistant"}`, want: "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := newRequest()
			req.Messages = append(req.Messages, tc.final)
			// The fault server refuses trailing whitespace as the API does.
			r, srv := run(t, pt.Always(pt.OK(pt.Text(tc.reply...))), req)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			want := `{"max_tokens":1024,"model":"claude-test","stream":true,"messages":[` + user
			if tc.sent != "" {
				want += "," + tc.sent
			}
			pt.AssertJSON(t, srv.Request(t, 1).Body, want+"]}")
			if r.Text() != tc.want {
				t.Errorf("text %q, want %q", r.Text(), tc.want)
			}
		})
	}
}

func TestTheFaultServerRefusesTrailingWhitespaceAsTheAPIDoes(t *testing.T) {
	// Without this, the test above would prove nothing: a conversation
	// ending in whitespace sent as it is is refused.
	srv := pt.NewAnthropic(t, pt.Always(pt.OK(pt.Text("x"))))
	res, err := srv.Client().Post(srv.URL+"/v1/messages", "application/json",
		strings.NewReader(`{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":[{"type":"text","text":"Hello "}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 400 {
		t.Fatalf("status %d, want 400", res.StatusCode)
	}
}

func TestRequestOnTheWire(t *testing.T) {
	req := newRequest()
	req.System = "Be brief."
	req.Messages = []recovery.Message{
		{Role: recovery.RoleUser, Blocks: []recovery.Block{
			recovery.TextBlock("What is in this image?"),
			{Kind: recovery.BlockImage, MediaType: "image/png", Data: []byte("\x89PNG")},
		}},
		{Role: recovery.RoleAssistant, Blocks: []recovery.Block{
			{Kind: recovery.BlockToolUse, ToolUseID: "toolu_01", ToolName: "zoom", ToolInput: []byte(`{"factor":2}`)},
		}},
		{Role: recovery.RoleUser, Blocks: []recovery.Block{
			{Kind: recovery.BlockToolResult, ToolUseID: "toolu_01", Text: "zoomed", IsError: true},
		}},
	}
	req.Tools = []provider.Tool{{
		Name: "zoom", Description: "Zooms.",
		InputSchema: []byte(`{"type":"object","properties":{"factor":{"type":"number"}},"required":["factor"],"additionalProperties":false}`),
	}}
	r, srv := run(t, pt.Always(pt.OK(pt.Text("ok"))), req)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	got := srv.Request(t, 1)
	if h := got.Header.Get("x-api-key"); h != apiKey {
		t.Errorf("x-api-key = %q", h)
	}
	if got.Header.Get("anthropic-version") == "" {
		t.Error("no anthropic-version header")
	}
	want := `{"max_tokens":1024,"messages":[` +
		`{"content":[{"text":"What is in this image?","type":"text"},{"source":{"data":"iVBORw==","media_type":"image/png","type":"base64"},"type":"image"}],"role":"user"},` +
		`{"content":[{"id":"toolu_01","input":{"factor":2},"name":"zoom","type":"tool_use"}],"role":"assistant"},` +
		`{"content":[{"tool_use_id":"toolu_01","is_error":true,"content":[{"text":"zoomed","type":"text"}],"type":"tool_result"}],"role":"user"}],` +
		`"model":"claude-test","system":[{"text":"Be brief.","type":"text"}],` +
		`"tools":[{"input_schema":{"properties":{"factor":{"type":"number"}},"required":["factor"],"type":"object","additionalProperties":false},"name":"zoom","description":"Zooms."}],"stream":true}`
	pt.AssertJSON(t, got.Body, want)
}

func TestPlainRequestOnTheWire(t *testing.T) {
	r, srv := run(t, pt.Always(pt.OK(pt.Text("ok"))), newRequest())
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	pt.AssertJSON(t, srv.Request(t, 1).Body,
		`{"max_tokens":1024,"messages":[{"content":[{"text":"Say hello.","type":"text"}],"role":"user"}],"model":"claude-test","stream":true}`)
}

func TestInvalidToolSchemaIsRefusedBeforeAnyCall(t *testing.T) {
	req := newRequest()
	req.Tools = []provider.Tool{{Name: "f", InputSchema: []byte(`[1,2]`)}}
	r, srv := run(t, pt.Always(pt.OK(pt.Text("x"))), req)
	if f := r.Failure(t); f.Kind != recovery.FailInvalidRequest {
		t.Errorf("kind = %v", f.Kind)
	}
	if srv.Count() != 0 {
		t.Errorf("server saw %d requests", srv.Count())
	}
}

func TestEmitErrorIsReturnedAsItIsAndStopsTheCall(t *testing.T) {
	srv := pt.NewAnthropic(t, pt.Always(pt.StallAfter(1, pt.Text("a", "b"))))
	p := newProvider(t, srv)
	errStop := errors.New("client gone")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := p.Stream(ctx, newRequest(), func(provider.Chunk) error { return errStop })
	if err != errStop {
		t.Fatalf("err = %v, want the emit error itself", err)
	}
	srv.Request(t, 1).WaitGone(t, 2*time.Second)
}

func TestCallerCancellationIsReturnedAsItIsAndStopsTheCall(t *testing.T) {
	for name, reply := range map[string]pt.Reply{
		"before headers": pt.Hang(),
		"mid-stream":     pt.StallAfter(1, pt.Text("a", "b")),
	} {
		t.Run(name, func(t *testing.T) {
			srv := pt.NewAnthropic(t, pt.Always(reply))
			p := newProvider(t, srv)
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			_, err := p.Stream(ctx, newRequest(), func(provider.Chunk) error { return nil })
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			if _, ok := provider.AsFailure(err); ok {
				t.Fatal("a cancellation was classified as an upstream failure")
			}
			srv.Request(t, 1).WaitGone(t, 2*time.Second)
		})
	}
}

// newRefusing is a provider whose every connection is refused.
func newRefusing(t *testing.T) (*anthropic.Provider, error) {
	return anthropic.New(anthropic.Config{BaseURL: pt.RefusedURL(t), APIKey: apiKey})
}

func TestConcurrentAttemptsShareOneProvider(t *testing.T) {
	srv := pt.NewAnthropic(t, pt.Always(pt.OK(pt.Text("a", "b"))))
	p := newProvider(t, srv)
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			text := ""
			_, err := p.Stream(ctx, newRequest(), func(c provider.Chunk) error {
				text += c.Text
				return nil
			})
			if err == nil && text != "ab" {
				err = errors.New("text " + text)
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func TestAFinishedStreamWithoutMessageStopCompletes(t *testing.T) {
	answer := pt.Answer{Text: []string{"a", "b", "c", "d"}, Stop: "max_tokens", Usage: pt.Usage{Input: 9, Output: 4}}
	r, srv := run(t, pt.Always(pt.NoEnd(answer)), newRequest())
	if r.Err != nil {
		t.Fatalf("a stream whose message_delta carried the stop reason failed: %v", r.Err)
	}
	if r.Text() != "abcd" || r.Finish.StopReason != recovery.StopMaxTokens || r.Finish.Usage.OutputTokens != 4 {
		t.Errorf("text %q finish %+v", r.Text(), r.Finish)
	}
	if n := srv.Count(); n != 1 {
		t.Errorf("server saw %d requests, want 1", n)
	}
}

// TestAddress is the upstream's host and port, for server.address and
// server.port: the base URL's, with the scheme's default port.
func TestAddress(t *testing.T) {
	for _, tc := range []struct {
		base string
		host string
		port int
	}{
		{"", "api.anthropic.com", 443},
		{"http://127.0.0.1:8080", "127.0.0.1", 8080},
		{"http://proxy.internal", "proxy.internal", 80},
	} {
		p, err := anthropic.New(anthropic.Config{BaseURL: tc.base})
		if err != nil {
			t.Fatal(err)
		}
		var a provider.Addressed = p
		if host, port := a.Address(); host != tc.host || port != tc.port {
			t.Errorf("%q: Address() = %s, %d, want %s, %d", tc.base, host, port, tc.host, tc.port)
		}
	}
}

// TestConnectionsAreReused: built without an HTTP client, the provider
// reuses its upstream connections (providertest.CheckConnectionsReused).
func TestConnectionsAreReused(t *testing.T) {
	pt.CheckConnectionsReused(t, pt.NewAnthropic, func(url string) (provider.Provider, error) {
		return anthropic.New(anthropic.Config{BaseURL: url, APIKey: apiKey})
	}, newRequest)
}

func TestFraming(t *testing.T) {
	pt.StreamFraming(t, pt.NewAnthropic, func(srv *pt.Server) (provider.Provider, error) {
		return anthropic.New(anthropic.Config{BaseURL: srv.URL, APIKey: apiKey, HTTPClient: srv.Client()})
	})
}

// TestStopSequenceIsNamed: a message_delta with stop_reason stop_sequence
// names the stop sequence that matched; Finish.StopSequence is it when it
// is one of the request's, and empty otherwise, the stop reason standing.
func TestStopSequenceIsNamed(t *testing.T) {
	long := strings.Repeat("x", 257)
	odd := "</answer>\n\"é\u2028&"
	for _, tc := range []struct {
		name   string
		stops  []string
		answer pt.Answer
		stop   recovery.StopReason
		want   string
	}{
		{"one of the request's", []string{"END", "\n\nHuman:"}, pt.Answer{StopSequence: "\n\nHuman:"}, recovery.StopSequence, "\n\nHuman:"},
		{"escaped on the wire", []string{odd}, pt.Answer{StopSequence: odd}, recovery.StopSequence, odd},
		{"not the request's", []string{"END"}, pt.Answer{StopSequence: "FIN"}, recovery.StopSequence, ""},
		{"a prefix of the request's", []string{"END"}, pt.Answer{StopSequence: "EN"}, recovery.StopSequence, ""},
		{"the request has none", nil, pt.Answer{StopSequence: "END"}, recovery.StopSequence, ""},
		{"longer than any request's", []string{long}, pt.Answer{StopSequence: long}, recovery.StopSequence, ""},
		{"named none", []string{"END"}, pt.Answer{Stop: "stop_sequence"}, recovery.StopSequence, ""},
		{"another stop reason", []string{"END"}, pt.Answer{Stop: "end_turn", StopSequence: "END"}, recovery.StopEndTurn, ""},
		{"the output limit", []string{"END"}, pt.Answer{Limit: true, StopSequence: "END"}, recovery.StopMaxTokens, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := newRequest()
			req.StopSequences = tc.stops
			tc.answer.Text = []string{"Hello"}
			r, _ := run(t, pt.Always(pt.OK(tc.answer)), req)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if r.Finish.StopReason != tc.stop || r.Finish.StopSequence != tc.want {
				t.Errorf("stop %v %q, want %v %q", r.Finish.StopReason, r.Finish.StopSequence, tc.stop, tc.want)
			}
			if r.Text() != "Hello" {
				t.Errorf("text %q", r.Text())
			}
		})
	}
}

// TestStopSequenceFromTheAPIsOwnWords: the stream as the API sends it, the
// stop sequence last of the answer (the API leaves it out of the text).
func TestStopSequenceFromTheAPIsOwnWords(t *testing.T) {
	const sse = "event: message_start\n" +
		`data: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}` + "\n\n" +
		"event: content_block_start\n" +
		`data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
		"event: ping\ndata: {\"type\": \"ping\"}\n\n" +
		"event: content_block_delta\n" +
		`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"1, 2, 3"}}` + "\n\n" +
		"event: content_block_stop\n" +
		`data: {"type":"content_block_stop","index":0}` + "\n\n" +
		"event: message_delta\n" +
		`data: {"type":"message_delta","delta":{"stop_reason":"stop_sequence","stop_sequence":"\u003c/list\u003e"},"usage":{"output_tokens":7}}` + "\n\n" +
		"event: message_stop\n" +
		`data: {"type":"message_stop"}` + "\n\n"
	req := newRequest()
	req.StopSequences = []string{"4", "</list>"}
	r, _ := run(t, pt.Always(pt.Reply{SSE: sse}), req)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	want := provider.Finish{StopReason: recovery.StopSequence, StopSequence: "</list>", Model: "claude-test", ID: "msg_01",
		Usage: recovery.Usage{InputTokens: 12, OutputTokens: 7}}
	if r.Finish != want || r.Text() != "1, 2, 3" {
		t.Errorf("text %q, finish %+v, want %+v", r.Text(), r.Finish, want)
	}
}

// TestModelParametersOnTheWire: the sampling parameters, the stop
// sequences and the tool choice go as the API's keys (the parity tests,
// body_test.go, hold them to the SDK's encoding).
func TestModelParametersOnTheWire(t *testing.T) {
	temp, topP := 0.0, 1e-9
	zoom := provider.Tool{Name: "zoom", InputSchema: []byte(`{"type":"object","properties":{"factor":{"type":"number"}}}`)}
	for _, tc := range []struct {
		name string
		set  func(*provider.Request)
		want string // the keys after "model", before "stream"
	}{
		{"nothing", func(*provider.Request) {}, ``},
		{"sampling", func(r *provider.Request) {
			r.Sampling = provider.Sampling{Temperature: &temp, TopP: &topP, TopK: 40, Seed: new(int64(1))}
		}, `"temperature":0,"top_k":40,"top_p":1e-9`},
		{"stop sequences", func(r *provider.Request) { r.StopSequences = []string{"</a>", "\n\"é"} },
			`"stop_sequences":["</a>","\n\"é"]`},
		{"disable parallel alone", func(r *provider.Request) { r.ToolChoice.DisableParallel = true },
			`"tool_choice":{"disable_parallel_tool_use":true,"type":"auto"}`},
		{"any", func(r *provider.Request) { r.ToolChoice.Mode = provider.ToolChoiceAny }, `"tool_choice":{"type":"any"}`},
		{"tool choice none", func(r *provider.Request) {
			r.ToolChoice = provider.ToolChoice{Mode: provider.ToolChoiceNone, DisableParallel: true}
		},
			`"tool_choice":{"type":"none"}`},
		{"tool", func(r *provider.Request) {
			r.ToolChoice = provider.ToolChoice{Mode: provider.ToolChoiceTool, Name: "zoom", DisableParallel: true}
			r.Tools = []provider.Tool{zoom}
		}, `"tool_choice":{"name":"zoom","disable_parallel_tool_use":true,"type":"tool"},` +
			`"tools":[{"input_schema":{"properties":{"factor":{"type":"number"}},"type":"object"},"name":"zoom"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := newRequest()
			tc.set(req)
			r, srv := run(t, pt.Always(pt.OK(pt.Text("ok"))), req)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			want := `{"max_tokens":1024,"messages":[{"content":[{"text":"Say hello.","type":"text"}],"role":"user"}],"model":"claude-test",` +
				tc.want + `,"stream":true}`
			if tc.want == "" {
				want = strings.Replace(want, ",,", ",", 1)
			}
			pt.AssertJSON(t, srv.Request(t, 1).Body, want)
		})
	}
}

// TestMediaOnTheWire: an image by URL and a PDF document, by data or by
// URL, with its title, go as the API's image and document blocks (the
// parity tests hold them to the SDK's encoding).
func TestMediaOnTheWire(t *testing.T) {
	for _, tc := range []struct {
		name  string
		block recovery.Block
		want  string
	}{
		{"image by URL", recovery.Block{Kind: recovery.BlockImage, URL: "https://example.com/cat.png"},
			`{"source":{"type":"url","url":"https://example.com/cat.png"},"type":"image"}`},
		{"image by data", recovery.Block{Kind: recovery.BlockImage, MediaType: "image/png", Data: []byte("\x89PNG")},
			`{"source":{"data":"iVBORw==","media_type":"image/png","type":"base64"},"type":"image"}`},
		{"document by data", recovery.Block{Kind: recovery.BlockDocument, MediaType: "application/pdf", Data: []byte("%PDF-1.7")},
			`{"source":{"data":"JVBERi0xLjc=","media_type":"application/pdf","type":"base64"},"type":"document"}`},
		{"document by data, titled", recovery.Block{Kind: recovery.BlockDocument, MediaType: "application/pdf", Data: []byte("%PDF"), Title: "Q3 report"},
			`{"source":{"data":"JVBERg==","media_type":"application/pdf","type":"base64"},"title":"Q3 report","type":"document"}`},
		{"document by URL, titled", recovery.Block{Kind: recovery.BlockDocument, URL: "https://example.com/q3.pdf", Title: "Q3"},
			`{"source":{"type":"url","url":"https://example.com/q3.pdf"},"title":"Q3","type":"document"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := newRequest()
			req.Messages = []recovery.Message{{Role: recovery.RoleUser, Blocks: []recovery.Block{tc.block, recovery.TextBlock("What is it?")}}}
			r, srv := run(t, pt.Always(pt.OK(pt.Text("ok"))), req)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			pt.AssertJSON(t, srv.Request(t, 1).Body, `{"max_tokens":1024,"messages":[{"content":[`+tc.want+
				`,{"text":"What is it?","type":"text"}],"role":"user"}],"model":"claude-test","stream":true}`)
		})
	}
}

// TestCacheMarksOnTheWire: the prompt cache marks go as cache_control
// ephemeral on the system prompt, the tools and the blocks marked; a
// thinking block's is ignored; a trimmed final assistant message keeps its
// marks on what is sent; beyond 4, the first ones are left out.
func TestCacheMarksOnTheWire(t *testing.T) {
	const cc = `"cache_control":{"type":"ephemeral"}`
	mark := func(b recovery.Block) recovery.Block { b.CacheBreakpoint = true; return b }
	text := func(s string) recovery.Block { return mark(recovery.TextBlock(s)) }
	user := func(blocks ...recovery.Block) recovery.Message {
		return recovery.Message{Role: recovery.RoleUser, Blocks: blocks}
	}
	assistant := func(blocks ...recovery.Block) recovery.Message {
		return recovery.Message{Role: recovery.RoleAssistant, Blocks: blocks}
	}
	tool := func(name string, marked bool) provider.Tool {
		return provider.Tool{Name: name, InputSchema: []byte(`{"properties":{"q":{}}}`), CacheBreakpoint: marked}
	}
	textJSON := func(s string, marked bool) string {
		if marked {
			return `{"text":"` + s + `",` + cc + `,"type":"text"}`
		}
		return `{"text":"` + s + `","type":"text"}`
	}
	toolJSON := func(name string, marked bool) string {
		if marked {
			return `{"name":"` + name + `","input_schema":{"type":"object","properties":{"q":{}}},` + cc + `}`
		}
		return `{"name":"` + name + `","input_schema":{"type":"object","properties":{"q":{}}}}`
	}
	for _, tc := range []struct {
		name string
		req  func(*provider.Request)
		want string // the keys after max_tokens, but for model and stream
	}{
		{"system", func(r *provider.Request) { r.System, r.CacheSystem = "Be brief.", true },
			`"messages":[{"content":[` + textJSON("Hi.", false) + `],"role":"user"}],"system":[` + textJSON("Be brief.", true) + `]`},
		{"system without one: the last tool", func(r *provider.Request) {
			r.CacheSystem, r.Tools = true, []provider.Tool{tool("a", false), tool("b", false)}
		}, `"messages":[{"content":[` + textJSON("Hi.", false) + `],"role":"user"}],"tools":[` + toolJSON("a", false) + `,` + toolJSON("b", true) + `]`},
		{"blocks, not thinking", func(r *provider.Request) {
			r.Messages = []recovery.Message{user(text("Hi.")), assistant(mark(recovery.Block{Kind: recovery.BlockThinking, Text: "t", Signature: "s"}),
				mark(recovery.Block{Kind: recovery.BlockToolUse, ToolUseID: "c", ToolName: "f", ToolInput: []byte(`{}`)})),
				user(mark(recovery.Block{Kind: recovery.BlockToolResult, ToolUseID: "c", Text: "ok"}))}
		}, `"messages":[{"content":[` + textJSON("Hi.", true) + `],"role":"user"},` +
			`{"content":[{"signature":"s","thinking":"t","type":"thinking"},{"id":"c","input":{},"name":"f",` + cc + `,"type":"tool_use"}],"role":"assistant"},` +
			`{"content":[{"tool_use_id":"c","is_error":false,"content":[{"text":"ok","type":"text"}],` + cc + `,"type":"tool_result"}],"role":"user"}]`},
		{"a trimmed final assistant keeps its marks", func(r *provider.Request) {
			r.Messages = []recovery.Message{user(recovery.TextBlock("Hi.")), assistant(recovery.TextBlock("Let me"), text(" \n"))}
		}, `"messages":[{"content":[` + textJSON("Hi.", false) + `],"role":"user"},{"content":[` + textJSON("Let me", true) + `],"role":"assistant"}]`},
		{"beyond 4, the first are left out", func(r *provider.Request) {
			r.System, r.CacheSystem = "S", true
			r.Tools = []provider.Tool{tool("a", true), tool("b", true)}
			r.Messages = []recovery.Message{user(text("1"), text("2"), text("3"))}
		}, `"messages":[{"content":[` + textJSON("1", true) + `,` + textJSON("2", true) + `,` + textJSON("3", true) + `],"role":"user"}],` +
			`"system":[` + textJSON("S", true) + `],"tools":[` + toolJSON("a", false) + `,` + toolJSON("b", false) + `]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := newRequest()
			req.Messages = []recovery.Message{recovery.UserText("Hi.")}
			tc.req(req)
			r, srv := run(t, pt.Always(pt.OK(pt.Text("ok"))), req)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			pt.AssertJSON(t, srv.Request(t, 1).Body, `{"max_tokens":1024,`+tc.want+`,"model":"claude-test","stream":true}`)
		})
	}
}

// TestCacheUsage: the prompt cache's counts, from message_start or
// message_delta (both cumulative: the larger wins), land in the usage.
func TestCacheUsage(t *testing.T) {
	stream := func(start, delta string) string {
		return "event: message_start\n" +
			`data: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,"usage":` + start + `}}` + "\n\n" +
			"event: content_block_start\n" +
			`data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
			"event: content_block_delta\n" +
			`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}}` + "\n\n" +
			"event: content_block_stop\n" +
			`data: {"type":"content_block_stop","index":0}` + "\n\n" +
			"event: message_delta\n" +
			`data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":` + delta + `}` + "\n\n" +
			"event: message_stop\n" +
			`data: {"type":"message_stop"}` + "\n\n"
	}
	for _, tc := range []struct {
		name, start, delta string
		want               recovery.Usage
	}{
		{"in message_start",
			`{"input_tokens":12,"cache_creation_input_tokens":2048,"cache_read_input_tokens":0,"output_tokens":1}`,
			`{"output_tokens":7}`,
			recovery.Usage{InputTokens: 12, OutputTokens: 7, CacheCreationInputTokens: 2048}},
		{"in message_delta",
			`{"input_tokens":12,"output_tokens":1}`,
			`{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":4096,"output_tokens":7}`,
			recovery.Usage{InputTokens: 12, OutputTokens: 7, CacheReadInputTokens: 4096}},
		{"in both, the larger",
			`{"input_tokens":12,"cache_creation_input_tokens":100,"cache_read_input_tokens":4096,"output_tokens":1}`,
			`{"input_tokens":12,"cache_creation_input_tokens":150,"cache_read_input_tokens":4000,"output_tokens":7}`,
			recovery.Usage{InputTokens: 12, OutputTokens: 7, CacheReadInputTokens: 4096, CacheCreationInputTokens: 150}},
		{"null", `{"input_tokens":12,"cache_creation_input_tokens":null,"cache_read_input_tokens":null,"output_tokens":1}`,
			`{"output_tokens":7}`, recovery.Usage{InputTokens: 12, OutputTokens: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := run(t, pt.Always(pt.Reply{SSE: stream(tc.start, tc.delta)}), newRequest())
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if r.Finish.Usage != tc.want {
				t.Errorf("usage %+v, want %+v", r.Finish.Usage, tc.want)
			}
		})
	}
}
