package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/backend/postgres"
	"github.com/orisun-io/orisun/catchup"
	"github.com/orisun-io/orisun/event"
)

func parseLine(b []byte) (Record, error) {
	var r Record
	err := json.Unmarshal(b, &r)
	return r, err
}

// childMain runs this test binary as an appender or a consumer process on
// PostgreSQL (the child "appender" or "consumer" of TestMain). SIGTERM ends it
// cleanly; SIGKILL is a fault.
func childMain(kind string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	rec, err := NewRecorder(os.Getenv("ORISUN_FAULT_HISTORY"), os.Getenv("ORISUN_FAULT_PROC"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer rec.Close()
	store, err := postgres.Open(ctx, postgres.Config{URL: os.Getenv("ORISUN_FAULTS_PG_URL"), MaxConns: 4})
	for err != nil {
		// PostgreSQL may be restarting (S7).
		if ctx.Err() != nil {
			return 0
		}
		time.Sleep(200 * time.Millisecond)
		store, err = postgres.Open(ctx, postgres.Config{URL: os.Getenv("ORISUN_FAULTS_PG_URL"), MaxConns: 4})
	}
	defer store.Close()
	atoi := func(name string) int { n, _ := strconv.Atoi(os.Getenv(name)); return n }
	switch kind {
	case "appender":
		a := &Appender{Rec: rec, Batch: max(atoi("ORISUN_FAULTS_BATCH"), 1),
			Pause: time.Duration(atoi("ORISUN_FAULTS_PAUSE_MS")) * time.Millisecond, Limit: atoi("ORISUN_FAULTS_LIMIT"),
			Append: func(ctx context.Context, in []event.Input) (event.AppendResult, error) {
				prepared, err := event.Prepare("default", in, event.Limits{})
				if err != nil {
					return event.AppendResult{}, err
				}
				return store.Append(ctx, "default", prepared, nil)
			}}
		a.Run(ctx)
		return 0
	case "consumer":
		c := &Consumer{Name: os.Getenv("ORISUN_FAULTS_NAME"), Rec: rec, CheckpointFile: os.Getenv("ORISUN_FAULTS_CHECKPOINT"),
			Delay:     time.Duration(atoi("ORISUN_FAULTS_DELAY_MS")) * time.Millisecond,
			Subscribe: leaderFollower(store, rec)}
		if err := c.Run(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "consumer:", err)
			return 1
		}
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown child kind", kind)
	return 2
}

// leaderFollower subscribes with catchup on the stream of the node that
// holds the lease (each node runs its own NATS until the cluster issue),
// and ends the subscription when the lease moves, so that the next one
// follows the new leader's stream. Until the NATS Go client exists, this is
// how an external consumer reads: the store for catching up, JetStream for
// live.
func leaderFollower(store *postgres.Store, rec *Recorder) SubscribeFunc {
	js := map[string]jetstream.JetStream{}
	for _, spec := range strings.Split(os.Getenv("ORISUN_FAULTS_NODES"), ",") {
		name, url, ok := strings.Cut(spec, "=")
		if !ok {
			continue
		}
		nc, err := nats.Connect(url, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1),
			nats.ReconnectWait(200*time.Millisecond), nats.Name("faults-consumer"))
		if err != nil {
			continue
		}
		js[name], _ = jetstream.New(nc)
	}
	holder := func(ctx context.Context) string {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		l, err := store.LeaseHolder(ctx, "default")
		if err != nil {
			return ""
		}
		name, _, _ := strings.Cut(l.Holder, "#")
		return name
	}
	return func(ctx context.Context, after uint64, opts event.SubscribeOptions, h event.Handler) error {
		node := holder(ctx)
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var moved atomic.Bool
		go func() {
			for sctx.Err() == nil {
				select {
				case <-sctx.Done():
					return
				case <-time.After(300 * time.Millisecond):
				}
				if n := holder(sctx); n != "" && n != node {
					moved.Store(true)
					cancel()
					return
				}
			}
		}()
		page, _ := strconv.Atoi(os.Getenv("ORISUN_FAULTS_PAGE")) // 0: catchup's default
		err := catchup.Subscribe(sctx, catchup.Config{Store: store, JS: js[node], Live: func() bool { return !moved.Load() }, PageSize: page},
			"default", after, h, opts)
		if moved.Load() && ctx.Err() == nil {
			return fmt.Errorf("the lease moved from %q: following the new leader", node)
		}
		return err
	}
}
