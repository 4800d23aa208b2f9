package testutil

import "testing"

// NotYet fails the test when ch already holds a value: the operation that
// reports on ch went through while the test held what it must wait for (a
// row, a transaction, a lock). what says so ("the move returned while the
// head row was held"), and the failure ends with the value.
func NotYet[T any](t testing.TB, ch <-chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s: %v", what, v)
	default:
	}
}

// Release lets go of what the test held (release: a transaction's Commit
// or Rollback) and waits for the held operation's result on ch, failing
// the test when either fails.
func Release(t testing.TB, ch <-chan error, release func() error) {
	t.Helper()
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
}
