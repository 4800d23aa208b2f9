//go:build !linux

package cluster

import "os/exec"

// dieWithParent: only Linux has a parent-death signal; elsewhere the
// tests' cleanups kill the children.
func dieWithParent(*exec.Cmd) {}
