package testutil

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes a child die when the test binary dies (a timeout, a
// ^C): no orisun or nats-server process outlives the run that started it.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
