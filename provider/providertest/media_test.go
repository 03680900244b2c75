package providertest

import (
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
)

// anthropicMedia is a Messages body whose second message holds a text, an
// image given as data, a document given as data, an image by URL and a
// document by URL: messages.1.content.1 to .4.
func anthropicMedia(image, pdf []byte) string {
	b64 := func(mt string, data []byte) map[string]any {
		return map[string]any{"type": "base64", "media_type": mt, "data": base64.StdEncoding.EncodeToString(data)}
	}
	url := func(u string) map[string]any { return map[string]any{"type": "url", "url": u} }
	return mustJSON(map[string]any{"model": "claude-x", "max_tokens": 16, "stream": true, "messages": []any{
		map[string]any{"role": "user", "content": "Look."},
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "These:"},
			map[string]any{"type": "image", "source": b64("image/png", image)},
			map[string]any{"type": "document", "source": b64("application/pdf", pdf)},
			map[string]any{"type": "image", "source": url("https://example.com/cat.png")},
			map[string]any{"type": "document", "source": url("https://example.com/doc.pdf")},
		}},
	}})
}

// openaiMedia is a Chat Completions body whose first message holds a
// text, an image as a data: URL and an image by URL: messages.0.content.1
// and .2.
func openaiMedia(image []byte) string {
	part := func(u string) map[string]any {
		return map[string]any{"type": "image_url", "image_url": map[string]any{"url": u}}
	}
	return mustJSON(map[string]any{"model": "gpt-x", "stream": true, "messages": []any{
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "These:"},
			part("data:image/png;base64," + base64.StdEncoding.EncodeToString(image)),
			part("https://example.com/cat.png"),
		}},
	}})
}

func TestRejectMedia(t *testing.T) {
	const anthropicErr = `{"type":"error","error":{"type":"invalid_request_error","message":%q},"request_id":"req_test_0001"}`
	small, big := []byte("PNG small"), []byte(strings.Repeat("x", imageLimit)) // big's base64 is over 5 MB
	bigB64 := base64.StdEncoding.EncodedLen(len(big))
	for _, tc := range []struct {
		name string
		s    func(testing.TB, Script) *Server
		path string
		body string
		rule MediaRule
		want string // the error body; empty when the request is answered
	}{
		{"anthropic: an image over 5 MB", NewAnthropic, "/v1/messages", anthropicMedia(big, small), MediaRule{Over: imageLimit},
			`messages.1.content.1.image.source.base64: image exceeds 5 MB maximum: ` + strconv.Itoa(bigB64) + ` bytes > 5242880 bytes`},
		{"anthropic: none over the size", NewAnthropic, "/v1/messages", anthropicMedia(small, small), MediaRule{Over: imageLimit}, ""},
		{"anthropic: an image under the API's limit, over the rule's", NewAnthropic, "/v1/messages", anthropicMedia(small, small), MediaRule{Over: 4},
			`messages.1.content.1.image.source.base64: image exceeds 5 MB maximum: 5316852 bytes > 5242880 bytes`},
		{"anthropic: a marker in a document's data", NewAnthropic, "/v1/messages", anthropicMedia(small, []byte("%PDF REJECT")), MediaRule{Marker: "REJECT"},
			`messages.1.content.2.document.source.base64.data: The PDF specified was not valid.`},
		{"anthropic: a marker in an image's URL", NewAnthropic, "/v1/messages", anthropicMedia(small, small), MediaRule{Marker: "cat"},
			`messages.1.content.3.image.source.url: Unable to download the file. Please verify the URL and try again.`},
		{"anthropic: a document by URL at a path", NewAnthropic, "/v1/messages", anthropicMedia(small, small), MediaRule{Path: "messages.1.content.4"},
			`messages.1.content.4.document.source.url: Unable to download the file. Please verify the URL and try again.`},
		{"anthropic: a path that is no media block", NewAnthropic, "/v1/messages", anthropicMedia(small, small), MediaRule{Path: "messages.1.content.0"}, ""},
		{"anthropic: the first block picked", NewAnthropic, "/v1/messages", anthropicMedia([]byte("REJECT"), []byte("REJECT")), MediaRule{Marker: "REJECT"},
			`messages.1.content.1.image.source.base64: image exceeds 5 MB maximum: 5316852 bytes > 5242880 bytes`},
		{"openai: an image as data", NewOpenAI, "/v1/chat/completions", openaiMedia([]byte("REJECT")), MediaRule{Marker: "REJECT"},
			`{"error":{"message":"Invalid image.","type":"invalid_request_error","param":null,"code":"invalid_image"}}`},
		{"openai: an image by URL", NewOpenAI, "/v1/chat/completions", openaiMedia(small), MediaRule{Path: "messages.0.content.2"},
			`{"error":{"message":"Error while downloading https://example.com/cat.png.","type":"invalid_request_error","param":null,"code":"invalid_image_url"}}`},
		{"openai: none picked", NewOpenAI, "/v1/chat/completions", openaiMedia(small), MediaRule{Over: 1 << 20}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s(t, Always(RejectMedia(tc.rule, OK(Text("ok")))))
			res, got, err := post(t, s, tc.path, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if res.StatusCode != 200 || !strings.Contains(got, `"ok"`) {
					t.Errorf("status %d, body %s; want the answer", res.StatusCode, got)
				}
				return
			}
			want := tc.want
			if !strings.HasPrefix(want, "{") {
				want = strings.Replace(anthropicErr, "%q", mustJSON(want), 1)
				if res.Header.Get("x-should-retry") != "false" {
					t.Errorf("x-should-retry %q, want false", res.Header.Get("x-should-retry"))
				}
			}
			if res.StatusCode != 400 {
				t.Errorf("status %d, want 400", res.StatusCode)
			}
			AssertJSON(t, []byte(got), want)
		})
	}
}
