package openai

import (
	"errors"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"

	sdk "github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// When the upstream rejects an image (a FailMedia), the recovery machine
// strips the images it named (recovery.Failure.MediaBlocks) and retries,
// or every image when it named none. The upstream names an image in one of
// two ways: by a path into the body in the error's param or its message —
// "messages.[1].content.[0].image_url", "Invalid 'messages[3]'. …" — or by
// the image's URL in the message — "Timeout while downloading
// https://example.com/a.png.", and at times the URL's file name alone,
// "Timeout while downloading a.png.". A path counts in wire indexes, which
// the body's layout (wireLayout) maps back to the request's messages and
// blocks.

// errorFields are the parts of an upstream error that may name a block.
type errorFields struct {
	param, message string
}

// apiErrorFields reads them from the SDK's error of an error status (nil
// fields when the body was not the usual {"error": {…}}).
func apiErrorFields(err error) errorFields {
	var e *sdk.Error
	if !errors.As(err, &e) {
		return errorFields{}
	}
	return errorFields{param: e.Param, message: e.Message}
}

// eventErrorFields reads them from an error event inside the stream: the
// "error" object, or the top level (vLLM's older form).
func eventErrorFields(data []byte) errorFields {
	v := gjson.GetBytes(data, "error")
	if !v.IsObject() {
		v = gjson.ParseBytes(data)
	}
	f := errorFields{}
	if p := v.Get("param"); p.Type == gjson.String {
		f.param = p.Str
	}
	if m := v.Get("message"); m.Type == gjson.String {
		f.message = m.Str
	}
	return f
}

// locateMedia sets the MediaBlocks of a FailMedia failure from what the
// upstream's error names; any other error is returned as it is. A message
// that could not be read raw is taken from the failure (scrubbed).
func locateMedia(err error, req *provider.Request, fields errorFields) error {
	f, ok := provider.AsFailure(err)
	if !ok || f.Kind != recovery.FailMedia {
		return err
	}
	if fields.message == "" {
		fields.message = f.Message
	}
	f.MediaBlocks = mediaBlocks(req, fields)
	return err
}

// mediaBlocks are the request's media blocks the error names: by a path in
// its param, else by their URLs in its message, else by a path in its
// message (after the URLs, which may hold what looks like a path). Nothing
// identifiable is none.
func mediaBlocks(req *provider.Request, fields errorFields) []recovery.BlockRef {
	layout := wireLayout(req)
	if refs := byPath(req, layout, fields.param); len(refs) > 0 {
		return refs
	}
	if refs := byURL(req, fields.message); len(refs) > 0 {
		return refs
	}
	return byPath(req, layout, fields.message)
}

// wireMessage is where one message of the body came from: the request's
// message msg (-1 for the system prompt and the prefill) and, for a user
// message sent as an array of parts, the block each part came from.
type wireMessage struct {
	msg   int
	parts []int
}

// wireLayout is the body's messages, as Provider.body lays them out: the
// system prompt; for each message, a user message's tool results (a tool
// message each) and its content (a string for one text, else parts), or an
// assistant message unless it says nothing; the prefill.
func wireLayout(req *provider.Request) []wireMessage {
	var out []wireMessage
	if req.System != "" {
		out = append(out, wireMessage{msg: -1})
	}
	for i, m := range req.Messages {
		if m.Role == recovery.RoleAssistant {
			if assistantSays(m.Blocks) {
				out = append(out, wireMessage{msg: i})
			}
			continue
		}
		out = append(out, userLayout(i, m.Blocks)...)
	}
	if req.Prefill != "" {
		out = append(out, wireMessage{msg: -1})
	}
	return out
}

// assistantSays reports whether an assistant message goes on the wire:
// whether it holds text or a tool call.
func assistantSays(blocks []recovery.Block) bool {
	for _, b := range blocks {
		if b.Kind == recovery.BlockToolUse || b.Kind == recovery.BlockText && b.Text != "" {
			return true
		}
	}
	return false
}

// userLayout is the wire messages of user message i: a tool message per
// tool result, then its content, if any (appendMessage).
func userLayout(i int, blocks []recovery.Block) []wireMessage {
	var out []wireMessage
	var parts []int
	for j, b := range blocks {
		switch {
		case b.Kind == recovery.BlockToolResult:
			out = append(out, wireMessage{msg: i})
		case b.Kind == recovery.BlockImage, b.Kind == recovery.BlockText && b.Text != "":
			parts = append(parts, j)
		}
	}
	switch {
	case len(parts) == 1 && blocks[parts[0]].Kind == recovery.BlockText:
		out = append(out, wireMessage{msg: i}) // a plain string
	case len(parts) > 0:
		out = append(out, wireMessage{msg: i, parts: parts})
	}
	return out
}

// wirePath finds a path into the body's messages: messages[1].content[0],
// OpenAI's messages.[1].content.[0], or messages.1.content.0; the content
// index is optional. It starts the text or follows a space, a quote or an
// opening bracket, not a slash: a URL's path is no path into the body.
var wirePath = regexp.MustCompile(`(?:^|[\s'"` + "`" + `(\[])messages(?:\.?\[(\d+)\]|\.(\d+))(?:\.content(?:\.?\[(\d+)\]|\.(\d+)))?`)

// byPath is the media blocks at the first path s holds: the block a
// content index names, if it is a media block, or the media blocks of the
// message a path without one names.
func byPath(req *provider.Request, layout []wireMessage, s string) []recovery.BlockRef {
	m := wirePath.FindStringSubmatch(s)
	if m == nil {
		return nil
	}
	w, err := strconv.Atoi(m[1] + m[2])
	if err != nil || w >= len(layout) || layout[w].msg < 0 {
		return nil
	}
	part := -1 // every part
	if m[3]+m[4] != "" {
		if part, err = strconv.Atoi(m[3] + m[4]); err != nil {
			return nil
		}
	}
	wm := layout[w]
	blocks := req.Messages[wm.msg].Blocks
	var refs []recovery.BlockRef
	for k, j := range wm.parts {
		if (part < 0 || part == k) && isMedia(blocks[j]) {
			refs = append(refs, recovery.BlockRef{Message: wm.msg, Block: j})
		}
	}
	return refs
}

// byURL is the media blocks whose URL the message names, or, failing that,
// whose URL's file name it names.
func byURL(req *provider.Request, message string) []recovery.BlockRef {
	for _, key := range []func(string) string{wholeURL, fileName} {
		var refs []recovery.BlockRef
		for i, m := range req.Messages {
			for j, b := range m.Blocks {
				if k := key(b.URL); isMedia(b) && k != "" && names(message, k) {
					refs = append(refs, recovery.BlockRef{Message: i, Block: j})
				}
			}
		}
		if len(refs) > 0 {
			return refs
		}
	}
	return nil
}

// wholeURL is a URL as it is.
func wholeURL(u string) string { return u }

// fileName is the last segment of a URL's path ("" for none): OpenAI names
// some images it could not fetch by it alone.
func fileName(u string) string {
	parsed, err := url.Parse(u)
	if err != nil || parsed.Path == "" {
		return ""
	}
	base := path.Base(parsed.Path)
	if base == "/" || base == "." {
		return ""
	}
	return base
}

// isMedia reports whether a block is one an upstream may reject as media.
func isMedia(b recovery.Block) bool {
	return b.Kind == recovery.BlockImage || b.Kind == recovery.BlockDocument
}

// names reports whether text holds s as a whole token: after the start, a
// space, a quote or an opening bracket, and before the end, a space, a
// quote, a closing bracket, a comma, or a full stop or colon that ends the
// sentence — so that a.png is taken neither for xa.png, a.png?x=1 nor the
// end of another URL, https://example.com/x/a.png.
func names(text, s string) bool {
	for from := 0; ; {
		i := strings.Index(text[from:], s)
		if i < 0 {
			return false
		}
		i += from
		if leftEdge(text, i) && rightEdge(text[i+len(s):]) {
			return true
		}
		from = i + 1
	}
}

func leftEdge(text string, i int) bool {
	return i == 0 || strings.IndexByte(" \t\n\"'`([<", text[i-1]) >= 0
}

func rightEdge(rest string) bool {
	switch {
	case rest == "":
		return true
	case strings.IndexByte(" \t\n\"'`)]>,;", rest[0]) >= 0:
		return true
	case strings.IndexByte(".:!?", rest[0]) >= 0:
		return len(rest) == 1 || strings.IndexByte(" \t\n\"'", rest[1]) >= 0
	}
	return false
}
