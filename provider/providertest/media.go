package providertest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// MediaRule picks the media blocks of a request that the server rejects
// (Reply.Media): a block any of its set fields picks is rejected. The
// server looks at the body as the API does — the blocks of each message's
// content, in order — and rejects the first block picked with the
// provider's own 400, which names it by its place in the body (its wire
// indexes, which need not be the conversation's: a provider leaves empty
// blocks and messages out).
//
// On Anthropic's wire the media blocks are the content blocks of type
// image and document, given by base64 data or by URL; on OpenAI's the
// image_url parts, a data: URL or a URL to download (its file parts are
// not media here).
type MediaRule struct {
	// Over picks a block given as base64 data longer than Over bytes of
	// base64 text (what Anthropic measures against its 5 MB limit); 0
	// picks none by size.
	Over int
	// Marker picks a block whose data — decoded, or as its base64 text —
	// or URL contains Marker.
	Marker string
	// Path picks the block at this place in the body:
	// messages.N.content.M.
	Path string
}

// RejectMedia is r, whose server first rejects a request that has a media
// block rule picks, with the provider's error for that block:
//
//   - Anthropic, an image as base64: 400 invalid_request_error
//     "messages.N.content.M.image.source.base64: image exceeds 5 MB
//     maximum: S bytes > 5242880 bytes", S the base64 text's length, or
//     5316852 for a block rule picks under the API's limit (the API's
//     words for a block just over it);
//   - Anthropic, a document as base64:
//     "messages.N.content.M.document.source.base64.data: The PDF
//     specified was not valid.";
//   - Anthropic, either by URL: "messages.N.content.M.image.source.url
//     (document.source.url): Unable to download the file. Please verify
//     the URL and try again.";
//   - OpenAI, an image as a data: URL: 400 {"message":"Invalid image.",
//     "type":"invalid_request_error","param":null,"code":"invalid_image"};
//   - OpenAI, an image by URL: "Error while downloading <url>.", code
//     invalid_image_url.
//
// A request with no such block gets r.
func RejectMedia(rule MediaRule, r Reply) Reply {
	r.Media = rule
	return r
}

// imageLimit is Anthropic's limit on an image's base64 text, and
// overLimit the size its rejection states for a block picked under it.
const (
	imageLimit = 5 << 20
	overLimit  = 5316852
)

// media is one media block of a request.
type media struct {
	path string // messages.N.content.M
	kind string // image, document
	// data is the base64 text of a block given as data; url the URL of
	// one given by URL.
	data, url string
}

// picks reports whether r picks m.
func (r MediaRule) picks(m media) bool {
	switch {
	case r.Path != "" && m.path == r.Path:
		return true
	case r.Over > 0 && m.url == "" && len(m.data) > r.Over:
		return true
	case r.Marker == "":
		return false
	case m.url != "":
		return strings.Contains(m.url, r.Marker)
	case strings.Contains(m.data, r.Marker):
		return true
	}
	decoded, err := base64.StdEncoding.DecodeString(m.data)
	return err == nil && strings.Contains(string(decoded), r.Marker)
}

// first is the first media block of msgs that r picks.
func (r MediaRule) first(msgs []media) (media, bool) {
	for _, m := range msgs {
		if r.picks(m) {
			return m, true
		}
	}
	return media{}, false
}

// contents are the content arrays of a body's messages (nil for a string
// content, which holds no media).
func contents(body []byte) [][]json.RawMessage {
	var req struct {
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil {
		return nil
	}
	out := make([][]json.RawMessage, len(req.Messages))
	for i, m := range req.Messages {
		_ = json.Unmarshal(m.Content, &out[i]) // a string content is no array
	}
	return out
}

// blockPath is messages.i.content.j.
func blockPath(i, j int) string {
	return "messages." + strconv.Itoa(i) + ".content." + strconv.Itoa(j)
}

// rejectMedia is the API's error for the first media block of the body
// rule picks, or nil.
func (anthropicWire) rejectMedia(body []byte, rule MediaRule) *APIError {
	var blocks []media
	for i, content := range contents(body) {
		for j, raw := range content {
			var b struct {
				Type   string `json:"type"`
				Source struct {
					Type string `json:"type"`
					Data string `json:"data"`
					URL  string `json:"url"`
				} `json:"source"`
			}
			if json.Unmarshal(raw, &b) != nil || (b.Type != "image" && b.Type != "document") {
				continue
			}
			m := media{path: blockPath(i, j), kind: b.Type, data: b.Source.Data}
			if b.Source.Type == "url" {
				m.url = b.Source.URL
			}
			blocks = append(blocks, m)
		}
	}
	m, ok := rule.first(blocks)
	if !ok {
		return nil
	}
	var msg string
	switch {
	case m.url != "":
		msg = m.path + "." + m.kind + ".source.url: Unable to download the file. Please verify the URL and try again."
	case m.kind == "document":
		msg = m.path + ".document.source.base64.data: The PDF specified was not valid."
	default:
		size := len(m.data)
		if size <= imageLimit {
			size = overLimit
		}
		msg = fmt.Sprintf("%s.image.source.base64: image exceeds 5 MB maximum: %d bytes > %d bytes", m.path, size, imageLimit)
	}
	return &APIError{Status: 400, Type: "invalid_request_error", Header: noRetry, Message: msg}
}

// rejectMedia is the API's error for the first image of the body rule
// picks, or nil.
func (openaiWire) rejectMedia(body []byte, rule MediaRule) *APIError {
	var blocks []media
	for i, content := range contents(body) {
		for j, raw := range content {
			var p struct {
				Type  string `json:"type"`
				Image struct {
					URL string `json:"url"`
				} `json:"image_url"`
			}
			if json.Unmarshal(raw, &p) != nil || p.Type != "image_url" {
				continue
			}
			m := media{path: blockPath(i, j), kind: "image", url: p.Image.URL}
			if rest, ok := strings.CutPrefix(p.Image.URL, "data:"); ok {
				_, data, _ := strings.Cut(rest, ",") // data:image/png;base64,<data>
				m.url, m.data = "", data
			}
			blocks = append(blocks, m)
		}
	}
	m, ok := rule.first(blocks)
	switch {
	case !ok:
		return nil
	case m.url != "":
		return &APIError{Status: 400, Type: "invalid_request_error", Code: "invalid_image_url",
			Message: "Error while downloading " + m.url + "."}
	}
	return &APIError{Status: 400, Type: "invalid_request_error", Code: "invalid_image", Message: "Invalid image."}
}
