package recovery

import "fmt"

// ContinuationPrompt is the user message appended after a truncated answer by
// MAX_OUTPUT_TOKENS_RECOVERY. The wording is Claude Code's: it stops the
// model from apologising or recapping, which would break the concatenated
// answer.
const ContinuationPrompt = "Output token limit hit. Resume directly — no apology, no recap of what you were doing. " +
	"Pick up mid-thought if that is where the cut happened. Break remaining work into smaller pieces."

// TokenBudgetPromptFormat is the user message of TOKEN_BUDGET_CONTINUATION;
// its verbs are the percentage reached, the kept output tokens and the
// budget. Use TokenBudgetPrompt to fill it in.
const TokenBudgetPromptFormat = "Stopped at %d%% of token target (%d / %d). Keep working — do not summarize."

// SummarySystemPrompt is the system prompt of the summarising call that
// AUTO_COMPACT and REACTIVE_COMPACT_RETRY make.
const SummarySystemPrompt = "You summarise conversations so that they can continue in less space. " +
	"Write a concise summary of the conversation you are given. Keep every fact, decision, file, " +
	"number, open question and piece of unfinished work that later turns may need; drop pleasantries " +
	"and repetition. Reply with the summary only."

// SummaryPrefix starts the user message that replaces the summarised middle
// of a conversation.
const SummaryPrefix = "[Previous conversation summary]\n"

// SummaryMaxTokens is the max_tokens of a summarising call: enough for a
// dense summary, small enough to leave room in the window it must free.
const SummaryMaxTokens = 4000

// ImagePlaceholder replaces an image that an upstream rejected.
const ImagePlaceholder = "[image removed: rejected by upstream]"

// DocumentPlaceholder replaces a document that an upstream rejected.
const DocumentPlaceholder = "[document removed: rejected by upstream]"

// ElidedFormat replaces a block elided by COLLAPSE_DRAIN_RETRY; its verb is
// the number of bytes removed.
const ElidedFormat = "[elided %d bytes]"

// DefaultHookMessage is sent to the model when a stop hook blocks an answer
// without saying why.
const DefaultHookMessage = "A stop hook rejected this answer. Revise it and answer again in full."

// TokenBudgetPrompt returns the TOKEN_BUDGET_CONTINUATION message for n kept
// output tokens against a budget of the given size.
func TokenBudgetPrompt(n, budget int) string {
	pct := 0
	if budget > 0 {
		pct = n * 100 / budget
	}
	return fmt.Sprintf(TokenBudgetPromptFormat, pct, n, budget)
}
