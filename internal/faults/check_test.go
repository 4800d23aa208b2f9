package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/backend/sqlite"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/internal/testutil/storetest"
	"github.com/orisun-io/orisun/natsembed"
	"github.com/orisun-io/orisun/stream"
)

func storeOf(ids ...string) []Stored {
	out := make([]Stored, len(ids))
	for i, id := range ids {
		out[i] = Stored{Pos: uint64(i + 1), ID: id}
	}
	return out
}

func has(vs []Violation, check, words string) bool {
	for _, v := range vs {
		if v.Check == check && strings.Contains(v.Msg, words) {
			return true
		}
	}
	return false
}

// TestCheckRules: each rule of the checker on a small history, clean and
// broken.
func TestCheckRules(t *testing.T) {
	store := storeOf("a", "b", "c")
	sub := func(c, s string, after uint64) Record {
		return Record{Kind: KindSubscribe, Consumer: c, Sub: s, After: after}
	}
	del := func(c, s string, pos uint64, id string) Record {
		return Record{Kind: KindDeliver, Consumer: c, Sub: s, Pos: pos, ID: id}
	}
	clean := []Record{
		{Kind: KindAppendOK, Pos: 1, IDs: []string{"a", "b", "c"}},
		{Kind: KindAppendFailed, IDs: []string{"x"}},
		sub("c1", "s1", 0), del("c1", "s1", 1, "a"), del("c1", "s1", 2, "b"),
		sub("c1", "s2", 1), del("c1", "s2", 2, "b"), del("c1", "s2", 3, "c"), // restart behind: one duplicate
		{Proc: "n#1", Kind: KindAckEvidence, Pos: 2}, {Proc: "n#1", Kind: KindCheckpoint, Term: 1, Pos: 2, OK: true},
		{Kind: KindSeen, Pos: 2},
		{Proc: "n#2", Kind: KindLease, Term: 2}, {Proc: "n#2", Kind: KindAckEvidence, Pos: 3}, {Proc: "n#2", Kind: KindCheckpoint, Term: 2, Pos: 3, OK: true},
		{Kind: KindSeen, Pos: 3},
		{Kind: KindStream, Node: "n", Seq: 2, Pos: 2, ID: "b"}, {Kind: KindStream, Node: "n", Seq: 3, Pos: 3, ID: "c"},
		{Kind: KindHeal, T: 1}, {Kind: KindSettled, T: 2},
	}
	vs, st := Check(clean, store, Options{})
	if len(vs) != 0 || st.Duplicates != 1 {
		t.Fatalf("clean history: %v, %d duplicates (want none, 1)", vs, st.Duplicates)
	}
	cases := []struct {
		name, check, words string
		h                  []Record
		o                  Options
	}{
		{"C1 lost position", "C1", "never got", []Record{sub("c1", "s1", 0), del("c1", "s1", 1, "a"), del("c1", "s1", 2, "b")}, Options{}},
		{"C1 lost append", "C1", "lost", []Record{{Kind: KindAppendOK, Pos: 2, IDs: []string{"z"}}}, Options{}},
		{"C2 failed append stored", "C2", "failed append", []Record{{Kind: KindAppendFailed, IDs: []string{"b"}}}, Options{}},
		{"C2 invented", "C2", "delivered", []Record{sub("c1", "s1", 0), del("c1", "s1", 1, "q")}, Options{}},
		{"C3 two ids", "C3", "as a and as b", []Record{sub("c1", "s1", 0), del("c1", "s1", 1, "a"), sub("c1", "s2", 0), del("c1", "s2", 1, "b")}, Options{}},
		{"C4 skip", "C4", "skipped", []Record{sub("c1", "s1", 0), del("c1", "s1", 2, "b")}, Options{}},
		{"C4 stream", "C4", "carries position", []Record{{Kind: KindStream, Node: "n", Seq: 2, Pos: 3, ID: "c"}}, Options{}},
		{"C5 dup in one subscription", "C5", "inside one subscription", []Record{sub("c1", "s1", 0), del("c1", "s1", 1, "a"), del("c1", "s1", 1, "a")}, Options{}},
		{"C5 no duplicates wanted", "C5", "must have none", []Record{sub("c1", "s1", 0), del("c1", "s1", 1, "a"), sub("c1", "s2", 0), del("c1", "s2", 1, "a")}, Options{NoDuplicates: true}},
		{"C5 resumed too far behind", "C5", "2 behind", []Record{sub("c1", "s1", 0), del("c1", "s1", 1, "a"), del("c1", "s1", 2, "b"), sub("c1", "s2", 0)}, Options{SavesEach: true}},
		{"C6 ahead", "C6", "acknowledged", []Record{{Proc: "n", Kind: KindAckEvidence, Pos: 1}, {Proc: "n", Kind: KindCheckpoint, Term: 1, Pos: 2, OK: true}}, Options{}},
		{"C6 the publisher's own word is no evidence", "C6", "with only 0 acknowledged", []Record{{Proc: "n", Kind: KindAck, Pos: 2}, {Proc: "n", Kind: KindCheckpoint, Term: 1, Pos: 2, OK: true}}, Options{}},
		{"C6 back", "C6", "went back", []Record{{Kind: KindSeen, Pos: 2}, {Kind: KindSeen, Pos: 1}}, Options{}},
		{"C6 stale accepted", "C6", "accepted although", []Record{{Proc: "m", Kind: KindAckEvidence, Pos: 3}, {Proc: "m", Kind: KindCheckpoint, T0: 1, T: 2, Term: 2, Pos: 2, OK: true}, {Proc: "n", Kind: KindAckEvidence, Pos: 3}, {Proc: "n", Kind: KindCheckpoint, T0: 3, T: 4, Term: 1, Pos: 3, OK: true}}, Options{}},
		{"C6 late record of an early write is no violation", "", "", []Record{{Proc: "m", Kind: KindAckEvidence, Pos: 3}, {Proc: "m", Kind: KindCheckpoint, T0: 2, T: 3, Term: 2, Pos: 2, OK: true}, {Proc: "n", Kind: KindAckEvidence, Pos: 3}, {Proc: "n", Kind: KindCheckpoint, T0: 1, T: 4, Term: 1, Pos: 3, OK: true}}, Options{}},
		{"C7 deposed keeps publishing", "C7", "deposed", []Record{{Proc: "n", Kind: KindCheckpoint, Term: 1, Pos: 2, Stale: true}, {Proc: "n", Kind: KindAck, Pos: 3}}, Options{}},
		{"C8 never settles", "C8", "never settled", []Record{{Kind: KindHeal, T: 1}}, Options{}},
		{"C8 too slow", "C8", "bound", []Record{{Kind: KindHeal, T: 1}, {Kind: KindSettled, T: int64(time.Hour)}}, Options{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vs, _ := Check(c.h, store, c.o)
			if c.check == "" {
				if len(vs) != 0 {
					t.Fatalf("want no violation, got %v", vs)
				}
				return
			}
			if !has(vs, c.check, c.words) {
				t.Fatalf("want a %s violation about %q, got %v", c.check, c.words, vs)
			}
		})
	}
}

// TestNegativeControlCheckpointBeforeAck_C6: a deliberately broken relay
// loop, on a real SQLite store and a real embedded JetStream, writes each
// batch's checkpoint before publishing it and dies after the third
// checkpoint write. The checker must report C6 (a checkpoint ahead of what
// JetStream acknowledged). The same loop in the right order is clean.
func TestNegativeControlCheckpointBeforeAck_C6(t *testing.T) {
	for _, broken := range []bool{true, false} {
		t.Run(fmt.Sprintf("broken=%v", broken), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			s := storetest.SQLite(t, sqlite.Config{Dir: dir})
			if _, _, err := s.CreateBoundary(ctx, "default"); err != nil {
				t.Fatal(err)
			}
			in := make([]event.Input, 30)
			for i := range in {
				in[i] = event.Input{Type: "x", Data: json.RawMessage(`{}`)}
			}
			prepared, err := event.Prepare("default", in, event.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Append(ctx, "default", prepared, nil); err != nil {
				t.Fatal(err)
			}
			ns := natstest.Server(t, natsembed.Config{})
			nc := natstest.Orisun(t, ns, "control")
			js, _ := jetstream.New(nc)
			b, _ := s.Boundary(ctx, "default")
			if _, err := js.CreateStream(ctx, stream.Config("default", b.Epoch, stream.Limits{}, 1)); err != nil {
				t.Fatal(err)
			}
			lease, err := s.AcquireLease(ctx, "default", "control", nil, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			rec, err := NewRecorder(filepath.Join(dir, "relay.jsonl"), "relay#1")
			if err != nil {
				t.Fatal(err)
			}
			rs := &RecordingStore{Store: s, Rec: rec}
			rs.SetJS(js)
			_, evs, err := s.Read(ctx, "default", 0, 100, nil)
			if err != nil {
				t.Fatal(err)
			}
			publish := func(batch []event.Event) {
				for i := range batch {
					msg, _ := stream.Message(&batch[i], false)
					if _, err := js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequence(batch[i].Position-1)); err != nil {
						t.Fatal(err)
					}
				}
				rs.Acked(batch[len(batch)-1].Position)
			}
			for i := 0; i < 3; i++ {
				batch := evs[i*10 : i*10+10]
				last := batch[len(batch)-1].Position
				if broken {
					if err := rs.SaveCheckpoint(ctx, "default", lease, last); err != nil {
						t.Fatal(err)
					}
					if i == 2 {
						break // dies with the checkpoint ahead of the stream
					}
					publish(batch)
				} else {
					publish(batch)
					if err := rs.SaveCheckpoint(ctx, "default", lease, last); err != nil {
						t.Fatal(err)
					}
				}
			}
			rec.Close()
			h, err := ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			stored := make([]Stored, len(evs))
			for i, e := range evs {
				stored[i] = Stored{Pos: e.Position, ID: e.ID}
			}
			vs, _ := Check(h, stored, Options{})
			if broken && !has(vs, "C6", "with only 0 acknowledged") {
				t.Fatalf("the checker missed a checkpoint written before the acknowledgement: %v", vs)
			}
			if !broken && len(vs) != 0 {
				t.Fatalf("the correct order was reported: %v", vs)
			}
			t.Logf("violations: %v", vs)
		})
	}
}

// TestNegativeControlNaiveSequenceReader_C1_C4: a naive reader that
// follows `position > checkpoint` over a bigserial column on real
// PostgreSQL, with two transactions committing in reverse order of their
// sequence numbers (as backend/postgres's TestNaiveSequenceSkips_I1
// NegativeControl), skips an event for good. The checker must report the
// loss (C1) and the skip (C4).
func TestNegativeControlNaiveSequenceReader_C1_C4(t *testing.T) {
	ctx := context.Background()
	dbURL := pgtest.URL(t)
	reader, c1, c2 := pgtest.Connect(t, dbURL), pgtest.Connect(t, dbURL), pgtest.Connect(t, dbURL)
	if _, err := reader.Exec(ctx, `CREATE TABLE naive (seq bigserial PRIMARY KEY, id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	hfile := filepath.Join(t.TempDir(), "naive.jsonl")
	rec, err := NewRecorder(hfile, "naive#1")
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	insert := func(conn *pgx.Conn, id string) pgx.Tx {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO naive (id) VALUES ($1)`, id); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	checkpoint := uint64(0)
	rec.Write(Record{Kind: KindSubscribe, Consumer: "naive", Sub: "1"})
	read := func() {
		rows, err := reader.Query(ctx, `SELECT seq, id FROM naive WHERE seq > $1 ORDER BY seq`, checkpoint)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var seq int64
			var id string
			if err := rows.Scan(&seq, &id); err != nil {
				t.Fatal(err)
			}
			rec.Write(Record{Kind: KindDeliver, Consumer: "naive", Sub: "1", Pos: uint64(seq), ID: id})
			checkpoint = uint64(seq)
		}
	}
	tx1 := insert(c1, "first")  // draws 1
	tx2 := insert(c2, "second") // draws 2
	if err := tx2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	read()
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	read()
	rows, err := reader.Query(ctx, `SELECT seq, id FROM naive ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	var stored []Stored
	for rows.Next() {
		var seq int64
		var id string
		if err := rows.Scan(&seq, &id); err != nil {
			t.Fatal(err)
		}
		stored = append(stored, Stored{Pos: uint64(seq), ID: id})
	}
	rows.Close()
	h, err := ReadFile(hfile)
	if err != nil {
		t.Fatal(err)
	}
	vs, _ := Check(h, stored, Options{})
	if !has(vs, "C1", "never got 1 of the 2") || !has(vs, "C4", "skipped") {
		t.Fatalf("the checker missed the naive reader's skip: %v", vs)
	}
	t.Logf("violations: %v", vs)
}

// TestNegativeControlSkipOnGap_C1_C4: on a real node whose stream holds
// only the last 10 messages, a broken subscription that follows the stream
// and jumps ahead over the gap is caught (C1, C4); orisun's subscription
// (catch up from the store, then live) on the same node is clean (I5).
func TestNegativeControlSkipOnGap_C1_C4(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	n, err := orisun.New(orisun.Config{DataDir: dir, NATSPort: -1, EventStreamMaxMsgs: 10, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	in := make([]event.Input, 100)
	for i := range in {
		in[i] = event.Input{Type: "x", Data: json.RawMessage(`{}`)}
	}
	if _, err := n.Append(ctx, "default", in, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, "the node to settle", 60*time.Second, 50*time.Millisecond, func() error {
		st, err := n.Status(ctx)
		if err == nil && st.Settled {
			return nil
		}
		return fmt.Errorf("status %+v (%v)", st, err)
	})
	rec, err := NewRecorder(filepath.Join(dir, "h.jsonl"), "consumers#1")
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()

	// The broken subscription: the stream from sequence 1, whatever comes.
	nc := natstest.Connect(t, n.NATSURL())
	js, _ := jetstream.New(nc)
	cons, err := js.OrderedConsumer(ctx, stream.Name("default"), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rec.Write(Record{Kind: KindSubscribe, Consumer: "jumps", Sub: "1"})
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		e, err := stream.Decode(msg.Subject(), msg.Headers(), msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		rec.Write(Record{Kind: KindDeliver, Consumer: "jumps", Sub: "1", Pos: e.Position, ID: e.ID, Epoch: e.Epoch})
		if e.Position == 100 {
			break
		}
	}
	// orisun's subscription on the same node.
	c := &Consumer{Name: "orisun", Rec: rec, CheckpointFile: filepath.Join(dir, "orisun.checkpoint"),
		Subscribe: func(ctx context.Context, after uint64, opts orisun.SubscribeOptions, h orisun.Handler) error {
			return n.Subscribe(ctx, "default", after, h, opts)
		}}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); c.Run(cctx) }()
	testutil.Eventually(t, "orisun's subscription to reach 100", 60*time.Second, 20*time.Millisecond, func() bool {
		_, pos, _ := LoadCheckpoint(c.CheckpointFile)
		return pos == 100
	})
	cancel()
	<-done
	_, evs, err := n.Read(ctx, "default", 0, 1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	stored := make([]Stored, len(evs))
	for i, e := range evs {
		stored[i] = Stored{Pos: e.Position, ID: e.ID}
	}
	rec.Close()
	h, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	vs, _ := Check(h, stored, Options{NoDuplicates: true})
	if !has(vs, "C1", "jumps never got 90") || !has(vs, "C4", "jumps subscription 1 skipped from 0 to 91") {
		t.Fatalf("the checker missed the subscription that skips on a gap: %v", vs)
	}
	for _, v := range vs {
		if strings.Contains(v.Msg, "orisun") {
			t.Fatalf("orisun's subscription was reported: %v", v)
		}
	}
	t.Logf("violations: %v", vs)
}

// TestReadFileCutLines: only a last line without its newline (a write cut
// by SIGKILL) may be dropped; a corrupt line in the middle is an error.
func TestReadFileCutLines(t *testing.T) {
	dir := t.TempDir()
	good := `{"t":1,"proc":"p","kind":"note"}` + "\n"
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	recs, err := ReadFile(write("cut.jsonl", good+good+`{"t":3,"proc":"p","ki`))
	if err != nil || len(recs) != 2 {
		t.Fatalf("a last line cut short: %d records, %v (want 2, nil)", len(recs), err)
	}
	if _, err := ReadFile(write("corrupt.jsonl", good+`{"t":2,"pro`+"\n"+good)); err == nil {
		t.Fatal("a corrupt line in the middle of a history was dropped silently")
	}
	if _, err := ReadFile(write("corrupt-last.jsonl", good+"garbage\n")); err == nil {
		t.Fatal("a corrupt complete last line was dropped silently")
	}
}

// TestCheckAudit: the audit of the checkpoint column catches a move back,
// a checkpoint beyond the head and a change nobody recorded.
func TestCheckAudit(t *testing.T) {
	ok := []AuditRow{{ID: 1, Old: 0, New: 5}, {ID: 2, Old: 5, New: 9}}
	if vs := CheckAudit(ok, 9); len(vs) != 0 {
		t.Fatalf("clean audit: %v", vs)
	}
	for _, c := range []struct {
		words string
		rows  []AuditRow
	}{
		{"went back", []AuditRow{{ID: 1, Old: 0, New: 5}, {ID: 2, Old: 5, New: 4}}},
		{"beyond the head", []AuditRow{{ID: 1, Old: 0, New: 10}}},
		{"unrecorded", []AuditRow{{ID: 1, Old: 0, New: 5}, {ID: 2, Old: 6, New: 7}}},
	} {
		if vs := CheckAudit(c.rows, 9); !has(vs, "C6", c.words) {
			t.Errorf("want C6 %q, got %v", c.words, vs)
		}
	}
}
