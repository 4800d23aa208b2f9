//go:build faultinject

// This file is compiled only with -tags faultinject: the binary the fault
// suite (internal/faults) builds and runs. It records the node's history
// and injects faults inside the process, driven by ORISUN_FAULT_*
// variables. A release build does not contain it and ignores them.
//
//	ORISUN_FAULT_HISTORY        history file (JSON lines) of this process
//	ORISUN_FAULT_PROC           this process's name in the history
//	ORISUN_FAULT_KILL_AFTER_ACK N: SIGKILL itself at the N-th acknowledged
//	                            batch, before its checkpoint is written (S2)
//	ORISUN_FAULT_STOP_AT_BATCH  N: SIGSTOP itself at the N-th acknowledged
//	                            batch, before its checkpoint is written (S5:
//	                            the harness lets the lease move, then sends
//	                            SIGCONT; the write must be refused)
//	ORISUN_FAULT_KILL_AT_SEEN   K: SIGKILL itself when the K-th message of
//	                            this run reaches the stream, with the
//	                            pipelined batch half acknowledged (S3)
//	ORISUN_FAULT_APPEND         batch:pause_ms:limit:stop_file, an in-process
//	                            appender that stops once stop_file exists
//	ORISUN_FAULT_CONSUMERS      name=checkpoint_file:delay_ms,… in-process
//	                            consumers
//	ORISUN_FAULT_STATUS         a status record every that often (e.g. 200ms)
//	ORISUN_FAULT_CHECKPOINT_BEFORE_ACK  1: a deliberately broken publisher
//	                            that writes each batch's checkpoint before
//	                            publishing it (the negative control of C6)
//
// In-process appenders and consumers are for SQLite, where one process owns
// the data directory. Once the NATS Go client exists they should become
// processes of their own, as on PostgreSQL.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/faults"
	"github.com/orisun-io/orisun/internal/testhooks"
)

func init() { faultHooks = faultInject }

func faultInject(log *slog.Logger) ([]orisun.Option, func(context.Context, *orisun.Node)) {
	// ORISUN_FAULT_NATS_OPEN=1: the embedded server without its permission
	// model, for tests whose client must send an operator's JetStream
	// request (a stream leader step-down) to a node in another process.
	var open []orisun.Option
	if os.Getenv("ORISUN_FAULT_NATS_OPEN") == "1" {
		open = append(open, testhooks.Option[orisun.Option](testhooks.Hooks{PermissionsOff: true}))
	}
	path := os.Getenv("ORISUN_FAULT_HISTORY")
	if path == "" {
		return open, nil
	}
	rec, err := faults.NewRecorder(path, os.Getenv("ORISUN_FAULT_PROC"))
	if err != nil {
		log.Error("fault injection", "err", err)
		os.Exit(2)
	}
	killSelf := func(note string) {
		rec.Write(faults.Record{Kind: faults.KindFault, Note: note})
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	// On SQLite this process is the only writer of the checkpoint: read
	// it back after each write (C6 never back, never beyond the head).
	rs := &faults.RecordingStore{Rec: rec, ReadBack: os.Getenv("ORISUN_BACKEND") != "postgres"}
	killAfterAck, _ := strconv.Atoi(os.Getenv("ORISUN_FAULT_KILL_AFTER_ACK"))
	stopAtBatch, _ := strconv.Atoi(os.Getenv("ORISUN_FAULT_STOP_AT_BATCH"))
	var acks atomic.Int64
	hooks := testhooks.Hooks{
		WrapStore: func(s backend.Store) backend.Store { rs.Store = s; return rs },
		AfterAck: func(_ string, last uint64) {
			rs.Acked(last)
			n := acks.Add(1)
			if killAfterAck > 0 && n == int64(killAfterAck) {
				killSelf(fmt.Sprintf("SIGKILL between the acknowledgement of %d and its checkpoint", last))
			}
			if stopAtBatch > 0 && n == int64(stopAtBatch) {
				// Resumes here on SIGCONT and writes the checkpoint of
				// its old term.
				// kill(2) to itself returns before the group stop has
				// reached every thread: without waiting for SIGCONT this
				// goroutine could send the checkpoint write before it
				// stops (seen: a write sent, the process stopped while
				// the write was under way, accepted on SIGCONT).
				cont := make(chan os.Signal, 1)
				signal.Notify(cont, syscall.SIGCONT)
				rec.Write(faults.Record{Kind: faults.KindFault, Pos: last,
					Note: fmt.Sprintf("SIGSTOP itself between the acknowledgement of %d and its checkpoint", last)})
				syscall.Kill(os.Getpid(), syscall.SIGSTOP)
				<-cont
				signal.Stop(cont)
				rec.Write(faults.Record{Kind: faults.KindNote, Pos: last, Note: "continued after SIGSTOP: writing the checkpoint of the old term"})
			}
		},
	}
	if os.Getenv("ORISUN_FAULT_CHECKPOINT_BEFORE_ACK") == "1" {
		rec.Write(faults.Record{Kind: faults.KindNote, Note: "a broken publisher: checkpoint before the acknowledgement"})
		hooks.CheckpointBeforeAck = true
	}
	hooks.PermissionsOff = len(open) > 0
	opts := []orisun.Option{testhooks.Option[orisun.Option](hooks)}
	started := func(ctx context.Context, n *orisun.Node) {
		// orisun's own connection: the core subscription on the event
		// subjects below is refused to the application principal.
		nc, err := n.ConnectNATS("orisun-faultinject")
		if err != nil {
			log.Error("fault injection: connect", "err", err)
			os.Exit(2)
		}
		js, _ := jetstream.New(nc)
		rs.SetJS(js)
		if k, _ := strconv.Atoi(os.Getenv("ORISUN_FAULT_KILL_AT_SEEN")); k > 0 {
			var seen atomic.Int64
			// Messages reach a plain subscriber as the stream stores them,
			// before the publisher has all the acknowledgements of its
			// pipelined batch.
			nc.Subscribe("orisun.events.>", func(m *nats.Msg) {
				if seen.Add(1) == int64(k) {
					killSelf(fmt.Sprintf("SIGKILL at the %d-th message of this run (position %s), a pipelined batch half acknowledged",
						k, m.Header.Get("Orisun-Position")))
				}
			})
		}
		if d, err := time.ParseDuration(os.Getenv("ORISUN_FAULT_STATUS")); err == nil && d > 0 {
			go func() {
				for {
					select {
					case <-ctx.Done():
						return
					case <-time.After(d):
					}
					st, err := n.Status(ctx)
					if err != nil {
						continue
					}
					for _, b := range st.Boundaries {
						rec.Write(faults.Record{Kind: faults.KindStatus, Node: st.NodeID, Head: b.Head, Pos: b.Published,
							State: string(b.State), Reason: b.Reason, Epoch: b.Epoch})
					}
				}
			}()
		}
		if spec := os.Getenv("ORISUN_FAULT_APPEND"); spec != "" {
			f := strings.Split(spec, ":")
			batch, _ := strconv.Atoi(f[0])
			pauseMS, _ := strconv.Atoi(f[1])
			limit, _ := strconv.Atoi(f[2])
			stopFile := f[3]
			a := &faults.Appender{Rec: rec, Batch: batch, Pause: time.Duration(pauseMS) * time.Millisecond, Limit: limit,
				Stop: func() bool { _, err := os.Stat(stopFile); return err == nil },
				Append: func(ctx context.Context, in []event.Input) (event.AppendResult, error) {
					return n.Append(ctx, "default", in, nil)
				}}
			go a.Run(ctx)
		}
		for _, spec := range strings.Split(os.Getenv("ORISUN_FAULT_CONSUMERS"), ",") {
			name, rest, ok := strings.Cut(spec, "=")
			if !ok {
				continue
			}
			file, delay, _ := strings.Cut(rest, ":")
			ms, _ := strconv.Atoi(delay)
			c := &faults.Consumer{Name: name, Rec: rec, CheckpointFile: file, Delay: time.Duration(ms) * time.Millisecond,
				Subscribe: func(ctx context.Context, after uint64, opts event.SubscribeOptions, h event.Handler) error {
					return n.Subscribe(ctx, "default", after, h, opts)
				}}
			go c.Run(ctx)
		}
	}
	return opts, started
}
