//go:build !linux

package harness

import "os/exec"

// setDeathSignal does nothing: only Linux has a parent-death signal, and
// the harness measures through Linux's /proc anyway.
func setDeathSignal(*exec.Cmd) {}
