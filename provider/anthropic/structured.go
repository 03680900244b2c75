package anthropic

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// StructuredToolName is the tool a request with an output schema declares on
// a provider.StructuredTool route: its input schema is the output schema,
// the model is forced to call it, and its input is the answer. A caller's
// tool may not take the name there.
const StructuredToolName = provider.StructuredToolName

// structuredToolDescription tells the model what the structured tool is for.
const structuredToolDescription = "Records your final answer. Call it exactly once, with the whole answer as its input."

// errStructured is why a request with an output schema and a structured
// output mode this code does not know is refused.
var errStructured = errors.New("unknown structured output mode")

// errOutputSchema is why an output schema sent natively is refused: the
// SDK's output format takes a JSON object.
var errOutputSchema = errors.New("output schema is not a JSON object")

// errToolName is why a caller's tool named StructuredToolName is refused on
// a request that declares the structured tool: the API refuses two tools of
// one name, and the answer's call could not be told from the caller's.
var errToolName = errors.New("the name is the structured output tool's")

// structured is how the request asks for its output schema; ok is false when
// it has none, or when the mode sends nothing (StructuredHook).
func structured(req *provider.Request) (mode provider.StructuredOutput, ok bool) {
	if len(req.OutputSchema) == 0 || req.StructuredOutput == provider.StructuredHook {
		return 0, false
	}
	return req.StructuredOutput, true
}

// structuredTool reports whether the request's answer is the structured
// tool's input.
func structuredTool(req *provider.Request) bool {
	mode, ok := structured(req)
	return ok && mode == provider.StructuredTool
}

// appendOutputConfig appends output_config with the output schema as its
// JSON format, on a StructuredNative request, where the SDK's encoder puts
// it: after top_p, before stop_sequences. The schema's values are decoded
// and encoded again, as the SDK's params held and encoded them.
func appendOutputConfig(b []byte, req *provider.Request) ([]byte, error) {
	mode, ok := structured(req)
	switch {
	case !ok || mode == provider.StructuredTool:
		return b, nil
	case mode != provider.StructuredNative:
		return nil, fmt.Errorf("%w %d", errStructured, mode)
	}
	var fields map[string]any
	if err := json.Unmarshal(req.OutputSchema, &fields); err != nil || fields == nil {
		return nil, errOutputSchema
	}
	enc, err := json.Marshal(fields)
	if err != nil {
		return nil, errOutputSchema
	}
	b = append(append(b, `,"output_config":{"format":{"schema":`...), enc...)
	return append(b, `,"type":"json_schema"}}`...), nil
}

// declaredTools are the tools the request declares: the caller's, and the
// structured tool last on a StructuredTool request, so that the caller's
// cache marks on the tools before it keep their prefix.
func declaredTools(req *provider.Request) []provider.Tool {
	if !structuredTool(req) {
		return req.Tools
	}
	return append(slices.Clip(req.Tools), provider.Tool{Name: StructuredToolName,
		Description: structuredToolDescription, InputSchema: req.OutputSchema})
}

// toolChoice is the request's tool choice, or on a StructuredTool request
// the structured tool, forced, and called once: two calls would be two
// answers run together. The caller's choice is refused before in that mode.
func toolChoice(req *provider.Request) provider.ToolChoice {
	if !structuredTool(req) {
		return req.ToolChoice
	}
	return provider.ToolChoice{Mode: provider.ToolChoiceTool, Name: StructuredToolName, DisableParallel: true}
}

// checkToolName refuses a caller's tool that takes the structured tool's
// name on a request that declares it.
func checkToolName(req *provider.Request, t provider.Tool, i int) error {
	if t.Name == StructuredToolName && i < len(req.Tools) && structuredTool(req) {
		return errToolName
	}
	return nil
}

// structuredPrefill refuses a prefill on a StructuredTool request: the
// answer so far would have to go as the start of the tool's input, which the
// API cannot continue. The refusal is a FailPrefillRejected, sent nowhere,
// on which the recovery machine restarts the answer without prefill (a
// route answered through the tool should have prefill off).
func structuredPrefill(req *provider.Request) error {
	if req.Prefill == "" || !structuredTool(req) {
		return nil
	}
	return &recovery.Failure{Kind: recovery.FailPrefillRejected, Provider: Kind,
		Message: "a prefill cannot continue an answer given as the " + StructuredToolName + " tool's input"}
}
