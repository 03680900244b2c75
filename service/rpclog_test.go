package service

import (
	"log/slog"
	"testing"

	"google.golang.org/grpc/codes"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/testkit"
)

// TestOneLinePerRPC checks what each kind of RPC logs at INFO: one line,
// "finished call", which reports the completion the RPC ran (its id,
// reason, stop reason, attempts and tokens) and no line of the completion's
// own; a completion that ends with a failure also logs its terminal
// transition; a request refused before any completion reports none.
func TestOneLinePerRPC(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(t *testing.T, e *testEnv) string // runs the RPC, returns the completion id ("" for none)
		// the RPC's line: method, code, level, reason and attempts
		method, code, level, reason string
		attempts                    float64
		transitions                 int // transition lines
	}{
		{name: "clean Stream", method: "Stream", code: "OK", level: "INFO", reason: "COMPLETED", attempts: 1,
			call: func(t *testing.T, e *testEnv) string {
				evs, st := e.streamAll(t, prompt("hi", nil))
				checkContract(t, evs, st)
				return evs[0].GetStarted().GetCompletionId()
			}},
		{name: "Stream with a retry", method: "Stream", code: "OK", level: "INFO", reason: "COMPLETED", attempts: 2, transitions: 1,
			call: func(t *testing.T, e *testEnv) string {
				evs, st := e.streamAll(t, faults("rate_limit"))
				checkContract(t, evs, st)
				return evs[0].GetStarted().GetCompletionId()
			}},
		{name: "clean Complete", method: "Complete", code: "OK", level: "INFO", reason: "COMPLETED", attempts: 1,
			call: func(t *testing.T, e *testEnv) string {
				resp, err := e.client.Complete(t.Context(), prompt("hi", nil))
				if err != nil {
					t.Fatal(err)
				}
				return resp.GetCompletionId()
			}},
		{name: "Stream ended by a content filter", method: "Stream", code: "FailedPrecondition", level: "WARN", reason: "MODEL_ERROR",
			attempts: 1, transitions: 1,
			call: func(t *testing.T, e *testEnv) string {
				evs, st := e.streamAll(t, faults("content_filter"))
				checkContract(t, evs, st)
				return evs[0].GetStarted().GetCompletionId()
			}},
		{name: "Session", method: "Session", code: "OK", level: "INFO", reason: "COMPLETED", attempts: 1,
			call: func(t *testing.T, e *testEnv) string {
				s := e.session(t, sessionStart("ok"))
				if _, code := s.end(); code != codes.OK {
					t.Fatalf("Session ended %v", code)
				}
				return s.events[0].GetStarted().GetCompletionId()
			}},
		{name: "invalid request", method: "Stream", code: "InvalidArgument", level: "INFO",
			call: func(t *testing.T, e *testEnv) string {
				_, st := e.streamAll(t, &completionv1.CompleteRequest{})
				if st.Code() != codes.InvalidArgument {
					t.Fatalf("status %v", st)
				}
				return ""
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf testkit.SyncBuffer
			e := newTestEnv(t, func(c *Config) { c.Logger = slog.New(slog.NewJSONHandler(&buf, nil)) })
			id := tc.call(t, e)
			// The RPC's line is written before its status is sent: it is
			// in the buffer once the call has ended.
			var rpc []map[string]any
			transitions := 0
			for _, l := range testkit.LogLines(t, buf.String()) {
				switch l["msg"] {
				case "finished call":
					rpc = append(rpc, l)
				case "transition":
					transitions++
				default:
					t.Errorf("unexpected line %v", l)
				}
			}
			if len(rpc) != 1 {
				t.Fatalf("%d RPC lines, want 1:\n%s", len(rpc), buf.String())
			}
			l := rpc[0]
			if l["grpc.method"] != tc.method || l["grpc.code"] != tc.code || l["level"] != tc.level {
				t.Errorf("RPC line %v, want method %s, code %s, level %s", l, tc.method, tc.code, tc.level)
			}
			if transitions != tc.transitions {
				t.Errorf("%d transition lines, want %d:\n%s", transitions, tc.transitions, buf.String())
			}
			if id == "" {
				if _, ok := l["completion_id"]; ok {
					t.Errorf("RPC line %v reports a completion, and there was none", l)
				}
				return
			}
			if l["completion_id"] != id || l["reason"] != tc.reason || l["attempts"] != tc.attempts || l["route"] != "sim" {
				t.Errorf("RPC line %v, want completion %s, reason %s, %v attempts, route sim", l, id, tc.reason, tc.attempts)
			}
			for _, f := range []string{"stop_reason", "truncated", "input_tokens", "output_tokens"} {
				if _, ok := l[f]; !ok {
					t.Errorf("RPC line %v lacks %s", l, f)
				}
			}
		})
	}
}
