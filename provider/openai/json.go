package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// errSchema is why a schema (a tool's input schema, the output schema) is
// refused.
var errSchema = errors.New("is not a JSON object")

// appendSchema appends a schema (a tool's input schema, the output schema),
// which must be a JSON object.
// It goes compacted but otherwise as it came, not decoded and encoded
// again, as the SDK's params had it (a map), at the cost of a map per
// node. A schema that the round trip would change — strings that are not
// UTF-8, escaped surrogates, numbers beyond a float64, which decoding
// refuses — still takes it, so that the server gets what it got before.
func appendSchema(b, schema []byte) ([]byte, error) {
	n := len(b)
	buf := bytes.NewBuffer(b)
	if json.Compact(buf, schema) == nil {
		if v := buf.Bytes()[n:]; v[0] == '{' && utf8.Valid(v) && asIs(v) {
			return buf.Bytes(), nil
		}
	}
	var m map[string]any
	if err := json.Unmarshal(schema, &m); err != nil || m == nil {
		return nil, errSchema
	}
	enc, err := json.Marshal(m)
	if err != nil {
		return nil, errSchema
	}
	return append(buf.Bytes()[:n], enc...), nil
}

// asIs reports whether decoding the valid, compact JSON v into any and
// encoding it again would keep its meaning: whether each of its numbers
// fits a float64 and none of its strings holds an escaped surrogate (which
// decoding may replace by U+FFFD). It walks v without recursion.
func asIs(v []byte) bool {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '"':
			for i++; v[i] != '"'; i++ {
				if v[i] != '\\' {
					continue
				}
				i++
				if v[i] == 'u' && surrogate(v[i+1:i+5]) {
					return false
				}
			}
		case c == '-' || '0' <= c && c <= '9':
			j := i + 1
			for j < len(v) && strings.IndexByte("+-.eE0123456789", v[j]) >= 0 {
				j++
			}
			if _, err := strconv.ParseFloat(string(v[i:j]), 64); err != nil {
				return false
			}
			i = j - 1
		}
	}
	return true
}

// surrogate reports whether the four hex digits of a \u escape are a UTF-16
// surrogate, D800 to DFFF.
func surrogate[T string | []byte](h T) bool {
	return (h[0] == 'd' || h[0] == 'D') && strings.IndexByte("89abcdefABCDEF", h[1]) >= 0
}
