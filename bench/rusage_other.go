//go:build !unix

package bench

import "time"

func cpuTime() (time.Duration, int64) { return 0, 0 }
func ResidentBytes() int64            { return 0 }
func loadAvg() []float64              { return nil }

func machineBusy() (float64, bool) { return 0, false }

func threadWaits() (map[int]threadSched, bool) { return nil, false }
