package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/outbox"
)

// An order and its event in one pgx transaction, under a condition: no
// event of the order may exist yet. A failed condition rolls the order back
// too; the caller reads again and decides again.
func ExampleAppend() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@localhost/shop")
	if err != nil {
		panic(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback(ctx) // after the commit, a no-op
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer) VALUES ($1, $2)`, 42, "c-7"); err != nil {
		panic(err)
	}
	cond := &event.Condition{Query: event.Query{Items: []event.QueryItem{{Tags: []string{"order:42"}}}}, After: 0}
	res, err := outbox.Append(ctx, tx, "orders", []event.Input{{
		Type: "order.placed",
		Data: json.RawMessage(`{"order":42,"customer":"c-7"}`),
		Tags: []string{"order:42", "customer:c-7"},
	}}, cond)
	var conflict *event.ConflictError
	switch {
	case errors.As(err, &conflict):
		fmt.Printf("order 42 already has an event at position %d\n", conflict.Position)
		return
	case errors.Is(err, event.ErrInvalid), errors.Is(err, event.ErrTooLarge):
		fmt.Println("a bug of ours:", err) // the message names the event and the field
		return
	case err != nil:
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}
	fmt.Printf("order 42 is at position %d of epoch %s\n", res.First, res.Epoch)
}

// The same with database/sql and pgx's driver (import _
// "github.com/jackc/pgx/v5/stdlib"), staging the event instead: no head
// row is held, and the lease holder moves it into the log after the commit.
func ExampleEnqueueSQL() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://app@localhost/shop")
	if err != nil {
		panic(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE orders SET shipped = true WHERE id = $1`, 42); err != nil {
		panic(err)
	}
	n, err := outbox.EnqueueSQL(ctx, tx, "orders", []event.Input{{
		Type: "order.shipped",
		Data: json.RawMessage(`{"order":42}`),
		Tags: []string{"order:42"},
	}})
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
	fmt.Println("staged", n)
}
