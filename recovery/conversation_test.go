package recovery

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestEstimateTokens(t *testing.T) {
	img := Block{Kind: BlockImage, Data: make([]byte, 1<<20)} // the bytes of an image do not count
	doc := func(n int) Block {
		return Block{Kind: BlockDocument, MediaType: "application/pdf", Data: make([]byte, n)}
	}
	tests := []struct {
		system string
		msgs   []Message
		want   int
	}{
		{"", nil, 0},
		{"abcd", nil, 1},
		{"abcde", nil, 2}, // rounds up
		{"", []Message{UserText(strings.Repeat("x", 400))}, 100},
		{"", []Message{{Role: RoleUser, Blocks: []Block{img, img}}}, 2 * ImageTokens},
		{"", []Message{{Role: RoleUser, Blocks: []Block{{Kind: BlockImage, URL: "https://example.com/a.png"}}}}, ImageTokens},
		{"", []Message{{Role: RoleUser, Blocks: []Block{doc(1)}}}, DocumentPageTokens}, // at least a page
		{"", []Message{{Role: RoleUser, Blocks: []Block{doc(DocumentPageBytes)}}}, DocumentPageTokens},
		{"", []Message{{Role: RoleUser, Blocks: []Block{doc(DocumentPageBytes + 1)}}}, 2 * DocumentPageTokens},
		{"", []Message{{Role: RoleUser, Blocks: []Block{doc(1 << 30)}}}, DocumentMaxPages * DocumentPageTokens},
		{"", []Message{{Role: RoleUser, Blocks: []Block{{Kind: BlockDocument, URL: "https://example.com/a.pdf", Title: "a"}}}}, DocumentURLPages * DocumentPageTokens},
		{"", []Message{{Role: RoleAssistant, Blocks: []Block{{Kind: BlockToolUse, ToolName: "grep", ToolInput: []byte(`{"q":"x"}`)}}}}, 4},
		{"sys!", []Message{UserText("1234"), {Role: RoleUser, Blocks: []Block{{Kind: BlockToolResult, Text: "12345678"}}}}, 4},
	}
	for _, tt := range tests {
		if got := EstimateTokens(tt.system, tt.msgs); got != tt.want {
			t.Errorf("EstimateTokens(%q, %v) = %d, want %d", tt.system, tt.msgs, got, tt.want)
		}
	}
}

func TestBlockingLimit(t *testing.T) {
	p := DefaultPolicy()
	if got := p.Overflow.BlockingLimit(200000, 8000); got != 189000 {
		t.Errorf("200000 − 8000 − 3000 = %d", got)
	}
	if got := p.Overflow.BlockingLimit(200000, 64000); got != 177000 { // reserve capped at 20000
		t.Errorf("200000 − 20000 − 3000 = %d", got)
	}
}

func TestCollapse(t *testing.T) {
	big := strings.Repeat("x", 3000)
	msgs := []Message{
		UserText(big), // the task: never elided
		{Role: RoleAssistant, Blocks: []Block{TextBlock(big), TextBlock("small")}},
		{Role: RoleUser, Blocks: []Block{{Kind: BlockToolResult, ToolUseID: "t1", Text: big, IsError: true}}},
		AssistantText(big), // in the recent window
	}
	before := clone(msgs)
	out, blocks, bytes := Collapse(msgs, 1, 2000)
	if blocks != 2 || bytes != 6000 {
		t.Fatalf("elided %d blocks, %d bytes; want 2, 6000", blocks, bytes)
	}
	if out[0].Blocks[0].Text != big || out[3].Blocks[0].Text != big {
		t.Error("the first message or the recent window was elided")
	}
	if got := out[2].Blocks[0]; got.Text != "[elided 3000 bytes]" || got.ToolUseID != "t1" || !got.IsError {
		t.Errorf("tool result became %+v", got)
	}
	if out[1].Blocks[1].Text != "small" {
		t.Error("a small block was elided")
	}
	if !reflect.DeepEqual(msgs, before) {
		t.Error("Collapse modified its input")
	}
	if _, n, _ := Collapse(out, 1, 2000); n != 0 {
		t.Errorf("a second collapse elided %d more blocks", n)
	}
}

func TestStripMedia(t *testing.T) {
	img := Block{Kind: BlockImage, MediaType: "image/png", Data: []byte{1}}
	url := Block{Kind: BlockImage, URL: "https://example.com/a.png"}
	doc := Block{Kind: BlockDocument, MediaType: "application/pdf", Data: []byte("%PDF")}
	msgs := []Message{
		{Role: RoleUser, Blocks: []Block{TextBlock("see"), img, doc}},
		AssistantText("ok"),
		{Role: RoleUser, Blocks: []Block{url}},
	}
	imgGone, docGone := TextBlock(ImagePlaceholder), TextBlock(DocumentPlaceholder)
	ref := func(m, b int) BlockRef { return BlockRef{Message: m, Block: b} }
	tests := []struct {
		name     string
		refs     []BlockRef
		want     [][]Block // the blocks of each message after the strip
		stripped []BlockRef
	}{
		{"every media block", MediaBlocks(msgs),
			[][]Block{{TextBlock("see"), imgGone, docGone}, {TextBlock("ok")}, {imgGone}},
			[]BlockRef{ref(0, 1), ref(0, 2), ref(2, 0)}},
		{"the named image only", []BlockRef{ref(0, 1)},
			[][]Block{{TextBlock("see"), imgGone, doc}, {TextBlock("ok")}, {url}},
			[]BlockRef{ref(0, 1)}},
		{"a document", []BlockRef{ref(0, 2)},
			[][]Block{{TextBlock("see"), img, docGone}, {TextBlock("ok")}, {url}},
			[]BlockRef{ref(0, 2)}},
		{"a URL image, in the order given", []BlockRef{ref(2, 0), ref(0, 1)},
			[][]Block{{TextBlock("see"), imgGone, doc}, {TextBlock("ok")}, {imgGone}},
			[]BlockRef{ref(2, 0), ref(0, 1)}},
		{"refs at no media block are skipped", []BlockRef{ref(0, 0), ref(1, 0), ref(5, 0), ref(0, 9), ref(-1, 0), ref(0, 1), ref(0, 1)},
			[][]Block{{TextBlock("see"), imgGone, doc}, {TextBlock("ok")}, {url}},
			[]BlockRef{ref(0, 1)}},
		{"none", nil,
			[][]Block{{TextBlock("see"), img, doc}, {TextBlock("ok")}, {url}},
			nil},
	}
	marked := Block{Kind: BlockImage, Data: []byte{1}, CacheBreakpoint: true}
	out, _ := StripMedia([]Message{{Role: RoleUser, Blocks: []Block{marked}}}, []BlockRef{{}})
	if want := (Block{Kind: BlockText, Text: ImagePlaceholder, CacheBreakpoint: true}); !reflect.DeepEqual(out[0].Blocks[0], want) {
		t.Errorf("a marked image became %+v, want %+v", out[0].Blocks[0], want)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := clone(msgs)
			out, stripped := StripMedia(msgs, tt.refs)
			if !reflect.DeepEqual(stripped, tt.stripped) {
				t.Errorf("stripped %v, want %v", stripped, tt.stripped)
			}
			for i, m := range out {
				if !reflect.DeepEqual(m.Blocks, tt.want[i]) || m.Role != msgs[i].Role {
					t.Errorf("message %d = %+v, want blocks %+v", i, m, tt.want[i])
				}
			}
			if !reflect.DeepEqual(msgs, before) {
				t.Error("StripMedia modified its input")
			}
		})
	}
}

func TestSplitForCompaction(t *testing.T) {
	u, a := UserText, AssistantText
	result := Message{Role: RoleUser, Blocks: []Block{{Kind: BlockToolResult, ToolUseID: "t"}}}
	tests := []struct {
		name                 string
		msgs                 []Message
		keep                 int
		ok                   bool
		head, middle, tailOK int
	}{
		{"no user message", []Message{a("x")}, 1, false, 0, 0, 0},
		{"too short", []Message{u("1"), a("2"), u("3")}, 2, false, 0, 0, 0},
		{"plain", []Message{u("1"), a("2"), u("3"), a("4"), u("5")}, 2, true, 1, 2, 2},
		{"keep nothing", []Message{u("1"), a("2"), u("3")}, 0, true, 1, 2, 0},
		{"negative keep", []Message{u("1"), a("2"), u("3")}, -1, true, 1, 2, 0},
		{"assistant first", []Message{a("0"), u("1"), a("2"), u("3"), a("4")}, 1, true, 2, 2, 1},
		{"tail widened over tool results", []Message{u("1"), a("2"), u("3"), a("use"), result, a("6")}, 2, true, 1, 2, 3},
		{"widening eats the middle", []Message{u("1"), a("use"), result}, 1, false, 0, 0, 0},
	}
	for _, tt := range tests {
		s, ok := SplitForCompaction(tt.msgs, tt.keep)
		if ok != tt.ok || len(s.Head) != tt.head || len(s.Middle) != tt.middle || len(s.Tail) != tt.tailOK {
			t.Errorf("%s: ok=%t head=%d middle=%d tail=%d", tt.name, ok, len(s.Head), len(s.Middle), len(s.Tail))
		}
	}
}

func TestCompactedAlternates(t *testing.T) {
	s := Split{
		Head:   []Message{UserText("task")},
		Middle: []Message{AssistantText("a"), UserText("b")},
		Tail:   []Message{UserText("c"), AssistantText("d")},
	}
	out := s.Compacted("sum")
	if len(out) != 2 || out[0].Role != RoleUser || out[1].Role != RoleAssistant {
		t.Fatalf("Compacted = %+v", out)
	}
	want := []string{"task", SummaryPrefix + "sum", "c"}
	if got := texts(out[0]); !slices.Equal(got, want) {
		t.Errorf("merged user message %q, want %q", got, want)
	}
	if s.Head[0].Blocks[0].Text != "task" || len(s.Head[0].Blocks) != 1 {
		t.Error("Compacted modified the split")
	}
}

func TestRenderTranscript(t *testing.T) {
	msgs := []Message{
		{Role: RoleUser, Blocks: []Block{TextBlock("look"), {Kind: BlockImage}, {Kind: BlockDocument, Title: "Q3"}, {Kind: BlockDocument}}},
		{Role: RoleAssistant, Blocks: []Block{{Kind: BlockToolUse, ToolUseID: "t1", ToolName: "grep", ToolInput: []byte(`{}`)}}},
		{Role: RoleUser, Blocks: []Block{{Kind: BlockToolResult, ToolUseID: "t1", Text: "none"}, {Kind: BlockToolResult, ToolUseID: "t2", Text: "boom", IsError: true}}},
	}
	want := "user: look [image] [document \"Q3\"] [document]\n\nassistant: [tool call t1 grep: {}]\n\nuser: [tool result t1] none [tool error t2] boom"
	if got := RenderTranscript(msgs); got != want {
		t.Errorf("RenderTranscript =\n%s\nwant\n%s", got, want)
	}
}

func TestAppendMessage(t *testing.T) {
	msgs := appendMessage(nil, UserText("a"))
	msgs = appendMessage(msgs, AssistantText("")) // empty: dropped
	msgs = appendMessage(msgs, UserText("b"))     // same role: merged
	msgs = appendMessage(msgs, AssistantText("c"))
	if len(msgs) != 2 || !slices.Equal(texts(msgs[0]), []string{"a", "b"}) {
		t.Fatalf("appendMessage = %+v", msgs)
	}
}

func TestTokenBudgetPrompt(t *testing.T) {
	if got, want := TokenBudgetPrompt(4500, 10000), "Stopped at 45% of token target (4500 / 10000). Keep working — do not summarize."; got != want {
		t.Errorf("got %q", got)
	}
	if got := TokenBudgetPrompt(5, 0); !strings.HasPrefix(got, "Stopped at 0%") {
		t.Errorf("zero budget: %q", got)
	}
}

// TestMachineLeavesConfigAlone runs the paths that rewrite the conversation
// (collapse, image strip, compaction, continuation, tool turn) and checks
// that the caller's messages are untouched.
func TestMachineLeavesConfigAlone(t *testing.T) {
	big := strings.Repeat("x", 5000)
	msgs := []Message{
		{Role: RoleUser, Blocks: []Block{TextBlock("task"), {Kind: BlockImage, Data: []byte{1}}}},
		AssistantText(big), UserText("u2"), AssistantText("a2"), UserText("u3"), AssistantText("a3"),
		UserText("u4"), AssistantText("a4"), UserText("u5"),
	}
	before := clone(msgs)
	m := New(Config{Policy: DefaultPolicy(), Routes: []Route{{Name: "a"}}, Messages: msgs, Session: true})
	now := epoch
	steps := []Event{
		{Kind: EvAttemptFailed, Failure: &Failure{Kind: FailPromptTooLong}}, // collapse
		{Kind: EvAttemptFailed, Failure: &Failure{Kind: FailMedia}},         // strip
		{Kind: EvAttemptFailed, Failure: &Failure{Kind: FailPromptTooLong}}, // summarise
		{Kind: EvAttemptDone, StopReason: StopEndTurn, Text: "s"},           // the summary
		{Kind: EvAttemptDone, StopReason: StopMaxTokens, Text: "cut"},       // escalate
		{Kind: EvAttemptDone, StopReason: StopMaxTokens, Text: "cut"},       // continue
		{Kind: EvAttemptDone, StopReason: StopToolUse, ToolCalls: []ToolCall{{ID: "t"}}},
		{Kind: EvToolResults, Results: []Block{{Kind: BlockToolResult, ToolUseID: "t", Text: "r"}}},
		{Kind: EvAttemptDone, StopReason: StopEndTurn, Text: "end"},
	}
	m.Start(now)
	var st Step
	for _, ev := range steps {
		now = now.Add(time.Second)
		ev.Now = now
		st = m.Step(ev)
		if st.Action.Kind == ActCall {
			st.Action.Call.Messages[0] = UserText("driver scribbles on its copy")
		}
	}
	if st.Action.Kind != ActFinish || st.Action.Result.Reason != Completed {
		t.Fatalf("scenario ended with %+v", st)
	}
	if !reflect.DeepEqual(msgs, before) {
		t.Error("the machine modified Config.Messages")
	}
}

func clone(msgs []Message) []Message {
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		out[i] = Message{Role: m.Role, Blocks: slices.Clone(m.Blocks)}
	}
	return out
}

func texts(m Message) []string {
	var s []string
	for _, b := range m.Blocks {
		s = append(s, b.Text)
	}
	return s
}
