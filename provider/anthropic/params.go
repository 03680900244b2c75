package anthropic

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/jsonenc"
)

// The caller's model parameters in the body: the sampling parameters, the
// stop sequences and the tool choice, each key where the SDK's encoder puts
// it (the order of MessageNewParams' fields): temperature, top_k and top_p
// after model, stop_sequences before system, tool_choice between thinking
// and tools.

// paramsRoom is what the sampling parameters, the stop sequences' key and
// the tool choice take at most, but for their strings: two of the longest
// floats (24 bytes), the longest int64, and tool_choice with every field.
const paramsRoom = 200

// appendSampling appends temperature, top_k and top_p, each only when set:
// a nil pointer or a zero TopK sends nothing, a pointer to 0 sends 0. The
// Messages API has no seed: Sampling.Seed is not sent (the capability
// table refuses it for the route).
func appendSampling(b []byte, s provider.Sampling) []byte {
	if s.Temperature != nil {
		b = jsonenc.AppendFloat(append(b, `,"temperature":`...), *s.Temperature)
	}
	if s.TopK != 0 {
		b = strconv.AppendInt(append(b, `,"top_k":`...), int64(s.TopK), 10)
	}
	if s.TopP != nil {
		b = jsonenc.AppendFloat(append(b, `,"top_p":`...), *s.TopP)
	}
	return b
}

// appendStopSequences appends the stop sequences, if there are any: none
// (nil or empty) sends no "stop_sequences".
func appendStopSequences(b []byte, seqs []string) []byte {
	if len(seqs) == 0 {
		return b
	}
	b = append(b, `,"stop_sequences":[`...)
	for _, s := range seqs {
		b = jsonenc.AppendString(comma(b), s)
	}
	return append(b, ']')
}

// errToolChoice is why a tool choice of a mode this code does not know is
// refused.
var errToolChoice = errors.New("unknown tool choice mode")

// toolChoiceTypes are the API's tool_choice types by mode.
// ToolChoiceDefault is there for a DisableParallel alone, which only auto
// carries without changing what the model may do.
var toolChoiceTypes = map[provider.ToolChoiceMode]string{
	provider.ToolChoiceDefault: "auto",
	provider.ToolChoiceAuto:    "auto",
	provider.ToolChoiceAny:     "any",
	provider.ToolChoiceNone:    "none",
	provider.ToolChoiceTool:    "tool",
}

// appendToolChoice appends tool_choice, its fields in the SDK's order:
// name (of a tool), disable_parallel_tool_use, type. ToolChoiceDefault
// without DisableParallel sends nothing. "none" has no disable_parallel_tool_use (a model that
// calls no tool calls none in parallel), and drops it.
func appendToolChoice(b []byte, c provider.ToolChoice) ([]byte, error) {
	typ, ok := toolChoiceTypes[c.Mode]
	if !ok {
		return nil, fmt.Errorf("%w %d", errToolChoice, c.Mode)
	}
	if c.Mode == provider.ToolChoiceDefault && !c.DisableParallel {
		return b, nil // the upstream's default; a Name goes with ToolChoiceTool only
	}
	b = append(b, `,"tool_choice":{`...)
	if c.Mode == provider.ToolChoiceTool {
		b = append(jsonenc.AppendString(append(b, `"name":`...), c.Name), ',')
	}
	if c.DisableParallel && c.Mode != provider.ToolChoiceNone {
		b = append(b, `"disable_parallel_tool_use":true,`...)
	}
	b = append(append(b, `"type":"`...), typ...)
	return append(b, `"}`...), nil
}
