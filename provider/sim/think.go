package sim

import (
	"context"
	"fmt"
	"strings"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// thinkingVocabulary is what the sim's reasoning is made of.
var thinkingVocabulary = strings.Fields(`first read the question then recall what the service
does weigh which facts matter check them against each other note what is still open and plan
a short clear answer that says only what was asked`)

// effortWords is how many tokens the sim reasons for at each effort. The
// most, MaxThinkingWords, keeps a reasoning demo short whatever was asked.
var effortWords = map[string]int{"minimal": 4, "low": 8, "medium": 16, "high": MaxThinkingWords}

// MaxThinkingWords is the longest reasoning the sim streams, in tokens.
const MaxThinkingWords = 32

// thinkingWords is the length of the reasoning req asks for, in tokens: by
// its effort, or by its thinking budget read as the API maps a budget to an
// effort (up to 2048 low, up to 8192 medium, above high); the larger when
// both are set. 0 when req asks for no reasoning.
func thinkingWords(req *provider.Request) int {
	n := 0
	if e := req.Reasoning.Effort; e != "" {
		n = effortWords[e]
		if n == 0 {
			n = effortWords["medium"] // an effort the sim does not know: the providers' default
		}
	}
	switch b := req.ThinkingBudget; {
	case b <= 0:
	case b <= 2048:
		n = max(n, effortWords["low"])
	case b <= 8192:
		n = max(n, effortWords["medium"])
	default:
		n = max(n, effortWords["high"])
	}
	return n
}

// thinks reports whether the sim reasons before its output to req: when
// req asks for reasoning, except on a prefill (a continuation of an answer
// already under way, which Anthropic refuses together with thinking
// anyway) and after tool results unless req asks for interleaved thinking
// (without it, a model thinks once at the start of its turn, and tool
// results continue that turn).
func thinks(req *provider.Request) bool {
	if thinkingWords(req) == 0 || req.Prefill != "" {
		return false
	}
	return req.Reasoning.Interleaved || !afterToolResults(req.Messages)
}

// afterToolResults reports whether msgs end with tool results: the model
// continues a turn in which it called tools.
func afterToolResults(msgs []recovery.Message) bool {
	if len(msgs) == 0 {
		return false
	}
	last := msgs[len(msgs)-1]
	return last.Role == recovery.RoleUser && len(last.Blocks) > 0 && last.Blocks[0].Kind == recovery.BlockToolResult
}

// Reasoning returns the sim's deterministic reasoning about prompt, as
// words tokens; afterTools reasons about tool results instead of the
// question. Every token but the first starts with a space.
func Reasoning(prompt string, words int, afterTools bool) []string {
	lead := fmt.Sprintf("Reasoning about %q:", truncate(prompt, 32))
	if afterTools {
		lead = fmt.Sprintf("Reasoning about the tool results for %q:", truncate(prompt, 32))
	}
	return sentence(lead, prompt, words, thinkingVocabulary)
}

// signedPrefix starts the signatures signatureFor makes.
const signedPrefix = "sig-for:"

// signatureFor is the signature of a thinking block model wrote: the form
// providertest.SignatureFor gives, which the fault server checks (valid for
// that model only), written out here because the sim imports nothing but
// provider and recovery.
func signatureFor(model string) string { return signedPrefix + model }

// think streams the attempt's reasoning, when its request asks for one, as
// ChunkThinking tokens, then the whole block, signed for the request's
// model, as a ChunkThinkingBlock. The tokens count as output (a.thought).
func (a *attempt) think(ctx context.Context, emit func(provider.Chunk) error) error {
	if !thinks(a.req) {
		return nil
	}
	words := Reasoning(firstUserText(a.req.Messages), thinkingWords(a.req), afterToolResults(a.req.Messages))
	for _, w := range words {
		if err := a.emitToken(ctx, emit, provider.ChunkThinking, w); err != nil {
			return err
		}
		a.thought++
	}
	b := recovery.Block{Kind: recovery.BlockThinking, Text: strings.Join(words, ""), Signature: signatureFor(a.req.Model)}
	return emit(provider.Chunk{Kind: provider.ChunkThinkingBlock, Block: b})
}
