package recovery

import (
	"fmt"
	"slices"
	"strings"
)

// ImageTokens is what EstimateTokens charges for one image. Providers bill an
// image by its pixels, which the machine does not decode; 1 600 tokens is
// Anthropic's cost of a full-size (1.15 megapixel) image, so the estimate errs
// on the large side.
const ImageTokens = 1600

// EstimateTokens estimates the input tokens of a request: about one token per
// four bytes of text, thinking, tool names and tool input, plus ImageTokens
// per image.
// It only has to be good enough to decide whether a prompt leaves room for
// the answer before calling (AUTO_COMPACT, BLOCKING_LIMIT).
func EstimateTokens(system string, msgs []Message) int {
	n, images := len(system), 0
	for _, m := range msgs {
		for _, b := range m.Blocks {
			if b.Kind == BlockImage {
				images++
				continue
			}
			n += len(b.Text) + len(b.ToolName) + len(b.ToolInput) + len(b.Data) // Data: redacted thinking
		}
	}
	return (n+3)/4 + images*ImageTokens
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

// StripImages replaces every image with a text block holding
// ImagePlaceholder. It returns the new conversation and the number of images
// removed; msgs is not modified.
func StripImages(msgs []Message) ([]Message, int) {
	out, n := slices.Clone(msgs), 0
	for i, m := range msgs {
		if !slices.ContainsFunc(m.Blocks, func(b Block) bool { return b.Kind == BlockImage }) {
			continue
		}
		bs := slices.Clone(m.Blocks)
		for j, b := range bs {
			if b.Kind == BlockImage {
				bs[j], n = TextBlock(ImagePlaceholder), n+1
			}
		}
		out[i] = Message{Role: m.Role, Blocks: bs}
	}
	return out, n
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
// paragraph per message, images and tool traffic as bracketed notes. The
// model's thinking is left out: the summary is of what was said and done.
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
