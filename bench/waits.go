package bench

// threadSched is what the kernel counted for one thread since it started
// (threadWaits): the time it ran and the time it was runnable but waited
// for a CPU, in nanoseconds.
type threadSched struct{ run, wait uint64 }

// waitedBetween is the time the threads of end waited for a CPU since
// start, in nanoseconds: each thread's wait less what it had waited at
// start. A thread not in start, or whose counts went down (a new thread
// that took the id of one that ended), started since and counts whole; a
// thread in start but not in end ended meanwhile and is not counted. A new
// thread whose counts are not below the old one's under the same id is
// taken for the old one: its wait counts from the old thread's.
func waitedBetween(start, end map[int]threadSched) uint64 {
	var ns uint64
	for tid, e := range end {
		s, ok := start[tid]
		if ok && s.run <= e.run && s.wait <= e.wait {
			ns += e.wait - s.wait
		} else {
			ns += e.wait
		}
	}
	return ns
}
