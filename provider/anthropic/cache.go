package anthropic

import (
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// cacheControl is a prompt cache breakpoint on the wire, as the SDK encodes
// CacheControlEphemeralParam (no ttl: the API's default, 5 minutes).
const cacheControl = `,"cache_control":{"type":"ephemeral"}`

// maxCacheMarks is the most cache breakpoints the API takes in one request:
// a request with more is refused.
const maxCacheMarks = 4

// cacheMarks says where the body puts its prompt cache breakpoints. The
// driver sends at most maxCacheMarks; should more come, the first ones in
// the prompt's order (tools, system, messages) are left out: a later
// breakpoint caches a longer prefix, the earlier ones' included.
type cacheMarks struct {
	// system marks the system prompt.
	system bool
	// lastTool marks the last tool with the system's mark when there is no
	// system prompt: the prefix it ends is the same.
	lastTool bool
	// skipTools and skipBlocks are how many of the tools' marks and the
	// blocks' marks, the first ones, are left out.
	skipTools, skipBlocks int
}

// planMarks is where the request's marks go, and which are left out;
// declared are the tools it declares (declaredTools).
func planMarks(req *provider.Request, declared []provider.Tool) cacheMarks {
	var m cacheMarks
	if req.CacheSystem {
		m.system = req.System != ""
		m.lastTool = !m.system && len(declared) > 0
	}
	tools := 0
	for i := range declared {
		if m.tool(declared, i) {
			tools++
		}
	}
	blocks := 0
	conversationOf(req).each(func(_, _ recovery.BlockRef, _ recovery.Block, mark bool) {
		if mark {
			blocks++
		}
	})
	over := tools + blocks - maxCacheMarks
	if m.system {
		over++
	}
	m.skipTools = min(max(over, 0), tools)
	over -= m.skipTools
	if over > 0 && m.system {
		m.system = false
		over--
	}
	m.skipBlocks = max(over, 0)
	return m
}

// tool reports whether tools[i] is marked, before the limit: its own mark,
// or the system's on the last tool.
func (m *cacheMarks) tool(tools []provider.Tool, i int) bool {
	return tools[i].CacheBreakpoint || (m.lastTool && i == len(tools)-1)
}

// marked reports whether a block that is sent carries a cache mark, before
// the limit: its own, or extra, one moved onto it (see trimFinal). A
// thinking block never does: the API takes none on it.
func marked(blk recovery.Block, extra bool) bool {
	return (blk.CacheBreakpoint || extra) && blk.Kind != recovery.BlockThinking
}

// keepMark reports whether a mark is sent: not when there is none, nor
// while skip, the marks still to leave out, counts down.
func keepMark(skip *int, mark bool) bool {
	if !mark {
		return false
	}
	if *skip > 0 {
		*skip--
		return false
	}
	return true
}
