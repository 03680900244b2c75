// Package sse reads the server-sent event streams of the LLM APIs — the
// body of a streamed Anthropic Messages or OpenAI Chat Completions call —
// for the providers that take the raw response from their SDK and decode
// it themselves (see the openai and anthropic packages): the SDKs' own
// stream decoding (a bufio.Scanner per line, then reflection-based JSON of
// every field of every event) was about a third of the service's CPU per
// streamed token.
//
// Reader frames the body as the HTML standard's event-stream
// interpretation says (https://html.spec.whatwg.org/multipage/server-sent-events.html):
// lines end in CRLF, LF or CR; a leading byte order mark is dropped; a
// line starting with a colon is a comment (keep-alives); "data" lines are
// joined with LF, with one space after the colon dropped, "event" names the
// event, "id" and "retry" are ignored (an attempt is never resumed with
// Last-Event-ID: the recovery machine decides what follows a broken
// stream), and so is every other field; a blank line dispatches the event,
// unless no data came. An event the body ends in the middle of — before its
// blank line — is not dispatched: the standard says so, the SDKs did the
// same, and a body cut mid-event may have cut its last line too.
//
// Reader is bounded: a line or an event's data longer than its limit
// (MaxEvent for the providers) ends the stream with ErrTooLarge instead of
// growing without end. It reuses its buffers from event to event, so that
// framing allocates nothing per event once they have grown to the stream's
// usual size; buffers grown for an outsized event are let go afterwards.
//
// JSON is the other half both providers share: it checks an event's data
// the way encoding/json does — the failure of a malformed event is the
// *json.SyntaxError the SDKs gave — and hands it to gjson without copying.
// Decode then reads the fields a decoder declares (String, Int, Object,
// Objects, Value) in one pass over the bytes, skipping the rest unread,
// with the rules of the SDKs' apijson, which is built on gjson: the same
// conversions of wrong types, the first of duplicate keys, an array of
// objects dropped whole when an element is not one. The providers' parity
// fuzz tests hold their decoders to the SDKs' results on any input.
package sse
