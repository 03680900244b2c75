package classify

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"unicode/utf8"
)

// maxMessage bounds a failure's message: enough for any provider's sentence,
// short enough that a proxy's HTML page does not flood a transcript.
const maxMessage = 600

// redacted replaces whatever secret was found.
const redacted = "[REDACTED]"

// secretPatterns catch credentials an upstream may echo back, whatever key
// the provider was configured with: bearer tokens, sk- keys (OpenAI,
// Anthropic), and key-like header or parameter assignments.
var secretPatterns = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`(?i)\bbearer\s+[^\s"',;]+`), "Bearer " + redacted},
	{regexp.MustCompile(`\bsk-[A-Za-z0-9_*\-]{6,}`), redacted},
	{regexp.MustCompile(`(?i)\b((?:x-api-key|api[-_]?key|authorization)["']?\s*[:=]\s*["']?(?:bearer\s+)?)[^\s"',;&]+`), "${1}" + redacted},
}

// minFragment is the shortest piece of a configured secret that Scrub
// removes wherever it appears. Upstreams echo keys cut: without their sk-
// prefix ("key suffix test-SECRET rejected"), or the end of one only.
// Eight characters of a random key are as good as the key to whoever
// collects pieces, and too specific to hit ordinary words; shorter pieces
// would: "sk-ant-" and "-api03" are shared by every Anthropic key and
// appear in any documentation, and four characters are what OpenAI shows
// of a key on purpose. A secret that is itself a word ("localhost-key")
// may redact that word (its piece "localhos"): the message loses a word,
// the key stays in.
const minFragment = 8

// maxModel bounds a model name an upstream reports.
const maxModel = 128

// Scrub removes secrets from s — each of secrets verbatim and every piece
// of minFragment characters or more of one, then anything that looks like
// a credential — and bounds its length. It is applied to every message a
// Failure carries.
func Scrub(s string, secrets ...string) string {
	for _, secret := range secrets {
		// A very short "secret" would shred ordinary words; real keys are long.
		if len(secret) >= 6 {
			s = strings.ReplaceAll(s, secret, redacted)
		}
		s = scrubFragments(s, secret)
	}
	if mayHoldCredential(s) {
		for _, p := range secretPatterns {
			s = p.re.ReplaceAllString(s, p.with)
		}
	}
	return truncate(strings.TrimSpace(s), maxMessage)
}

// mayHoldCredential reports whether s contains a word every one of
// secretPatterns needs — bearer, sk-, key (x-api-key, api_key, apikey)
// or authorization, in any case — so that the patterns run only on the
// strings they could change: a model name or an id, scrubbed on every
// answer, has none of them.
func mayHoldCredential(s string) bool {
	return strings.Contains(s, "sk-") || containsFold(s, "bearer") || containsFold(s, "key") ||
		containsFold(s, "authorization")
}

// containsFold reports whether s contains word, an ASCII lower-case word,
// in any case, without allocating.
func containsFold(s, word string) bool {
	for i := 0; i+len(word) <= len(s); i++ {
		j := 0
		for j < len(word) && s[i+j]|0x20 == word[j] {
			j++
		}
		if j == len(word) {
			return true
		}
	}
	return false
}

// ScrubModel is Scrub for a model name an upstream reports, which the
// caller sees in its result: bounded to maxModel bytes.
func ScrubModel(s string, secrets ...string) string {
	return truncate(Scrub(s, secrets...), maxModel)
}

// Model is ScrubModel with the classifier's secrets, for the model an
// upstream's stream names. A nil classifier has no secrets.
func (c *Classifier) Model(s string) string {
	if c == nil {
		return ScrubModel(s)
	}
	return ScrubModel(s, c.Secrets...)
}

// scrubFragments replaces every run of s made of pieces of secret at least
// minFragment bytes long with one redacted mark. Any such piece is covered
// by the secret's substrings of exactly minFragment bytes, so s is scanned
// once against the set of those.
func scrubFragments(s, secret string) string {
	if len(secret) < minFragment || len(s) < minFragment || !hasFragment(s, secret) {
		return s
	}
	grams := make(map[string]struct{}, len(secret)-minFragment+1)
	for i := 0; i+minFragment <= len(secret); i++ {
		grams[secret[i:i+minFragment]] = struct{}{}
	}
	in := func(i int) bool { _, ok := grams[s[i:i+minFragment]]; return ok }
	var b strings.Builder
	copied := 0
	for i := 0; i+minFragment <= len(s); {
		if !in(i) {
			i++
			continue
		}
		end := i + minFragment
		for end < len(s) && in(end+1-minFragment) {
			end++
		}
		b.WriteString(s[copied:i])
		b.WriteString(redacted)
		copied, i = end, end
	}
	if copied == 0 {
		return s
	}
	b.WriteString(s[copied:])
	return b.String()
}

// hasFragment reports whether s contains a piece of secret of minFragment
// bytes: the common case, none, costs no allocation.
func hasFragment(s, secret string) bool {
	for i := 0; i+minFragment <= len(secret); i++ {
		if strings.Contains(s, secret[i:i+minFragment]) {
			return true
		}
	}
	return false
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// BaseURL checks an upstream's base URL (def when empty) and returns it.
// The error names the provider kind and shows the URL without any password
// it carries, since configuration errors are printed at start.
func BaseURL(kind, base, def string) (string, error) {
	if base == "" {
		base = def
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("%s: base URL is not a valid URL", kind)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%s: base URL %q is not an http(s) URL", kind, u.Redacted())
	}
	return base, nil
}
