package service

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider/anthropic"
	"github.com/completiond/completiond/provider/openai"
	pt "github.com/completiond/completiond/provider/providertest"
)

// TestKeyPiecesDoNotLeak has each upstream echo a piece of its key without
// the sk- prefix — in a retried error's message, as the model its answer
// names, in the message of a 401 that ends a completion — and proves that no piece of 8 characters or more of a key reaches the
// caller (events, result, status) or the logs.
func TestKeyPiecesDoNotLeak(t *testing.T) {
	keys := map[string]string{anthropic.Kind: "sk-ant-SUFFIXCHECK-5e6f7a8b", openai.Kind: "sk-SUFFIXCHECK-1c2d3e4f"}
	logs := &lockedBuffer{}
	routes := map[string]*config.Route{}
	for kind, key := range keys {
		suffix := strings.TrimPrefix(strings.TrimPrefix(key, "sk-"), "ant-") // "SUFFIXCHECK-…"
		srv := upstreamServer(t, kind, pt.Seq(
			pt.Reply{Error: &pt.APIError{Status: 500, Type: "api_error", Message: "key suffix " + suffix + " rejected"}},
			pt.Reply{Answer: pt.Answer{Model: "model-" + suffix[2:], Text: []string{"Fine", "."}}},
			pt.Reply{Error: &pt.APIError{Status: 401, Type: "authentication_error", Message: "key suffix " + suffix + " rejected"}},
		))
		routes[kind] = upstreamRoute(kind, kind+"-model", kind, realProvider(t, kind, srv, key), 128_000, false, generous)
	}
	cfg := faultConfig(routes)
	cfg.DefaultRoute = anthropic.Kind
	cfg.Breaker = config.BreakerSettings{Failures: -1}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	client, _ := grpcClient(t, cfg)
	env := &testEnv{client: client}

	var seen strings.Builder
	for kind := range keys {
		req := prompt("Explain recovery.", nil)
		req.Route = kind
		evs, st := env.streamAll(t, req)
		res := checkContract(t, evs, st)
		if got := transitions(evs); strings.Join(got, ",") != "RETRY,COMPLETED" {
			t.Fatalf("%s: transitions %v, want RETRY then COMPLETED: the echoes did not both happen", kind, got)
		}
		// Controls: the echoes reached the caller, scrubbed.
		if msg := findTransition(evs, completionv1.TransitionReason_TRANSITION_REASON_RETRY).GetError().GetMessage(); msg != "key suffix [REDACTED] rejected" {
			t.Errorf("%s: the retry's error says %q", kind, msg)
		}
		if res.GetModel() != "model-[REDACTED]" || res.GetAttempts()[1].GetModel() != "model-[REDACTED]" {
			t.Errorf("%s: result model %q, attempts %v", kind, res.GetModel(), res.GetAttempts())
		}
		for _, ev := range evs {
			seen.WriteString(prototext.Format(ev))
		}
		seen.WriteString(prototext.Format(st.Proto()))

		// Complete: the scripts now answer every call with the 401, which
		// ends the completion; its status is logged with the call.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		resp, err := env.client.Complete(ctx, req)
		cancel()
		st = status.Convert(err)
		if st.Code() != codes.Internal || !strings.Contains(st.Message(), "key suffix [REDACTED] rejected") {
			t.Fatalf("%s: Complete: %v, %v; want INTERNAL with the scrubbed echo", kind, resp, err)
		}
		seen.WriteString(prototext.Format(st.Proto()))
	}
	all := seen.String() + logs.String()
	if !strings.Contains(logs.String(), `"msg":"finished call"`) || !strings.Contains(logs.String(), "key suffix [REDACTED] rejected") {
		t.Errorf("the logs lack the call's log line with the scrubbed echo: the capture is incomplete")
	}
	for _, key := range keys {
		for i := 0; i+8 <= len(key); i++ {
			if j := strings.Index(all, key[i:i+8]); j >= 0 {
				t.Errorf("a piece of the key leaks (%q found): …%s…", key[i:i+8], context40(all, j))
			}
		}
	}
}
