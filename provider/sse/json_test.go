package sse

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestJSON(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, tc := range []struct {
		name, data string
		ok         bool
	}{
		{"object", `{"a":[1,{"b":null}],"c":"d\n"}`, true},
		{"whitespace around", " \t{}\r\n", true},
		{"not JSON", "not json", false},
		{"cut", `{"choices":[{"delta":`, false},
		{"two texts", `{} {}`, false},
		{"empty", "", false},
		{"nested 4 000 deep, the fast validator's", deep(4000), true},
		{"nested 10 000 deep", deep(10000), true},
		{"nested 10 001 deep, refused as encoding/json does", deep(10001), false},
		{"nested a million deep does not exhaust the stack", deep(1 << 20), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := JSON([]byte(tc.data))
			if tc.ok != (err == nil) {
				t.Fatalf("err %v, want ok %t", err, tc.ok)
			}
			var syntax *json.SyntaxError
			if err != nil && !errors.As(err, &syntax) {
				t.Fatalf("err %v (%T) is not a *json.SyntaxError", err, err)
			}
			if err == nil && !v.Exists() {
				t.Fatal("no value")
			}
		})
	}
}

func TestJSONViewsData(t *testing.T) {
	data := []byte(`{"text":"hello","escaped":"a\nb"}`)
	v, err := JSON(data)
	if err != nil {
		t.Fatal(err)
	}
	text, escaped := v.Get("text").String(), strings.Clone(v.Get("escaped").String())
	kept := strings.Clone(text)
	copy(data[9:], "HELLO")
	if text != "HELLO" || kept != "hello" || escaped != "a\nb" {
		t.Errorf("text %q, kept %q, escaped %q: the result should view data", text, kept, escaped)
	}
}

// FuzzJSON checks that JSON takes exactly the texts encoding/json takes.
func FuzzJSON(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[1,2.5e-3,"x\u00e9",true,null]`, `{"a":}`, `-01`, "\"\xff\"", `"\ud800"`, `1e999`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := JSON(data)
		if (err == nil) != json.Valid(data) {
			t.Fatalf("JSON err %v, json.Valid %t", err, json.Valid(data))
		}
	})
}
