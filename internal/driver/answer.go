package driver

import (
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// checkAnswer validates a final answer against the output schema and
// returns a message for the model when it does not conform.
func checkAnswer(schema *jsonschema.Schema, answer string) (string, bool) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(stripFence(answer)))
	if err != nil {
		return fmt.Sprintf("Your answer is not valid JSON (%v). Answer again with only a JSON document that satisfies the required schema.", err), false
	}
	if err := schema.Validate(doc); err != nil {
		return fmt.Sprintf("Your answer does not satisfy the required JSON Schema:\n%v\nAnswer again with only a corrected JSON document.", err), false
	}
	return "", true
}

// stripFence removes a ```json fence around an answer, which models add often.
func stripFence(s string) string {
	t := strings.TrimSpace(s)
	if !strings.HasPrefix(t, "```") {
		return t
	}
	t = strings.TrimPrefix(t, "```")
	if i := strings.IndexByte(t, '\n'); i >= 0 {
		t = t[i+1:]
	}
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(t), "```"))
}
