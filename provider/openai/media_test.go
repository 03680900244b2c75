package openai

import (
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// mediaRequest is a conversation whose wire indexes differ from its own:
// a system prompt first, a user message split into tool messages and its
// content, an assistant message that says nothing (left out), a prefill.
//
//	wire 0 system          —
//	wire 1 user            messages[0]: text, image a.png, image data, image b.png
//	wire 2 assistant       messages[1]
//	wire 3 tool            messages[2].content[0]
//	wire 4 user            messages[2]: text, image a.png (again)
//	(none)                 messages[3]: an assistant message of thinking only
//	wire 5 user            messages[4]: image c.jpg alone
//	wire 6 user            messages[5]: text alone, a string
//	wire 7 assistant       the prefill
func mediaRequest() *provider.Request {
	img := func(u string) recovery.Block { return recovery.Block{Kind: recovery.BlockImage, URL: u} }
	return &provider.Request{
		System:  "Be brief.",
		Prefill: "So",
		Messages: []recovery.Message{
			{Role: recovery.RoleUser, Blocks: []recovery.Block{recovery.TextBlock("Compare."),
				img("https://example.com/img/a.png"), {Kind: recovery.BlockImage, MediaType: "image/png", Data: []byte("x")},
				img("https://cdn.example.net/b.png?sig=1")}},
			{Role: recovery.RoleAssistant, Blocks: []recovery.Block{
				{Kind: recovery.BlockToolUse, ToolUseID: "call_1", ToolName: "zoom", ToolInput: []byte(`{}`)}}},
			{Role: recovery.RoleUser, Blocks: []recovery.Block{{Kind: recovery.BlockToolResult, ToolUseID: "call_1", Text: "zoomed"},
				recovery.TextBlock("And this?"), img("https://example.com/img/a.png")}},
			{Role: recovery.RoleAssistant, Blocks: []recovery.Block{{Kind: recovery.BlockThinking, Text: "hmm"}}},
			{Role: recovery.RoleUser, Blocks: []recovery.Block{img("https://other.example.org/c.jpg")}},
			recovery.UserText("Well?"),
		},
	}
}

func TestMediaBlocks(t *testing.T) {
	ref := func(m, b int) recovery.BlockRef { return recovery.BlockRef{Message: m, Block: b} }
	for _, tc := range []struct {
		name           string
		param, message string
		want           []recovery.BlockRef
	}{
		{"OpenAI's param path", "messages.[1].content.[1].image_url", "Invalid image.", []recovery.BlockRef{ref(0, 1)}},
		{"bracket path", "messages[1].content[2]", "Invalid image.", []recovery.BlockRef{ref(0, 2)}},
		{"dotted path", "messages.4.content.1.image_url.url", "Invalid image.", []recovery.BlockRef{ref(2, 2)}},
		{"a lone image is an array of one part", "messages[5].content[0]", "Invalid image.", []recovery.BlockRef{ref(4, 0)}},
		{"a message path names its images", "messages[1]", "Invalid image.", []recovery.BlockRef{ref(0, 1), ref(0, 2), ref(0, 3)}},
		{"a path in the message", "", "Invalid 'messages[4].content[1].image_url.url'. Expected a base64-encoded data URL.", []recovery.BlockRef{ref(2, 2)}},
		{"the param's path before the message's", "messages[5].content[0]", "Invalid 'messages[4]'.", []recovery.BlockRef{ref(4, 0)}},
		{"a path to a text part", "messages[1].content[0]", "Invalid image.", nil},
		{"a path to a string content", "messages[6].content[0]", "Invalid image.", nil},
		{"a path to a tool message", "messages[3].content[0]", "Invalid image.", nil},
		{"a path to the system prompt", "messages[0]", "Invalid image.", nil},
		{"a path to the prefill", "messages[7]", "Invalid image.", nil},
		{"a path past the end", "messages[8].content[0]", "Invalid image.", nil},
		{"a part past the end", "messages[1].content[4]", "Invalid image.", nil},
		{"a huge index", "messages[99999999999999999999].content[0]", "Invalid image.", nil},
		{"another URL ending in a file name", "", "Timeout while downloading https://elsewhere.example/c.jpg.", nil},
		{"a path in quotes", "", "Invalid image at 'messages[5].content[0]'.", []recovery.BlockRef{ref(4, 0)}},
		{"a URL that holds a path", "", "Timeout while downloading https://example.com/messages.1/a.png.", nil},
		{"a URL before a path in the message", "", "Invalid 'messages[1]': timeout while downloading https://other.example.org/c.jpg.", []recovery.BlockRef{ref(4, 0)}},
		{"a path to text, then a URL", "messages[1].content[0]", "Timeout while downloading https://other.example.org/c.jpg.", []recovery.BlockRef{ref(4, 0)}},
		{"timeout naming a URL", "", "Timeout while downloading https://other.example.org/c.jpg.", []recovery.BlockRef{ref(4, 0)}},
		{"error naming a URL with a query", "", "Error while downloading https://cdn.example.net/b.png?sig=1.", []recovery.BlockRef{ref(0, 3)}},
		{"a URL given twice names both", "", "Timeout while downloading https://example.com/img/a.png.", []recovery.BlockRef{ref(0, 1), ref(2, 2)}},
		{"a file name alone", "", "Timeout while downloading c.jpg.", []recovery.BlockRef{ref(4, 0)}},
		{"a file name in a sentence", "", "Failed to download image from b.png. Image size exceeds the limit.", []recovery.BlockRef{ref(0, 3)}},
		{"a longer URL is not the one named", "", "Timeout while downloading https://other.example.org/c.jpg.bak.", nil},
		{"a longer file name is not the one named", "", "Timeout while downloading xc.jpg.", nil},
		{"a URL another one begins with", "", "Error while downloading https://cdn.example.net/b.png?sig=12.", nil},
		{"nothing named", "", "Invalid image.", nil},
		{"null param, no message", "", "", nil},
		{"a param that is not a path", "image_url", "Invalid image.", nil},
		{"messages without an index", "messages", "Image URLs are only allowed for messages with role 'user'.", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mediaBlocks(mediaRequest(), errorFields{param: tc.param, message: tc.message})
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("media blocks %v, want %v", got, tc.want)
			}
		})
	}
}

func TestEventErrorFields(t *testing.T) {
	for _, tc := range []struct {
		data string
		want errorFields
	}{
		{`{"error":{"message":"Invalid image.","type":"invalid_request_error","param":"messages[1].content[0]","code":"invalid_image"}}`,
			errorFields{param: "messages[1].content[0]", message: "Invalid image."}},
		{`{"object":"error","message":"bad image","param":null,"code":400}`, errorFields{message: "bad image"}},
		{`{"error":"a string"}`, errorFields{}},
		{`{"error":{"message":7,"param":["messages[1]"]}}`, errorFields{}},
		{`not JSON`, errorFields{}},
	} {
		if got := eventErrorFields([]byte(tc.data)); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.data, got, tc.want)
		}
	}
}

// TestWireLayoutMatchesTheBody: the layout the failures' paths are read
// by is the body's, for every parity request and random ones.
func TestWireLayoutMatchesTheBody(t *testing.T) {
	p, _ := parityProvider(t, Config{APIKey: "sk"})
	reqs := parityRequests()
	reqs["media"] = mediaRequest()
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 200 {
		reqs["random "+strconv.Itoa(i)] = genRequest(rng, "Hello, world. é 😀", []byte(schema))
	}
	for name, req := range reqs {
		t.Run(name, func(t *testing.T) { checkLayout(t, p, req) })
	}
}

// checkLayout holds wireLayout to the body's messages: as many, each from
// the message it says, and each array of parts from the blocks it says.
func checkLayout(t *testing.T, p *Provider, req *provider.Request) {
	t.Helper()
	body, err := p.body(req)
	if err != nil {
		return
	}
	msgs := gjson.GetBytes(body, "messages").Array()
	layout := wireLayout(req)
	if len(msgs) != len(layout) {
		t.Fatalf("%d messages on the wire, layout %d: %s", len(msgs), len(layout), body)
	}
	for w, wm := range layout {
		if role := msgs[w].Get("role").Str; role != wireRole(req, wm, role) {
			t.Fatalf("wire message %d is a %s message, layout says message %d", w, role, wm.msg)
		}
		content := msgs[w].Get("content")
		if wm.msg < 0 || !content.IsArray() {
			if len(wm.parts) > 0 {
				t.Fatalf("wire message %d is not an array of parts: %s", w, msgs[w].Raw)
			}
			continue
		}
		parts := content.Array()
		if len(parts) != len(wm.parts) {
			t.Fatalf("wire message %d has %d parts, layout %d", w, len(parts), len(wm.parts))
		}
		for k, j := range wm.parts {
			b := req.Messages[wm.msg].Blocks[j]
			if isImage := parts[k].Get("type").Str == "image_url"; isImage != (b.Kind == recovery.BlockImage) {
				t.Fatalf("wire message %d part %d is %s, block %d of message %d is kind %d", w, k, parts[k].Raw, j, wm.msg, b.Kind)
			}
		}
	}
}

// wireRole is the role a wire message from wm must have (role, when either
// of two may be).
func wireRole(req *provider.Request, wm wireMessage, role string) string {
	switch {
	case wm.msg < 0 && (role == "system" || role == "assistant"):
		return role // the system prompt, the prefill
	case wm.msg < 0:
		return "system or assistant"
	case req.Messages[wm.msg].Role == recovery.RoleAssistant:
		return "assistant"
	case role == "tool" && len(wm.parts) == 0:
		return role
	}
	return "user"
}
