package faults

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNegativeControlRealPublisherCheckpointBeforeAck_C6: the real relay
// (cmd/orisun built with -tags faultinject, a real SQLite store, its real
// embedded JetStream) with its publisher broken on purpose by
// ORISUN_FAULT_CHECKPOINT_BEFORE_ACK=1: each batch's checkpoint is written
// before the batch is published. The publisher's own after-ack records
// still come before each of its checkpoint writes, so a C6 that trusted
// them would pass; the checker must report C6 from what JetStream itself
// held before the write. The same run without the switch is clean.
func TestNegativeControlRealPublisherCheckpointBeforeAck_C6(t *testing.T) {
	for _, broken := range []bool{true, false} {
		name := map[bool]string{true: "broken", false: "correct"}[broken]
		t.Run(name, func(t *testing.T) {
			r := newRun(t, "NC-C6-"+name, "sqlite", 0, 1)
			stopFile := filepath.Join(r.dir, "stop-append")
			r.nodeEnv = []string{"ORISUN_LEASE_TTL=2s", "ORISUN_PUBLISH_BATCH=50",
				"ORISUN_FAULT_APPEND=10:2:300:" + stopFile}
			if broken {
				r.nodeEnv = append(r.nodeEnv, "ORISUN_FAULT_CHECKPOINT_BEFORE_ACK=1")
			}
			r.startNode("node-a")
			r.eventually("300 events published and checkpointed", 3*time.Minute, func() bool {
				h, cp, ok := r.headAndCheckpoint()
				return ok && h >= 300 && cp == h
			})
			if err := os.WriteFile(stopFile, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			r.readStreams()
			vs, _, _ := r.check(Options{})
			t.Logf("violations: %v", vs)
			var c6 []Violation
			for _, v := range vs {
				if v.Check == "C6" && strings.Contains(v.Msg, "acknowledged by JetStream") {
					c6 = append(c6, v)
				}
			}
			if broken && len(c6) == 0 {
				t.Fatalf("the checker missed the real publisher checkpointing before JetStream acknowledged: %v", vs)
			}
			if !broken && len(vs) != 0 {
				t.Fatalf("the correct publisher was reported: %v", vs)
			}
		})
	}
}
