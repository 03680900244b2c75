package docs_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// reasonPrefix is the prefix every TransitionReason value's name carries on
// the wire; the diagram names the reasons without it, as the docs do.
const reasonPrefix = "TRANSITION_REASON_"

// TestDiagramNamesEveryTransitionReason: the recovery machine's diagram in
// docs/architecture.md names every TransitionReason the API has (from the
// generated enum, so that a new reason cannot be left out), and names no
// reason the API does not have. TRANSITION_REASON_UNSPECIFIED is not a
// transition: the server never sends it.
func TestDiagramNamesEveryTransitionReason(t *testing.T) {
	text := readPage(t, "docs/architecture.md").text
	blocks := regexp.MustCompile("(?s)```mermaid\n(.*?)```").FindAllStringSubmatch(text, -1)
	if len(blocks) != 1 {
		t.Fatalf("docs/architecture.md has %d mermaid blocks, want the one of the recovery machine", len(blocks))
	}
	diagram := blocks[0][1]
	if !strings.HasPrefix(diagram, "stateDiagram-v2\n") {
		t.Errorf("the diagram is not a stateDiagram-v2: %.40q", diagram)
	}
	named := map[string]bool{}
	for _, w := range regexp.MustCompile(`\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b|\b[A-Z]{3,}\b`).FindAllString(diagram, -1) {
		named[w] = true
	}
	var want []string
	for n, name := range completionv1.TransitionReason_name {
		if n == int32(completionv1.TransitionReason_TRANSITION_REASON_UNSPECIFIED) {
			continue
		}
		short := strings.TrimPrefix(name, reasonPrefix)
		want = append(want, short)
		if !named[short] {
			t.Errorf("the diagram of docs/architecture.md does not name %s: add the arrows on which the machine publishes it", short)
		}
	}
	if len(want) < 20 {
		t.Fatalf("only %d transition reasons in the generated enum", len(want))
	}
	for w := range named {
		if !slices.Contains(want, w) {
			t.Errorf("the diagram of docs/architecture.md names %s, which is not a TransitionReason", w)
		}
	}
	// The table below the diagram says what the machine does for each.
	for _, short := range want {
		if !strings.Contains(text, "| `"+short+"` |") {
			t.Errorf("docs/architecture.md's table of reasons has no row for %s", short)
		}
	}
}
