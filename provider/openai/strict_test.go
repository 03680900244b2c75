package openai

import (
	"strconv"
	"strings"
	"testing"
)

// closed is an object schema in strict form holding the given properties
// (name → schema).
func closed(props ...string) string {
	var names, decls []string
	for i := 0; i < len(props); i += 2 {
		names = append(names, strconv.Quote(props[i]))
		decls = append(decls, strconv.Quote(props[i])+":"+props[i+1])
	}
	return `{"type":"object","properties":{` + strings.Join(decls, ",") + `},"required":[` +
		strings.Join(names, ",") + `],"additionalProperties":false}`
}

// nested is depth levels of objects, each the only property of the one above.
func nested(depth int) string {
	s := closed()
	for range depth - 1 {
		s = closed("x", s)
	}
	return s
}

// enumOf is a string schema whose enum holds n values of size characters.
func enumOf(n, size int) string {
	values := make([]string, n)
	for i := range values {
		v := strconv.Itoa(i)
		values[i] = strconv.Quote(v + strings.Repeat("e", max(size-len(v), 0)))
	}
	return `{"type":"string","enum":[` + strings.Join(values, ",") + `]}`
}

func TestStrictSchema(t *testing.T) {
	str := `{"type":"string"}`
	for _, tc := range []struct {
		name   string
		schema string
		want   bool
	}{
		{"closed object", closed("a", str, "b", `{"type":"integer"}`), true},
		{"empty closed object", closed(), true},
		{"empty required list", `{"type":"object","properties":{},"required":[],"additionalProperties":false}`, true},
		{"properties without a type", `{"properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false}`, true},
		{"nullable by a type list", closed("a", `{"type":["string","null"]}`), true},
		{"descriptions and titles", `{"type":"object","title":"T","description":"d","properties":{"a":{"type":"string","description":"x","title":"A"}},"required":["a"],"additionalProperties":false}`, true},
		{"supported type-specific keywords", closed(
			"s", `{"type":"string","pattern":"^a+$","format":"email"}`,
			"n", `{"type":"number","minimum":0,"maximum":10,"exclusiveMinimum":-1,"exclusiveMaximum":11,"multipleOf":0.5}`,
			"l", `{"type":"array","items":{"type":"string"},"minItems":1,"maxItems":3}`), true},
		{"enum and const", closed("e", `{"type":"string","enum":["a","b"]}`, "c", `{"const":"x"}`), true},
		{"closed items", closed("l", `{"type":"array","items":`+closed("x", str)+`}`), true},
		{"anyOf of closed branches", closed("v", `{"anyOf":[`+closed("x", str)+`,{"type":"number"}]}`), true},
		{"$defs and a lone $ref", `{"type":"object","properties":{"p":{"$ref":"#/$defs/P"}},"required":["p"],"additionalProperties":false,"$defs":{"P":` + closed("x", str) + `}}`, true},
		{"definitions", `{"type":"object","properties":{"p":{"$ref":"#/definitions/P"}},"required":["p"],"additionalProperties":false,"definitions":{"P":` + closed() + `}}`, true},
		{"recursion through #", closed("child", `{"anyOf":[{"$ref":"#"},{"type":"null"}]}`), true},
		{"a property named like a keyword", closed("default", str, "allOf", str), true},
		{"ten levels of objects", nested(10), true},

		{"not JSON", `{"type":`, false},
		{"not an object", `["a"]`, false},
		{"null", `null`, false},
		{"root a string schema", `{"type":"string"}`, false},
		{"root anyOf", `{"anyOf":[` + closed() + `]}`, false},
		{"root $ref", `{"$ref":"#/$defs/P","$defs":{"P":` + closed() + `}}`, false},
		{"additionalProperties missing", `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`, false},
		{"additionalProperties true", `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":true}`, false},
		{"additionalProperties a schema", `{"type":"object","properties":{},"required":[],"additionalProperties":{"type":"string"}}`, false},
		{"a property not required", `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"required":["a"],"additionalProperties":false}`, false},
		{"required missing", `{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false}`, false},
		{"required null", `{"type":"object","properties":{},"required":null,"additionalProperties":false}`, false},
		{"required names an undeclared property", `{"type":"object","properties":{"a":{"type":"string"}},"required":["a","b"],"additionalProperties":false}`, false},
		{"required twice", `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"required":["a","a"],"additionalProperties":false}`, false},
		{"required not strings", `{"type":"object","properties":{"a":{"type":"string"}},"required":[1],"additionalProperties":false}`, false},
		{"open nested object", closed("o", `{"type":"object","properties":{"x":{"type":"string"}},"required":["x"]}`), false},
		{"open object in items", closed("l", `{"type":"array","items":{"type":"object","properties":{"x":{"type":"string"}}}}`), false},
		{"open object in anyOf", closed("v", `{"anyOf":[{"type":"object","properties":{"x":{"type":"string"}},"required":["x"]}]}`), false},
		{"open object in $defs", `{"type":"object","properties":{},"required":[],"additionalProperties":false,"$defs":{"P":{"type":"object"}}}`, false},
		{"open object in definitions", `{"type":"object","properties":{},"required":[],"additionalProperties":false,"definitions":{"P":{"type":"object","properties":{}}}}`, false},
		{"object among types", closed("o", `{"type":["object","null"],"properties":{"x":{"type":"string"}}}`), false},
		{"allOf", closed("a", `{"allOf":[{"type":"string"}]}`), false},
		{"oneOf", closed("a", `{"oneOf":[{"type":"string"},{"type":"number"}]}`), false},
		{"not", closed("a", `{"not":{"type":"string"}}`), false},
		{"if then else", closed("a", `{"type":"string","if":{"const":"x"},"then":{},"else":{}}`), false},
		{"minLength", closed("a", `{"type":"string","minLength":1}`), false},
		{"maxLength", closed("a", `{"type":"string","maxLength":9}`), false},
		{"uniqueItems", closed("a", `{"type":"array","items":{"type":"string"},"uniqueItems":true}`), false},
		{"patternProperties", `{"type":"object","properties":{},"required":[],"additionalProperties":false,"patternProperties":{"^x":{"type":"string"}}}`, false},
		{"default", closed("a", `{"type":"string","default":"x"}`), false},
		{"$schema", `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{},"required":[],"additionalProperties":false}`, false},
		{"unknown keyword", closed("a", `{"type":"string","x-order":1}`), false},
		{"unknown format", closed("a", `{"type":"string","format":"uri"}`), false},
		{"unknown type", closed("a", `{"type":"text"}`), false},
		{"empty type list", closed("a", `{"type":[]}`), false},
		{"$ref with siblings", closed("p", `{"$ref":"#/$defs/P","description":"p"}`), false},
		{"$ref elsewhere", closed("p", `{"$ref":"https://example.com/s.json"}`), false},
		{"tuple items", closed("l", `{"type":"array","items":[{"type":"string"}]}`), false},
		{"boolean subschema", closed("a", `true`), false},
		{"empty anyOf", closed("a", `{"anyOf":[]}`), false},
		{"enum not a list", closed("a", `{"enum":"a"}`), false},
		{"eleven levels of objects", nested(11), false},
		{"1000 enum values", closed("a", enumOf(500, 1), "b", enumOf(500, 1)), true},
		{"1001 enum values", closed("a", enumOf(500, 1), "b", enumOf(501, 1)), false},
		{"a big enum within its characters", closed("a", enumOf(251, 59)), true},
		{"a big enum beyond its characters", closed("a", enumOf(251, 60)), false},
		{"too many characters", closed("a", enumOf(200, 500), "b", enumOf(200, 500)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strictSchema([]byte(tc.schema)); got != tc.want {
				t.Errorf("strictSchema(%s) = %v, want %v", tc.schema, got, tc.want)
			}
		})
	}
}

// TestStrictSchemaPropertyLimit: 5000 properties in all, whatever the objects.
func TestStrictSchemaPropertyLimit(t *testing.T) {
	props := func(n int) string {
		var p []string
		for i := range n {
			p = append(p, "p"+strconv.Itoa(i), `{"type":"null"}`)
		}
		return closed(p...)
	}
	for n, want := range map[int]bool{2500: true, 2501: false} {
		schema := closed("a", props(n-1), "b", props(n-1)) // n-1 each, and a and b
		if got := strictSchema([]byte(schema)); got != want {
			t.Errorf("%d properties: strict %v, want %v", 2*n, got, want)
		}
	}
}
