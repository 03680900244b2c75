package providertest

import (
	"reflect"
	"strings"
	"testing"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/sse"
	"github.com/completiond/completiond/recovery"
)

// StreamFraming streams an answer as newServer's wire renders it, then
// the same events in every framing the event-stream standard allows and
// servers use — CRLF or CR line ends, a byte order mark, comments between
// events, data: without its space, id and retry fields — through the
// provider build makes, and checks that each gives the same chunks and
// Finish. Then it streams an event over sse.MaxEvent, which must fail the
// attempt as a broken stream, not grow a buffer without end.
func StreamFraming(t *testing.T, newServer func(testing.TB, Script) *Server, build func(*Server) (provider.Provider, error)) {
	answer := Answer{Model: "m", Thinking: []string{"Let me ", "think."}, Text: []string{"Hel", "lo\n", "é"},
		Tools: []ToolCall{{ID: "call_1", Name: "search", Args: []string{`{"q":`, `"x"}`}}},
		Usage: Usage{Input: 10, Output: 5, CacheRead: 2}}
	body := newServer(t, Always(OK(answer))).Body(t)
	stream := func(t *testing.T, reply Reply) Result {
		t.Helper()
		p, err := build(newServer(t, Always(reply)))
		if err != nil {
			t.Fatal(err)
		}
		return Run(t, p, &provider.Request{Attempt: 1, Model: "m", MaxTokens: 1024,
			Messages: []recovery.Message{recovery.UserText("Say hello.")}})
	}
	want := stream(t, Reply{SSE: body})
	if want.Err != nil || want.Text() != "Hello\né" || len(want.ToolCalls()) != 1 {
		t.Fatalf("as rendered: err %v, text %q, %d tool calls", want.Err, want.Text(), len(want.ToolCalls()))
	}
	for name, reframe := range map[string]func(string) string{
		"CRLF": func(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") },
		"CR":   func(s string) string { return strings.ReplaceAll(s, "\n", "\r") },
		"byte order mark and comments": func(s string) string {
			return "\xEF\xBB\xBF: open\n\n" + strings.ReplaceAll(s, "\n\n", "\n: keep-alive\n\n:\n\n")
		},
		"data: without its space": func(s string) string { return strings.ReplaceAll(s, "data: ", "data:") },
		"id and retry fields":     func(s string) string { return strings.ReplaceAll(s, "data:", "id: 7\nretry: 3000\ndata:") },
	} {
		t.Run(name, func(t *testing.T) {
			got := stream(t, Reply{SSE: reframe(body)})
			got.Took, want.Took = 0, 0
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got\n%+v\nwant, as rendered,\n%+v", got, want)
			}
		})
	}
	t.Run("an event over the limit", func(t *testing.T) {
		r := stream(t, Reply{SSE: "data: " + strings.Repeat("x", sse.MaxEvent) + "\n\n"})
		f, ok := provider.AsFailure(r.Err)
		if !ok || f.Kind != recovery.FailStreamBroken || f.HTTPStatus != 200 || !strings.Contains(f.Message, "too large") {
			t.Fatalf("err %v, want a broken stream: event too large", r.Err)
		}
	})
}
