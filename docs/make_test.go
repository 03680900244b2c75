package docs_test

import (
	"regexp"
	"strings"
	"testing"
)

// TestMakeTargetsExist: every make target the documentation tells you to
// run (in code: `make x`, or a command line of a code block) is one the
// Makefile has.
func TestMakeTargetsExist(t *testing.T) {
	makefile := readPage(t, "Makefile").text
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`).FindAllStringSubmatch(makefile, -1) {
		targets[m[1]] = true
	}
	// In a code span, make may come anywhere (`cd x && make y`); in a code
	// block only where a command starts (a line, after a prompt, &&, |
	// or a parenthesis), since a block may be a listing whose prose says
	// "make checkgenerate proves it current".
	inSpan := regexp.MustCompile(`(?:^|[\s;&|(` + "`" + `])make((?:\s+[a-z][a-z0-9-]*)+)`)
	inBlock := regexp.MustCompile(`(?:^\s*(?:\$\s+)?|&&\s*|\|\s*|\(\s*)make((?:\s+[a-z][a-z0-9-]*)+)`)
	for _, path := range markdownFiles(t) {
		text := readPage(t, path).text
		type snippet struct {
			text    string
			command *regexp.Regexp
		}
		var code []snippet
		for _, c := range codeSpans(prose(text)) {
			code = append(code, snippet{c, inSpan})
		}
		fence := false
		for line := range strings.Lines(text) {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fence = !fence
				continue
			}
			if fence {
				code = append(code, snippet{line, inBlock})
			}
		}
		for _, s := range code {
			c, _, _ := strings.Cut(s.text, "#") // a shell comment says what the command does
			for _, m := range s.command.FindAllStringSubmatch(c, -1) {
				for _, target := range strings.Fields(m[1]) {
					if !targets[target] {
						t.Errorf("%s: %q names the make target %s, which the Makefile does not have", path, strings.TrimSpace(c), target)
					}
				}
			}
		}
	}
}
