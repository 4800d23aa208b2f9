package faults

import (
	"testing"
)

// TestScenarios is the fast subset of TEST-PLAN.md that CI runs: S1–S11 on
// PostgreSQL and S1, S2, S3, S8, S9, S11 on SQLite, each with real
// processes, a small load and a few faults, judged by the checker C1–C8.
// Each subtest logs its seed; a failure logs the fault schedule.
func TestScenarios(t *testing.T) {
	for _, s := range catalogue(1) {
		t.Run(s.name(), func(t *testing.T) { execute(t, s) })
	}
}
