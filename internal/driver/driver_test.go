package driver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/guard"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// script is a provider that plays one attempt per entry: its words, then
// its failure or a natural end.
type script []struct {
	words []string
	fail  *recovery.Failure
}

func (s *script) Kind() string { return "script" }

func (s *script) Stream(ctx context.Context, _ *provider.Request, emit func(provider.Chunk) error) (provider.Finish, error) {
	if len(*s) == 0 {
		return provider.Finish{}, errors.New("the script has no more attempts")
	}
	a := (*s)[0]
	*s = (*s)[1:]
	for _, w := range a.words {
		if err := emit(provider.Chunk{Kind: provider.ChunkText, Text: w}); err != nil {
			return provider.Finish{}, err
		}
	}
	if a.fail != nil {
		return provider.Finish{}, a.fail
	}
	return provider.Finish{StopReason: recovery.StopEndTurn, Usage: recovery.Usage{OutputTokens: int64(len(a.words))}, Model: "scripted-1"}, nil
}

// spec is a Spec of one route served by up, whose events go to sent.
func spec(up provider.Provider, sent *[]*completionv1.CompletionEvent) Spec {
	route := &config.Route{Spec: recovery.Route{Name: "r", Provider: "script", Model: "m", ContextWindow: 100_000, MaxOutputTokens: 1000}, Upstream: up}
	policy := recovery.DefaultPolicy()
	return Spec{
		ID: "cmpl_test", Request: &completionv1.CompleteRequest{}, Routes: []*config.Route{route},
		Machine: recovery.Config{Policy: policy, Routes: []recovery.Route{route.Spec}, MaxTokens: 100,
			Messages: []recovery.Message{{Role: recovery.RoleUser, Blocks: []recovery.Block{recovery.TextBlock("hi")}}}},
		Caller: Stateless{}, Breakers: guard.NewFleetBreakers(config.BreakerSettings{Failures: -1}, nil),
		Now: time.Now, Rand: func() float64 { return 0.5 },
		Conclude: func(r *recovery.Result) Conclusion { return Conclusion{Status: []byte(r.Reason.String())} },
		Release:  func() {},
		Send: func(ev *completionv1.CompletionEvent) error {
			*sent = append(*sent, ev)
			return nil
		},
	}
}

// TestRunRecoversWithoutGRPC runs a completion whose first attempt is
// rate limited: the driver waits out the backoff (on synctest's clock),
// answers on the second attempt, numbers every event from 1, and hands
// the machine's result to Conclude.
func TestRunRecoversWithoutGRPC(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &script{
			{words: []string{"lost "}, fail: &recovery.Failure{Kind: recovery.FailRateLimit, Provider: "script", HTTPStatus: 429}},
			{words: []string{"hello ", "world"}},
		}
		var sent []*completionv1.CompletionEvent
		c := New(spec(up, &sent))
		res, err := c.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if res.Reason != recovery.Completed || res.Text != "hello world" {
			t.Fatalf("result %v %q", res.Reason, res.Text)
		}
		var reasons []string
		for i, ev := range sent {
			if ev.GetSeq() != uint64(i+1) {
				t.Fatalf("event %d has seq %d", i, ev.GetSeq())
			}
			if tr := ev.GetTransition(); tr != nil {
				reasons = append(reasons, tr.GetReason().String())
			}
		}
		if got := strings.Join(reasons, " "); got != "TRANSITION_REASON_RETRY TRANSITION_REASON_COMPLETED" {
			t.Errorf("transitions %s", got)
		}
		if got := sent[len(sent)-1].GetResult(); got.GetModel() != "scripted-1" || len(c.Transitions()) != 2 || c.Result() != got {
			t.Errorf("result event %v, transitions %d", got, len(c.Transitions()))
		}
		if string(c.Conclusion().Status) != "COMPLETED" {
			t.Errorf("conclusion %q", c.Conclusion().Status)
		}
	})
}

// hookCaller blocks the first answer and allows the next, and records the
// requests it sent through ask.
type hookCaller struct {
	Stateless
	asked []*completionv1.CompletionEvent
}

func (h *hookCaller) AwaitStopHook(_ context.Context, _ recovery.Action, ask func(*completionv1.CompletionEvent) bool) recovery.Event {
	req := &completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_StopHookRequest{StopHookRequest: &completionv1.StopHookRequest{HookId: "h"}}}
	if !ask(req) {
		return recovery.Event{Kind: recovery.EvCancelled, Reason: "gone"}
	}
	h.asked = append(h.asked, req)
	if len(h.asked) == 1 {
		return recovery.Event{Kind: recovery.EvStopHookVerdict, Verdict: recovery.VerdictBlock, VerdictMessage: "again"}
	}
	return recovery.Event{Kind: recovery.EvStopHookVerdict, Verdict: recovery.VerdictAllow}
}

// TestCallerAsksThroughTheOutbox: a Caller's stop-hook request is numbered
// and sent in the completion's order, and counted for the checkpoint.
func TestCallerAsksThroughTheOutbox(t *testing.T) {
	up := &script{{words: []string{"first"}}, {words: []string{"second"}}}
	var sent []*completionv1.CompletionEvent
	sp := spec(up, &sent)
	h := &hookCaller{}
	sp.Caller, sp.Machine.StopHook = h, true
	c := New(sp)
	res, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "second" || len(h.asked) != 2 {
		t.Fatalf("answer %q after %d hook requests", res.Text, len(h.asked))
	}
	for _, req := range h.asked {
		if req.GetSeq() == 0 || sent[req.GetSeq()-1] != req {
			t.Errorf("hook request seq %d is not where it was sent", req.GetSeq())
		}
	}
	if c.out.hooks != 2 {
		t.Errorf("outbox counted %d hook requests, want 2", c.out.hooks)
	}
}

// TestCallerGoneEndsTheRun: a send that fails makes Run return
// ErrCallerGone, and nothing more is sent.
func TestCallerGoneEndsTheRun(t *testing.T) {
	up := &script{{words: []string{"a", "b", "c"}}}
	var sent []*completionv1.CompletionEvent
	sp := spec(up, &sent)
	n := 0
	sp.Send = func(*completionv1.CompletionEvent) error {
		if n++; n >= 2 {
			return errors.New("stream closed")
		}
		return nil
	}
	_, err := New(sp).Run(context.Background())
	if !errors.Is(err, ErrCallerGone) {
		t.Fatalf("Run = %v, want ErrCallerGone", err)
	}
	if n != 2 {
		t.Errorf("%d sends, want 2 (none after the failed one)", n)
	}
}
