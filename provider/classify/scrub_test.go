package classify

import (
	"strings"
	"testing"
)

func TestScrub(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"invalid x-api-key: sk-test-SECRET-123", "invalid x-api-key: [REDACTED]"},
		{"Incorrect API key provided: sk-proj-abcdef******************wxyz.", "Incorrect API key provided: [REDACTED]."},
		{"key sk-ant-api03-AbC_dEf-123 rejected", "key [REDACTED] rejected"},
		{"sent Authorization: Bearer eyJhbGciOi.abc.def", "sent Authorization: Bearer [REDACTED]"},
		{"token bearer abcdef123456 expired", "token Bearer [REDACTED] expired"},
		{`{"api_key":"abcdef123456"}`, `{"api_key":"[REDACTED]"}`},
		{"url ?api-key=abcdef123456&x=1", "url ?api-key=[REDACTED]&x=1"},
		{"the configured secret my-own-token-42 leaked", "the configured secret [REDACTED] leaked"},
		{"nothing to hide: prompt is too long", "nothing to hide: prompt is too long"},
		// Pieces of a configured secret, 8 characters or more, wherever they are.
		{"key suffix test-SECRET-123 rejected", "key suffix [REDACTED] rejected"},
		{"key ending SECRET-123.", "key ending [REDACTED]."},
		{"key starting sk-test-S…", "key starting [REDACTED]…"},
		{"own-token and my-own-t", "[REDACTED] and [REDACTED]"},
		{"pieces test-SEC and RET-123 apart", "pieces [REDACTED] and RET-123 apart"},
		{"glued SECRET-123SECRET-123", "glued [REDACTED][REDACTED]"},
		{"7 characters: ECRET-1 stays", "7 characters: ECRET-1 stays"},
		{"  padded  ", "padded"},
	} {
		if got := Scrub(tc.in, "sk-test-SECRET-123", "my-own-token-42", ""); got != tc.want {
			t.Errorf("Scrub(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestScrubIgnoresTinySecrets(t *testing.T) {
	if got := Scrub("a bad request", "a"); got != "a bad request" {
		t.Errorf("got %q", got)
	}
}

func TestScrubBoundsLength(t *testing.T) {
	got := Scrub(strings.Repeat("é", 1000))
	if len(got) > maxMessage+len("…") || !strings.HasSuffix(got, "…") {
		t.Errorf("len %d", len(got))
	}
	if !strings.HasPrefix(got, "éé") || strings.ContainsRune(got, '\uFFFD') {
		t.Error("cut inside a rune")
	}
}

func TestBaseURL(t *testing.T) {
	tests := []struct{ base, want, err string }{
		{"", "https://api.example.com", ""},
		{"http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1", ""},
		{"ftp://host", "", "not an http(s) URL"},
		{"https://user:hunter2@proxy.example.com", "https://user:hunter2@proxy.example.com", ""},
		{"ftp://user:hunter2@host", "", "xxxxx"},
		{"localhost:8000", "", "not an http(s) URL"},
	}
	for _, tt := range tests {
		got, err := BaseURL("test", tt.base, "https://api.example.com")
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("BaseURL(%q) error %v, want one containing %q and no password", tt.base, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("BaseURL(%q) = %q, %v; want %q", tt.base, got, err, tt.want)
		}
	}
}

func TestScrubModel(t *testing.T) {
	c := &Classifier{Secrets: []string{"sk-ant-api03-LEAKCHECK-9f8e7d"}}
	for _, tc := range []struct{ in, want string }{
		{"claude-sonnet-4-5-20250929", "claude-sonnet-4-5-20250929"},
		{"LEAKCHECK-9f8e7d", "[REDACTED]"},
		{"model-api03-LEAKCHECK", "model[REDACTED]"},
		{"sk-other-key-123456", "[REDACTED]"},
		{strings.Repeat("m", 1000), strings.Repeat("m", maxModel) + "…"},
	} {
		if got := c.Model(tc.in); got != tc.want {
			t.Errorf("Model(%.40q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// BenchmarkScrubModel scrubs what every answer's model name and id go
// through: a string with nothing to scrub, with the provider's key.
func BenchmarkScrubModel(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = ScrubModel("chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT", "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789")
	}
}
