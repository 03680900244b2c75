package sim

import (
	"slices"
	"strings"
)

// stopIn looks for the request's stop sequences in the text of words, the
// output a step is about to generate (never what the conversation or the
// prefill already holds: a real upstream matches only what it generates).
// When one matches, cut is the tokens to stream instead — those before the
// match, the last one cut mid-token when the match starts inside it — and
// seq is the sequence. The earliest match wins; at the same position, the
// one listed first. Without stop sequences it returns at once and
// allocates nothing, so the common path costs nothing.
func (a *attempt) stopIn(words []string) (cut []string, seq string, ok bool) {
	if len(a.req.StopSequences) == 0 {
		return words, "", false
	}
	text := strings.Join(words, "")
	at := -1
	for _, s := range a.req.StopSequences {
		if s == "" {
			continue // matches everywhere; the service refuses it, and a model would ignore it
		}
		if i := strings.Index(text, s); i >= 0 && (at < 0 || i < at) {
			at, seq = i, s
		}
	}
	if at < 0 {
		return words, "", false
	}
	return cutAt(words, at), seq, true
}

// cutAt returns the tokens of words that make up the first at bytes of
// their text: the token the offset falls inside is cut there, and an empty
// piece is left out, since the sim never streams an empty token. Appending
// the cut piece never writes into words' backing array (clipped first).
func cutAt(words []string, at int) []string {
	pos := 0
	for i, w := range words {
		if pos+len(w) > at {
			out := slices.Clip(words[:i])
			if part := w[:at-pos]; part != "" {
				out = append(out, part)
			}
			return out
		}
		pos += len(w)
	}
	return words
}
