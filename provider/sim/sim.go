package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// Config sets the sim's defaults; request metadata may override them.
type Config struct {
	// Words is the answer length in words; each word is one token (default 40).
	Words int
	// Pace is the delay between two tokens (default 0: as fast as possible).
	Pace time.Duration
	// ContextWindow is the window the sim reports in prompt-too-long errors
	// (default 200 000).
	ContextWindow int
	// StallLimit bounds a scripted stall or hang when the request sets no
	// timeout (default 2 s), so that a stall always ends.
	StallLimit time.Duration
}

// The most a request's metadata may ask of the sim: sim.pace and sim.words
// beyond them are cut to them, so that no caller can hold a stream open for
// long (at most MaxPace × MaxWords, and never past the route's
// provider.Timeouts, which the sim obeys as a real upstream would).
const (
	// MaxPace is the longest delay between two tokens sim.pace may ask for.
	MaxPace = time.Second
	// MaxWords is the longest answer sim.words may ask for, in tokens.
	MaxWords = 10_000
)

// errTotal is the cause of an attempt cut by its Timeouts.Total.
var errTotal = errors.New("sim: attempt exceeded its total limit")

// Provider is the simulator. It is safe for concurrent use.
type Provider struct {
	cfg Config
}

// New returns a simulator with cfg's defaults filled in.
func New(cfg Config) *Provider {
	if cfg.Words <= 0 {
		cfg.Words = 40
	}
	if cfg.ContextWindow <= 0 {
		cfg.ContextWindow = 200_000
	}
	if cfg.StallLimit <= 0 {
		cfg.StallLimit = 2 * time.Second
	}
	return &Provider{cfg: cfg}
}

// Kind returns "sim".
func (p *Provider) Kind() string { return "sim" }

// Stream runs one simulated attempt.
func (p *Provider) Stream(ctx context.Context, req *provider.Request, emit func(provider.Chunk) error) (provider.Finish, error) {
	script, err := ParseScript(req.Metadata[MetaFaults])
	if err != nil {
		return provider.Finish{}, fail(recovery.FailInvalidRequest, http.StatusBadRequest, "invalid_request_error", "", err.Error())
	}
	a := p.newAttempt(req, chooseTools(namedMedia(script.At(req.Attempt), req.Messages), req.ToolChoice))
	return a.run(ctx, emit)
}

// namedMedia is step as it applies to msgs: a media step that names blocks
// rejects those of them that are images or documents of the request, and
// answers normally when none is (as after recovery replaced them with a
// placeholder), as a real upstream accepts a request whose bad media is
// gone. A media step naming no block rejects whatever the request holds.
func namedMedia(step Step, msgs []recovery.Message) Step {
	if step.Kind != StepMedia || len(step.Blocks) == 0 {
		return step
	}
	step.Blocks = slices.DeleteFunc(slices.Clone(step.Blocks), func(r recovery.BlockRef) bool {
		return r.Message >= len(msgs) || r.Block >= len(msgs[r.Message].Blocks) || !msgs[r.Message].Blocks[r.Block].Media()
	})
	if len(step.Blocks) == 0 {
		return Step{Kind: StepOK}
	}
	return step
}

// attempt is one simulated call in progress.
type attempt struct {
	req    *provider.Request
	step   Step
	pace   time.Duration
	stall  time.Duration
	window int
	words  []string // the rest of the answer, one token each
	input  int64
	tokens int // text tokens emitted so far
	// thought is the thinking tokens emitted so far: output tokens like
	// the text's, but never part of the answer nor of its limit.
	thought int
}

func (p *Provider) newAttempt(req *provider.Request, step Step) *attempt {
	words := p.cfg.Words
	if n, err := strconv.Atoi(req.Metadata[MetaWords]); err == nil && n > 0 {
		words = min(n, MaxWords)
	}
	pace := p.cfg.Pace
	if d, err := time.ParseDuration(req.Metadata[MetaPace]); err == nil && d >= 0 {
		pace = min(d, MaxPace)
	}
	stall := p.cfg.StallLimit
	if t := req.Timeouts.Idle; t > 0 {
		stall = t
	}
	return &attempt{
		req: req, step: step, pace: pace, stall: stall, window: p.cfg.ContextWindow,
		words: answerFor(req, words),
		input: promptTokens(req),
	}
}

// run runs the attempt within its Timeouts.Total: an attempt that
// outlives it fails with a total timeout, as a real upstream's would.
func (a *attempt) run(ctx context.Context, emit func(provider.Chunk) error) (provider.Finish, error) {
	total := a.req.Timeouts.Total
	if total <= 0 {
		return a.script(ctx, emit)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, total, errTotal)
	defer cancel()
	fin, err := a.script(ctx, emit)
	if err != nil && errors.Is(context.Cause(ctx), errTotal) {
		f := fail(recovery.FailTimeout, 0, "", "", fmt.Sprintf("attempt exceeded its total limit of %s", total))
		f.Timeout = recovery.TimeoutTotal
		return fin, f
	}
	return fin, err
}

// script plays the attempt's scripted step.
func (a *attempt) script(ctx context.Context, emit func(provider.Chunk) error) (provider.Finish, error) {
	if f := a.failBeforeHeaders(ctx); f != nil {
		return provider.Finish{}, f
	}
	if err := a.think(ctx, emit); err != nil {
		return a.finish(0, a.tokens), err
	}
	switch a.step.Kind {
	case StepCut, StepStall, StepStreamOverload:
		return a.streamThenBreak(ctx, emit)
	case StepToolUse, StepToolCut, StepToolReset:
		return a.toolUse(ctx, emit)
	case StepRefusal:
		return a.stream(ctx, emit, []string{"I can't help with that."}, recovery.StopRefusal)
	case StepMaxTokens:
		return a.stream(ctx, emit, a.words[:min(a.limit(a.step.N), len(a.words))], recovery.StopMaxTokens)
	case StepShort:
		return a.stream(ctx, emit, a.words[:min(a.step.N, len(a.words))], recovery.StopEndTurn)
	}
	if n := a.limit(0); n < len(a.words) {
		return a.stream(ctx, emit, a.words[:n], recovery.StopMaxTokens)
	}
	return a.stream(ctx, emit, a.words, recovery.StopEndTurn)
}

// limit is the number of tokens the call may produce: n when set, capped by max_tokens.
func (a *attempt) limit(n int) int {
	m := a.req.MaxTokens
	if m <= 0 {
		m = len(a.words)
	}
	if n > 0 && n < m {
		return n
	}
	return m
}

// failBeforeHeaders returns the failure of a step that fails before any token.
func (a *attempt) failBeforeHeaders(ctx context.Context) *recovery.Failure {
	switch a.step.Kind {
	case StepRateLimit:
		f := fail(recovery.FailRateLimit, 429, "rate_limit_error", "", "Number of request tokens has exceeded your per-minute rate limit")
		f.RetryAfter = a.step.Delay
		return f
	case StepOverload:
		return fail(recovery.FailOverloaded, 529, "overloaded_error", "", "Overloaded")
	case StepServerError:
		return serverError(a.step.N)
	case StepReset:
		return fail(recovery.FailConnection, 0, "", "", "read: connection reset by peer")
	case StepHang:
		return a.hang(ctx, recovery.TimeoutHeaders)
	case StepPromptTooLong:
		f := fail(recovery.FailPromptTooLong, 400, "invalid_request_error", "",
			fmt.Sprintf("prompt is too long: %d tokens > %d maximum", max(a.input, int64(a.window)+1), a.window))
		f.PromptTokens, f.ContextWindow = int(max(a.input, int64(a.window)+1)), a.window
		return f
	case StepContextLimit:
		return a.contextLimit()
	case StepMedia:
		if len(a.step.Blocks) > 0 {
			return mediaRejection(a.req.Messages, a.step.Blocks)
		}
		return fail(recovery.FailMedia, 400, "invalid_request_error", "", "Could not process image")
	case StepContentFilter:
		return fail(recovery.FailContentFilter, 400, "invalid_request_error", "content_filter", "Output blocked by content filtering policy")
	case StepAuth:
		return fail(recovery.FailAuth, 401, "authentication_error", "", "invalid x-api-key")
	case StepNotFound:
		return fail(recovery.FailNotFound, 404, "not_found_error", "", "model: "+a.req.Model)
	case StepQuota:
		return fail(recovery.FailQuota, 429, "insufficient_quota", "insufficient_quota", "You exceeded your current quota, please check your plan and billing details.")
	case StepInvalid:
		return fail(recovery.FailInvalidRequest, 400, "invalid_request_error", "", "messages: invalid request")
	case StepPrefillRejected:
		if a.req.Prefill != "" {
			return fail(recovery.FailPrefillRejected, 400, "invalid_request_error", "", "This model does not support assistant message prefill.")
		}
	}
	return nil
}

// mediaRejection is the 400 of a media step that names refs, every one a
// media block of msgs: the message is Anthropic's, which names the first
// ("messages.0.content.1.image.source.base64: …"), and MediaBlocks are
// the refs, as the real providers' classification reads them.
func mediaRejection(msgs []recovery.Message, refs []recovery.BlockRef) *recovery.Failure {
	r := refs[0]
	b := msgs[r.Message].Blocks[r.Block]
	kind, source := "image", "base64"
	if b.Kind == recovery.BlockDocument {
		kind = "document"
	}
	why := fmt.Sprintf("The image was specified using the %s media type, but does not appear to be a valid image", b.MediaType)
	switch {
	case b.URL != "":
		source, why = "url", "Unable to download the file. Please verify the URL and try again."
	case b.Kind == recovery.BlockDocument:
		why = "The PDF specified was not valid."
	}
	f := fail(recovery.FailMedia, 400, "invalid_request_error", "",
		fmt.Sprintf("messages.%d.content.%d.%s.source.%s: %s", r.Message, r.Block, kind, source, why))
	f.MediaBlocks = slices.Clone(refs)
	return f
}

func (a *attempt) contextLimit() *recovery.Failure {
	x, y := int(a.input), a.req.MaxTokens
	z := x + y - 1
	f := fail(recovery.FailContextLimit, 400, "invalid_request_error", "",
		fmt.Sprintf("input length and `max_tokens` exceed context limit: %d + %d > %d, decrease input length or `max_tokens` and try again", x, y, z))
	f.InputTokens, f.MaxTokens, f.ContextWindow = x, y, z
	return f
}

func serverError(status int) *recovery.Failure {
	if status == 0 {
		status = 500
	}
	typ := "api_error"
	if status == 503 {
		typ = "service_unavailable"
	}
	return fail(recovery.FailServer, status, typ, "", http.StatusText(status))
}

// hang waits until the caller gives up or the sim's own limit passes.
func (a *attempt) hang(ctx context.Context, phase recovery.TimeoutPhase) *recovery.Failure {
	limit := a.stall
	if phase == recovery.TimeoutHeaders && a.req.Timeouts.Headers > 0 {
		limit = a.req.Timeouts.Headers
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil
	case <-t.C:
		f := fail(recovery.FailTimeout, 0, "", "", fmt.Sprintf("no data for %s", limit))
		f.Timeout = phase
		return f
	}
}

// stream says words and stops with stop, unless a stop sequence ends them
// first. Words is all the step generates, up to its limit or its end, so a
// sequence only the tokens past a max_tokens cut would complete never
// matches, as with a real model.
func (a *attempt) stream(ctx context.Context, emit func(provider.Chunk) error, words []string, stop recovery.StopReason) (provider.Finish, error) {
	if cut, seq, ok := a.stopIn(words); ok {
		return a.say(ctx, emit, cut, recovery.StopSequence, seq)
	}
	return a.say(ctx, emit, words, stop, "")
}

// say emits words, then finishes with stop (and seq, the stop sequence of
// recovery.StopSequence).
func (a *attempt) say(ctx context.Context, emit func(provider.Chunk) error, words []string, stop recovery.StopReason, seq string) (provider.Finish, error) {
	if err := a.emitAll(ctx, emit, words); err != nil {
		return a.finish(0, a.tokens), err
	}
	fin := a.finish(stop, len(words))
	fin.StopSequence = seq
	return fin, nil
}

// emitAll emits words, one token each.
func (a *attempt) emitAll(ctx context.Context, emit func(provider.Chunk) error, words []string) error {
	for _, w := range words {
		if err := a.emitText(ctx, emit, w); err != nil {
			return err
		}
	}
	return nil
}

func (a *attempt) streamThenBreak(ctx context.Context, emit func(provider.Chunk) error) (provider.Finish, error) {
	n := a.step.N
	if n == 0 && a.step.Kind != StepStreamOverload {
		n = 5
	}
	n = min(n, max(len(a.words)-1, 0)) // break before the end, or the answer would be complete
	if cut, seq, ok := a.stopIn(a.words[:n]); ok {
		// The answer reaches a stop sequence before the break: it ends
		// there, as a real model's would, and the break never comes.
		return a.say(ctx, emit, cut, recovery.StopSequence, seq)
	}
	if err := a.emitAll(ctx, emit, a.words[:n]); err != nil {
		return a.finish(0, a.tokens), err
	}
	switch a.step.Kind {
	case StepStall:
		if f := a.hang(ctx, recovery.TimeoutIdle); f != nil {
			return a.finish(0, n), f
		}
		return a.finish(0, n), ctx.Err()
	case StepStreamOverload:
		return a.finish(0, n), fail(recovery.FailOverloaded, 200, "overloaded_error", "", "Overloaded")
	}
	return a.finish(0, n), fail(recovery.FailStreamBroken, 200, "", "", "unexpected EOF before message_stop")
}

// toolPreamble is what the sim says before it calls a tool.
var toolPreamble = []string{"Let me check. "}

// chooseTools makes step obey the request's tool choice, as a real model
// must: "any" turns a plain answer into a call of the first tool, "tool"
// makes every call (a plain answer's included) call the named tool, and
// "none" turns every tool step into a plain answer, since the model may not
// call. Auto and the default leave the script as it is; so does
// DisableParallel, since the sim never makes more than one call.
func chooseTools(step Step, choice provider.ToolChoice) Step {
	tool := step.Kind == StepToolUse || step.Kind == StepToolCut || step.Kind == StepToolReset
	switch choice.Mode {
	case provider.ToolChoiceAny:
		if step.Kind == StepOK {
			step.Kind = StepToolUse
		}
	case provider.ToolChoiceTool:
		if step.Kind == StepOK {
			step.Kind, tool = StepToolUse, true
		}
		if tool {
			step.Name = choice.Name
		}
	case provider.ToolChoiceNone:
		if tool {
			step = Step{Kind: StepOK}
		}
	}
	return step
}

// toolUse says a few words and calls a tool: whole (tool_use), cut by the
// output limit (tool_cut: the call is dropped, as the real providers drop
// it, and the attempt stops with max_tokens), or whole and then the
// connection reset before the finish (tool_reset). A stop sequence in the
// words ends the answer before any call.
func (a *attempt) toolUse(ctx context.Context, emit func(provider.Chunk) error) (provider.Finish, error) {
	name := a.step.Name
	if name == "" {
		name = "lookup"
		if len(a.req.Tools) > 0 {
			name = a.req.Tools[0].Name
		}
	}
	if cut, seq, ok := a.stopIn(toolPreamble); ok {
		return a.say(ctx, emit, cut, recovery.StopSequence, seq)
	}
	if err := a.emitAll(ctx, emit, toolPreamble); err != nil {
		return a.finish(0, 1), err
	}
	if a.step.Kind == StepToolCut {
		return a.finish(recovery.StopMaxTokens, a.limit(12)), nil
	}
	call := recovery.ToolCall{
		ID:    fmt.Sprintf("toolu_sim_%d_%d", a.req.Attempt, len(a.req.Messages)),
		Name:  name,
		Input: []byte(fmt.Sprintf(`{"query":%q}`, truncate(firstUserText(a.req.Messages), 40))),
	}
	if err := emit(provider.Chunk{Kind: provider.ChunkToolCall, ToolCall: call}); err != nil {
		return a.finish(0, 1), err
	}
	if a.step.Kind == StepToolReset {
		return a.finish(0, 12), fail(recovery.FailStreamBroken, 200, "", "", "read: connection reset by peer before message_stop")
	}
	return a.finish(recovery.StopToolUse, 12), nil
}

// emitText emits w as a token of the answer.
func (a *attempt) emitText(ctx context.Context, emit func(provider.Chunk) error, w string) error {
	if err := a.emitToken(ctx, emit, provider.ChunkText, w); err != nil {
		return err
	}
	a.tokens++
	return nil
}

// emitToken waits the pace, then emits w as a chunk of kind. The pace is
// the upstream's silence: the first-token limit (before the first token,
// thinking or text) or the idle limit (before the next ones) cuts a pace
// longer than itself with a timeout, as it would cut a real upstream.
func (a *attempt) emitToken(ctx context.Context, emit func(provider.Chunk) error, kind provider.ChunkKind, w string) error {
	wait, limit, phase := a.pace, a.req.Timeouts.Idle, recovery.TimeoutIdle
	if a.tokens+a.thought == 0 {
		limit, phase = a.req.Timeouts.FirstToken, recovery.TimeoutFirstToken
	}
	timedOut := limit > 0 && wait > limit
	if timedOut {
		wait = limit
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	} else if err := ctx.Err(); err != nil {
		return err
	}
	if timedOut {
		f := fail(recovery.FailTimeout, 0, "", "", fmt.Sprintf("no token for %s", limit))
		f.Timeout = phase
		return f
	}
	return emit(provider.Chunk{Kind: kind, Text: w})
}

func (a *attempt) finish(stop recovery.StopReason, outTokens int) provider.Finish {
	return provider.Finish{
		StopReason: stop,
		Model:      a.req.Model,
		ID:         "msg_sim_" + strconv.Itoa(a.req.Attempt),
		Usage:      recovery.Usage{InputTokens: a.input, OutputTokens: int64(outTokens + a.thought)},
	}
}

func fail(kind recovery.FailureKind, status int, typ, code, msg string) *recovery.Failure {
	return &recovery.Failure{Kind: kind, Provider: "sim", HTTPStatus: status, Type: typ, Code: code,
		Message: msg, RequestID: "req_sim_" + strconv.FormatUint(uint64(hash(msg)), 36)}
}

func hash(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// answerFor is what is left to say: the rest of the generated answer to
// the first user message (or of a "sim.reply"), after what the conversation
// already holds; a reply scripted for this very attempt is said whole, after
// any prefill.
func answerFor(req *provider.Request, words int) []string {
	if reply := req.Metadata[fmt.Sprintf("%s.%d", MetaReply, req.Attempt)]; reply != "" {
		return remaining(splitTokens(reply), req.Prefill)
	}
	if reply := req.Metadata[MetaReply]; reply != "" {
		return remaining(splitTokens(reply), produced(req))
	}
	return remaining(Answer(firstUserText(req.Messages), words), produced(req))
}

// splitTokens cuts s before each space, so the tokens concatenate to s.
func splitTokens(s string) []string {
	var out []string
	start := 0
	for i := 1; i < len(s); i++ {
		if s[i] == ' ' {
			out = append(out, s[start:i])
			start = i
		}
	}
	return append(out, s[start:])
}

// firstUserText is the text of the first user message: the sim's "prompt".
func firstUserText(msgs []recovery.Message) string {
	for _, m := range msgs {
		if m.Role == recovery.RoleUser {
			return m.Text()
		}
	}
	return ""
}

// produced is the answer text already in the conversation: every assistant
// text since the first user message, then the prefill.
func produced(req *provider.Request) string {
	var b strings.Builder
	for _, m := range req.Messages {
		if m.Role == recovery.RoleAssistant {
			b.WriteString(m.Text())
		}
	}
	b.WriteString(req.Prefill)
	return b.String()
}

// promptTokens is the sim's token count of a prompt: about four bytes a
// token, and its images and documents as the machine estimates them
// (recovery.MediaTokens: a flat 1 600 per image, inline or by URL, as
// Anthropic counts a large one; a document by its pages). The sim never
// fetches a URL.
func promptTokens(req *provider.Request) int64 {
	n, media := len(req.System), 0
	for _, m := range req.Messages {
		for _, b := range m.Blocks {
			if b.Media() {
				media += recovery.MediaTokens(b)
				continue
			}
			n += len(b.Text) + len(b.ToolInput)
		}
	}
	return int64(n/4 + 1 + media)
}
