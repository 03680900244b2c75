package openai

import (
	"fmt"
	"strconv"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/jsonenc"
)

// The request's sampling, reasoning effort, stop sequences, structured
// output and tool choice, appended as the SDK encodes its params' seed,
// temperature, top_p, parallel_tool_calls, reasoning_effort, stop,
// response_format and tool_choice: each value byte for byte (checkTopLevel,
// in the parity tests; the output schema's JSON equal), each field where the
// SDK puts it (Provider.appendParams).
// Sampling.TopK has no field on this wire and is never sent: the request
// validation refuses top_k on an openai route (config.KindCapabilities).

// appendSampling appends the seed, the temperature and top_p that are set;
// a nil pointer sends nothing (the upstream's default), and a temperature
// of 0 set through its pointer is sent as 0.
func appendSampling(b []byte, s provider.Sampling) ([]byte, error) {
	if err := s.Finite(); err != nil {
		return nil, err
	}
	if s.Seed != nil {
		b = strconv.AppendInt(append(b, `,"seed":`...), *s.Seed, 10)
	}
	if s.Temperature != nil {
		b = jsonenc.AppendFloat(append(b, `,"temperature":`...), *s.Temperature)
	}
	if s.TopP != nil {
		b = jsonenc.AppendFloat(append(b, `,"top_p":`...), *s.TopP)
	}
	return b, nil
}

// appendStop appends the stop sequences as an array, the form of the SDK's
// stop union that every compatible server takes, for one sequence too;
// none sends nothing.
func appendStop(b []byte, stops []string) []byte {
	if len(stops) == 0 {
		return b
	}
	b = append(b, `,"stop":[`...)
	for i, s := range stops {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonenc.AppendString(b, s)
	}
	return append(b, ']')
}

// toolChoiceModes are the tool choice modes sent as a string.
var toolChoiceModes = map[provider.ToolChoiceMode]string{
	provider.ToolChoiceAuto: "auto",
	provider.ToolChoiceAny:  "required",
	provider.ToolChoiceNone: "none",
}

// errToolChoice is the failure of a tool choice mode this provider does
// not know; the request validation lets none through.
func errToolChoice(m provider.ToolChoiceMode) error {
	return fmt.Errorf("tool choice mode %d is not known", m)
}

// appendToolChoice appends tool_choice: a mode's string, or the named
// function, in the SDK's key order. ToolChoiceDefault sends nothing.
func appendToolChoice(b []byte, tc provider.ToolChoice) ([]byte, error) {
	switch tc.Mode {
	case provider.ToolChoiceDefault:
		return b, nil
	case provider.ToolChoiceTool:
		if tc.Name == "" {
			// The SDK omits a function that is all zero; the server
			// refuses the choice either way.
			return append(b, `,"tool_choice":{"type":"function"}`...), nil
		}
		b = jsonenc.AppendString(append(b, `,"tool_choice":{"function":{"name":`...), tc.Name)
		return append(b, `},"type":"function"}`...), nil
	}
	mode, ok := toolChoiceModes[tc.Mode]
	if !ok {
		return nil, errToolChoice(tc.Mode)
	}
	b = append(b, `,"tool_choice":"`...)
	return append(append(b, mode...), '"'), nil
}

// appendEffort appends reasoning_effort, the route's resolved effort, as it
// is; none sends nothing. The output limit stays in the field the route's
// configuration chose (Provider.appendMaxTokens): max_completion_tokens,
// which reasoning models need, unless LegacyMaxTokens.
func appendEffort(b []byte, effort string) []byte {
	if effort == "" {
		return b
	}
	return jsonenc.AppendString(append(b, `,"reasoning_effort":`...), effort)
}

// outputName is the name of the structured output's schema: the API needs
// one, and the model sees it.
const outputName = "output"

// sendsSchema reports whether the request's output schema goes on the wire:
// as response_format for StructuredNative. StructuredHook sends nothing,
// and StructuredTool (an Anthropic route's) is taken like it.
func sendsSchema(req *provider.Request) bool {
	return len(req.OutputSchema) > 0 && req.StructuredOutput == provider.StructuredNative
}

// appendResponseFormat appends the output schema as a json_schema
// response_format, in the SDK's key order, strict when the schema meets
// strict mode's rules (strictSchema). The schema goes as it came, its keys
// in their order, which the answer's keys follow; it must be a JSON object.
func appendResponseFormat(b []byte, req *provider.Request) ([]byte, error) {
	if !sendsSchema(req) {
		return b, nil
	}
	b = append(b, `,"response_format":{"json_schema":{"name":"`+outputName+`","strict":`...)
	b = strconv.AppendBool(b, strictSchema(req.OutputSchema))
	b, err := appendSchema(append(b, `,"schema":`...), req.OutputSchema)
	if err != nil {
		return nil, fmt.Errorf("output schema %w", err)
	}
	return append(b, `},"type":"json_schema"}`...), nil
}
