package sim

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// chunks runs r on p and returns every chunk, in order, with the finish.
func chunks(t *testing.T, p *Provider, r *provider.Request) ([]provider.Chunk, provider.Finish, error) {
	t.Helper()
	var cs []provider.Chunk
	fin, err := p.Stream(t.Context(), r, func(c provider.Chunk) error {
		cs = append(cs, c)
		return nil
	})
	return cs, fin, err
}

// kinds is the chunk kinds of cs, runs of one kind folded: "thinking,
// block, text".
func kinds(cs []provider.Chunk) string {
	names := map[provider.ChunkKind]string{provider.ChunkText: "text", provider.ChunkThinking: "thinking",
		provider.ChunkThinkingBlock: "block", provider.ChunkToolCall: "call"}
	var out []string
	for _, c := range cs {
		if n := names[c.Kind]; len(out) == 0 || out[len(out)-1] != n {
			out = append(out, n)
		}
	}
	return strings.Join(out, ", ")
}

func TestReasoning(t *testing.T) {
	toolTurn := []recovery.Message{
		recovery.UserText("What is recovery?"),
		{Role: recovery.RoleAssistant, Blocks: []recovery.Block{
			{Kind: recovery.BlockThinking, Text: "earlier", Signature: signatureFor("sim-1")},
			recovery.TextBlock("Let me check. "),
			{Kind: recovery.BlockToolUse, ToolUseID: "t1", ToolName: "lookup", ToolInput: []byte("{}")}}},
		{Role: recovery.RoleUser, Blocks: []recovery.Block{{Kind: recovery.BlockToolResult, ToolUseID: "t1", Text: "found"}}},
	}
	tests := []struct {
		name    string
		script  string
		set     func(r *provider.Request)
		thought int    // thinking tokens, 0: none
		kinds   string // the chunks, runs folded
	}{
		{"no reasoning asked", "", func(r *provider.Request) {}, 0, "text"},
		{"effort minimal", "", func(r *provider.Request) { r.Reasoning.Effort = "minimal" }, 4, "thinking, block, text"},
		{"effort low", "", func(r *provider.Request) { r.Reasoning.Effort = "low" }, 8, "thinking, block, text"},
		{"effort medium", "", func(r *provider.Request) { r.Reasoning.Effort = "medium" }, 16, "thinking, block, text"},
		{"effort high", "", func(r *provider.Request) { r.Reasoning.Effort = "high" }, MaxThinkingWords, "thinking, block, text"},
		{"an unknown effort reasons as medium", "", func(r *provider.Request) { r.Reasoning.Effort = "xhigh" }, 16, "thinking, block, text"},
		{"budget 1024 is low", "", func(r *provider.Request) { r.ThinkingBudget = 1024 }, 8, "thinking, block, text"},
		{"budget 8192 is medium", "", func(r *provider.Request) { r.ThinkingBudget = 8192 }, 16, "thinking, block, text"},
		{"a large budget is bounded", "", func(r *provider.Request) { r.ThinkingBudget = 1 << 20 }, MaxThinkingWords, "thinking, block, text"},
		{"the larger of effort and budget", "", func(r *provider.Request) { r.ThinkingBudget, r.Reasoning.Effort = 1024, "high" }, MaxThinkingWords, "thinking, block, text"},
		{"thinking before the tool call", "tool_use", func(r *provider.Request) { r.Reasoning.Effort = "low" }, 8, "thinking, block, text, call"},
		{"thinking before a cut", "cut=3", func(r *provider.Request) { r.Reasoning.Effort = "low" }, 8, "thinking, block, text"},
		{"no thinking on a prefill", "", func(r *provider.Request) { r.Reasoning.Effort = "low"; r.Prefill = "Simulated" }, 0, "text"},
		{"none after tool results", "", func(r *provider.Request) { r.Reasoning.Effort = "low"; r.Messages = toolTurn }, 0, "text"},
		{"interleaved: again after tool results", "", func(r *provider.Request) {
			r.Reasoning = provider.Reasoning{Effort: "low", Interleaved: true}
			r.Messages = toolTurn
		}, 8, "thinking, block, text"},
		{"a failure before the stream: no thinking", "overload", func(r *provider.Request) { r.Reasoning.Effort = "low" }, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := req(tt.script, 1)
			tt.set(r)
			p := New(Config{Words: 10})
			cs, fin, err := chunks(t, p, r)
			if got := kinds(cs); got != tt.kinds {
				t.Fatalf("chunks %q, want %q", got, tt.kinds)
			}
			var thinking, text strings.Builder
			var blocks []recovery.Block
			n := 0
			for _, c := range cs {
				switch c.Kind {
				case provider.ChunkThinking:
					thinking.WriteString(c.Text)
					n++
				case provider.ChunkThinkingBlock:
					blocks = append(blocks, c.Block)
				case provider.ChunkText:
					text.WriteString(c.Text)
				}
			}
			if n != tt.thought {
				t.Errorf("%d thinking tokens, want %d", n, tt.thought)
			}
			plain := *r
			plain.ThinkingBudget, plain.Reasoning = 0, provider.Reasoning{}
			_, base, _ := chunks(t, p, &plain)
			if err == nil && fin.Usage.OutputTokens != base.Usage.OutputTokens+int64(n) {
				t.Errorf("output tokens %d, want the answer's %d and the thinking's %d", fin.Usage.OutputTokens, base.Usage.OutputTokens, n)
			}
			if tt.thought == 0 {
				return
			}
			want := recovery.Block{Kind: recovery.BlockThinking, Text: thinking.String(), Signature: signatureFor(r.Model)}
			if len(blocks) != 1 || blocks[0].Kind != want.Kind || blocks[0].Text != want.Text || blocks[0].Signature != want.Signature {
				t.Errorf("thinking blocks %+v, want one %+v", blocks, want)
			}
			lead := `Reasoning about "What is recovery?":`
			if r.Messages[len(r.Messages)-1].Blocks[0].Kind == recovery.BlockToolResult {
				lead = `Reasoning about the tool results for "What is recovery?":`
			}
			if !strings.HasPrefix(thinking.String(), lead) || !strings.HasSuffix(thinking.String(), ".") {
				t.Errorf("reasoning %q, want it to start %q and end with a period", thinking.String(), lead)
			}
			if strings.Contains(text.String(), "Reasoning") {
				t.Errorf("the reasoning leaked into the answer %q", text.String())
			}
			again, _, _ := chunks(t, p, r)
			if !reflect.DeepEqual(again, cs) {
				t.Error("the same request reasoned differently")
			}
		})
	}
}

// TestSignatureMatchesTheFaultServer: the sim signs a thinking block as
// providertest.SignatureFor does (which the sim may not import), so that a
// block the sim wrote is checked like one the fault server wrote.
func TestSignatureMatchesTheFaultServer(t *testing.T) {
	if got := signatureFor("claude-a"); got != "sig-for:claude-a" {
		t.Errorf("signatureFor = %q, want providertest.SignatureFor's sig-for:claude-a", got)
	}
}

// TestReasoningObeysTheFirstTokenLimit: a thinking token is the stream's
// first token, so the first-token limit times it. Fake time (synctest).
func TestReasoningObeysTheFirstTokenLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := req("", 1)
		r.Reasoning.Effort = "low"
		r.Metadata[MetaPace] = "1s"
		r.Timeouts = provider.Timeouts{FirstToken: 500 * time.Millisecond, Idle: 2 * time.Second}
		cs, _, err := chunks(t, New(Config{Words: 3}), r)
		if f, ok := provider.AsFailure(err); !ok || f.Kind != recovery.FailTimeout || f.Timeout != recovery.TimeoutFirstToken || len(cs) != 0 {
			t.Fatalf("err %v after %d chunks, want a first-token timeout before any", err, len(cs))
		}
		r.Timeouts.FirstToken = 2 * time.Second
		cs, fin, err := chunks(t, New(Config{Words: 3}), r)
		if err != nil || kinds(cs) != "thinking, block, text" || fin.Usage.OutputTokens != 8+3 {
			t.Fatalf("%s, %+v, %v; want 8 thinking tokens, then 3 of text", kinds(cs), fin, err)
		}
	})
}

func TestMediaRejectionNamesItsBlock(t *testing.T) {
	img := recovery.Block{Kind: recovery.BlockImage, MediaType: "image/png", Data: []byte("\x89PNG")}
	msgs := []recovery.Message{{Role: recovery.RoleUser, Blocks: []recovery.Block{
		recovery.TextBlock("Compare these."), img,
		{Kind: recovery.BlockImage, URL: "https://example.com/b.png"},
		{Kind: recovery.BlockDocument, MediaType: "application/pdf", Data: []byte("%PDF")},
		{Kind: recovery.BlockDocument, URL: "https://example.com/c.pdf"},
		recovery.TextBlock(recovery.ImagePlaceholder), // an image recovery already stripped
	}}}
	ref := func(b int) recovery.BlockRef { return recovery.BlockRef{Block: b} }
	tests := []struct {
		script string
		named  []recovery.BlockRef // nil: the sim answers
		msg    string
	}{
		{"media=0.1", []recovery.BlockRef{ref(1)},
			"messages.0.content.1.image.source.base64: The image was specified using the image/png media type, but does not appear to be a valid image"},
		{"media=0.2", []recovery.BlockRef{ref(2)}, "messages.0.content.2.image.source.url: Unable to download the file. Please verify the URL and try again."},
		{"media=0.3", []recovery.BlockRef{ref(3)}, "messages.0.content.3.document.source.base64: The PDF specified was not valid."},
		{"media=0.4", []recovery.BlockRef{ref(4)}, "messages.0.content.4.document.source.url: Unable to download the file. Please verify the URL and try again."},
		{"media=0.0+0.3+0.1", []recovery.BlockRef{ref(3), ref(1)}, "messages.0.content.3.document.source.base64: The PDF specified was not valid."},
		{"media=0.5", nil, ""}, // a placeholder now: the request is accepted
		{"media=0.0", nil, ""}, // text
		{"media=0.9", nil, ""}, // past the message's blocks
		{"media=4.0", nil, ""}, // past the conversation
		{"media", nil, "Could not process image"},
	}
	for _, tt := range tests {
		t.Run(tt.script, func(t *testing.T) {
			r := req(tt.script, 1)
			r.Messages = msgs
			text, fin, err := collect(t, New(Config{Words: 5}), r)
			if tt.msg == "" {
				if err != nil || fin.StopReason != recovery.StopEndTurn || text == "" {
					t.Fatalf("%q, %+v, %v; want the answer", text, fin, err)
				}
				return
			}
			f, ok := provider.AsFailure(err)
			if !ok || f.Kind != recovery.FailMedia || f.HTTPStatus != 400 || f.Provider != "sim" || f.Type != "invalid_request_error" {
				t.Fatalf("err %v, want a 400 media failure", err)
			}
			if f.Message != tt.msg || !slices.Equal(f.MediaBlocks, tt.named) {
				t.Errorf("failure %q naming %v, want %q naming %v", f.Message, f.MediaBlocks, tt.msg, tt.named)
			}
		})
	}
}

// TestMediaIsCountedNotFetched: URL images and documents are accepted
// (never fetched) and counted in the input as the machine estimates them.
func TestMediaIsCountedNotFetched(t *testing.T) {
	base := promptTokens(req("", 1))
	tests := []struct {
		name  string
		block recovery.Block
	}{
		{"inline image", recovery.Block{Kind: recovery.BlockImage, MediaType: "image/png", Data: make([]byte, 1<<20)}},
		{"URL image", recovery.Block{Kind: recovery.BlockImage, URL: "https://example.invalid/a.png"}},
		{"inline document", recovery.Block{Kind: recovery.BlockDocument, MediaType: "application/pdf", Data: make([]byte, 3*recovery.DocumentPageBytes)}},
		{"URL document", recovery.Block{Kind: recovery.BlockDocument, URL: "https://example.invalid/a.pdf", Title: "A"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := req("", 1)
			r.Messages = []recovery.Message{{Role: recovery.RoleUser, Blocks: []recovery.Block{recovery.TextBlock("What is recovery?"), tt.block}}}
			_, fin, err := collect(t, New(Config{Words: 5}), r)
			if err != nil || fin.StopReason != recovery.StopEndTurn {
				t.Fatalf("%+v, %v; want the answer", fin, err)
			}
			if want := base + int64(recovery.MediaTokens(tt.block)); fin.Usage.InputTokens != want {
				t.Errorf("input tokens %d, want %d", fin.Usage.InputTokens, want)
			}
		})
	}
}
