package anthropic

import (
	"regexp"
	"slices"
	"strconv"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// blockPath is a block's path in the API's words, as a 400 names the block
// it rejected: "messages.0.content.1.image.source.base64: image exceeds 5 MB
// maximum: …".
var blockPath = regexp.MustCompile(`messages\.(\d+)\.content\.(\d+)`)

// mediaBlocks are the request's media blocks (images, documents) that msg,
// a rejection's message, names by their paths on the wire, each once, in
// the order named; nil when it names none. The body's indexes are not the
// request's — a message or a block that says nothing is not sent, the
// caller's final assistant message may be left out, a prefill adds a
// message — so each path is mapped back through what was sent; one that
// points at no media block of the request (the prefill's, a text block) is
// dropped.
func mediaBlocks(req *provider.Request, msg string) []recovery.BlockRef {
	paths := blockPath.FindAllStringSubmatch(msg, -1)
	if len(paths) == 0 {
		return nil
	}
	media := map[recovery.BlockRef]recovery.BlockRef{} // the request's media blocks by their wire paths
	conversationOf(req).each(func(at, wire recovery.BlockRef, blk recovery.Block, _ bool) {
		if blk.Kind == recovery.BlockImage || blk.Kind == recovery.BlockDocument {
			media[wire] = at
		}
	})
	var refs []recovery.BlockRef
	for _, p := range paths {
		n, errN := strconv.Atoi(p[1])
		k, errK := strconv.Atoi(p[2])
		at, ok := media[recovery.BlockRef{Message: n, Block: k}]
		if errN == nil && errK == nil && ok && !slices.Contains(refs, at) {
			refs = append(refs, at)
		}
	}
	return refs
}

// withMediaBlocks sets the MediaBlocks of a FailMedia, err, from its
// message; any other error is returned as it is.
func withMediaBlocks(req *provider.Request, err error) error {
	if f, ok := provider.AsFailure(err); ok && f.Kind == recovery.FailMedia {
		f.MediaBlocks = mediaBlocks(req, f.Message)
	}
	return err
}
