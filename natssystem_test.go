package orisun_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
)

// TestNATSSystemUser: ORISUN_NATS_SYSTEM_USER and _PASSWORD log an
// operator into the embedded server's system account, where the server
// answers what `nats server report jetstream` asks ($SYS.REQ.SERVER.PING.JSZ)
// with orisun's stream and its events; the application, on the same node,
// gets no answer there.
func TestNATSSystemUser(t *testing.T) {
	t.Parallel()
	n := setup(t, "", func(c *orisun.Config) { c.NATSSystemUser, c.NATSSystemPassword = "operator", "sys-s3cret" })
	if _, err := n.Append(context.Background(), "default", events(3, "ok", 32), nil); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, n, 30*time.Second)
	sys := natstest.Connect(t, n.NATSURL(), nats.UserInfo("operator", "sys-s3cret"))
	msg, err := sys.Request("$SYS.REQ.SERVER.PING.JSZ", []byte(`{"streams":true,"accounts":true}`), 5*time.Second)
	if err != nil {
		t.Fatalf("$SYS.REQ.SERVER.PING.JSZ: %v", err)
	}
	var jsz struct {
		Data struct {
			Streams  int    `json:"streams"`
			Messages uint64 `json:"messages"`
		} `json:"data"`
	}
	if err := json.Unmarshal(msg.Data, &jsz); err != nil || jsz.Data.Streams != 1 || jsz.Data.Messages != 3 {
		t.Fatalf("JSZ %+v %v, want 1 stream (ORISUN_default) and 3 messages: %.1000s", jsz, err, msg.Data)
	}
	app := natstest.Connect(t, n.NATSURL())
	if msg, err := app.Request("$SYS.REQ.SERVER.PING.JSZ", nil, time.Second); err == nil {
		t.Fatalf("the application got an answer on $SYS: %.200s", msg.Data)
	}
}
