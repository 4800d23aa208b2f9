// Package api holds the wire types of orisun's NATS API (docs/protocol.md):
// the subjects, the JSON bodies of requests and replies, and the error
// codes with their mapping to the sentinel errors of package event. It is
// part of orisun's stable public API: any NATS client may rely on these
// shapes, and an incompatible change to them, or to what this package
// exports, is a breaking change, made only with a new protocol version
// (ServiceVersion) and a new major version of orisun.
//
// The service that serves the API, a NATS micro service named "orisun"
// that answers appends, reads, read-latest (the context of a decision),
// the boundary list and the status as JSON request/reply on orisun.api.>,
// runs inside the node (package api/service, machinery). Package client is
// the Go client of the same API.
//
// Errors carry the micro error headers (Nats-Service-Error-Code, numeric;
// Nats-Service-Error, the message) and the body
// {"error":{"code":…,"message":…}}, with "position" added to the conflict of
// a failed append condition (an *event.ConflictError). The code comes from
// the sentinel errors of package event (CodeOf, errors.Is); a request the
// service cannot understand is "invalid", and nothing is ever written for a
// request that fails validation. Choices where the design is silent:
//
//   - unknown JSON fields are refused ("invalid", naming the field): a
//     misspelt "condition" must never turn a conditional append into an
//     unconditional one, nor a misspelt "after" a read from the start;
//   - so is a key given twice in a request's envelope (the request, an
//     event, the condition, a query and its items), naming the key and
//     where it is: a decoder would keep one of them, and
//     {"condition":{…},"condition":null} would append unconditionally.
//     Keys are the same when equal once unescaped, regardless of case, as
//     encoding/json matches field names. The data and metadata of an event
//     are the application's JSON, stored as given, duplicate keys included;
//   - a read whose "after" is past the boundary's head is "invalid" and the
//     message names the head: a reader cannot be ahead of the log, so its
//     saved position belongs to another store or epoch;
//   - a backward read ("backwards": true, newest first) names its page by
//     "before", and a "before" past the head reads from the head: it is a
//     place to browse from, not a saved position. "after" with it, or
//     "before" without it, is "invalid", naming the field, so that neither
//     is silently ignored.
package api
