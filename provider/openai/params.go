package openai

import (
	"fmt"
	"strconv"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/jsonenc"
)

// The request's sampling, stop sequences and tool choice, appended as the
// SDK encodes its params' seed, temperature, top_p, stop, tool_choice and
// parallel_tool_calls: each value byte for byte (checkTopLevel, in the
// parity tests), each field where the SDK puts it (Provider.appendParams).
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
