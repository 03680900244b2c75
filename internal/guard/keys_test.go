package guard

import (
	"testing"

	"github.com/completiond/completiond/internal/redisscript"
)

// TestScripts: every script of lua/ is loaded once, and touches only the
// keys it declares, named in the one table.
func TestScripts(t *testing.T) {
	for _, p := range redisscript.Audit(luaFiles, takeSlotScript, renewSlotScript, breakerAdmitScript, breakerReportScript, probeRenewScript, budgetChargeScript, budgetSpendScript) {
		t.Error(p)
	}
}
