// Package statushttp is a node's HTTP status listener: the status document
// of package status served to people and machines.
// It is orisun's machinery, not for import by applications (they read the
// document over HTTP, or decode it with package status): its API may change
// without notice, and such a change is not a breaking change of orisun.
//
//	/status   the document, as JSON
//	/healthz  200 while the process serves HTTP: liveness only
//	/readyz   200 when the store and NATS answer, the store takes the
//	          node's work, and no publisher has been stalled longer than
//	          the stall threshold; 503 with the reasons
//	/metrics  the same facts as Prometheus metrics, and the node's
//	          counters and histograms (Options.Collectors)
//	/console/ the operator's console: the overview, a page that polls
//	          /status (docs/console.md); its event pages follow the
//	          access rule of Options.Console
//
// Every figure is measured when it is asked for: concurrent requests share
// one measurement in progress, but none gets a cached one, so a scrape
// never reports a stale "settled". A part that could not be measured
// carries an error instead of a guess, and its metrics are left out.
package statushttp
