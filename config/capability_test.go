package config

import (
	"os"
	"strings"
	"testing"
)

// TestCapabilityTableInREADME: the README shows the capability table the
// request validation uses, as CapabilityTable prints it.
func TestCapabilityTableInREADME(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if table := CapabilityTable(); !strings.Contains(string(readme), table) {
		t.Errorf("README.md lacks the capability table; paste it in:\n%s", table)
	}
}

func TestThinkingRoutesTakeNoForcedSampling(t *testing.T) {
	c := KindCapabilities("anthropic").WithThinking()
	if c.MaxTemperature != 0 || c.TopK || c.MinTopP != 0.95 || c.ToolChoiceAny || c.ToolChoiceTool || !c.ToolChoiceNone {
		t.Errorf("thinking capabilities %+v", c)
	}
}
