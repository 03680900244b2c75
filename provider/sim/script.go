package sim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/completiond/completiond/recovery"
)

// Metadata keys the sim reads from a request.
const (
	// MetaFaults is the fault script: comma-separated steps, one per attempt.
	MetaFaults = "sim.faults"
	// MetaWords is the answer length in words (tokens).
	MetaWords = "sim.words"
	// MetaPace is the delay between two tokens, as a Go duration ("20ms").
	MetaPace = "sim.pace"
	// MetaReply replaces the generated answer with this text, split into
	// tokens at spaces; "sim.reply.N" does so for attempt N only.
	MetaReply = "sim.reply"
)

// StepKind is what the sim does on one attempt.
type StepKind int

// The step kinds. Their script names are listed in stepNames.
const (
	StepOK StepKind = iota
	StepRateLimit
	StepOverload
	StepServerError
	StepReset
	StepCut
	StepStall
	StepHang
	StepMaxTokens
	StepShort
	StepPromptTooLong
	StepContextLimit
	StepMedia
	StepToolUse
	StepRefusal
	StepContentFilter
	StepAuth
	StepNotFound
	StepQuota
	StepInvalid
	StepPrefillRejected
	StepStreamOverload
	StepToolCut
	StepToolReset
)

// stepNames maps script names to kinds; the comment says what the arg means.
var stepNames = map[string]StepKind{
	"ok":               StepOK,              // answer normally
	"rate_limit":       StepRateLimit,       // 429; arg: Retry-After duration ("2s", "1500ms")
	"overload":         StepOverload,        // 529 overloaded_error before the stream
	"stream_overload":  StepStreamOverload,  // overloaded_error inside a 200 stream; arg: tokens first
	"server_error":     StepServerError,     // arg: HTTP status (500, 502, 503, 504; default 500)
	"reset":            StepReset,           // connection reset before headers
	"cut":              StepCut,             // stream breaks after arg tokens (default 5)
	"stall":            StepStall,           // stream goes silent after arg tokens (default 5)
	"hang":             StepHang,            // no response headers at all
	"max_tokens":       StepMaxTokens,       // stop max_tokens after arg tokens (default: max_tokens of the call)
	"short":            StepShort,           // stop end_turn after arg tokens
	"prompt_too_long":  StepPromptTooLong,   // 400 prompt is too long
	"context_limit":    StepContextLimit,    // 400 input + max_tokens > context limit
	"media":            StepMedia,           // 400 image rejected; arg: the blocks it names, M.B[+M.B...] (messages[M].content[B])
	"tool_use":         StepToolUse,         // tool call; arg: tool name (default: the first tool, else "lookup")
	"tool_cut":         StepToolCut,         // text, then a tool call cut by the limit: stop max_tokens, no call; arg: tool name
	"tool_reset":       StepToolReset,       // text and a whole tool call, then the stream breaks (reset); arg: tool name
	"refusal":          StepRefusal,         // stop refusal
	"content_filter":   StepContentFilter,   // 400 content policy
	"auth":             StepAuth,            // 401 invalid x-api-key
	"not_found":        StepNotFound,        // 404 model not found
	"quota":            StepQuota,           // 429 insufficient_quota
	"invalid":          StepInvalid,         // 400 invalid_request_error
	"prefill_rejected": StepPrefillRejected, // 400 prefill refused (only when the call has a prefill)
}

// Step is one scripted attempt.
type Step struct {
	// Kind is what happens.
	Kind StepKind
	// N is the step's count argument (tokens, HTTP status), 0 if none.
	N int
	// Delay is the step's duration argument (Retry-After), 0 if none.
	Delay time.Duration
	// Name is the step's argument as text (a tool name).
	Name string
	// Blocks are the blocks a media step names as the ones it rejects:
	// "media=0.1" rejects messages[0].content[1]. Empty, the step rejects
	// the request without naming a block.
	Blocks []recovery.BlockRef
}

// Script is a parsed fault script.
type Script []Step

// At returns the step of attempt n (1-based); attempts past the script answer normally.
func (s Script) At(n int) Step {
	if n < 1 || n > len(s) {
		return Step{Kind: StepOK}
	}
	return s[n-1]
}

// ParseScript parses a fault script such as
// "rate_limit=2s,overload,overload,overload,cut=7,ok". Each step is a name
// from the table above, optionally followed by "=arg"; "*N" repeats a step
// ("overload*3"). An empty script answers every attempt normally.
func ParseScript(s string) (Script, error) {
	var out Script
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for i, raw := range strings.Split(s, ",") {
		st, times, err := parseStep(strings.TrimSpace(raw))
		if err != nil {
			return nil, fmt.Errorf("step %d %q: %w", i+1, raw, err)
		}
		for range times {
			out = append(out, st)
		}
		if len(out) > 100 {
			return nil, fmt.Errorf("script longer than 100 steps")
		}
	}
	return out, nil
}

func parseStep(raw string) (Step, int, error) {
	times := 1
	if body, rep, ok := strings.Cut(raw, "*"); ok {
		n, err := strconv.Atoi(rep)
		if err != nil || n < 1 || n > 100 {
			return Step{}, 0, fmt.Errorf("repeat must be 1..100")
		}
		raw, times = body, n
	}
	name, arg, hasArg := strings.Cut(raw, "=")
	kind, ok := stepNames[name]
	if !ok {
		return Step{}, 0, fmt.Errorf("unknown step %q (known: %s)", name, knownSteps())
	}
	st := Step{Kind: kind}
	if !hasArg {
		return st, times, nil
	}
	return st, times, st.setArg(arg)
}

func (st *Step) setArg(arg string) error {
	switch st.Kind {
	case StepRateLimit:
		d, err := time.ParseDuration(arg)
		if err != nil || d < 0 || d > 10*time.Minute {
			return fmt.Errorf("retry-after must be a duration up to 10m")
		}
		st.Delay = d
	case StepServerError, StepCut, StepStall, StepMaxTokens, StepShort, StepStreamOverload:
		n, err := strconv.Atoi(arg)
		if err != nil || n < 0 || n > 1_000_000 {
			return fmt.Errorf("argument must be a count")
		}
		st.N = n
	case StepToolUse, StepToolCut, StepToolReset:
		st.Name = arg
	case StepMedia:
		for _, ref := range strings.Split(arg, "+") {
			r, err := parseRef(ref)
			if err != nil {
				return err
			}
			st.Blocks = append(st.Blocks, r)
		}
	default:
		return fmt.Errorf("takes no argument")
	}
	return nil
}

// parseRef parses "M.B", the block messages[M].content[B].
func parseRef(s string) (recovery.BlockRef, error) {
	m, b, ok := strings.Cut(s, ".")
	mi, err1 := strconv.Atoi(m)
	bi, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || mi < 0 || bi < 0 || mi > 100_000 || bi > 100_000 {
		return recovery.BlockRef{}, fmt.Errorf("block %q must be M.B, for messages[M].content[B]", s)
	}
	return recovery.BlockRef{Message: mi, Block: bi}, nil
}

func knownSteps() string {
	names := make([]string, 0, len(stepNames))
	for n := range stepNames {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
