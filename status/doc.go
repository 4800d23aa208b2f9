// Package status is what an orisun node says about itself (DESIGN §8, I7):
// the status document, per node and per boundary, and the readiness
// judgement made from it. It holds types only, so that clients can decode
// the document without the server; package statushttp serves it over HTTP
// and as Prometheus metrics.
package status
