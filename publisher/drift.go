// Drift: what of a boundary's stream configuration is not orisun's (a
// NATS client with the rights changed it), how the stream is put back, and
// which changes JetStream cannot undo in place, so that the stream is
// recreated from the checkpoint instead.

package publisher

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/stream"
)

// Drift is one setting of a stream that differs from orisun's.
type Drift struct {
	// Field is the setting's name in JetStream's stream configuration
	// (subjects, max_msgs, storage, …).
	Field string
	// Have is what the stream has, Want what orisun sets, both as an
	// operator would write them.
	Have, Want string
	// Recreate is true when JetStream cannot change the setting of an
	// existing stream (storage, sealed, deny_delete, …): the stream is
	// deleted and created again from the publish checkpoint.
	Recreate bool
}

func (d Drift) String() string { return d.Field + " changed to " + d.Have + " (want " + d.Want + ")" }

// defaultDuplicates is JetStream's de-duplication window when none is set
// (it is shorter when max_age is, or when the account caps it).
const defaultDuplicates = 2 * time.Minute

// ConfigDrift compares the configuration of a boundary's stream (have, as
// JetStream reports it) with orisun's (want, stream.Config with the node's
// limits) and returns every setting that differs, in a fixed order. It
// leaves out what orisun does not own or handles on its own: the epoch in
// the metadata (a stream of another epoch is recreated), the replica count
// (compared on its own: StreamDrifted, applyConfig; changing it copies the
// messages, and JetStream may refuse it while a cluster forms), the first
// sequence (a creation setting), the placement and the server's own
// metadata (keys starting with "_nats.").
func ConfigDrift(have, want *jetstream.StreamConfig) []Drift {
	var out []Drift
	add := func(field, h, w string, recreate bool) {
		out = append(out, Drift{Field: field, Have: h, Want: w, Recreate: recreate})
	}
	if !slices.Equal(have.Subjects, want.Subjects) {
		add("subjects", list(have.Subjects), list(want.Subjects), false)
	}
	if have.Storage != want.Storage {
		add("storage", have.Storage.String(), want.Storage.String(), true)
	}
	if have.Retention != want.Retention {
		// JetStream changes limits ↔ interest in place, never to or
		// from work queue.
		wq := have.Retention == jetstream.WorkQueuePolicy || want.Retention == jetstream.WorkQueuePolicy
		add("retention", have.Retention.String(), want.Retention.String(), wq)
	}
	if have.Discard != want.Discard {
		add("discard", have.Discard.String(), want.Discard.String(), false)
	}
	if have.DiscardNewPerSubject != want.DiscardNewPerSubject {
		add("discard_new_per_subject", flag(have.DiscardNewPerSubject), flag(want.DiscardNewPerSubject), false)
	}
	limits := []struct {
		field      string
		have, want int64
	}{
		{"max_msgs", have.MaxMsgs, want.MaxMsgs},
		{"max_bytes", have.MaxBytes, want.MaxBytes},
		{"max_msg_size", int64(have.MaxMsgSize), int64(want.MaxMsgSize)},
		{"max_msgs_per_subject", have.MaxMsgsPerSubject, want.MaxMsgsPerSubject},
		{"max_consumers", int64(have.MaxConsumers), int64(want.MaxConsumers)},
	}
	for _, l := range limits {
		if unlimited(l.have) != unlimited(l.want) {
			add(l.field, limit(l.have), limit(l.want), false)
		}
	}
	if have.MaxAge != want.MaxAge {
		add("max_age", age(have.MaxAge), age(want.MaxAge), false)
	}
	switch {
	case want.Duplicates > 0 && have.Duplicates != want.Duplicates:
		add("duplicate_window", have.Duplicates.String(), want.Duplicates.String(), false)
	case want.Duplicates <= 0 && have.Duplicates > defaultDuplicates:
		add("duplicate_window", have.Duplicates.String(), "the server's default, at most "+defaultDuplicates.String(), false)
	}
	bools := []struct {
		field      string
		have, want bool
		recreate   bool
	}{
		// JetStream never turns these off again on a stream.
		{"sealed", have.Sealed, want.Sealed, true},
		{"deny_delete", have.DenyDelete, want.DenyDelete, true},
		{"deny_purge", have.DenyPurge, want.DenyPurge, true},
		{"allow_msg_ttl", have.AllowMsgTTL, want.AllowMsgTTL, true},
		{"allow_msg_counter", have.AllowMsgCounter, want.AllowMsgCounter, true},
		{"allow_msg_schedules", have.AllowMsgSchedules, want.AllowMsgSchedules, true},
		// These it changes in place.
		{"no_ack", have.NoAck, want.NoAck, false},
		{"allow_rollup_hdrs", have.AllowRollup, want.AllowRollup, false},
		{"allow_direct", have.AllowDirect, want.AllowDirect, false},
		{"mirror_direct", have.MirrorDirect, want.MirrorDirect, false},
		{"allow_atomic", have.AllowAtomicPublish, want.AllowAtomicPublish, false},
		// allow_batched is not put back either way: orisun asks for it
		// where the server takes it (the node reads the JetStream API
		// level at start), and nodes that read different levels, or a
		// server upgraded under a stream, must not make the leaders turn
		// it on and off; the publisher uses batches only where the stream
		// has it (docs/design.md §5; TestConfigDriftLeavesAllowBatched).
	}
	for _, b := range bools {
		if b.have != b.want {
			add(b.field, flag(b.have), flag(b.want), b.recreate)
		}
	}
	if have.PersistMode != want.PersistMode {
		add("persist_mode", have.PersistMode.String(), want.PersistMode.String(), true)
	}
	if !reflect.DeepEqual(have.Mirror, want.Mirror) {
		// A mirror's content is another stream's, whatever is done to
		// its configuration.
		add("mirror", mirror(have.Mirror), mirror(want.Mirror), true)
	}
	if len(have.Sources) != 0 || len(want.Sources) != 0 {
		if !reflect.DeepEqual(have.Sources, want.Sources) {
			add("sources", sources(have.Sources), sources(want.Sources), false)
		}
	}
	if !reflect.DeepEqual(have.SubjectTransform, want.SubjectTransform) {
		add("subject_transform", transform(have.SubjectTransform), transform(want.SubjectTransform), false)
	}
	if !reflect.DeepEqual(have.RePublish, want.RePublish) {
		add("republish", republish(have.RePublish), republish(want.RePublish), false)
	}
	if have.Compression != want.Compression {
		add("compression", have.Compression.String(), want.Compression.String(), false)
	}
	if have.SubjectDeleteMarkerTTL != want.SubjectDeleteMarkerTTL {
		add("subject_delete_marker_ttl", have.SubjectDeleteMarkerTTL.String(), want.SubjectDeleteMarkerTTL.String(), false)
	}
	if have.ConsumerLimits != want.ConsumerLimits {
		add(consumerLimits, fmt.Sprintf("%+v", have.ConsumerLimits), fmt.Sprintf("%+v", want.ConsumerLimits), false)
	}
	if have.Description != want.Description {
		add("description", strconv.Quote(have.Description), strconv.Quote(want.Description), false)
	}
	if h, w := ownMetadata(have.Metadata), ownMetadata(want.Metadata); !maps.Equal(h, w) {
		add("metadata", fmt.Sprint(h), fmt.Sprint(w), false)
	}
	return out
}

// DescribeDrift says what drifted in the stream name, for a log line or a
// status warning: "stream ORISUN_x: subjects changed to [a] (want [b]),
// max_msgs changed to 10 (want unlimited)". Empty when nothing did.
func DescribeDrift(name string, ds []Drift) string {
	if len(ds) == 0 {
		return ""
	}
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.String()
	}
	return "stream " + name + ": " + strings.Join(parts, ", ")
}

// consumerLimits is the field of the consumer limits' drift, put back on
// their own (see Restored).
const consumerLimits = "consumer_limits"

// splitConsumerLimits takes the consumer limits' drift out of ds.
func splitConsumerLimits(ds []Drift) (rest []Drift, limits *Drift) {
	for i := range ds {
		if ds[i].Field == consumerLimits {
			limits = &ds[i]
			continue
		}
		rest = append(rest, ds[i])
	}
	return rest, limits
}

// mustRecreate reports whether one of ds cannot be undone in place.
func mustRecreate(ds []Drift) bool {
	return slices.ContainsFunc(ds, func(d Drift) bool { return d.Recreate })
}

// Restored is have with every setting ConfigDrift compares taken from want,
// but the consumer limits: the configuration that puts an existing stream
// back (UpdateStream). What orisun leaves alone (replicas, placement, the
// first sequence, the server's metadata) stays as the stream has it. The
// consumer limits are put back on their own (with have's consumer limits
// changed to want's), since JetStream refuses them while a consumer of the
// stream asks for more than they allow (a stream of an earlier orisun had
// none), and that refusal must not keep the rest from being put back.
func Restored(have, want *jetstream.StreamConfig) jetstream.StreamConfig {
	upd := *have
	upd.Description = want.Description
	upd.Subjects = slices.Clone(want.Subjects)
	upd.Retention, upd.Discard, upd.DiscardNewPerSubject = want.Retention, want.Discard, want.DiscardNewPerSubject
	upd.MaxMsgs, upd.MaxBytes, upd.MaxAge = want.MaxMsgs, want.MaxBytes, want.MaxAge
	upd.MaxMsgSize, upd.MaxMsgsPerSubject, upd.MaxConsumers = want.MaxMsgSize, want.MaxMsgsPerSubject, want.MaxConsumers
	if want.Duplicates > 0 || have.Duplicates > defaultDuplicates {
		upd.Duplicates = want.Duplicates // 0: the server's default
	}
	upd.NoAck, upd.AllowRollup = want.NoAck, want.AllowRollup
	upd.AllowDirect, upd.MirrorDirect = want.AllowDirect, want.MirrorDirect
	upd.AllowAtomicPublish, upd.AllowBatchPublish = want.AllowAtomicPublish, want.AllowBatchPublish
	upd.Sources, upd.SubjectTransform, upd.RePublish = want.Sources, want.SubjectTransform, want.RePublish
	upd.Compression, upd.SubjectDeleteMarkerTTL = want.Compression, want.SubjectDeleteMarkerTTL
	md := make(map[string]string, len(want.Metadata))
	for k, v := range have.Metadata {
		if strings.HasPrefix(k, "_nats.") {
			md[k] = v
		}
	}
	maps.Copy(md, want.Metadata)
	upd.Metadata = md
	return upd
}

// ownMetadata is the metadata orisun compares: neither the epoch (see
// ConfigDrift) nor the server's own keys.
func ownMetadata(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if k != stream.MetaEpoch && !strings.HasPrefix(k, "_nats.") {
			out[k] = v
		}
	}
	return out
}

// unlimited maps JetStream's two spellings of "no limit" (0, -1) to -1.
func unlimited(v int64) int64 {
	if v <= 0 {
		return -1
	}
	return v
}

func limit(v int64) string {
	if v <= 0 {
		return "unlimited"
	}
	return strconv.FormatInt(v, 10)
}

func age(d time.Duration) string {
	if d <= 0 {
		return "unlimited"
	}
	return d.String()
}

func flag(b bool) string { return strconv.FormatBool(b) }

func list(s []string) string { return "[" + strings.Join(s, " ") + "]" }

func mirror(m *jetstream.StreamSource) string {
	if m == nil {
		return "none"
	}
	return m.Name
}

func sources(ss []*jetstream.StreamSource) string {
	names := make([]string, 0, len(ss))
	for _, s := range ss {
		names = append(names, mirror(s))
	}
	return list(names)
}

func transform(t *jetstream.SubjectTransformConfig) string {
	if t == nil {
		return "none"
	}
	return t.Source + " → " + t.Destination
}

func republish(r *jetstream.RePublish) string {
	if r == nil {
		return "none"
	}
	return r.Source + " → " + r.Destination
}
