// Package status is what an orisun node says about itself (docs/design.md §8, I7):
// the status document, per node and per boundary, and the readiness
// judgement made from it. It holds types only, so that clients can decode
// the document without the server; package statushttp serves it over HTTP
// and as Prometheus metrics.
// It is part of orisun's stable public API (see package orisun), and so is
// the document's JSON.
package status
