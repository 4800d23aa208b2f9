// Package status is what an orisun node says about itself (DESIGN §8, I7):
// the status document, and the HTTP listener that serves it to people and
// machines.
//
//	/status   the document, as JSON
//	/healthz  200 while the process serves HTTP: liveness only
//	/readyz   200 when the store and NATS answer and no publisher has been
//	          stalled longer than the stall threshold; 503 with the reasons
//	/metrics  the same facts as Prometheus metrics
//
// Every figure is measured when it is asked for: the handler and the
// metrics collector call Source.Status on each request, so a scrape never
// reports a cached "settled". A part that could not be measured carries an
// error instead of a guess.
package status
