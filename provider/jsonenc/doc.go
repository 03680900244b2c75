// Package jsonenc appends JSON strings to a byte slice, escaped exactly as
// encoding/json escapes them (with HTML escaping off): the request bodies
// that the openai and anthropic providers encode themselves, by appending,
// must be JSON-equal to what their SDKs' reflective encoders send, and both
// use this one escaper.
package jsonenc
