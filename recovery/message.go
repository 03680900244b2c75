package recovery

import "strings"

// Role is the author of a Message.
type Role int

const (
	// RoleUser is the caller, including tool results.
	RoleUser Role = iota + 1
	// RoleAssistant is the model, including tool calls.
	RoleAssistant
)

// String returns "user" or "assistant".
func (r Role) String() string {
	switch r {
	case RoleUser:
		return "user"
	case RoleAssistant:
		return "assistant"
	}
	return "unknown"
}

// BlockKind is the kind of a Block.
type BlockKind int

const (
	// BlockText is plain text.
	BlockText BlockKind = iota + 1
	// BlockImage is an image: Data with MediaType, or URL.
	BlockImage
	// BlockToolUse is a tool call made by the model.
	BlockToolUse
	// BlockToolResult answers a tool call.
	BlockToolResult
	// BlockThinking is the model's reasoning exactly as the upstream sent
	// it: Text and Signature, or, when Redacted, the opaque Data. It is
	// never part of the answer text. Anthropic requires the thinking blocks
	// of an answer that calls tools to come back unchanged, signature and
	// all, ahead of the tool uses in that assistant message; the machine
	// puts them there (see Event.Thinking).
	BlockThinking
	// BlockDocument is a PDF document: Data with MediaType, or URL.
	BlockDocument
)

// Block is one piece of a Message. Which fields are meaningful depends on Kind.
type Block struct {
	// Kind selects the block's kind.
	Kind BlockKind
	// Text is the text of a BlockText, the output of a BlockToolResult, or
	// the reasoning of a BlockThinking.
	Text string
	// MediaType is the MIME type of a BlockImage or a BlockDocument
	// given as Data.
	MediaType string
	// Data is the encoded image of a BlockImage, the document of a
	// BlockDocument, or the opaque data of a redacted BlockThinking, byte
	// for byte as the upstream sent it.
	Data []byte
	// URL is where the provider fetches a BlockImage or a BlockDocument
	// given by URL (https; completiond never fetches it).
	URL string
	// Title names a BlockDocument for the model.
	Title string
	// CacheBreakpoint marks the end of the block as a prompt cache
	// breakpoint: the prompt up to and including it is cached (Anthropic
	// cache_control). The machine never sets it; the driver marks the
	// blocks of each call's prompt.
	CacheBreakpoint bool
	// Signature is the upstream's signature of a BlockThinking's Text; it
	// must go back unchanged with it.
	Signature string
	// Redacted marks a BlockThinking whose reasoning the upstream encrypted
	// (Anthropic redacted_thinking): Data holds it, Text and Signature are
	// empty.
	Redacted bool
	// Model is the model that produced a BlockThinking, which its signature
	// binds it to: the machine sends the block to that model only, and
	// leaves it out of a call to another (a fallback, a takeover onto
	// another route). Empty for a block the caller brought, which goes as
	// it is.
	Model string
	// ToolUseID identifies a BlockToolUse, or the call a BlockToolResult answers.
	ToolUseID string
	// ToolName is the tool of a BlockToolUse.
	ToolName string
	// ToolInput is the JSON arguments of a BlockToolUse.
	ToolInput []byte
	// IsError marks a failed tool run in a BlockToolResult.
	IsError bool
	// Halt asks, in a BlockToolResult, to stop the completion (HOOK_STOPPED).
	Halt bool
}

// Media reports whether b is a media block: an image or a document, which
// an upstream may reject (FailMedia) and the machine then strips.
func (b Block) Media() bool { return b.Kind == BlockImage || b.Kind == BlockDocument }

// Message is one turn of a conversation.
type Message struct {
	// Role is the author.
	Role Role
	// Blocks are the message's content in order.
	Blocks []Block
}

// TextBlock returns a text block.
func TextBlock(s string) Block { return Block{Kind: BlockText, Text: s} }

// UserText returns a user message holding one text block.
func UserText(s string) Message { return Message{Role: RoleUser, Blocks: []Block{TextBlock(s)}} }

// AssistantText returns an assistant message holding one text block.
func AssistantText(s string) Message {
	return Message{Role: RoleAssistant, Blocks: []Block{TextBlock(s)}}
}

// Text returns the message's text blocks, concatenated.
func (m Message) Text() string {
	var b strings.Builder
	for _, bl := range m.Blocks {
		if bl.Kind == BlockText {
			b.WriteString(bl.Text)
		}
	}
	return b.String()
}

// ToolCall is a complete tool call made by the model.
type ToolCall struct {
	// ID identifies the call.
	ID string
	// Name is the tool's name.
	Name string
	// Input is the call's JSON arguments.
	Input []byte
}

// Usage counts the tokens of an attempt.
type Usage struct {
	// InputTokens were read by the model.
	InputTokens int64
	// OutputTokens were generated.
	OutputTokens int64
	// CacheReadInputTokens were read from the prompt cache.
	CacheReadInputTokens int64
	// CacheCreationInputTokens were written to the prompt cache.
	CacheCreationInputTokens int64
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		InputTokens:              u.InputTokens + v.InputTokens,
		OutputTokens:             u.OutputTokens + v.OutputTokens,
		CacheReadInputTokens:     u.CacheReadInputTokens + v.CacheReadInputTokens,
		CacheCreationInputTokens: u.CacheCreationInputTokens + v.CacheCreationInputTokens,
	}
}

// StopReason is why the model stopped.
type StopReason int

const (
	// StopNone means no answer was produced.
	StopNone StopReason = iota
	// StopEndTurn means the model finished its answer.
	StopEndTurn
	// StopMaxTokens means the output limit cut the answer (Anthropic
	// max_tokens, OpenAI length).
	StopMaxTokens
	// StopContextWindow means the context window cut the answer (Anthropic
	// model_context_window_exceeded); it is handled like StopMaxTokens.
	StopContextWindow
	// StopSequence means a stop sequence ended the answer.
	StopSequence
	// StopToolUse means the model called tools.
	StopToolUse
	// StopRefusal means the model refused.
	StopRefusal
	// StopContentFilter means the provider's content filter stopped the answer.
	StopContentFilter
	// StopPauseTurn means the provider paused a long turn.
	StopPauseTurn
)

var stopReasonNames = [...]string{"none", "end_turn", "max_tokens", "model_context_window_exceeded",
	"stop_sequence", "tool_use", "refusal", "content_filter", "pause_turn"}

// String returns the snake_case name used in transcripts.
func (s StopReason) String() string {
	if int(s) >= 0 && int(s) < len(stopReasonNames) {
		return stopReasonNames[s]
	}
	return "unknown"
}

// Truncating reports whether s means the answer was cut by a token limit.
func (s StopReason) Truncating() bool { return s == StopMaxTokens || s == StopContextWindow }
