package anthropic_test

import (
	"encoding/json"
	"reflect"
	"testing"

	pt "github.com/completiond/completiond/provider/providertest"
	"github.com/completiond/completiond/recovery"
)

// rejection is Anthropic's 400 refusing a request, as the API sends it.
func rejection(message string) pt.Reply {
	body, err := json.Marshal(map[string]any{
		"type":       "error",
		"error":      map[string]any{"type": "invalid_request_error", "message": message},
		"request_id": "req_011CVbVqGFK6rUcXh9PFbZ1p",
	})
	if err != nil {
		panic(err)
	}
	return pt.Reply{Status: 400, Body: string(body)}.With("x-should-retry", "false")
}

// TestRejectedMediaBlocksAreNamed: a rejection of a media block names it by
// its path on the wire; the failure names it as an index into the
// request's messages, wherever the two differ.
func TestRejectedMediaBlocksAreNamed(t *testing.T) {
	user := func(blocks ...recovery.Block) recovery.Message {
		return recovery.Message{Role: recovery.RoleUser, Blocks: blocks}
	}
	assistant := func(blocks ...recovery.Block) recovery.Message {
		return recovery.Message{Role: recovery.RoleAssistant, Blocks: blocks}
	}
	text := recovery.TextBlock
	image := recovery.Block{Kind: recovery.BlockImage, MediaType: "image/jpeg", Data: []byte("\x89PNG")}
	byURL := recovery.Block{Kind: recovery.BlockImage, URL: "https://example.com/cat.png"}
	pdf := recovery.Block{Kind: recovery.BlockDocument, MediaType: "application/pdf", Data: []byte("%PDF"), Title: "Q3"}
	const (
		tooLarge = "image exceeds 5 MB maximum: 5316852 bytes > 5242880 bytes"
		mismatch = "The image was specified using the image/jpeg media type, but the image appears to be a image/png image"
		badPDF   = "The PDF specified was not valid."
	)
	ref := func(m, b int) recovery.BlockRef { return recovery.BlockRef{Message: m, Block: b} }
	for _, tc := range []struct {
		name    string
		msgs    []recovery.Message
		prefill string
		message string
		want    []recovery.BlockRef
	}{
		{name: "as sent", msgs: []recovery.Message{user(text("What is it?"), image)},
			message: "messages.0.content.1.image.source.base64: " + tooLarge, want: []recovery.BlockRef{ref(0, 1)}},
		{name: "after an empty text block", msgs: []recovery.Message{user(text(""), image, text("What is it?"))},
			message: "messages.0.content.0.image.source.base64: " + tooLarge, want: []recovery.BlockRef{ref(0, 1)}},
		{name: "after a message that says nothing",
			msgs: []recovery.Message{user(text("Look."), image), assistant(text("")), user(text("Seen?")),
				assistant(text("Yes.")), user(text(""), text("And this?"), image)},
			message: "messages.3.content.1.image.source.base64.data: " + mismatch, want: []recovery.BlockRef{ref(4, 2)}},
		{name: "a document", msgs: []recovery.Message{user(text("a")), assistant(text("b")), user(text("")), user(text("c"), text("d"), text(""), text("e"), pdf)},
			message: "messages.2.content.3.document.source.base64.data: " + badPDF, want: []recovery.BlockRef{ref(3, 4)}},
		{name: "an image by URL", msgs: []recovery.Message{user(byURL, text("What is it?"))},
			message: "messages.0.content.0.image.source.url: Unable to download the file. Please verify the URL and try again.",
			want:    []recovery.BlockRef{ref(0, 0)}},
		{name: "several, each once, in the order named",
			msgs:    []recovery.Message{user(image, text("and"), pdf), assistant(text("Hm.")), user(byURL)},
			message: "messages.2.content.0.image.source.url: x; messages.0.content.2.document.source.base64.data: y; messages.2.content.0.image.source.url: z",
			want:    []recovery.BlockRef{ref(2, 0), ref(0, 2)}},
		{name: "before a final assistant message left out",
			msgs:    []recovery.Message{user(text("What is it?"), image), assistant(text(" \n"))},
			message: "messages.0.content.1.image.source.base64: " + tooLarge, want: []recovery.BlockRef{ref(0, 1)}},
		{name: "before a prefill", msgs: []recovery.Message{user(text("What is it?"), image)}, prefill: "It is ",
			message: "messages.0.content.1.image.source.base64: " + tooLarge, want: []recovery.BlockRef{ref(0, 1)}},
		{name: "the prefill's path is no request block", msgs: []recovery.Message{user(image)}, prefill: "It is",
			message: "messages.1.content.0.image.source.base64: " + tooLarge},
		{name: "a text block is no media block", msgs: []recovery.Message{user(text("What is it?"), image)},
			message: "messages.0.content.0.image.source.base64: " + tooLarge},
		{name: "out of range", msgs: []recovery.Message{user(image)},
			message: "messages.7.content.0.image.source.base64: " + tooLarge + "; messages.0.content.99999999999999999999.image.source: x"},
		{name: "no path", msgs: []recovery.Message{user(image)}, message: "Could not process image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := newRequest()
			req.Messages, req.Prefill = tc.msgs, tc.prefill
			r, srv := run(t, pt.Always(rejection(tc.message)), req)
			f := r.Failure(t)
			if f.Kind != recovery.FailMedia || f.HTTPStatus != 400 {
				t.Fatalf("failure %+v, want a media failure", f)
			}
			if !reflect.DeepEqual(f.MediaBlocks, tc.want) {
				t.Errorf("media blocks %v, want %v", f.MediaBlocks, tc.want)
			}
			for _, ref := range f.MediaBlocks { // the test's own check: the wire path was the block's
				if k := req.Messages[ref.Message].Blocks[ref.Block].Kind; k != recovery.BlockImage && k != recovery.BlockDocument {
					t.Errorf("%v is a block of kind %d", ref, k)
				}
			}
			if srv.Count() != 1 {
				t.Errorf("%d calls", srv.Count())
			}
		})
	}
}

// TestOtherRejectionsNameNoMediaBlock: a path in a failure that is not a
// media one names no media block.
func TestOtherRejectionsNameNoMediaBlock(t *testing.T) {
	req := newRequest()
	req.Messages = []recovery.Message{{Role: recovery.RoleUser, Blocks: []recovery.Block{
		{Kind: recovery.BlockImage, MediaType: "image/png", Data: []byte("x")}}}}
	r, _ := run(t, pt.Always(rejection("messages.0.content.0: Invalid `signature` in `thinking` block")), req)
	if f := r.Failure(t); f.Kind != recovery.FailInvalidRequest || f.MediaBlocks != nil {
		t.Errorf("failure %+v", f)
	}
}
