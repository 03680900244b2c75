package openai

import (
	"encoding/json"
	"slices"
)

// OpenAI's strict structured outputs accept a subset of JSON Schema and
// refuse the whole request (a 400) for a schema outside it; strict false
// takes any schema, as guidance the model is not held to. strictSchema
// decides which to ask for. It errs on the side of false — a keyword it
// does not know, a limit it cannot be sure of — because a refused request
// costs the attempt, while a non-strict answer is still held to the schema
// by the driver's stop hook. The rules are OpenAI's documented ones
// (Structured Outputs, "Supported schemas").

// strictKeywords are the keywords strict mode takes. Left out are the ones
// OpenAI documents as unsupported (allOf, not, if, then, else,
// dependentRequired, dependentSchemas) and every one it does not list as
// supported: oneOf, patternProperties, minLength, uniqueItems, $schema,
// default and examples (which Azure's deployments refuse), …
var strictKeywords = map[string]bool{
	"type": true, "description": true, "title": true, "enum": true, "const": true,
	"properties": true, "required": true, "additionalProperties": true,
	"items": true, "anyOf": true, "$ref": true, "$defs": true, "definitions": true,
	// Type-specific keywords OpenAI enforces (not Azure's deployments,
	// which refuse them: an Azure route is best given StructuredHook).
	"pattern": true, "format": true,
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true, "multipleOf": true,
	"minItems": true, "maxItems": true,
}

// strictTypes are the types strict mode knows.
var strictTypes = []any{"string", "number", "integer", "boolean", "object", "array", "null"}

// strictFormats are the string formats strict mode knows; any other is refused.
var strictFormats = []string{"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}

// Strict mode's documented limits on a schema.
const (
	strictMaxProperties = 5000    // object properties in all
	strictMaxDepth      = 10      // levels of nested objects
	strictMaxEnums      = 1000    // enum values in all
	strictMaxChars      = 120_000 // characters of property and definition names, enum and const strings
	strictBigEnum       = 250     // an enum of more string values than this …
	strictBigEnumChars  = 15_000  // … holds at most this many characters
)

// strictSchema reports whether schema, a JSON Schema, meets strict mode's
// rules: its root is an object; every object schema — the root, properties,
// items, $defs and definitions, anyOf branches, nested to any depth — has
// additionalProperties false and lists each of its properties, and only
// those, in required; a $ref stands alone; every keyword is one strict
// mode takes (strictKeywords), a format one it knows; and the schema keeps
// within the documented limits.
func strictSchema(schema []byte) bool {
	var root map[string]any
	if json.Unmarshal(schema, &root) != nil || root == nil || !isObjectSchema(root) {
		return false
	}
	if _, anyOf := root["anyOf"]; anyOf {
		return false // the root must not be anyOf
	}
	var w strictWalk
	return w.node(root, 1) && w.props <= strictMaxProperties && w.enums <= strictMaxEnums && w.chars <= strictMaxChars
}

// strictWalk walks a schema's nodes and counts what the limits bound.
type strictWalk struct {
	props, enums, chars int
}

// node checks one schema node at an object nesting depth, and its subschemas.
func (w *strictWalk) node(n map[string]any, depth int) bool {
	if _, ref := n["$ref"]; ref && len(n) > 1 {
		return false // $ref with siblings is not supported
	}
	for k, v := range n {
		if !strictKeywords[k] || !w.keyword(k, v) {
			return false
		}
	}
	if isObjectSchema(n) {
		if depth > strictMaxDepth || !closedObject(n) {
			return false
		}
		depth++
	}
	return w.subschemas(n, depth)
}

// keyword checks one keyword's value where strict mode restricts it, and
// counts enum values and the characters they hold.
func (w *strictWalk) keyword(k string, v any) bool {
	switch k {
	case "type":
		return knownTypes(v)
	case "$ref":
		s, ok := v.(string)
		return ok && len(s) > 0 && s[0] == '#'
	case "format":
		s, ok := v.(string)
		return ok && slices.Contains(strictFormats, s)
	case "enum":
		return w.enum(v)
	case "const":
		if s, ok := v.(string); ok {
			w.chars += len(s)
		}
	}
	return true
}

// enum counts an enum's values and their characters.
func (w *strictWalk) enum(v any) bool {
	values, ok := v.([]any)
	if !ok {
		return false
	}
	w.enums += len(values)
	chars := 0
	for _, e := range values {
		if s, ok := e.(string); ok {
			chars += len(s)
		}
	}
	w.chars += chars
	return len(values) <= strictBigEnum || chars <= strictBigEnumChars
}

// subschemas walks the schemas a node holds: properties, items, anyOf
// branches, $defs and definitions.
func (w *strictWalk) subschemas(n map[string]any, depth int) bool {
	for _, k := range []string{"properties", "$defs", "definitions"} {
		if !w.named(n, k, depth) {
			return false
		}
	}
	if items, ok := n["items"]; ok && !w.schema(items, depth) {
		return false
	}
	if anyOf, ok := n["anyOf"]; ok {
		branches, isList := anyOf.([]any)
		if !isList || len(branches) == 0 {
			return false
		}
		for _, b := range branches {
			if !w.schema(b, depth) {
				return false
			}
		}
	}
	return true
}

// named walks a map of named schemas (properties, $defs), counting the
// names' characters, and the properties themselves.
func (w *strictWalk) named(n map[string]any, key string, depth int) bool {
	v, ok := n[key]
	if !ok {
		return true
	}
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	if key == "properties" {
		w.props += len(m)
	}
	for name, s := range m {
		w.chars += len(name)
		if !w.schema(s, depth) {
			return false
		}
	}
	return true
}

// schema walks a subschema, which must be a JSON object (strict mode takes
// no boolean schemas).
func (w *strictWalk) schema(v any, depth int) bool {
	m, ok := v.(map[string]any)
	return ok && w.node(m, depth)
}

// knownTypes reports whether a type keyword's value is a known type or a
// list of them.
func knownTypes(v any) bool {
	if list, ok := v.([]any); ok {
		return len(list) > 0 && !slices.ContainsFunc(list, func(t any) bool { return !slices.Contains(strictTypes, t) })
	}
	return slices.Contains(strictTypes, v)
}

// isObjectSchema reports whether a node describes objects: its type is (or
// includes) "object", or it declares properties or additionalProperties.
func isObjectSchema(n map[string]any) bool {
	if _, ok := n["properties"]; ok {
		return true
	}
	if _, ok := n["additionalProperties"]; ok {
		return true
	}
	switch t := n["type"].(type) {
	case string:
		return t == "object"
	case []any:
		return slices.Contains(t, any("object"))
	}
	return false
}

// closedObject reports whether an object schema has additionalProperties
// false and requires exactly its properties.
func closedObject(n map[string]any) bool {
	if n["additionalProperties"] != false {
		return false
	}
	props, _ := n["properties"].(map[string]any)
	required, _ := n["required"].([]any)
	if _, has := n["required"]; has && required == nil {
		return false // required is not a list
	}
	if len(required) != len(props) {
		return false
	}
	seen := make(map[string]bool, len(required))
	for _, r := range required {
		name, ok := r.(string)
		if _, declared := props[name]; !ok || !declared || seen[name] {
			return false
		}
		seen[name] = true
	}
	return true
}
