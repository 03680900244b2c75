package sim

import (
	"fmt"
	"strings"
)

var vocabulary = strings.Fields(`the service keeps every answer whole when upstream models fail
it retries transient errors with jittered backoff honours retry after headers falls back to
another route after repeated overloads continues truncated output and compacts prompts that
grow too long each decision is reported to the caller as a typed transition event`)

// Answer returns the sim's deterministic answer to prompt, as words tokens.
// Every token but the first starts with a space, so the tokens concatenate
// to readable text.
func Answer(prompt string, words int) []string {
	return sentence(fmt.Sprintf("Simulated answer to %q:", truncate(prompt, 32)), prompt, words, vocabulary)
}

// sentence is lead and then words−1 tokens of vocab, chosen by prompt's
// hash, the last ending in a full stop.
func sentence(lead, prompt string, words int, vocab []string) []string {
	out := append(make([]string, 0, words), lead)
	seed := int(hash(prompt) % uint32(len(vocab)))
	for i := 1; i < words; i++ {
		w := " " + vocab[(seed+i)%len(vocab)]
		if i == words-1 {
			w += "."
		}
		out = append(out, w)
	}
	return out
}

// remaining returns the tokens of answer that come after done. When done is
// not a prefix of the answer (or already covers it), the sim starts a fresh
// extension, so a budget continuation still has something to say.
func remaining(answer []string, done string) []string {
	if done == "" {
		return answer
	}
	pos := 0
	for i, w := range answer {
		if pos == len(done) {
			return answer[i:]
		}
		if pos+len(w) > len(done) || done[pos:pos+len(w)] != w {
			break
		}
		pos += len(w)
	}
	ext := make([]string, len(answer))
	for i := range answer {
		ext[i] = " " + strings.TrimSpace(strings.TrimPrefix(answer[len(answer)-1-i], " "))
	}
	ext[0] = " More:"
	return ext
}
