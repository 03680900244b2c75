package convert

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/recovery"
)

// TestEveryReasonHasItsName checks that every reason of the machine
// reaches the wire as the value of the same name.
func TestEveryReasonHasItsName(t *testing.T) {
	for _, r := range recovery.AllReasons() {
		got := FromReason(r)
		if got.String() != "TRANSITION_REASON_"+r.String() {
			t.Errorf("FromReason(%v) = %v", r, got)
		}
	}
}

// TestEveryFailureKindIsMapped checks that every failure kind up to the
// last has an error kind, and only FailUnknown the unspecified one.
func TestEveryFailureKindIsMapped(t *testing.T) {
	for k := recovery.FailUnknown; k <= recovery.FailReplicaLost; k++ {
		got, ok := errorKinds[k]
		if !ok {
			t.Errorf("failure kind %v has no error kind", k)
		}
		if (got == completionv1.ErrorKind_ERROR_KIND_UNSPECIFIED) != (k == recovery.FailUnknown) {
			t.Errorf("failure kind %v maps to %v", k, got)
		}
	}
}

func TestVerdicts(t *testing.T) {
	tests := []struct {
		in   completionv1.Verdict
		want recovery.Verdict
	}{
		{completionv1.Verdict_VERDICT_ALLOW, recovery.VerdictAllow},
		{completionv1.Verdict_VERDICT_BLOCK, recovery.VerdictBlock},
		{completionv1.Verdict_VERDICT_PREVENT, recovery.VerdictPrevent},
		{completionv1.Verdict_VERDICT_UNSPECIFIED, 0},
		{completionv1.Verdict(99), 0},
	}
	for _, tt := range tests {
		if got := ToVerdict(tt.in); got != tt.want {
			t.Errorf("ToVerdict(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestToolArguments(t *testing.T) {
	tests := []struct {
		name, raw, want string
	}{
		{"object", `{"city":"Paris"}`, `"city":"Paris"`},
		{"not an object", `["a"]`, `"_raw":"[\"a\"]"`},
		{"malformed", `{"city":`, `"_raw":"{\"city\":"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromToolCall(recovery.ToolCall{ID: "c1", Name: "f", Input: []byte(tt.raw)}).GetInput().MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if s := strings.ReplaceAll(string(got), " ", ""); !strings.Contains(s, tt.want) {
				t.Errorf("input = %s, want it to hold %s", s, tt.want)
			}
		})
	}
}

func TestToolSchemas(t *testing.T) {
	schema, _ := structpb.NewStruct(map[string]any{"type": "object"})
	tools := ToTools([]*completionv1.Tool{{Name: "a"}, {Name: "b", InputSchema: schema}})
	if string(tools[0].InputSchema) != "{}" {
		t.Errorf("a tool without a schema has %s, want {}", tools[0].InputSchema)
	}
	if s := strings.ReplaceAll(string(tools[1].InputSchema), " ", ""); s != `{"type":"object"}` {
		t.Errorf("schema = %s", s)
	}
}
