package anthropic_test

import (
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/anthropic"
	pt "github.com/completiond/completiond/provider/providertest"
	"github.com/completiond/completiond/recovery"
)

// answerSchema is an output schema as a caller sends it.
const answerSchema = `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`

// TestStructuredOutputOnTheWire: an output schema goes as output_config's
// JSON format (native), as a forced tool (tool), or not at all (hook).
func TestStructuredOutputOnTheWire(t *testing.T) {
	const user = `"messages":[{"content":[{"text":"Say hello.","type":"text"}],"role":"user"}],"model":"claude-test"`
	const inputSchema = `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`
	zoom := provider.Tool{Name: "zoom", InputSchema: []byte(`{"properties":{"f":{"type":"number"}}}`)}
	for _, tc := range []struct {
		name string
		mode provider.StructuredOutput
		set  func(*provider.Request)
		want string // the keys after model, before stream
	}{
		{"native", provider.StructuredNative, func(*provider.Request) {},
			`"output_config":{"format":{"schema":` + answerSchema + `,"type":"json_schema"}}`},
		{"tool", provider.StructuredTool, func(*provider.Request) {},
			`"tool_choice":{"name":"structured_output","disable_parallel_tool_use":true,"type":"tool"},` +
				`"tools":[{"name":"structured_output","description":"Records your final answer. Call it exactly once, with the whole answer as its input.",` +
				`"input_schema":` + inputSchema + `}]`},
		{"tool after the caller's, whose choice it overrides, thinking off", provider.StructuredTool, func(r *provider.Request) {
			r.Tools, r.ToolChoice, r.ThinkingBudget, r.MaxTokens = []provider.Tool{zoom}, provider.ToolChoice{Mode: provider.ToolChoiceAny}, 2048, 4096
		}, `"tool_choice":{"name":"structured_output","disable_parallel_tool_use":true,"type":"tool"},` +
			`"tools":[{"name":"zoom","input_schema":{"type":"object","properties":{"f":{"type":"number"}}}},` +
			`{"name":"structured_output","description":"Records your final answer. Call it exactly once, with the whole answer as its input.",` +
			`"input_schema":` + inputSchema + `}]`},
		{"hook", provider.StructuredHook, func(*provider.Request) {}, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := newRequest()
			req.OutputSchema, req.StructuredOutput = []byte(answerSchema), tc.mode
			tc.set(req)
			r, srv := run(t, pt.Always(pt.OK(pt.Text("ok"))), req)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			want := `{"max_tokens":` + strconv.Itoa(req.MaxTokens) + `,` + user
			if tc.want != "" {
				want += "," + tc.want
			}
			pt.AssertJSON(t, srv.Request(t, 1).Body, want+`,"stream":true}`)
		})
	}
}

// TestTheStructuredToolsCallIsTheAnswer: on a StructuredTool request the
// structured tool's input streams as the answer's text, never as a tool
// call, and its tool_use stop is end_turn; a cut one is a truncated answer.
func TestTheStructuredToolsCallIsTheAnswer(t *testing.T) {
	answer := pt.ToolCall{ID: "toolu_01", Name: anthropic.StructuredToolName, Args: []string{`{"ci`, `ty":"Pa`, `ris"}`}}
	cut := pt.ToolCall{ID: "toolu_01", Name: anthropic.StructuredToolName, Args: []string{`{"ci`, `ty":"Pa`}}
	other := pt.ToolCall{ID: "toolu_02", Name: "zoom", Args: []string{`{}`}}
	text := func(s ...string) []provider.Chunk {
		var out []provider.Chunk
		for _, p := range s {
			out = append(out, provider.Chunk{Kind: provider.ChunkText, Text: p})
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		mode   provider.StructuredOutput
		reply  pt.Reply
		stop   recovery.StopReason
		chunks []provider.Chunk
	}{
		{"whole", provider.StructuredTool, pt.OK(pt.Answer{Tools: []pt.ToolCall{answer}}),
			recovery.StopEndTurn, text(`{"ci`, `ty":"Pa`, `ris"}`)},
		{"cut by max_tokens", provider.StructuredTool, pt.ToolCutByLimit(pt.Answer{Tools: []pt.ToolCall{cut}}),
			recovery.StopMaxTokens, text(`{"ci`, `ty":"Pa`)},
		{"cut by max_tokens, no message_stop", provider.StructuredTool, pt.NoEnd(pt.Answer{Tools: []pt.ToolCall{cut}, Limit: true}),
			recovery.StopMaxTokens, text(`{"ci`, `ty":"Pa`)},
		{"empty input", provider.StructuredTool, pt.OK(pt.Answer{Tools: []pt.ToolCall{{ID: "toolu_01", Name: anthropic.StructuredToolName}}}),
			recovery.StopEndTurn, text(`{}`)},
		{"text instead", provider.StructuredTool, pt.OK(pt.Text(`{"city":`, `"Rome"}`)),
			recovery.StopEndTurn, text(`{"city":`, `"Rome"}`)},
		{"and another call: tool_use stands", provider.StructuredTool, pt.OK(pt.Answer{Tools: []pt.ToolCall{answer, other}}),
			recovery.StopToolUse, append(text(`{"ci`, `ty":"Pa`, `ris"}`),
				provider.Chunk{Kind: provider.ChunkToolCall, ToolCall: recovery.ToolCall{ID: "toolu_02", Name: "zoom", Input: []byte(`{}`)}})},
		{"native: a tool of that name is a tool", provider.StructuredNative, pt.OK(pt.Answer{Tools: []pt.ToolCall{answer}}),
			recovery.StopToolUse, []provider.Chunk{{Kind: provider.ChunkToolCall,
				ToolCall: recovery.ToolCall{ID: "toolu_01", Name: anthropic.StructuredToolName, Input: []byte(`{"city":"Paris"}`)}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := newRequest()
			req.OutputSchema, req.StructuredOutput = []byte(answerSchema), tc.mode
			r, _ := run(t, pt.Always(tc.reply), req)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if r.Finish.StopReason != tc.stop {
				t.Errorf("stop %v, want %v", r.Finish.StopReason, tc.stop)
			}
			if !reflect.DeepEqual(r.Chunks, tc.chunks) {
				t.Errorf("chunks\n got %+v\nwant %+v", r.Chunks, tc.chunks)
			}
		})
	}
}

// TestTheStructuredAnswerCutMidStreamIsABrokenStream: what came of the
// answer was streamed; the attempt failed, as any other broken stream.
func TestTheStructuredAnswerCutMidStreamIsABrokenStream(t *testing.T) {
	req := newRequest()
	req.OutputSchema, req.StructuredOutput = []byte(answerSchema), provider.StructuredTool
	answer := pt.Answer{Tools: []pt.ToolCall{{ID: "toolu_01", Name: anthropic.StructuredToolName, Args: []string{`{"ci`, `ty":"Pa`, `ris"}`}}}}
	r, _ := run(t, pt.Always(pt.CutAfter(2, answer)), req)
	if f := r.Failure(t); f.Kind != recovery.FailStreamBroken {
		t.Errorf("failure %+v", f)
	}
	if r.Text() != `{"city":"Pa` || len(r.ToolCalls()) != 0 {
		t.Errorf("text %q, calls %+v", r.Text(), r.ToolCalls())
	}
}

// TestAPrefillOnAStructuredToolRequestIsRefusedUnsent: the answer so far
// cannot start the tool's input; the refusal, a FailPrefillRejected, has
// the machine restart without prefill. Natively, the prefill goes.
func TestAPrefillOnAStructuredToolRequestIsRefusedUnsent(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  provider.StructuredOutput
		calls int
	}{{"tool", provider.StructuredTool, 0}, {"native", provider.StructuredNative, 1}, {"hook", provider.StructuredHook, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			req := newRequest()
			req.OutputSchema, req.StructuredOutput, req.Prefill = []byte(answerSchema), tc.mode, `{"city": `
			r, srv := run(t, pt.Always(pt.OK(pt.Text(`"Paris"}`))), req)
			if n := srv.Count(); n != tc.calls {
				t.Errorf("%d calls, want %d", n, tc.calls)
			}
			if tc.calls > 0 {
				if r.Err != nil || r.Text() != `"Paris"}` {
					t.Errorf("err %v, text %q", r.Err, r.Text())
				}
				return
			}
			if f := r.Failure(t); f.Kind != recovery.FailPrefillRejected || f.Provider != "anthropic" {
				t.Errorf("failure %+v, want a prefill rejected", f)
			}
		})
	}
}

// sseBody answers every request with its body as a 200 event stream.
type sseBody string

func (b sseBody) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	h := http.Header{"Content-Type": {"text/event-stream"}, "Request-Id": {"req_fuzz"}}
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(strings.NewReader(string(b))), ContentLength: -1, Request: r}, nil
}

// FuzzStructuredStream streams arbitrary bodies to a StructuredTool
// request: whatever the upstream sends, the structured tool's call is never
// a tool call, and the attempt ends with a stop reason or a
// *recovery.Failure.
func FuzzStructuredStream(f *testing.F) {
	answer := pt.ToolCall{ID: "toolu_01", Name: anthropic.StructuredToolName, Args: []string{`{"ci`, `ty":"Pa`, `ris"}`}}
	cut := pt.ToolCall{ID: "toolu_01", Name: anthropic.StructuredToolName, Args: []string{`{"ci`}}
	other := pt.ToolCall{ID: "toolu_02", Name: "zoom", Args: []string{`{"f":`, `2}`}}
	replies := []pt.Reply{
		pt.OK(pt.Answer{Tools: []pt.ToolCall{answer}}),
		pt.ToolCutByLimit(pt.Answer{Tools: []pt.ToolCall{cut}}),
		pt.OK(pt.Answer{Text: []string{"So: "}, Tools: []pt.ToolCall{answer, other}}),
		pt.OK(pt.Answer{Tools: []pt.ToolCall{{ID: "toolu_01", Name: anthropic.StructuredToolName}}}),
		pt.CutAfter(2, pt.Answer{Tools: []pt.ToolCall{answer}}),
	}
	srv := pt.NewAnthropic(f, pt.Seq(replies...))
	for range replies {
		f.Add(srv.Body(f))
	}
	f.Fuzz(func(t *testing.T, sse string) {
		p, err := anthropic.New(anthropic.Config{BaseURL: "http://upstream.invalid", APIKey: apiKey,
			HTTPClient: &http.Client{Transport: sseBody(sse)}})
		if err != nil {
			t.Fatal(err)
		}
		req := newRequest()
		req.OutputSchema, req.StructuredOutput = []byte(answerSchema), provider.StructuredTool
		fin, err := p.Stream(t.Context(), req, func(c provider.Chunk) error {
			if c.Kind == provider.ChunkToolCall && c.ToolCall.Name == anthropic.StructuredToolName {
				t.Fatalf("the answer's call was emitted as a tool call: %+v", c.ToolCall)
			}
			if c.Kind == provider.ChunkText && c.Text == "" {
				t.Fatal("an empty text chunk")
			}
			return nil
		})
		if _, ok := provider.AsFailure(err); err != nil && !ok {
			t.Fatalf("error %v (%T) is not a *recovery.Failure", err, err)
		}
		if err == nil && fin.StopReason == recovery.StopNone {
			t.Fatalf("nil error without a stop reason: %+v", fin)
		}
	})
}
