package orisun_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/internal/testutil/nodetest"
)

// An embedding program keeps its own table in the node's SQLite database
// and writes its row and its event in one transaction of the node's writer:
// both are committed, or neither. The table is created once, in a
// transaction of its own; the function gets a context that ends at the
// deadline (ORISUN_APPEND_TX_TIMEOUT): give it to every statement.
func ExampleNode_AppendTx() {
	n, _, stop := nodetest.Start() // a node on SQLite, started as in Example
	defer stop()
	ctx := context.Background()

	err := n.AppendTx(ctx, func(ctx context.Context, tx *sql.Tx, _ orisun.AppendFunc) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS app_orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL)`)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	var res orisun.AppendResult
	err = n.AppendTx(ctx, func(ctx context.Context, tx *sql.Tx, appendEvents orisun.AppendFunc) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO app_orders (id, customer) VALUES (?, ?)`, 42, "c-7"); err != nil {
			return err
		}
		var err error
		res, err = appendEvents("default", []orisun.Input{{
			Type: "order.placed", Data: json.RawMessage(`{"order":42}`), Tags: []string{"order:42"},
		}}, nil)
		return err // nil commits the row and the event; an error rolls both back
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("order 42 is at position %d\n", res.First)
	// Output: order 42 is at position 1
}
