// Package pgretry says which PostgreSQL errors are worth retrying: the
// SQLSTATEs that the store (backend/postgres) and package outbox both
// report as unavailable. Being internal, it is orisun's machinery: its
// API may change without notice.
package pgretry

// Retryable reports whether an error with SQLSTATE code left nothing
// written and the same request may succeed when sent again: a serialization
// failure, a deadlock, a lock or statement timeout, a standby or a server
// going down, a lost connection, resources or I/O failing.
func Retryable(code string) bool {
	switch code {
	case "40001", // serialization_failure
		"40P01", // deadlock_detected
		"55P03", // lock_not_available (lock_timeout)
		"55006", // object_in_use
		"57014", // query_canceled (statement_timeout, a cancel request)
		"25006", // read_only_sql_transaction: connected to a standby
		"72000": // snapshot_too_old
		return true
	}
	if len(code) != 5 {
		return false
	}
	switch code[:2] {
	case "08", // connection exception
		"53", // insufficient resources: disk full, out of memory, too many connections
		"57", // operator intervention: admin shutdown (pg_terminate_backend), crash shutdown, cannot connect now
		"58": // system error: I/O
		return true
	}
	return false
}
