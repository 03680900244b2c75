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

// Field is one field of a JSON object that a decoder reads (Decode), and
// where its value goes.
type Field struct {
	key  string
	str  *string
	num  *int64
	f    func(gjson.Result)
	objs bool // f takes objects only
}

// String reads the field key as text, with gjson's conversions — the
// apijson's: a number or a literal is its JSON text, an object or array
// its raw JSON, null "" — into dst.
func String(key string, dst *string) Field { return Field{key: key, str: dst} }

// Int reads the field key as an integer, with gjson's conversions — the
// apijson's: a string of digits is its number, true 1, anything else 0 —
// into dst.
func Int(key string, dst *int64) Field { return Field{key: key, num: dst} }

// Object calls f with the field key's value when it is an object; any
// other value leaves the destination as it is, as apijson leaves a struct
// field empty.
func Object(key string, f func(gjson.Result)) Field { return Field{key: key, f: f, objs: true} }

// Value calls f with the field key's value, whatever it is.
func Value(key string, f func(gjson.Result)) Field { return Field{key: key, f: f} }

// Decode reads the fields of v, an object, into their destinations, in one
// pass over it; the others are skipped unread. Of duplicate keys the first
// counts, as in gjson's Map, from which the SDKs' apijson decodes. At most
// 32 fields.
func Decode(v gjson.Result, fields ...Field) {
	var seen uint32
	v.ForEach(func(k, v gjson.Result) bool {
		for i := range fields {
			f := &fields[i]
			if f.key != k.Str {
				continue
			}
			if bit := uint32(1) << i; seen&bit == 0 {
				seen |= bit
				switch {
				case f.str != nil:
					*f.str = v.String()
				case f.num != nil:
					*f.num = v.Int()
				case !f.objs || v.IsObject():
					f.f(v)
				}
			}
			break
		}
		return true
	})
}

// Objects reads the field key, an array of objects, into *dst, reusing
// its elements: decode reads each (null elements included, which read as
// empty) into the element as the last use left it, which decode resets.
// An array holding anything else is dropped whole, as the SDKs' apijson
// drops it — Objects stops at such an element and empties *dst, in one
// pass: a second one to check first would cost as much as the decoding —
// and so is a value that is not an array.
func Objects[T any](key string, dst *[]T, decode func(*T, gjson.Result)) Field {
	return Value(key, func(v gjson.Result) {
		s, ok := (*dst)[:0], v.IsArray()
		if ok {
			v.ForEach(func(_, e gjson.Result) bool {
				if ok = e.IsObject() || e.Type == gjson.Null; ok {
					if len(s) < cap(s) {
						s = s[:len(s)+1]
					} else {
						s = append(s, *new(T))
					}
					decode(&s[len(s)-1], e)
				}
				return ok
			})
		}
		if !ok {
			s = s[:0]
		}
		*dst = s
	})
}
