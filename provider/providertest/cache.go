package providertest

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"hash"
	"strconv"
	"sync"
)

// The servers model the providers' prompt caches, so that a test can see
// what a request's cache marks (or its prefix) are worth: what the real
// API would report as cache reads and writes, counted with the same
// estimate on every request.
//
// Anthropic's cache (explicit, cache_control): the prompt is a sequence of
// blocks in the order tools → system → messages (each tool, each system
// block, each message content block; a string system or content is one
// text block). A block carrying cache_control is a breakpoint. For each
// breakpoint the lookup walks back from it over CacheLookback block
// positions, the breakpoint's own included, and stops at the first prefix
// (the prompt up to and including a block) that an earlier request wrote;
// the longest such prefix over the request's breakpoints is read from the
// cache. Then the prefix up to each breakpoint is written, so that the
// tokens from the end of the read prefix to the last breakpoint are the
// cache's creation. A prefix shorter than MinCacheTokens is never written
// (the API caches none, and says nothing). input_tokens is what is left:
// the tokens after the last breakpoint, or the whole prompt when nothing is
// cached — as the API reports it, cache reads and writes apart.
//
// OpenAI's cache (automatic): a prompt of MinCacheTokens or more is cached
// in increments of CacheIncrement tokens; a request reads the longest
// prefix, in whole increments, that an earlier one had (and at least
// MinCacheTokens of it), reported as usage.prompt_tokens_details.
// cached_tokens, which prompt_tokens counts too.
//
// Both caches are keyed by the model as well (a model has its own cache),
// live as long as the server, shared by every request it serves, and never
// expire: the real ones drop an entry unused for 5 minutes (Anthropic's
// default TTL; OpenAI's 5 to 10), far longer than a test, so that a test
// sees what a caller whose requests come within that time would. The
// cache sees the requests whose replies count their prompt
// (Usage.CountPrompt), and each only when the server begins to stream its
// answer (the model read the prompt): an error response, a reset or a hang
// before the headers writes nothing, a stream cut after them does. Thinking
// parameters, which invalidate Anthropic's cached messages, are not
// modelled.
//
// Tokens are estimated as the rest of the repository does, about four bytes
// a token (recovery.EstimateTokens; the server had no estimate of its
// own): each block counts ceil(n/4) tokens, n the length of its canonical
// JSON — the block without its cache_control, keys sorted, as
// encoding/json writes a decoded value — on OpenAI's wire the whole
// prompt's canonical JSON (each tool, then each message), cut in
// CacheIncrement-token (512-byte) pieces. Images are counted as their
// base64 text, not by their pixels.

const (
	// MinCacheTokens is the shortest prefix either cache keeps: 1 024
	// tokens (Anthropic's minimum for its Sonnet and Opus models before
	// Opus 4.5 and Haiku 4.5; OpenAI's for every model).
	MinCacheTokens = 1024
	// CacheLookback is the number of block positions Anthropic's lookup
	// checks for a cached prefix from a breakpoint back, the
	// breakpoint's own included.
	CacheLookback = 20
	// CacheIncrement is the step, in tokens, of OpenAI's cached prefixes.
	CacheIncrement = 128
	// bytesPerToken is the token estimate.
	bytesPerToken = 4
)

// PromptBlock is one block of a request's prompt, as the server's model of
// the provider's prompt cache sees it.
type PromptBlock struct {
	// Path is the block's place in the body: tools.0, system.1 (system for
	// a string), messages.2.content.0 (messages.2.content for a string). On
	// OpenAI's wire a block is a whole tool or message: tools.0,
	// messages.2.
	Path string
	// Breakpoint says the block carries a cache mark (Anthropic
	// cache_control); never on OpenAI's wire.
	Breakpoint bool
	// Tokens is the server's estimate of the block's tokens.
	Tokens int
	// Prefix identifies the prompt up to and including the block, its
	// marks aside: two requests whose blocks at one place have the same
	// Prefix share the prompt up to there (the same model, the same
	// blocks in the same messages).
	Prefix [sha256.Size]byte
}

// CacheStats is what a server's prompt cache did so far.
type CacheStats struct {
	// Lookups is the number of requests the cache was looked up for (each
	// one whose answer the server began to stream).
	Lookups int
	// Hits is the number of those that read a cached prefix.
	Hits int
	// ReadTokens and WriteTokens are the tokens read from and written to
	// the cache, summed over the lookups (as usage reports them).
	ReadTokens, WriteTokens int
	// Entries is the number of prefixes the cache holds.
	Entries int
}

// promptCache is a server's prompt cache: the prefixes written, by their
// Prefix (Anthropic) or the Prefix of their last increment (OpenAI).
type promptCache struct {
	mu      sync.Mutex
	written map[[sha256.Size]byte]bool
	stats   CacheStats
}

// CacheStats is what the server's prompt cache did so far.
func (s *Server) CacheStats() CacheStats {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	st := s.cache.stats
	st.Entries = len(s.cache.written)
	return st
}

// ResetCache empties the server's prompt cache and its statistics, as if
// every entry had expired.
func (s *Server) ResetCache() {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	s.cache.written = nil
	s.cache.stats = CacheStats{}
}

// Prompt is the request's prompt, block by block, as the server's model of
// the provider's prompt cache sees it; nil when the body is not a request
// the server understands.
func (r *Request) Prompt() []PromptBlock {
	if r.wire == nil {
		return nil
	}
	return r.wire.prompt(r.Body)
}

// add counts one lookup, which read and wrote as many tokens, and keeps
// keys as written. c.mu is held.
func (c *promptCache) add(read, written int, keys [][sha256.Size]byte) {
	if c.written == nil {
		c.written = make(map[[sha256.Size]byte]bool)
	}
	for _, k := range keys {
		c.written[k] = true
	}
	c.stats.Lookups++
	if read > 0 {
		c.stats.Hits++
	}
	c.stats.ReadTokens += read
	c.stats.WriteTokens += written
}

// anthropic looks up and writes an Anthropic prompt: its usage's Input,
// CacheRead and CacheWrite (see the top of this file).
func (c *promptCache) anthropic(blocks []PromptBlock) Usage {
	cum := make([]int, len(blocks)) // cum[i]: the tokens of blocks[:i+1]
	total := 0
	for i, b := range blocks {
		total += b.Tokens
		cum[i] = total
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	read := -1 // the last block of the prefix read
	var keys [][sha256.Size]byte
	last := -1 // the last breakpoint whose prefix is long enough to cache
	for i, b := range blocks {
		if !b.Breakpoint {
			continue
		}
		for j := i; j >= 0 && j > i-CacheLookback; j-- {
			if c.written[blocks[j].Prefix] {
				read = max(read, j)
				break
			}
		}
		if cum[i] >= MinCacheTokens {
			keys = append(keys, b.Prefix)
			last = i
		}
	}
	u := Usage{Input: total}
	if read >= 0 {
		u.CacheRead = cum[read]
	}
	if last > read {
		u.CacheWrite = cum[last] - u.CacheRead
	}
	u.Input = total - u.CacheRead - u.CacheWrite
	c.add(u.CacheRead, u.CacheWrite, keys)
	return u
}

// openai looks up and writes an OpenAI prompt of total tokens whose
// increments' prefixes are steps (steps[k] the prompt's first
// (k+1)·CacheIncrement tokens).
func (c *promptCache) openai(total int, steps [][sha256.Size]byte) Usage {
	const first = MinCacheTokens/CacheIncrement - 1 // the step of the shortest cacheable prefix
	c.mu.Lock()
	defer c.mu.Unlock()
	cached := 0
	for k := first; k < len(steps) && c.written[steps[k]]; k++ {
		cached = (k + 1) * CacheIncrement
	}
	var keys [][sha256.Size]byte
	if len(steps) > first {
		keys = steps[first:]
	}
	c.add(cached, 0, keys)
	return Usage{Input: total - cached, CacheRead: cached}
}

// tokens is the estimate of n bytes.
func tokens(n int) int { return (n + bytesPerToken - 1) / bytesPerToken }

// chain hashes a prompt a block at a time: each Prefix is the hash of the
// one before and of the block, so that a prompt is hashed once, block by
// block, however many prefixes are looked up.
type chain struct {
	h    hash.Hash
	last [sha256.Size]byte
}

// newChain starts the prompt of model.
func newChain(model string) *chain {
	c := &chain{h: sha256.New()}
	c.h.Write([]byte(model))
	c.h.Sum(c.last[:0])
	return c
}

// next is the Prefix of the prompt so far followed by a block of kind
// (where it sits: a tool, the system, the first or a later block of a
// role's message) and canonical JSON b.
func (c *chain) next(kind string, b []byte) [sha256.Size]byte {
	c.h.Reset()
	c.h.Write(c.last[:])
	c.h.Write([]byte(kind))
	c.h.Write([]byte{0})
	c.h.Write(b)
	c.h.Sum(c.last[:0])
	return c.last
}

// canonical is raw's canonical JSON (keys sorted, no spaces) and whether
// it had a cache_control (a non-null one), which it leaves out: a block's
// identity in the cache is its content, not its marks.
func canonical(raw json.RawMessage) (b []byte, mark bool) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber() // numbers as they were written, not rounded through float64
	var v any
	if d.Decode(&v) != nil {
		return raw, false
	}
	if m, ok := v.(map[string]any); ok {
		mark = m["cache_control"] != nil
		delete(m, "cache_control")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return raw, mark
	}
	return b, mark
}

// textBlock is the block a string system prompt or message content
// stands for: the API reads "x" as [{"type":"text","text":"x"}].
func textBlock(raw json.RawMessage) (json.RawMessage, bool) {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return nil, false
	}
	return json.RawMessage(mustJSON(map[string]any{"type": "text", "text": s})), true
}

// blocks is a system prompt or message content: its blocks, or the one a
// string stands for (path then names the whole, not an element).
func blocks(raw json.RawMessage) (elems []json.RawMessage, whole bool) {
	if b, ok := textBlock(raw); ok {
		return []json.RawMessage{b}, true
	}
	_ = json.Unmarshal(raw, &elems)
	return elems, false
}

// prompt is the body's prompt on Anthropic's wire: tools, system, then
// each message's content blocks.
func (anthropicWire) prompt(body []byte) []PromptBlock {
	var req struct {
		Model    string            `json:"model"`
		Tools    []json.RawMessage `json:"tools"`
		System   json.RawMessage   `json:"system"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil {
		return nil
	}
	c := newChain(req.Model)
	var out []PromptBlock
	add := func(path, kind string, raw json.RawMessage) {
		b, mark := canonical(raw)
		out = append(out, PromptBlock{Path: path, Breakpoint: mark, Tokens: tokens(len(b)), Prefix: c.next(kind, b)})
	}
	for i, t := range req.Tools {
		add("tools."+strconv.Itoa(i), "tool", t)
	}
	if len(req.System) > 0 {
		elems, whole := blocks(req.System)
		for i, b := range elems {
			path := "system"
			if !whole {
				path += "." + strconv.Itoa(i)
			}
			add(path, "system", b)
		}
	}
	for i, m := range req.Messages {
		elems, whole := blocks(m.Content)
		for j, b := range elems {
			path := "messages." + strconv.Itoa(i) + ".content"
			if !whole {
				path += "." + strconv.Itoa(j)
			}
			kind := m.Role // a block that begins a message says so: [a][b] is not [a b]
			if j == 0 {
				kind += " message"
			}
			add(path, kind, b)
		}
	}
	return out
}

// countPrompt looks the body's prompt up in Anthropic's cache and writes it.
func (w anthropicWire) countPrompt(c *promptCache, body []byte) Usage {
	return c.anthropic(w.prompt(body))
}

// openaiPrompt is the body's prompt on the Chat Completions wire: each
// tool, then each message, with the canonical JSON of each, and its model.
func openaiPrompt(body []byte) (model string, paths []string, canon [][]byte) {
	var req struct {
		Model    string            `json:"model"`
		Tools    []json.RawMessage `json:"tools"`
		Messages []json.RawMessage `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil {
		return "", nil, nil
	}
	for i, t := range req.Tools {
		b, _ := canonical(t)
		paths, canon = append(paths, "tools."+strconv.Itoa(i)), append(canon, b)
	}
	for i, m := range req.Messages {
		b, _ := canonical(m)
		paths, canon = append(paths, "messages."+strconv.Itoa(i)), append(canon, b)
	}
	return req.Model, paths, canon
}

// prompt is the body's prompt on the Chat Completions wire, a block per
// tool and message.
func (openaiWire) prompt(body []byte) []PromptBlock {
	model, paths, canon := openaiPrompt(body)
	if paths == nil {
		return nil
	}
	c := newChain(model)
	out := make([]PromptBlock, len(paths))
	for i, b := range canon {
		out[i] = PromptBlock{Path: paths[i], Tokens: tokens(len(b)), Prefix: c.next("", b)}
	}
	return out
}

// countPrompt looks the body's prompt up in OpenAI's cache and writes it:
// the prompt's canonical JSON is hashed an increment (512 bytes) at a
// time, each step's hash that of the one before and of its bytes.
func (openaiWire) countPrompt(c *promptCache, body []byte) Usage {
	model, _, canon := openaiPrompt(body)
	const step = CacheIncrement * bytesPerToken
	ch := newChain(model)
	var steps [][sha256.Size]byte
	var piece []byte // the bytes of the increment under way
	n := 0
	for _, b := range canon {
		n += len(b)
		for len(b) > 0 {
			k := min(step-len(piece), len(b))
			piece, b = append(piece, b[:k]...), b[k:]
			if len(piece) == step {
				steps = append(steps, ch.next("", piece))
				piece = piece[:0]
			}
		}
	}
	return c.openai(tokens(n), steps)
}
