// Package cluster holds the scale-out tests of orisun, run against real
// processes: an embedded NATS cluster, an external three-server NATS
// cluster, boundaries spread over several nodes, leaders killed with
// SIGKILL. It has tests only. Being internal, it is orisun's machinery:
// its API may change without notice.
package cluster
