package sse

import (
	"encoding/json"
	"errors"
	"unsafe"

	"github.com/tidwall/gjson"
)

// fastValid is the longest text checked with gjson's validator, which is
// four times as fast as encoding/json's but recurses once per nesting
// level without a bound: a text this short cannot nest deep enough to
// matter. A longer one (a whole tool call's arguments, say) is checked by
// encoding/json, which also refuses nesting over 10 000 levels as the SDKs
// did. Both accept exactly the same texts otherwise (FuzzJSON).
const fastValid = 4 << 10

// JSON checks that data is one JSON text, as encoding/json would, and
// returns it for reading with gjson. The result views data without copying
// it: it and every string read from it are valid only as long as data is
// (for an Event's, until the next Next), and a string to keep must be
// copied (strings.Clone) — except one gjson unescaped, which is its own
// already; copying all is simplest and costs little. An invalid text fails
// with the *json.SyntaxError encoding/json gives for it, which the SDKs'
// decoding returned too.
func JSON(data []byte) (gjson.Result, error) {
	if !valid(data) {
		return gjson.Result{}, syntaxError(data)
	}
	return gjson.Parse(unsafe.String(unsafe.SliceData(data), len(data))), nil
}

// valid reports whether data is one JSON text.
func valid(data []byte) bool {
	if len(data) <= fastValid {
		return gjson.ValidBytes(data)
	}
	return json.Valid(data)
}

// syntaxError is encoding/json's error for data, which is not valid JSON.
func syntaxError(data []byte) error {
	var raw json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	return errInvalid // the validators disagreed, which FuzzJSON says they do not
}

// errInvalid is the failure of a text gjson refused and encoding/json took.
var errInvalid = errors.New("sse: invalid JSON")

// Fields records which of an object's fields a decoder read, by the
// decoder's own numbering (up to 32): of duplicate keys the first is the
// one that counts, as in gjson's Map, from which the SDKs' apijson decodes.
type Fields uint32

// First reports whether field is met for the first time, and records it.
func (s *Fields) First(field int) bool {
	bit := Fields(1) << field
	if *s&bit != 0 {
		return false
	}
	*s |= bit
	return true
}

// Objects calls f with each element of v, an array of objects (null
// elements included, which read as empty), and reports whether v was one.
// An array holding anything else is dropped whole by the SDKs' apijson:
// Objects stops at such an element, and returns false, for the caller to
// drop what f took of the elements before it (in one pass: a second one
// to check first would cost as much as the decoding). A value that is not
// an array is dropped too.
func Objects(v gjson.Result, f func(gjson.Result)) bool {
	if !v.IsArray() {
		return false
	}
	ok := true
	v.ForEach(func(_, e gjson.Result) bool {
		if ok = e.IsObject() || e.Type == gjson.Null; ok {
			f(e)
		}
		return ok
	})
	return ok
}
