package checkpoint_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/checkpoint"
	"github.com/orisun-io/orisun/client"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
)

// TestMain lets the test binary run as a consumer child process for the
// kill tests (testutil.StartChild): "consumer" runs consumerMain, "naive"
// naiveMain, instead of the tests.
func TestMain(m *testing.M) {
	testutil.Children(map[string]func() int{
		"consumer": func() int { return childMain("consumer", "kill-consumer", consumerMain) },
		"naive":    func() int { return childMain("naive consumer", "naive-consumer", naiveMain) },
	})
	testutil.Main(m)
}

// childMain runs a consumer child process: it opens what both consumers
// use, a pool on the database of ORISUN_TEST_PROJECTION_URL and a client
// named clientName of the node at ORISUN_TEST_NATS_URL, and runs run with
// them. run returns only with an error: the child writes it on stderr,
// after name, and exits with status 1.
func childMain(name, clientName string, run func(ctx context.Context, pool *pgxpool.Pool, c *client.Client) error) int {
	ctx := context.Background()
	err := func() error {
		pool, err := pgxpool.New(ctx, os.Getenv("ORISUN_TEST_PROJECTION_URL"))
		if err != nil {
			return fmt.Errorf("pool: %w", err)
		}
		defer pool.Close()
		c, err := client.Connect(os.Getenv("ORISUN_TEST_NATS_URL"), client.Name(clientName))
		if err != nil {
			return fmt.Errorf("client: %w", err)
		}
		defer c.Close()
		return run(ctx, pool, c)
	}()
	fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	return 1
}

// consumerMain projects boundary "default" into the PostgreSQL database of
// ORISUN_TEST_PROJECTION_URL with the checkpoint helper: one row per
// position with a counter. It writes "applied P" on stdout inside the
// transaction of P, after the projection's write and before the commit, so
// that the parent's SIGKILL lands at every stage of a transaction.
//
// The event source is the NATS client connected to the parent's leading
// node (ORISUN_TEST_NATS_URL): catch-up through the API, then live from the
// stream, so the kills land in the live path too.
func consumerMain(ctx context.Context, pool *pgxpool.Pool, c *client.Client) error {
	if _, err := pool.Exec(ctx, pgAppliedTable); err != nil {
		return fmt.Errorf("projection table: %w", err)
	}
	cp, err := checkpoint.NewPG(pool, "kill-projection", "default")
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := cp.EnsureSchema(ctx); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	err = cp.Run(ctx, c, func(ctx context.Context, tx pgx.Tx, e event.Event) error {
		if _, err := tx.Exec(ctx, pgApply, int64(e.Position)); err != nil {
			return err
		}
		fmt.Fprintf(os.Stdout, "applied %d\n", e.Position)
		return nil
	})
	return fmt.Errorf("run: %w", err)
}

// naiveMain is the negative control's consumer: it commits the projection's
// write and its checkpoint in two transactions, the mistake the helper
// exists to prevent. At position ORISUN_TEST_HANG_AT it stops between the
// two, so that the parent's SIGKILL lands exactly there.
func naiveMain(ctx context.Context, pool *pgxpool.Pool, c *client.Client) error {
	hangAt, _ := strconv.ParseUint(os.Getenv("ORISUN_TEST_HANG_AT"), 10, 64)
	if _, err := pool.Exec(ctx, pgAppliedTable+`; CREATE TABLE IF NOT EXISTS naive_checkpoint (id int PRIMARY KEY, position bigint NOT NULL);
		INSERT INTO naive_checkpoint VALUES (1, 0) ON CONFLICT DO NOTHING`); err != nil {
		return fmt.Errorf("tables: %w", err)
	}
	var after int64
	if err := pool.QueryRow(ctx, `SELECT position FROM naive_checkpoint`).Scan(&after); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	err := c.Subscribe(ctx, "default", uint64(after), func(ctx context.Context, e event.Event) error {
		if _, err := pool.Exec(ctx, pgApply, int64(e.Position)); err != nil {
			return err
		}
		fmt.Fprintf(os.Stdout, "applied %d\n", e.Position)
		if e.Position == hangAt {
			select {} // the parent kills the process here
		}
		_, err := pool.Exec(ctx, `UPDATE naive_checkpoint SET position = $1`, int64(e.Position))
		return err
	}, client.SubscribeOptions{})
	return fmt.Errorf("subscribe: %w", err)
}

// startConsumer starts this test binary as the consumer child process
// child (TestMain: "consumer" or "naive") projecting into the database of
// url.
func startConsumer(t *testing.T, child, url, id string, env ...string) *testutil.Process {
	t.Helper()
	return testutil.StartChild(t, id, child, append([]string{"ORISUN_TEST_PROJECTION_URL=" + url,
		"ORISUN_DATA_DIR=" + t.TempDir(), "ORISUN_NODE_ID=" + id}, env...)...)
}

// TestConsumerKilledAppliesEachEventOnce_I5: a consumer projecting into
// PostgreSQL with the checkpoint helper is killed with SIGKILL at random
// points, several times, while appends continue, and restarted each time
// from its saved checkpoint. At the end every position 1..head is applied
// exactly once (I5 carried into the consumer's own state: effectively-once,
// docs/design.md §7). The seed is logged; ORISUN_TEST_SEED replays a schedule.
func TestConsumerKilledAppliesEachEventOnce_I5(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ORISUN_TEST_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("ORISUN_TEST_SEED: %v", err)
		}
		seed = v
	}
	t.Logf("seed %d (ORISUN_TEST_SEED=%d replays the kill schedule)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	url := pgtest.URL(t)
	ctx := context.Background()
	leader := startNode(t, orisun.Config{Backend: "postgres", PGURL: url, NodeID: "leader"})

	// Appends continue through every kill.
	stop := make(chan struct{})
	var appendErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		arng := rand.New(rand.NewPCG(seed, 2))
		for total := 0; total < 20000; {
			// About 100 events/s: faster than the consumer's start-ups,
			// slower than it catches up (one transaction per event).
			k := 1 + arng.IntN(4)
			in := make([]orisun.Input, k)
			for i := range in {
				in[i] = orisun.Input{Type: "kill.consumer", Data: []byte(fmt.Sprintf(`{"i":%d}`, total+i))}
			}
			if _, err := leader.Append(ctx, "default", in, nil); err != nil {
				appendErr = err
				return
			}
			total += k
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(10+arng.IntN(20)) * time.Millisecond):
			}
		}
	}()

	const rounds = 6
	for round := range rounds {
		p := startConsumer(t, "consumer", url, fmt.Sprintf("consumer-%d", round), "ORISUN_TEST_NATS_URL="+leader.NATSURL())
		// Kill after a random number of applications: 0 kills it during
		// start-up (schema, node start, checkpoint load).
		k := rng.IntN(400)
		last := ""
		for range k {
			last = p.WaitLine(t, "applied ", 2*time.Minute)
		}
		p.Kill(t)
		t.Logf("round %d: SIGKILL after %d applications (last %q)", round, k, last)
	}
	close(stop)
	wg.Wait()
	if appendErr != nil {
		t.Fatalf("append: %v", appendErr)
	}
	bs, err := leader.Boundaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	head, epoch := bs[0].Head, bs[0].Epoch

	// A last consumer runs until the checkpoint reaches the head.
	p := startConsumer(t, "consumer", url, "consumer-final", "ORISUN_TEST_NATS_URL="+leader.NATSURL())
	pool := pgPool(t, url)
	cp, err := checkpoint.NewPG(pool, "kill-projection", "default")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, "the final consumer to reach the head", 3*time.Minute, 50*time.Millisecond, func() error {
		st, err := cp.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Position == head {
			if st.Epoch != epoch {
				t.Fatalf("checkpoint of epoch %s, the boundary's is %s", st.Epoch, epoch)
			}
			return nil
		}
		if p.Exited() {
			t.Fatalf("the final consumer ended at %d of %d; its output:\n%s", st.Position, head, p.Tail(20))
		}
		return fmt.Errorf("it reached %d of %d", st.Position, head)
	})
	p.Signal(syscall.SIGKILL)
	p.Wait()

	if err := exactlyOnce(pgCounts(t, pool), head); err != nil {
		t.Fatalf("%v (I5)", err)
	}
	t.Logf("%d events, each applied exactly once across %d SIGKILLs", head, rounds)
}

// exactlyOnce is the kill test's checker: positions 1..head applied once
// each, and nothing else.
func exactlyOnce(counts map[uint64]int, head uint64) error {
	for pos := uint64(1); pos <= head; pos++ {
		if counts[pos] != 1 {
			return fmt.Errorf("position %d applied %d times, want exactly once", pos, counts[pos])
		}
	}
	if uint64(len(counts)) != head {
		return fmt.Errorf("%d positions applied, the head is %d", len(counts), head)
	}
	return nil
}

// TestKillCheckerCatchesNaiveConsumer is the negative control of the kill
// test's checker: a consumer that commits its write and its checkpoint in
// two transactions, killed between them, applies that position twice after
// the restart, and the checker says so.
func TestKillCheckerCatchesNaiveConsumer(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	leader := startNode(t, orisun.Config{Backend: "postgres", PGURL: url, NodeID: "leader"})
	in := make([]orisun.Input, 100)
	for i := range in {
		in[i] = orisun.Input{Type: "kill.naive", Data: []byte(`{}`)}
	}
	if _, err := leader.Append(ctx, "default", in, nil); err != nil {
		t.Fatal(err)
	}
	p := startConsumer(t, "naive", url, "naive-1", "ORISUN_TEST_HANG_AT=40", "ORISUN_TEST_NATS_URL="+leader.NATSURL())
	p.WaitLine(t, "applied 40", 2*time.Minute)
	p.Signal(syscall.SIGKILL)
	p.Wait()
	p = startConsumer(t, "naive", url, "naive-2", "ORISUN_TEST_NATS_URL="+leader.NATSURL())
	p.WaitLine(t, "applied 100", 2*time.Minute)
	p.Signal(syscall.SIGKILL)
	p.Wait()
	err := exactlyOnce(pgCounts(t, pgPool(t, url)), 100)
	if err == nil || !strings.Contains(err.Error(), "position 40 applied 2 times") {
		t.Fatalf("the checker missed the naive consumer's double application: %v", err)
	}
}
