package recovery

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ImageTokens is what EstimateTokens charges for one image. Providers bill an
// image by its pixels, which the machine does not decode; 1 600 tokens is
// Anthropic's cost of a full-size (1.15 megapixel) image, so the estimate errs
// on the large side. An image given by URL, whose bytes the machine never
// sees, costs the same.
const ImageTokens = 1600

// The estimate of a PDF document. Anthropic bills each page as its text
// (1 500 to 3 000 tokens) plus an image of the page, and accepts at most
// 100 pages; the machine counts no pages (it does not parse PDFs), so it
// takes one page per DocumentPageBytes of the document, at least one and
// at most DocumentMaxPages. Text-born PDFs run some 10 to 50 KB a page and
// scans far more, so this over-counts a scan's pages (the cap bounds it)
// and under-counts a dense text PDF's, which the upstream's prompt-too-long
// then sends down the overflow ladder. Erring large matters less than for
// images: an estimate too large ends the completion BLOCKING_LIMIT without
// asking the upstream, hence the moderate page size and the cap.
const (
	// DocumentPageTokens is what one page of a document costs.
	DocumentPageTokens = 3000
	// DocumentPageBytes is how many bytes of a document count as one page.
	DocumentPageBytes = 32 << 10
	// DocumentMaxPages caps a document's pages: Anthropic's limit.
	DocumentMaxPages = 100
	// DocumentURLPages is the pages of a document given by URL, whose
	// size the machine never sees: a short paper's worth.
	DocumentURLPages = 10
)

// EstimateTokens estimates the input tokens of a request: about one token per
// four bytes of text, thinking, tool names and tool input, plus ImageTokens
// per image and DocumentPageTokens per estimated page of a document (see
// DocumentPageBytes).
// It only has to be good enough to decide whether a prompt leaves room for
// the answer before calling (AUTO_COMPACT, BLOCKING_LIMIT).
func EstimateTokens(system string, msgs []Message) int {
	n, media := len(system), 0
	for _, m := range msgs {
		for _, b := range m.Blocks {
			if b.Media() {
				media += MediaTokens(b)
				continue
			}
			n += len(b.Text) + len(b.ToolName) + len(b.ToolInput) + len(b.Data) // Data: redacted thinking
		}
	}
	return (n+3)/4 + media
}

// MediaTokens is EstimateTokens' estimate of one image (ImageTokens) or
// document (DocumentPageTokens per estimated page), for a provider that
// must count a prompt's media the same way.
func MediaTokens(b Block) int {
	if b.Kind == BlockImage {
		return ImageTokens
	}
	pages := DocumentURLPages
	if b.URL == "" {
		pages = min(max((len(b.Data)+DocumentPageBytes-1)/DocumentPageBytes, 1), DocumentMaxPages)
	}
	return pages * DocumentPageTokens
}

// BlockingLimit returns the estimated input, in tokens, at or above which a
// request to a route with the given context window would leave too little
// room for an answer of maxOut tokens: window − min(maxOut, OutputReserveCap)
// − BlockingMargin.
func (p OverflowPolicy) BlockingLimit(window, maxOut int) int {
	return window - min(maxOut, p.OutputReserveCap) - p.BlockingMargin
}

// Collapse elides bulky old content: every text or tool-result block longer
// than minBytes is replaced by ElidedFormat, except in the first user message
// (the task itself) and in the last keepRecent messages. It returns the new
// conversation, the number of blocks elided and the bytes removed; msgs is
// not modified.
func Collapse(msgs []Message, keepRecent, minBytes int) (out []Message, blocks, bytes int) {
	out = slices.Clone(msgs)
	first := firstUser(msgs)
	for i := 0; i < len(msgs)-max(keepRecent, 0); i++ {
		if i == first {
			continue
		}
		var n, b int
		out[i], n, b = collapseMessage(msgs[i], minBytes)
		blocks, bytes = blocks+n, bytes+b
	}
	return out, blocks, bytes
}

func collapseMessage(m Message, minBytes int) (Message, int, int) {
	var blocks, bytes int
	var bs []Block
	for i, b := range m.Blocks {
		if (b.Kind != BlockText && b.Kind != BlockToolResult) || len(b.Text) <= minBytes {
			continue
		}
		if bs == nil {
			bs = slices.Clone(m.Blocks) // copy on first write: msgs stays untouched
		}
		bs[i].Text = fmt.Sprintf(ElidedFormat, len(b.Text))
		blocks, bytes = blocks+1, bytes+len(b.Text)
	}
	if bs == nil {
		return m, 0, 0
	}
	return Message{Role: m.Role, Blocks: bs}, blocks, bytes
}

// MediaBlocks returns where the media blocks (images and documents) of msgs
// are, in order.
func MediaBlocks(msgs []Message) []BlockRef {
	var refs []BlockRef
	for i, m := range msgs {
		for j, b := range m.Blocks {
			if b.Media() {
				refs = append(refs, BlockRef{Message: i, Block: j})
			}
		}
	}
	return refs
}

// StripMedia replaces the media blocks of msgs that refs point at with a
// text block holding their placeholder (ImagePlaceholder,
// DocumentPlaceholder), which keeps the block's CacheBreakpoint. A ref
// that points at no media block of msgs (out of range, or at a block that
// is not, or no longer, an image or a document) is skipped, and so is a
// repeated one. It returns the new conversation and the refs of the blocks
// it replaced, in the order given; msgs is not modified.
func StripMedia(msgs []Message, refs []BlockRef) (out []Message, stripped []BlockRef) {
	out = slices.Clone(msgs)
	for _, r := range refs {
		if r.Message < 0 || r.Message >= len(out) || r.Block < 0 || r.Block >= len(out[r.Message].Blocks) {
			continue
		}
		m := out[r.Message]
		b := m.Blocks[r.Block]
		if !b.Media() {
			continue // a repeated ref finds the placeholder it left
		}
		bs := slices.Clone(m.Blocks) // copy on write: msgs stays untouched
		// The caller's cache mark stays where the caller put it: the
		// prompt up to the placeholder is what the next calls repeat.
		bs[r.Block] = Block{Kind: BlockText, Text: placeholder(b), CacheBreakpoint: b.CacheBreakpoint}
		out[r.Message] = Message{Role: m.Role, Blocks: bs}
		stripped = append(stripped, r)
	}
	return out, stripped
}

// placeholder is the text that replaces the rejected media block b.
func placeholder(b Block) string {
	if b.Kind == BlockDocument {
		return DocumentPlaceholder
	}
	return ImagePlaceholder
}

// Split is a conversation cut for compaction: Middle is summarised, Head (up
// to and including the first user message) and Tail (the recent messages) are
// kept verbatim.
type Split struct {
	// Head ends with the first user message, which states the task.
	Head []Message
	// Middle is what the summary replaces.
	Middle []Message
	// Tail is the recent window, kept verbatim.
	Tail []Message
}

// SplitForCompaction cuts msgs into the first user message, a middle and the
// last keepRecent messages. The tail is widened backwards while it would
// start with tool results, so that no tool result loses its tool call to the
// summary. ok is false when there is no middle to summarise.
func SplitForCompaction(msgs []Message, keepRecent int) (s Split, ok bool) {
	first := firstUser(msgs)
	if first < 0 {
		return Split{}, false
	}
	cut := max(len(msgs)-max(keepRecent, 0), first+1)
	for cut > first+1 && cut < len(msgs) && hasToolResults(msgs[cut]) {
		cut--
	}
	if cut <= first+1 {
		return Split{}, false
	}
	return Split{Head: msgs[:first+1], Middle: msgs[first+1 : cut], Tail: msgs[cut:]}, true
}

// Compacted returns the conversation of s with its middle replaced by a user
// message holding SummaryPrefix and the summary. Adjacent messages of the same
// role are merged so that roles keep alternating.
func (s Split) Compacted(summary string) []Message {
	out := make([]Message, 0, len(s.Head)+len(s.Tail)+1)
	for _, m := range s.Head {
		out = appendMessage(out, m)
	}
	out = appendMessage(out, UserText(SummaryPrefix+summary))
	for _, m := range s.Tail {
		out = appendMessage(out, m)
	}
	return out
}

// RenderTranscript renders msgs as plain text for a summarising call: one
// paragraph per message, images, documents and tool traffic as bracketed
// notes. The model's thinking is left out: the summary is of what was said
// and done.
func RenderTranscript(msgs []Message) string {
	var sb strings.Builder
	for i, m := range msgs {
		if i > 0 {
			sb.WriteString("\n\n")
		}
		sb.WriteString(m.Role.String())
		sb.WriteString(":")
		for _, b := range m.Blocks {
			if b.Kind == BlockThinking {
				continue
			}
			sb.WriteString(" ")
			sb.WriteString(renderBlock(b))
		}
	}
	return sb.String()
}

func renderBlock(b Block) string {
	switch b.Kind {
	case BlockImage:
		return "[image]"
	case BlockDocument:
		if b.Title != "" {
			return "[document " + strconv.Quote(b.Title) + "]"
		}
		return "[document]"
	case BlockToolUse:
		return fmt.Sprintf("[tool call %s %s: %s]", b.ToolUseID, b.ToolName, b.ToolInput)
	case BlockToolResult:
		if b.IsError {
			return fmt.Sprintf("[tool error %s] %s", b.ToolUseID, b.Text)
		}
		return fmt.Sprintf("[tool result %s] %s", b.ToolUseID, b.Text)
	}
	return b.Text
}

// appendMessage appends m to msgs, merging it into the last message when both
// have the same role: upstreams want roles to alternate. Empty text blocks are
// dropped (upstreams refuse them) and so is a message left empty.
func appendMessage(msgs []Message, m Message) []Message {
	blocks := slices.DeleteFunc(slices.Clone(m.Blocks), func(b Block) bool {
		return b.Kind == BlockText && b.Text == ""
	})
	if len(blocks) == 0 {
		return msgs
	}
	if n := len(msgs); n > 0 && msgs[n-1].Role == m.Role {
		last := msgs[n-1]
		msgs[n-1] = Message{Role: m.Role, Blocks: append(slices.Clip(last.Blocks), blocks...)}
		return msgs
	}
	return append(msgs, Message{Role: m.Role, Blocks: blocks})
}

func firstUser(msgs []Message) int {
	return slices.IndexFunc(msgs, func(m Message) bool { return m.Role == RoleUser })
}

func hasToolResults(m Message) bool {
	return slices.ContainsFunc(m.Blocks, func(b Block) bool { return b.Kind == BlockToolResult })
}
