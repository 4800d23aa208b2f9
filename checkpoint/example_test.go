package checkpoint_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"path/filepath"

	_ "modernc.org/sqlite"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/checkpoint"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil/nodetest"
)

// A projection that counts events per type in SQLite, its checkpoint saved
// in the same transaction as each count. Run twice, it resumes where it
// stopped and applies nothing twice.
func Example() {
	n, dir, stop := nodetest.Start() // the projection's database goes in dir too
	defer stop()
	ctx := context.Background()

	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "projection.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE counts (type TEXT PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	cp, err := checkpoint.NewSQLite(db, "type-counts", "default")
	if err != nil {
		log.Fatal(err)
	}
	if err := cp.EnsureSchema(ctx); err != nil {
		log.Fatal(err)
	}
	count := cp.Handler(func(ctx context.Context, tx *sql.Tx, e event.Event) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO counts (type, n) VALUES (?, 1)
			ON CONFLICT (type) DO UPDATE SET n = n + 1`, e.Type)
		return err
	})

	// project appends events, then applies everything after the saved
	// checkpoint up to the last position appended.
	project := func(types ...string) {
		in := make([]orisun.Input, len(types))
		for i, t := range types {
			in[i] = orisun.Input{Type: t, Data: json.RawMessage(`{}`)}
		}
		res, err := n.Append(ctx, "default", in, nil)
		if err != nil {
			log.Fatal(err)
		}
		saved, err := cp.Load(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("resume after %d\n", saved.Position)
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		err = n.Subscribe(sctx, "default", saved.Position, func(ctx context.Context, e event.Event) error {
			if err := count(ctx, e); err != nil {
				return err
			}
			fmt.Printf("applied %d %s\n", e.Position, e.Type)
			if e.Position == res.Last {
				cancel() // once its transaction has committed
			}
			return nil
		}, event.SubscribeOptions{Epoch: saved.Epoch})
		if !errors.Is(err, context.Canceled) {
			log.Fatal(err)
		}
	}
	project("seat.booked", "seat.booked")
	project("seat.released")

	rows, err := db.Query(`SELECT type, n FROM counts ORDER BY type`)
	if err != nil {
		log.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var t string
		var k int
		if err := rows.Scan(&t, &k); err != nil {
			log.Fatal(err)
		}
		fmt.Println(t, k)
	}
	// Output:
	// resume after 0
	// applied 1 seat.booked
	// applied 2 seat.booked
	// resume after 2
	// applied 3 seat.released
	// seat.booked 2
	// seat.released 1
}
