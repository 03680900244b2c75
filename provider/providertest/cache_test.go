package providertest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// blockOverhead is the length of a text block's canonical JSON around its
// text: {"text":"","type":"text"}.
const blockOverhead = len(`{"text":"","type":"text"}`)

// sized is a text whose text block is n tokens, its canonical JSON 4n
// bytes; letter tells texts of one size apart.
func sized(n int, letter byte) string {
	return strings.Repeat(string(letter), bytesPerToken*n-blockOverhead)
}

// block is an Anthropic text block of n tokens; mark gives it a
// cache_control.
func block(n int, letter byte, mark bool) map[string]any {
	b := map[string]any{"type": "text", "text": sized(n, letter)}
	if mark {
		b["cache_control"] = map[string]any{"type": "ephemeral"}
	}
	return b
}

// prompt is an Anthropic request body: tools and system as they are, and
// messages alternating user and assistant, each of its blocks.
type prompt struct {
	model    string
	tools    []any
	system   []any
	sysText  string // the system prompt as a string, when system is nil
	messages [][]any
}

func (p prompt) body() string {
	req := map[string]any{"model": "claude-x", "max_tokens": 16, "stream": true}
	if p.model != "" {
		req["model"] = p.model
	}
	if p.tools != nil {
		req["tools"] = p.tools
	}
	if p.system != nil {
		req["system"] = p.system
	} else if p.sysText != "" {
		req["system"] = p.sysText
	}
	msgs := []any{}
	for i, content := range p.messages {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]any{"role": role, "content": content})
	}
	req["messages"] = msgs
	return mustJSON(req)
}

// tool is a tool whose canonical JSON is n tokens.
func tool(n int, letter byte, mark bool) map[string]any {
	const overhead = len(`{"description":"","input_schema":{"type":"object"},"name":"t"}`)
	t := map[string]any{"name": "t", "description": strings.Repeat(string(letter), bytesPerToken*n-overhead),
		"input_schema": map[string]any{"type": "object"}}
	if mark {
		t["cache_control"] = map[string]any{"type": "ephemeral"}
	}
	return t
}

// anthropicUsage is the usage of the body's message_start.
func anthropicUsage(t *testing.T, body string) Usage {
	t.Helper()
	for _, data := range events(body) {
		var ev struct {
			Type    string `json:"type"`
			Message struct {
				Usage struct {
					Input      int `json:"input_tokens"`
					CacheRead  int `json:"cache_read_input_tokens"`
					CacheWrite int `json:"cache_creation_input_tokens"`
				} `json:"usage"`
			} `json:"message"`
		}
		if json.Unmarshal([]byte(data), &ev) == nil && ev.Type == "message_start" {
			u := ev.Message.Usage
			return Usage{Input: u.Input, CacheRead: u.CacheRead, CacheWrite: u.CacheWrite}
		}
	}
	t.Fatalf("no message_start in\n%s", body)
	return Usage{}
}

// counted is an answer whose usage the server counts.
var counted = OK(Answer{Text: []string{"ok"}, Usage: Usage{Output: 1, CountPrompt: true}})

// conversation is n one-block messages of 10 tokens each, alternating
// user and assistant, the last one marked when mark is set.
func conversation(n int, mark bool) [][]any {
	msgs := make([][]any, n)
	for i := range msgs {
		msgs[i] = []any{block(10, 'a'+byte(i%26), mark && i == n-1)}
	}
	return msgs
}

// TestAnthropicPromptCache sends each case's requests, in order, to one
// server and checks the usage of each against the cache's rules.
func TestAnthropicPromptCache(t *testing.T) {
	sys := []any{block(2000, 's', true)}
	long := [][]any{{block(100, 'u', false)}}
	for _, tc := range []struct {
		name string
		reqs []prompt
		want []Usage
	}{
		{"a breakpoint writes its prefix, the same prompt reads it",
			[]prompt{{system: sys, messages: long}, {system: sys, messages: long}},
			[]Usage{{Input: 100, CacheWrite: 2000}, {Input: 100, CacheRead: 2000}}},
		{"no breakpoint, no cache",
			[]prompt{{system: []any{block(2000, 's', false)}, messages: long}, {system: []any{block(2000, 's', false)}, messages: long}},
			[]Usage{{Input: 2100}, {Input: 2100}}},
		{"a prefix under the minimum is not cached",
			[]prompt{{system: []any{block(MinCacheTokens-1, 's', true)}, messages: long}, {system: []any{block(MinCacheTokens-1, 's', true)}, messages: long}},
			[]Usage{{Input: MinCacheTokens - 1 + 100}, {Input: MinCacheTokens - 1 + 100}}},
		{"a prefix of the minimum is",
			[]prompt{{system: []any{block(MinCacheTokens, 's', true)}, messages: long}, {system: []any{block(MinCacheTokens, 's', true)}, messages: long}},
			[]Usage{{Input: 100, CacheWrite: MinCacheTokens}, {Input: 100, CacheRead: MinCacheTokens}}},
		{"a string system prompt is one text block",
			[]prompt{{system: sys, messages: long}, {sysText: sized(2000, 's'), messages: [][]any{{block(100, 'u', true)}}}},
			[]Usage{{Input: 100, CacheWrite: 2000}, {CacheRead: 2000, CacheWrite: 100}}},
		{"a changed early block misses from there on",
			[]prompt{
				{system: sys, messages: [][]any{{block(1500, 'u', true)}}},
				{system: sys, messages: [][]any{{block(1500, 'v', true)}}},
			},
			[]Usage{{CacheWrite: 3500}, {CacheRead: 2000, CacheWrite: 1500}}},
		{"the conversation's growth reads the last request's breakpoint",
			[]prompt{
				{system: sys, messages: conversation(3, true)},
				{system: sys, messages: conversation(5, true)},
			},
			[]Usage{{CacheWrite: 2030}, {CacheRead: 2030, CacheWrite: 20}}},
		{"a write 19 blocks back is inside the lookback",
			[]prompt{
				{system: sys, messages: conversation(1, true)},
				{system: sys, messages: conversation(1+CacheLookback-1, true)},
			},
			[]Usage{{CacheWrite: 2010}, {CacheRead: 2010, CacheWrite: 190}}},
		{"a write 20 blocks back is beyond it: only the system's breakpoint reads",
			[]prompt{
				{system: sys, messages: conversation(1, true)},
				{system: sys, messages: conversation(1+CacheLookback, true)},
			},
			[]Usage{{CacheWrite: 2010}, {CacheRead: 2000, CacheWrite: 210}}},
		{"the order is tools, system, messages: a tool's mark caches the tools alone",
			[]prompt{
				{tools: []any{tool(1200, 't', true)}, system: []any{block(500, 's', false)}, messages: long},
				{tools: []any{tool(1200, 't', true)}, system: []any{block(500, 'r', false)}, messages: long},
			},
			[]Usage{{Input: 600, CacheWrite: 1200}, {Input: 600, CacheRead: 1200}}},
		{"a changed tool misses the system's cache after it",
			[]prompt{
				{tools: []any{tool(100, 't', false)}, system: sys, messages: long},
				{tools: []any{tool(100, 'x', false)}, system: sys, messages: long},
			},
			[]Usage{{Input: 100, CacheWrite: 2100}, {Input: 100, CacheWrite: 2100}}},
		{"the system's mark caches the tools before it",
			[]prompt{
				{tools: []any{tool(100, 't', false)}, system: sys, messages: long},
				{tools: []any{tool(100, 't', false)}, system: sys, messages: [][]any{{block(7, 'w', false)}}},
			},
			[]Usage{{Input: 100, CacheWrite: 2100}, {Input: 7, CacheRead: 2100}}},
		{"each model has its own cache",
			[]prompt{{system: sys, messages: long}, {model: "claude-y", system: sys, messages: long}},
			[]Usage{{Input: 100, CacheWrite: 2000}, {Input: 100, CacheWrite: 2000}}},
		{"marks are not the prompt: a prefix written under a mark is read without it",
			[]prompt{
				{system: sys, messages: [][]any{{block(10, 'a', true)}}},
				{system: []any{block(2000, 's', false)}, messages: [][]any{{block(10, 'a', false)}, {block(10, 'b', true)}}},
			},
			[]Usage{{CacheWrite: 2010}, {CacheRead: 2010, CacheWrite: 10}}},
		{"two messages are not one message of two blocks",
			[]prompt{
				{system: sys, messages: [][]any{{block(10, 'a', false), block(10, 'a', true)}}},
				{system: sys, messages: [][]any{{block(10, 'a', false)}, {block(10, 'a', true)}}},
			},
			[]Usage{{CacheWrite: 2020}, {CacheRead: 2000, CacheWrite: 20}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewAnthropic(t, Always(counted))
			for i, p := range tc.reqs {
				_, got, err := post(t, s, "/v1/messages", p.body())
				if err != nil {
					t.Fatal(err)
				}
				if u := anthropicUsage(t, got); u != tc.want[i] {
					t.Errorf("request %d: usage %+v, want %+v", i+1, u, tc.want[i])
				}
			}
		})
	}
}

func TestPromptBlocks(t *testing.T) {
	body := prompt{
		tools:    []any{tool(50, 't', true)},
		system:   []any{block(10, 's', false), block(10, 's', true)},
		messages: [][]any{{block(7, 'a', false), block(8, 'b', true)}, {block(9, 'c', false)}},
	}.body()
	s := NewAnthropic(t, Always(OK(Text("x"))))
	if _, _, err := post(t, s, "/v1/messages", body); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range s.Request(t, 1).Prompt() {
		got = append(got, fmt.Sprintf("%s %d %v", b.Path, b.Tokens, b.Breakpoint))
	}
	want := []string{"tools.0 50 true", "system.0 10 false", "system.1 10 true",
		"messages.0.content.0 7 false", "messages.0.content.1 8 true", "messages.1.content.0 9 false"}
	if !slices.Equal(got, want) {
		t.Errorf("prompt\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if st := s.CacheStats(); st != (CacheStats{}) {
		t.Errorf("a reply that does not count its prompt used the cache: %+v", st)
	}
}

// TestPromptCacheWritesWhenTheModelReadThePrompt: an error before the
// headers writes nothing, a stream cut after them writes; the statistics
// count both lookups, and ResetCache forgets every entry.
func TestPromptCacheWritesWhenTheModelReadThePrompt(t *testing.T) {
	a := Answer{Text: []string{"a", "b"}, Usage: Usage{CountPrompt: true}}
	s := NewAnthropic(t, Seq(Fail(Overloaded), CutAfter(1, a), OK(a)))
	body := prompt{system: []any{block(2000, 's', true)}, messages: [][]any{{block(10, 'u', true)}}}.body()
	var usages []Usage
	for i := range 5 {
		if i == 3 {
			s.ResetCache()
		}
		res, got, err := post(t, s, "/v1/messages", body)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode == 200 {
			usages = append(usages, anthropicUsage(t, got))
		}
	}
	want := []Usage{{CacheWrite: 2010}, {CacheRead: 2010}, {CacheWrite: 2010}, {CacheRead: 2010}}
	if !slices.Equal(usages, want) {
		t.Errorf("usages %+v, want %+v", usages, want)
	}
	if st, want := s.CacheStats(), (CacheStats{Lookups: 2, Hits: 1, ReadTokens: 2010, WriteTokens: 2010, Entries: 2}); st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
}

// openaiBody is a Chat Completions body of the given messages' texts,
// alternating user and assistant.
func openaiBody(model string, texts ...string) string {
	msgs := []any{}
	for i, s := range texts {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]any{"role": role, "content": s})
	}
	return mustJSON(map[string]any{"model": model, "stream": true, "messages": msgs})
}

// msgOverhead is the length of a user message's canonical JSON around its
// text: {"content":"","role":"user"} (the assistant's is 5 bytes more).
const msgOverhead = len(`{"content":"","role":"user"}`)

func TestOpenAIPromptCache(t *testing.T) {
	// first is a user message of 1 000 tokens (4 000 bytes); second brings
	// the prompt to 2 000 tokens.
	first := strings.Repeat("a", 4000-msgOverhead)
	second := strings.Repeat("b", 4000-msgOverhead-len("assistant")+len("user"))
	short := strings.Repeat("c", 4*1000-msgOverhead)
	for _, tc := range []struct {
		name   string
		bodies []string
		// prompt and cached are each request's prompt_tokens and cached_tokens.
		prompt, cached []int
	}{
		{"the same prompt reads its whole 128-token increments",
			[]string{openaiBody("gpt-x", first, second), openaiBody("gpt-x", first, second)},
			[]int{2000, 2000}, []int{0, 1920}},
		{"a longer prompt reads the shorter one's increments",
			[]string{openaiBody("gpt-x", first, second), openaiBody("gpt-x", first, second, "more")},
			[]int{2000, 2008}, []int{0, 1920}},
		{"a prompt under 1024 tokens is not cached",
			[]string{openaiBody("gpt-x", short), openaiBody("gpt-x", short)},
			[]int{1000, 1000}, []int{0, 0}},
		{"a common prefix under 1024 tokens is not read",
			[]string{openaiBody("gpt-x", first, second), openaiBody("gpt-x", first, "other"+second)},
			[]int{2000, 2000 + 2}, []int{0, 0}},
		{"a changed first message misses",
			[]string{openaiBody("gpt-x", first, second), openaiBody("gpt-x", "z"+first[1:], second)},
			[]int{2000, 2000}, []int{0, 0}},
		{"each model has its own cache",
			[]string{openaiBody("gpt-x", first, second), openaiBody("gpt-y", first, second)},
			[]int{2000, 2000}, []int{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewOpenAI(t, Always(counted))
			for i, body := range tc.bodies {
				_, got, err := post(t, s, "/v1/chat/completions", body)
				if err != nil {
					t.Fatal(err)
				}
				evs := events(got)
				var chunk struct {
					Usage struct {
						Prompt  int `json:"prompt_tokens"`
						Details struct {
							Cached int `json:"cached_tokens"`
						} `json:"prompt_tokens_details"`
					} `json:"usage"`
				}
				if len(evs) < 2 || json.Unmarshal([]byte(evs[len(evs)-2]), &chunk) != nil {
					t.Fatalf("no usage chunk in\n%s", got)
				}
				if u := chunk.Usage; u.Prompt != tc.prompt[i] || u.Details.Cached != tc.cached[i] {
					t.Errorf("request %d: prompt_tokens %d, cached_tokens %d; want %d, %d", i+1, u.Prompt, u.Details.Cached, tc.prompt[i], tc.cached[i])
				}
			}
		})
	}
}
