//go:build !faultinject

package main

import "testing"

// TestReleaseBuildIgnoresFaultVariables: without -tags faultinject the
// binary contains no fault point, so ORISUN_FAULT_* variables cannot kill or
// slow a production relay.
func TestReleaseBuildIgnoresFaultVariables(t *testing.T) {
	t.Setenv("ORISUN_FAULT_HISTORY", t.TempDir()+"/h.jsonl")
	t.Setenv("ORISUN_FAULT_KILL_AFTER_ACK", "1")
	t.Setenv("ORISUN_FAULT_STOP_AT_BATCH", "1")
	t.Setenv("ORISUN_FAULT_CHECKPOINT_BEFORE_ACK", "1")
	if faultHooks != nil {
		t.Fatal("faultHooks is set in a build without the faultinject tag")
	}
}
