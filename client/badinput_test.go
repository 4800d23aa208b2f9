package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/event"
)

// TestBadInputNamedByTheClient: input that cannot even be sent as a request
// (a boundary name that is no subject token, data or metadata that is not
// JSON, a request over the server's max payload) is a clear error naming
// the field and the limit, wrapping event.ErrInvalid or event.ErrTooLarge,
// never "unavailable: is the relay running?"; and nothing is written.
func TestBadInputNamedByTheClient(t *testing.T) {
	t.Parallel()
	c := startNode(t, orisun.Config{DataDir: t.TempDir(), NATSPort: -1, PollInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	ok := []event.Input{{Type: "ok", Data: json.RawMessage(`{}`)}}
	// Each event fits the max payload (1 MB by default) on its own; the two
	// together do not fit one request.
	half := json.RawMessage(`"` + strings.Repeat("a", 600_000) + `"`)
	whole := json.RawMessage(`"` + strings.Repeat("a", 1_100_000) + `"`)
	cases := []struct {
		name    string
		call    func() error
		want    error
		mention []string
	}{
		{"append boundary with dot", func() error { _, err := c.Append(ctx, "a.b", ok, nil); return err },
			event.ErrInvalid, []string{"boundary name", "a.b"}},
		{"append boundary with space", func() error { _, err := c.Append(ctx, "a b", ok, nil); return err },
			event.ErrInvalid, []string{"boundary name"}},
		{"append boundary with NUL", func() error { _, err := c.Append(ctx, "a\x00", ok, nil); return err },
			event.ErrInvalid, []string{"boundary name"}},
		{"read boundary with dot", func() error { _, err := c.Read(ctx, "default.x", 0, 10, nil); return err },
			event.ErrInvalid, []string{"boundary name"}},
		{"latest boundary with space", func() error { _, err := c.ReadLatest(ctx, "de fault", nil); return err },
			event.ErrInvalid, []string{"boundary name"}},
		{"metadata not JSON", func() error {
			_, err := c.Append(ctx, "default", []event.Input{ok[0], {Type: "a", Data: json.RawMessage(`1`), Metadata: json.RawMessage(`x`)}}, nil)
			return err
		}, event.ErrInvalid, []string{"events[1]", "metadata", "JSON"}},
		{"data not JSON", func() error {
			_, err := c.Append(ctx, "default", []event.Input{{Type: "a", Data: json.RawMessage(`{nope`)}}, nil)
			return err
		}, event.ErrInvalid, []string{"events[0]", "data", "JSON"}},
		{"one event over max payload", func() error {
			_, err := c.Append(ctx, "default", []event.Input{{Type: "a", Data: whole}}, nil)
			return err
		}, event.ErrTooLarge, []string{"max payload is 1048576"}},
		{"batch over max payload", func() error {
			_, err := c.Append(ctx, "default", []event.Input{{Type: "a", Data: half}, {Type: "a", Data: half}}, nil)
			return err
		}, event.ErrTooLarge, []string{"max payload is 1048576", "fewer or smaller events"}},
	}
	for _, tc := range cases {
		err := tc.call()
		if !errors.Is(err, tc.want) || errors.Is(err, event.ErrUnavailable) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
			continue
		}
		for _, m := range tc.mention {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%s: error %q does not mention %q", tc.name, err, m)
			}
		}
	}
	bs, err := c.Boundaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 1 || bs[0].Name != "default" || bs[0].Head != 0 {
		t.Fatalf("something was written: %+v", bs)
	}
}
