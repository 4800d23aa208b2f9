//go:build !linux

package testutil

import "os/exec"

// dieWithParent: only Linux has a parent-death signal; elsewhere the
// tests' cleanups end the children.
func dieWithParent(*exec.Cmd) {}
