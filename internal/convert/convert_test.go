package convert

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/recovery"
)

// TestEveryReasonHasItsName checks that every reason of the machine
// reaches the wire as the value of the same name.
func TestEveryReasonHasItsName(t *testing.T) {
	for _, r := range recovery.AllReasons() {
		got := FromReason(r)
		if got.String() != "TRANSITION_REASON_"+r.String() {
			t.Errorf("FromReason(%v) = %v", r, got)
		}
	}
}

// TestEveryFailureKindIsMapped checks that every failure kind up to the
// last has an error kind, and only FailUnknown the unspecified one.
func TestEveryFailureKindIsMapped(t *testing.T) {
	for k := recovery.FailUnknown; k <= recovery.FailReplicaLost; k++ {
		got, ok := errorKinds[k]
		if !ok {
			t.Errorf("failure kind %v has no error kind", k)
		}
		if (got == completionv1.ErrorKind_ERROR_KIND_UNSPECIFIED) != (k == recovery.FailUnknown) {
			t.Errorf("failure kind %v maps to %v", k, got)
		}
	}
}

func TestVerdicts(t *testing.T) {
	tests := []struct {
		in   completionv1.Verdict
		want recovery.Verdict
	}{
		{completionv1.Verdict_VERDICT_ALLOW, recovery.VerdictAllow},
		{completionv1.Verdict_VERDICT_BLOCK, recovery.VerdictBlock},
		{completionv1.Verdict_VERDICT_PREVENT, recovery.VerdictPrevent},
		{completionv1.Verdict_VERDICT_UNSPECIFIED, 0},
		{completionv1.Verdict(99), 0},
	}
	for _, tt := range tests {
		if got := ToVerdict(tt.in); got != tt.want {
			t.Errorf("ToVerdict(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestToolArguments(t *testing.T) {
	tests := []struct {
		name, raw, want string
	}{
		{"object", `{"city":"Paris"}`, `"city":"Paris"`},
		{"not an object", `["a"]`, `"_raw":"[\"a\"]"`},
		{"malformed", `{"city":`, `"_raw":"{\"city\":"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromToolCall(recovery.ToolCall{ID: "c1", Name: "f", Input: []byte(tt.raw)}).GetInput().MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if s := strings.ReplaceAll(string(got), " ", ""); !strings.Contains(s, tt.want) {
				t.Errorf("input = %s, want it to hold %s", s, tt.want)
			}
		})
	}
}

func TestToolSchemas(t *testing.T) {
	schema, _ := structpb.NewStruct(map[string]any{"type": "object"})
	tools := ToTools([]*completionv1.Tool{{Name: "a"}, {Name: "b", InputSchema: schema}})
	if string(tools[0].InputSchema) != "{}" {
		t.Errorf("a tool without a schema has %s, want {}", tools[0].InputSchema)
	}
	if s := strings.ReplaceAll(string(tools[1].InputSchema), " ", ""); s != `{"type":"object"}` {
		t.Errorf("schema = %s", s)
	}
}

// TestMessagesRoundTrip checks that every block the wire carries, media
// given by data or URL and the caller's cache marks included, reaches the
// machine and comes back unchanged (FromMessage writes transcripts).
func TestMessagesRoundTrip(t *testing.T) {
	input, _ := structpb.NewStruct(map[string]any{"q": "x"})
	block := func(b *completionv1.ContentBlock, mark bool) *completionv1.ContentBlock {
		b.CacheBreakpoint = mark
		return b
	}
	tests := []struct {
		name string
		in   *completionv1.ContentBlock
		want recovery.Block
	}{
		{"text", TextBlock("hi"), recovery.TextBlock("hi")},
		{"marked text", block(TextBlock("hi"), true), recovery.Block{Kind: recovery.BlockText, Text: "hi", CacheBreakpoint: true}},
		{"inline image", &completionv1.ContentBlock{Block: &completionv1.ContentBlock_Image{
			Image: &completionv1.ImageBlock{MediaType: "image/png", Data: []byte{1, 2}}}},
			recovery.Block{Kind: recovery.BlockImage, MediaType: "image/png", Data: []byte{1, 2}}},
		{"URL image", &completionv1.ContentBlock{Block: &completionv1.ContentBlock_Image{
			Image: &completionv1.ImageBlock{Url: "https://example.com/a.png"}}},
			recovery.Block{Kind: recovery.BlockImage, URL: "https://example.com/a.png"}},
		{"inline document, marked", block(&completionv1.ContentBlock{Block: &completionv1.ContentBlock_Document{
			Document: &completionv1.DocumentBlock{MediaType: "application/pdf", Data: []byte("%PDF"), Title: "Q3"}}}, true),
			recovery.Block{Kind: recovery.BlockDocument, MediaType: "application/pdf", Data: []byte("%PDF"), Title: "Q3", CacheBreakpoint: true}},
		{"URL document", &completionv1.ContentBlock{Block: &completionv1.ContentBlock_Document{
			Document: &completionv1.DocumentBlock{Url: "https://example.com/a.pdf"}}},
			recovery.Block{Kind: recovery.BlockDocument, URL: "https://example.com/a.pdf"}},
		{"tool use", &completionv1.ContentBlock{Block: &completionv1.ContentBlock_ToolUse{
			ToolUse: &completionv1.ToolUseBlock{Id: "t1", Name: "f", Input: input}}},
			recovery.Block{Kind: recovery.BlockToolUse, ToolUseID: "t1", ToolName: "f", ToolInput: []byte(`{"q":"x"}`)}},
		{"marked tool result", block(&completionv1.ContentBlock{Block: &completionv1.ContentBlock_ToolResult{
			ToolResult: &completionv1.ToolResultBlock{ToolUseId: "t1", Text: "r", IsError: true}}}, true),
			recovery.Block{Kind: recovery.BlockToolResult, ToolUseID: "t1", Text: "r", IsError: true, CacheBreakpoint: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := &completionv1.Message{Role: completionv1.Role_ROLE_USER, Content: []*completionv1.ContentBlock{tt.in}}
			msgs := ToMessages([]*completionv1.Message{in})
			got := msgs[0].Blocks[0]
			if got.ToolInput != nil { // structpb's JSON spacing is its own
				got.ToolInput = []byte(strings.ReplaceAll(string(got.ToolInput), " ", ""))
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ToMessages = %+v, want %+v", got, tt.want)
			}
			if back := FromMessage(msgs[0]); !proto.Equal(back, in) {
				t.Errorf("FromMessage = %v, want %v", back, in)
			}
		})
	}
}

// TestFromMessageLeavesThinkingOut: the wire's messages carry no thinking.
// TestThinkingRoundTrip: a thinking block, plain or redacted, goes to the
// wire with the model that signed it and comes back the same; the result's
// message carries the answer's thinking before its text.
func TestThinkingRoundTrip(t *testing.T) {
	m := recovery.Message{Role: recovery.RoleAssistant, Blocks: []recovery.Block{
		{Kind: recovery.BlockThinking, Text: "hmm", Signature: "s", Model: "claude-a"},
		{Kind: recovery.BlockThinking, Data: []byte("opaque"), Redacted: true, Model: "claude-a"},
		recovery.TextBlock("answer")}}
	wire := FromMessage(m)
	want := &completionv1.Message{Role: completionv1.Role_ROLE_ASSISTANT, Content: []*completionv1.ContentBlock{
		{Block: &completionv1.ContentBlock_Thinking{Thinking: &completionv1.ThinkingBlock{Thinking: "hmm", Signature: "s", Model: "claude-a"}}},
		{Block: &completionv1.ContentBlock_Thinking{Thinking: &completionv1.ThinkingBlock{RedactedData: []byte("opaque"), Model: "claude-a"}}},
		TextBlock("answer")}}
	if !proto.Equal(wire, want) {
		t.Errorf("FromMessage = %v, want %v", wire, want)
	}
	if back := ToMessages([]*completionv1.Message{wire}); !reflect.DeepEqual(back[0], m) {
		t.Errorf("ToMessages(FromMessage(m)) = %+v, want %+v", back[0], m)
	}
	res := FromResult(&recovery.Result{Text: "answer", Thinking: m.Blocks[:2]})
	if !proto.Equal(res.GetMessage(), want) {
		t.Errorf("FromResult's message = %v, want %v", res.GetMessage(), want)
	}
}

func TestToolCacheBreakpoint(t *testing.T) {
	tools := ToTools([]*completionv1.Tool{{Name: "a"}, {Name: "b", CacheBreakpoint: true}})
	if tools[0].CacheBreakpoint || !tools[1].CacheBreakpoint {
		t.Errorf("cache marks = %t, %t; want false, true", tools[0].CacheBreakpoint, tools[1].CacheBreakpoint)
	}
}

func TestStrippedBlocks(t *testing.T) {
	refs := func(n int) []recovery.BlockRef {
		var rs []recovery.BlockRef
		for i := range n {
			rs = append(rs, recovery.BlockRef{Message: i / 2, Block: i % 2})
		}
		return rs
	}
	tests := []struct {
		name  string
		in    []recovery.BlockRef
		count int
		last  string
	}{
		{"none", nil, 0, ""},
		{"one", []recovery.BlockRef{{Message: 0, Block: 1}}, 1, "messages[0].content[1]"},
		{"at the bound", refs(MaxStrippedBlocks), MaxStrippedBlocks, "messages[7].content[1]"},
		{"past the bound: the first 16", refs(40), MaxStrippedBlocks, "messages[7].content[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FromTransition(recovery.Transition{Reason: recovery.ReactiveCompactRetry, Stripped: tt.in}).GetStrippedBlocks()
			if len(got) != tt.count {
				t.Fatalf("stripped_blocks = %v, want %d of them", got, tt.count)
			}
			if tt.count > 0 && got[len(got)-1] != tt.last {
				t.Errorf("last stripped block %q, want %q", got[len(got)-1], tt.last)
			}
		})
	}
}
