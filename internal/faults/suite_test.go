package faults

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestScenarios is the fast subset of docs/test-plan.md that CI runs: S1–S11 on
// PostgreSQL and S1, S2, S3, S8, S9, S11 on SQLite, each with real
// processes, a small load and a few faults, judged by the checker C1–C8.
// Each subtest logs its seed; a failure logs the fault schedule and the
// command that replays it (-seed, -scale).
func TestScenarios(t *testing.T) {
	for _, s := range catalogue(*scaleFlag) {
		t.Run(s.name(), func(t *testing.T) { execute(t, s) })
	}
}

// TestSoak runs random scenarios, with more load and more faults each
// (scale 2 unless -scale is given), until -soak has passed, then prints a
// summary: per scenario the runs, faults injected, events, duplicates, the
// longest takeover and the longest lag after the heal. Without -soak it
// runs one scenario, so that the command stays a real run in CI.
//
//	scripts/soak -duration 20m -seed 42
//	(= scripts/test -run TestSoak -timeout 0 ./internal/faults -args -soak 20m -seed 42)
func TestSoak(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	scale := 2
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "scale" {
			scale = *scaleFlag
		}
	})
	if *soakFlag == 0 {
		scale = 1
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	t.Logf("soak: seed %d, scale %d, duration %s", seed, scale, *soakFlag)
	type agg struct {
		runs, faults, events, dups int
		takeover, lag              time.Duration
	}
	sum := map[string]*agg{}
	start := time.Now()
	total := &agg{}
	for i := 0; i == 0 || time.Since(start) < *soakFlag; i++ {
		specs := catalogue(scale)
		s := specs[rng.IntN(len(specs))]
		s.seed = rng.Uint64()
		var st Stats
		ok := t.Run(fmt.Sprintf("%03d-%s", i, s.name()), func(t *testing.T) { st = execute(t, s) })
		if !ok {
			break
		}
		a := sum[s.name()]
		if a == nil {
			a = &agg{}
			sum[s.name()] = a
		}
		for _, x := range []*agg{a, total} {
			x.runs++
			x.faults += st.Faults
			x.events += st.Events
			x.dups += st.Duplicates
			x.takeover = max(x.takeover, st.MaxTakeover)
			x.lag = max(x.lag, st.MaxLagAfterHeal)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "soak summary: seed %d, scale %d, ran %s\n", seed, scale, time.Since(start).Round(time.Second))
	fmt.Fprintf(&b, "| scenario | runs | faults injected | events | duplicates | max takeover | max lag after heal |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|\n")
	names := make([]string, 0, len(sum))
	for n := range sum {
		names = append(names, n)
	}
	sort.Strings(names)
	row := func(n string, a *agg) {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %s | %s |\n", n, a.runs, a.faults, a.events, a.dups,
			a.takeover.Round(time.Millisecond), a.lag.Round(time.Millisecond))
	}
	for _, n := range names {
		row(n, sum[n])
	}
	row("**total**", total)
	fmt.Print(b.String())
	t.Log("\n" + b.String())
	if *summaryTo != "" {
		if err := os.WriteFile(*summaryTo, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}
