// Package stream is the JetStream layout of docs/design.md §6, a public contract that
// NATS clients rely on: one memory stream per boundary named ORISUN_<boundary>
// on the subjects orisun.events.<boundary>.>, the message of an event with its
// headers and JSON body, and the stream metadata that carries the boundary's
// epoch. The publisher writes this layout and subscriptions read it; both go
// through this package so that the two can never disagree.
// It is part of orisun's stable public API (see package orisun): the layout
// is a wire contract, and changing it is a breaking change.
package stream

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/event"
)

// Header names of an event message.
const (
	HeaderEventID  = "Orisun-Event-Id"
	HeaderPosition = "Orisun-Position"
	HeaderEpoch    = "Orisun-Epoch"
	HeaderType     = "Orisun-Type"
	HeaderTime     = "Orisun-Time"
)

// Stream metadata keys.
const (
	MetaEpoch    = "orisun_epoch"
	MetaBoundary = "orisun_boundary"
)

// SubjectPrefix is the first two tokens of every event subject.
const SubjectPrefix = "orisun.events"

// Name returns the stream name of a boundary.
func Name(boundary string) string { return "ORISUN_" + boundary }

// Subjects returns the stream's subject filter: orisun.events.<boundary>.>.
func Subjects(boundary string) string { return SubjectPrefix + "." + boundary + ".>" }

// Subject returns the subject of an event of the given type.
func Subject(boundary, typ string) string { return SubjectPrefix + "." + boundary + "." + typ }

// ConsumerInactiveMax is the longest a consumer of a boundary's stream may
// go unused before JetStream deletes it (the stream's consumer limits): a
// consumer created without an inactive threshold, durable or not, gets
// this one, and one asking for longer is refused. The stream holds a
// limited number of consumers (JetStream's per-stream limit, 1,000 by
// default); consumers an application created and abandoned free their
// slots after this long instead of never (docs/security.md, "Limits").
const ConsumerInactiveMax = time.Hour

// Limits are the stream limits from configuration.
type Limits struct {
	MaxBytes int64         // <= 0: unlimited
	MaxMsgs  int64         // <= 0: unlimited
	MaxAge   time.Duration // 0: unlimited
	Replicas int           // 0 means 1
	// Duplicates is the de-duplication window for Nats-Msg-Id; 0 leaves
	// the server default.
	Duplicates time.Duration
	// Batched allows fast-ingest batches (allow_batched), in which the
	// publisher sends a backlog: only for a server whose JetStream API
	// level is 4 or more (nats-server 2.14), since an older one refuses
	// the field (2.12, 2.13) or drops it (2.11 and before).
	Batched bool
}

// Config returns the stream configuration of a boundary in an epoch.
// firstSeq is the sequence of the stream's first message when it is created
// (checkpoint + 1), so that sequence and position agree (I2).
func Config(boundary, epoch string, lim Limits, firstSeq uint64) jetstream.StreamConfig {
	cfg := jetstream.StreamConfig{
		Name:        Name(boundary),
		Description: "orisun events of boundary " + boundary,
		Subjects:    []string{Subjects(boundary)},
		Storage:     jetstream.MemoryStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxBytes:    -1,
		MaxMsgs:     -1,
		MaxAge:      lim.MaxAge,
		Replicas:    max(lim.Replicas, 1),
		Duplicates:  lim.Duplicates,
		FirstSeq:    firstSeq,
		Metadata:    map[string]string{MetaEpoch: epoch, MetaBoundary: boundary},

		ConsumerLimits:    jetstream.StreamConsumerLimits{InactiveThreshold: ConsumerInactiveMax},
		AllowBatchPublish: lim.Batched,
	}
	if lim.MaxBytes > 0 {
		cfg.MaxBytes = lim.MaxBytes
	}
	if lim.MaxMsgs > 0 {
		cfg.MaxMsgs = lim.MaxMsgs
	}
	return cfg
}

// Epoch returns the epoch recorded in a stream's metadata ("" if none).
func Epoch(cfg *jetstream.StreamConfig) string { return cfg.Metadata[MetaEpoch] }

// Message builds the message of a stored event. When msgID is true the
// Nats-Msg-Id header carries the event id, for NATS-side de-duplication.
//
// It runs once per published event, so it allocates little: the header
// values share one array, the keys are already canonical (no Header.Set),
// and the time is formatted once for the header and the body
// (BenchmarkMessage: 13 allocations before, docs/performance.md).
func Message(e *event.Event, msgID bool) (*nats.Msg, error) {
	ts := e.Time.UTC().Format(time.RFC3339Nano)
	body := appendBody(make([]byte, 0, 256+len(e.Data)+len(e.Metadata)), e, ts)
	n := 5
	if msgID {
		n = 6
	}
	vals := make([]string, n)
	vals[0], vals[1], vals[2], vals[3], vals[4] = e.ID, strconv.FormatUint(e.Position, 10), e.Epoch, e.Type, ts
	// One more slot: the publisher's expected-last-sequence header.
	h := make(nats.Header, n+1)
	h[HeaderEventID] = vals[0:1:1]
	h[HeaderPosition] = vals[1:2:2]
	h[HeaderEpoch] = vals[2:3:3]
	h[HeaderType] = vals[3:4:4]
	h[HeaderTime] = vals[4:5:5]
	if msgID {
		vals[5] = e.ID
		h[nats.MsgIdHdr] = vals[5:6:6]
	}
	return &nats.Msg{Subject: Subject(e.Boundary, e.Type), Header: h, Data: body}, nil
}

// Body encodes the event as the JSON body of its message: the shape of
// event.Event's JSON. Data and metadata are stored as compact, valid JSON, so
// they are copied as they are instead of being re-validated by
// encoding/json, which is the larger part of the cost of a publish.
func Body(e *event.Event) ([]byte, error) {
	b := make([]byte, 0, 256+len(e.Data)+len(e.Metadata))
	return appendBody(b, e, e.Time.UTC().Format(time.RFC3339Nano)), nil
}

// appendBody appends the body of Body, with the time already formatted.
func appendBody(b []byte, e *event.Event, ts string) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, e.ID)
	b = append(b, `,"boundary":`...)
	b = appendJSONString(b, e.Boundary)
	b = append(b, `,"epoch":`...)
	b = appendJSONString(b, e.Epoch)
	b = append(b, `,"position":`...)
	b = strconv.AppendUint(b, e.Position, 10)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, e.Type)
	b = append(b, `,"time":"`...)
	b = append(b, ts...)
	b = append(b, `","tags":[`...)
	for i, t := range e.Tags {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, t)
	}
	b = append(b, `],"data":`...)
	if len(e.Data) == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, e.Data...)
	}
	b = append(b, `,"metadata":`...)
	if len(e.Metadata) == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, e.Metadata...)
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string. Plain ASCII (ids, names,
// types) is copied; anything else goes through encoding/json for exact
// escaping.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !plainJSON(s[i]) {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// plainJSON is true of a byte that encoding/json writes as it is inside a
// string.
func plainJSON(c byte) bool {
	return c >= 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
}

// EncodedSize returns an upper bound of the size of the message the input
// becomes once stored: headers and body, with the widest position and time,
// and the headers the publisher adds. Appends compare it with the NATS max
// payload so that an event too large to publish can never be stored.
//
// It runs for every appended event, so it counts rather than builds: the
// size is that of the message Message would build for the input stored
// at position 2^64−1 with a nine-digit fraction of a second, Nats-Msg-Id
// included, plus the expected-last-sequence header (TestEncodedSizeCounts
// holds it to that message's size; building it was a fifth of
// event.Prepare, docs/performance.md).
func EncodedSize(boundary string, in *event.Input) int {
	const (
		epoch    = len("00000000-0000-0000-0000-000000000000")
		position = len("18446744073709551615")           // math.MaxUint64
		ts       = len("2006-01-02T15:04:05.999999999Z") // RFC 3339 with nanoseconds, UTC
	)
	id, typ := jsonStringLen(in.ID), jsonStringLen(in.Type)
	size := len(`{"id":`) + id + len(`,"boundary":`) + jsonStringLen(boundary) + len(`,"epoch":`) + epoch + 2 +
		len(`,"position":`) + position + len(`,"type":`) + typ + len(`,"time":"`) + ts + len(`","tags":[`) +
		len(`],"data":`) + jsonValueLen(in.Data) + len(`,"metadata":`) + jsonValueLen(in.Metadata) + len(`}`)
	for i, t := range in.Tags {
		if i > 0 {
			size++
		}
		size += jsonStringLen(t)
	}
	size += len(SubjectPrefix) + 1 + len(boundary) + 1 + len(in.Type) // Subject(boundary, in.Type)
	// Each header is "Key: value\r\n" (len(k)+len(v)+4, as NATS counts
	// it): the five of Message and Nats-Msg-Id.
	size += len(HeaderEventID) + len(in.ID) + 4 + len(HeaderPosition) + position + 4 + len(HeaderEpoch) + epoch + 4 +
		len(HeaderType) + len(in.Type) + 4 + len(HeaderTime) + ts + 4 + len(nats.MsgIdHdr) + len(in.ID) + 4
	// NATS/1.0 line, the expected-last-sequence header the publisher adds
	// (a uint64), and the header block's terminator.
	size += len("NATS/1.0\r\n") + len(jetstream.ExpectedLastSeqHeader) + 20 + 4 + 2
	return size
}

// jsonStringLen is the length of appendJSONString's encoding of s.
func jsonStringLen(s string) int {
	for i := 0; i < len(s); i++ {
		if !plainJSON(s[i]) {
			q, _ := json.Marshal(s)
			return len(q)
		}
	}
	return len(s) + 2
}

// jsonValueLen is the length of a data or metadata value in the body
// (appendBody writes null for none).
func jsonValueLen(v json.RawMessage) int {
	if len(v) == 0 {
		return len("null")
	}
	return len(v)
}

// Decode reads an event from a stream message. It returns the position and
// epoch from the headers, and the event from the body; a message whose
// headers and body disagree is an error (it was not written by orisun).
// The event's Data and Metadata may share data's array: copy
// them before changing either.
func Decode(subject string, h nats.Header, data []byte) (event.Event, error) {
	var e event.Event
	pos, err := strconv.ParseUint(h.Get(HeaderPosition), 10, 64)
	if err != nil {
		return e, fmt.Errorf("message on %s: header %s %q is not a position", subject, HeaderPosition, h.Get(HeaderPosition))
	}
	if fast, ok := fastBody(data); ok {
		e = fast
	} else if err := json.Unmarshal(data, &e); err != nil {
		return e, fmt.Errorf("message on %s at position %d: body is not an event: %w", subject, pos, err)
	}
	if e.Position != pos || e.Epoch != h.Get(HeaderEpoch) {
		return e, fmt.Errorf("message on %s: headers (position %d, epoch %s) disagree with the body (position %d, epoch %s)",
			subject, pos, h.Get(HeaderEpoch), e.Position, e.Epoch)
	}
	if e.Tags == nil {
		e.Tags = []string{}
	}
	if string(e.Metadata) == "null" {
		// The same event read from the store has no metadata: keep the
		// two paths identical.
		e.Metadata = nil
	}
	return e, nil
}
