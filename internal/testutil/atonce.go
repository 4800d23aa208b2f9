package testutil

import "sync"

// AtOnce calls fn(0) to fn(n-1), each in a goroutine of its own, released
// together once all have started, and returns when every call has
// returned: the racing callers of a test of what a race may and may not
// do. fn runs outside the test's goroutine: it records its outcome for the
// test to check, and does not call t.Fatal.
func AtOnce(n int, fn func(i int)) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn(i)
		}()
	}
	close(start)
	wg.Wait()
}
