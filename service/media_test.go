package service

import (
	"slices"
	"strings"
	"testing"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider/sim"
	"github.com/completiond/completiond/recovery"
)

// Media blocks and reasoning end to end through the sim: gRPC (bufconn) →
// validation → driver → machine → sim.

// pngPixel is a 1×1 PNG, small enough for any image limit.
var pngPixel = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89")

// recordRoutes puts a recordingProvider in front of every route's upstream
// and hands it back through rec, so a test sees what each attempt sent.
func recordRoutes(rec **recordingProvider) func(*Config) {
	return func(cfg *Config) {
		*rec = &recordingProvider{Provider: cfg.Routes["sim"].Upstream}
		for _, r := range cfg.Routes {
			r.Upstream = *rec
		}
	}
}

func imageBlock() *completionv1.ContentBlock {
	return &completionv1.ContentBlock{Block: &completionv1.ContentBlock_Image{
		Image: &completionv1.ImageBlock{MediaType: "image/png", Data: pngPixel}}}
}

// TestMediaRejectionStripsOnlyTheNamedImage: the sim rejects the first of
// two images by its place, as Anthropic does; the stream shows one
// REACTIVE_COMPACT_RETRY naming that block in stripped_blocks, the retry
// carries the placeholder and the other image, and the sim (whose script
// still rejects messages[0].content[1], now text) answers.
func TestMediaRejectionStripsOnlyTheNamedImage(t *testing.T) {
	var rec *recordingProvider
	env := newTestEnv(t, recordRoutes(&rec))
	req := prompt("Compare these.", map[string]string{sim.MetaFaults: "media=0.1*2"})
	req.Messages[0].Content = append(req.Messages[0].Content, imageBlock(), imageBlock())
	evs, st := env.streamAll(t, req)
	res := checkContract(t, evs, st)
	if got := strings.Join(transitions(evs), " "); got != "REACTIVE_COMPACT_RETRY COMPLETED" {
		t.Fatalf("transitions %s, want REACTIVE_COMPACT_RETRY COMPLETED", got)
	}
	tr := transitionEvents(evs)[0].GetTransition()
	if want := []string{"messages[0].content[1]"}; !slices.Equal(tr.GetStrippedBlocks(), want) {
		t.Errorf("stripped_blocks %q, want %q", tr.GetStrippedBlocks(), want)
	}
	if e := tr.GetError(); e.GetKind() != completionv1.ErrorKind_ERROR_KIND_MEDIA || e.GetHttpStatus() != 400 ||
		!strings.HasPrefix(e.GetMessage(), "messages.0.content.1.image.source.base64: ") {
		t.Errorf("transition error %v, want the sim's 400 naming messages.0.content.1", e)
	}
	if res.GetReason() != completionv1.TransitionReason_TRANSITION_REASON_COMPLETED || resultText(res) == "" {
		t.Errorf("result %v, want COMPLETED with the answer", res)
	}
	sent := rec.requests()
	if len(sent) != 2 {
		t.Fatalf("%d attempts reached the sim, want 2", len(sent))
	}
	retry := sent[1].Messages[0].Blocks
	if len(retry) != 3 || retry[1].Kind != recovery.BlockText || retry[1].Text != recovery.ImagePlaceholder ||
		retry[2].Kind != recovery.BlockImage || string(retry[2].Data) != string(pngPixel) {
		t.Errorf("the retry sent %+v, want the text, the placeholder and the second image", retry)
	}
}

// reasoningRequest is a request that asks the sim route to reason with a
// low effort.
func reasoningRequest() *completionv1.CompleteRequest {
	req := prompt("Explain retries.", nil)
	req.Reasoning = &completionv1.Reasoning{Effort: completionv1.ReasoningEffort_REASONING_EFFORT_LOW}
	return req
}

// checkThinkingFirst checks that the stream holds thinking deltas, every
// one before the first text delta, and returns the thinking.
func checkThinkingFirst(t *testing.T, evs []*completionv1.CompletionEvent) string {
	t.Helper()
	var thinking strings.Builder
	text := false
	for _, ev := range evs {
		switch ev.GetDelta().GetKind() {
		case completionv1.DeltaKind_DELTA_KIND_THINKING:
			if text {
				t.Errorf("a thinking delta (seq %d) after the text began", ev.GetSeq())
			}
			thinking.WriteString(ev.GetDelta().GetText())
		case completionv1.DeltaKind_DELTA_KIND_TEXT:
			text = true
		}
	}
	if thinking.Len() == 0 || !text {
		t.Fatalf("thinking %q, text %t: want thinking deltas, then text", thinking.String(), text)
	}
	return thinking.String()
}

// TestReasoningOnTheSimRoute: reasoning.effort LOW on the sim route streams
// DELTA_KIND_THINKING deltas before the answer's text.
func TestReasoningOnTheSimRoute(t *testing.T) {
	var rec *recordingProvider
	env := newTestEnv(t, recordRoutes(&rec))
	evs, st := env.streamAll(t, reasoningRequest())
	if sent := rec.requests(); len(sent) == 0 || sent[0].ThinkingBudget == 0 || sent[0].Reasoning.Effort != "low" {
		t.Fatalf("the sim was not asked to reason: %+v", sent)
	}
	res := checkContract(t, evs, st)
	thinking := checkThinkingFirst(t, evs)
	if !strings.HasPrefix(thinking, `Reasoning about "Explain retries.":`) {
		t.Errorf("thinking %q, want the sim's reasoning about the prompt", thinking)
	}
	if res.GetReason() != completionv1.TransitionReason_TRANSITION_REASON_COMPLETED || strings.Contains(resultText(res), "Reasoning") {
		t.Errorf("result %v, want COMPLETED with the answer alone", res)
	}
	// The result keeps the thinking, signed by the model that wrote it,
	// for the caller to send back.
	th := res.GetMessage().GetContent()[0].GetThinking()
	if th.GetThinking() != thinking || th.GetSignature() == "" || th.GetModel() != "sim-1" {
		t.Errorf("the result's first block %v, want the thinking %q signed by sim-1", res.GetMessage().GetContent()[0], thinking)
	}
}

// TestThinkingSimRoute: a sim route configured to think (a thinking budget,
// which the machine knows of) streams the sim's reasoning as
// DELTA_KIND_THINKING before the text, and its thinking tokens count in
// the attempt's output.
func TestThinkingSimRoute(t *testing.T) {
	env := newTestEnv(t, func(cfg *Config) {
		r := cfg.Routes["sim"]
		r.ThinkingBudget, r.Spec.Thinking = 2048, true
	})
	evs, st := env.streamAll(t, prompt("Explain retries.", nil))
	res := checkContract(t, evs, st)
	thinking := checkThinkingFirst(t, evs)
	want := strings.Join(sim.Reasoning("Explain retries.", 8, false), "") // a 2048 budget reasons as a low effort
	if thinking != want {
		t.Errorf("thinking %q, want %q", thinking, want)
	}
	if out := res.GetUsage().GetOutputTokens(); out != 12+8 { // newTestEnv's sim answers in 12 tokens
		t.Errorf("output tokens %d, want the answer's 12 and the thinking's 8", out)
	}
}
