package jsonenc

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestAppendStringIsEncodingJSONs: every kind of byte run — control
// characters, quotes, HTML characters, line separators, multi-byte runes,
// bytes that are not UTF-8, a cut rune, an encoded surrogate — comes out as
// encoding/json writes it with HTML escaping off.
func TestAppendStringIsEncodingJSONs(t *testing.T) {
	for _, s := range []string{"", "plain", "\x00\x01\x1f\x7f", "\"\\/", "<>&", "\u2028\u2029", "é😀", "\xff", "a\xe2\x82", "\xed\xa0\x80", "\b\f\n\r\t"} {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		w := strings.TrimSuffix(want.String(), "\n")
		if got := AppendString(nil, s); string(got) != w {
			t.Errorf("AppendString(%q) = %s, want %s", s, got, w)
		}
		if got := AppendString([]byte("x"), []byte(s)); string(got) != "x"+w {
			t.Errorf("AppendString(x, []byte(%q)) = %s, want x%s", s, got, w)
		}
	}
}
