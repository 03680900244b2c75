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
	command := regexp.MustCompile(`(?:^|[\s;&|(` + "`" + `])make((?:\s+[a-z][a-z0-9-]*)+)`)
	for _, path := range markdownFiles(t) {
		text := readPage(t, path).text
		var code []string
		code = append(code, codeSpans(prose(text))...)
		fence := false
		for line := range strings.Lines(text) {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fence = !fence
				continue
			}
			if fence {
				code = append(code, line)
			}
		}
		for _, c := range code {
			c, _, _ = strings.Cut(c, "#") // a shell comment says what the command does
			for _, m := range command.FindAllStringSubmatch(c, -1) {
				for _, target := range strings.Fields(m[1]) {
					if !targets[target] {
						t.Errorf("%s: %q names the make target %s, which the Makefile does not have", path, strings.TrimSpace(c), target)
					}
				}
			}
		}
	}
}
