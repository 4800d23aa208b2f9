// Package faults is orisun's fault suite (docs/test-plan.md): a history of what
// real processes did (appends, deliveries, publish acknowledgements,
// checkpoint writes, stream contents), and the checker C1–C8 that judges a
// history against the store's final content.
// Being internal, it is orisun's machinery: its API may change without
// notice.
//
// Every process of a scenario (orisun nodes built with -tags faultinject,
// appenders, consumers) appends its records as JSON lines to a file of its
// own, one write per record, so a SIGKILL loses nothing already recorded.
// The harness (the tests of this package) merges the files and runs Check.
package faults

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// Record kinds.
const (
	KindAppendOK     = "append_ok"     // IDs stored at Pos, Pos+1, … (acknowledged)
	KindAppendFailed = "append_failed" // IDs definitely not stored (rolled back)
	KindSubscribe    = "subscribe"     // Consumer's subscription Sub starts after After
	KindDeliver      = "deliver"       // Consumer's Sub delivered (Pos, ID, Epoch)
	KindCaughtUp     = "caught_up"     // Consumer's Sub went live at Pos (OnCaughtUp)
	KindFellBehind   = "fell_behind"   // Consumer's Sub went back to the store at Pos (OnFellBehind), Reason
	KindAck          = "ack"           // JetStream acknowledged everything up to Pos (this process)
	KindAckEvidence  = "ack_evidence"  // the stream of this process held up to Pos (read back)
	KindCheckpoint   = "checkpoint"    // a checkpoint write: Term, Holder, Pos; OK or Err (Stale: lease lost)
	KindSeen         = "checkpoint_seen"
	KindStream       = "stream" // Node's stream holds Seq with (Pos, ID, Epoch)
	KindStatus       = "status" // a node's status: Head, Pos (published), State, Reason
	KindFault        = "fault"  // a fault injected (Note)
	KindHeal         = "heal"   // faults over: liveness is measured from here
	KindSettled      = "settled"
	KindTakeover     = "takeover" // Dur: from the leader's death to the new leader's first checkpoint
	KindLease        = "lease"    // this process got lease Term
	KindNote         = "note"     // anything worth reading in a failed run's history
)

// Record is one line of a history.
type Record struct {
	T        int64    `json:"t"`            // unix nanoseconds, when recorded (for a write: when it returned)
	T0       int64    `json:"t0,omitempty"` // for a write: when it was sent
	Proc     string   `json:"proc"`
	Kind     string   `json:"kind"`
	Pos      uint64   `json:"pos,omitempty"`
	Seq      uint64   `json:"seq,omitempty"`
	ID       string   `json:"id,omitempty"`
	IDs      []string `json:"ids,omitempty"`
	Epoch    string   `json:"epoch,omitempty"`
	Consumer string   `json:"consumer,omitempty"`
	Sub      string   `json:"sub,omitempty"`
	After    uint64   `json:"after,omitempty"`
	Term     uint64   `json:"term,omitempty"`
	Holder   string   `json:"holder,omitempty"`
	OK       bool     `json:"ok,omitempty"`
	Stale    bool     `json:"stale,omitempty"`
	Err      string   `json:"err,omitempty"`
	Node     string   `json:"node,omitempty"`
	Head     uint64   `json:"head,omitempty"`
	State    string   `json:"state,omitempty"`
	Reason   string   `json:"reason,omitempty"`
	Note     string   `json:"note,omitempty"`
	Dur      int64    `json:"dur,omitempty"` // nanoseconds
}

// Recorder appends records of one process to its history file.
type Recorder struct {
	proc string
	mu   sync.Mutex
	f    *os.File
}

// NewRecorder opens (creates or appends to) a history file. proc names the
// process in every record; a restarted process should take a new name
// (the harness adds a generation number).
func NewRecorder(path, proc string) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("history file: %w", err)
	}
	return &Recorder{proc: proc, f: f}, nil
}

// Proc is the process name of the records.
func (r *Recorder) Proc() string { return r.proc }

// Write records one record, stamped with the time and the process. It is
// one write(2): a record is in the file once Write returns, whatever
// happens to the process afterwards.
func (r *Recorder) Write(rec Record) {
	if r == nil {
		return
	}
	rec.T = time.Now().UnixNano()
	rec.Proc = r.proc
	b, err := json.Marshal(rec)
	if err != nil {
		panic(err)
	}
	b = append(b, '\n')
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.f.Write(b); err != nil {
		fmt.Fprintln(os.Stderr, "faults: history write:", err)
	}
}

// Close closes the file.
func (r *Recorder) Close() error {
	if r == nil {
		return nil
	}
	return r.f.Close()
}

// ReadDir reads every *.jsonl history file of dir and returns the records
// ordered by time; records of one process keep their file order. A last line
// cut short by a SIGKILL is dropped.
func ReadDir(dir string) ([]Record, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	var all []Record
	for _, name := range files {
		recs, err := ReadFile(name)
		if err != nil {
			return nil, err
		}
		all = append(all, recs...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].T < all[j].T })
	return all, nil
}

// ReadFile reads one history file. Each record is one write(2) of a line
// with its newline, so the only line that may be cut is the last one, by a
// SIGKILL during that write: a last line without its newline that does not
// parse is dropped. Any other line that does not parse is an error: a
// history that lost records silently would judge a run on less than
// happened.
func ReadFile(name string) ([]Record, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var out []Record
	for n := 1; len(b) > 0; n++ {
		line, rest, complete := bytes.Cut(b, []byte{'\n'})
		b = rest
		var r Record
		if err := json.Unmarshal(line, &r); err != nil {
			if !complete {
				break // the last line, cut by SIGKILL
			}
			return out, fmt.Errorf("history %s line %d: %w (%.80q)", name, n, err, line)
		}
		out = append(out, r)
	}
	return out, nil
}
