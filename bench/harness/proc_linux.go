package harness

import (
	"os/exec"
	"syscall"
)

// setDeathSignal kills the child when the harness dies, so that no server
// outlives an interrupted run.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
