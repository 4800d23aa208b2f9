package natsembed_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/natsembed"
)

const sysUser, sysPassword = "operator", "sys-s3cret"

// startWithStream starts a server with cfg and a stream ORISUN_x of
// orisun's holding three events, as a node's would.
func startWithStream(t *testing.T, cfg natsembed.Config) (*natsembed.Server, jetstream.Stream) {
	t.Helper()
	s := natstest.Server(t, cfg)
	nc := natstest.Orisun(t, s, "orisun")
	js := natstest.JetStream(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORISUN_x", Subjects: []string{"orisun.events.x.>"},
		Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := js.Publish(ctx, "orisun.events.x.t", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	return s, st
}

// sysReply is the envelope of the server's answers on $SYS.REQ.SERVER.
type sysReply struct {
	Server struct {
		Name string `json:"name"`
		ID   string `json:"id"`
	} `json:"server"`
	Statsz *struct {
		Connections int `json:"connections"`
	} `json:"statsz"`
	Data  json.RawMessage `json:"data"`
	Error *struct {
		Description string `json:"description"`
	} `json:"error"`
}

func sysRequest(t *testing.T, nc *nats.Conn, subject string) sysReply {
	t.Helper()
	msg, err := nc.Request(subject, nil, 5*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	var r sysReply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		t.Fatalf("reply to %s: %v: %s", subject, err, msg.Data)
	}
	if r.Error != nil {
		t.Fatalf("reply to %s: error %s", subject, r.Error.Description)
	}
	return r
}

// TestSystemUserMonitorsTheServer: the system user (Config.System) gets
// the answers the nats CLI's `nats server ping`, `server info` and `server
// report jetstream` ask for ($SYS.REQ.SERVER.PING, .<id>.VARZ, .PING.JSZ),
// counting the stream and messages of orisun's account, and is in the
// system account ($SYS.REQ.USER.INFO), with and without application
// credentials configured.
func TestSystemUserMonitorsTheServer(t *testing.T) {
	t.Parallel()
	for name, app := range map[string]*natsembed.Auth{
		"no application credentials": nil,
		"application credentials":    {User: "app", Password: "app-pass"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, _ := startWithStream(t, natsembed.Config{ServerName: "watched", Auth: app,
				System: &natsembed.Auth{User: sysUser, Password: sysPassword}})
			nc := natstest.Connect(t, s.ClientURL(), nats.UserInfo(sysUser, sysPassword))

			ping := sysRequest(t, nc, "$SYS.REQ.SERVER.PING")
			if ping.Server.Name != "watched" || ping.Server.ID == "" || ping.Statsz == nil || ping.Statsz.Connections < 1 {
				t.Fatalf("$SYS.REQ.SERVER.PING: server %+v, statsz %+v", ping.Server, ping.Statsz)
			}
			var varz struct {
				ServerName string `json:"server_name"`
				JetStream  struct {
					Config *struct{} `json:"config"`
				} `json:"jetstream"`
			}
			r := sysRequest(t, nc, "$SYS.REQ.SERVER."+ping.Server.ID+".VARZ")
			if err := json.Unmarshal(r.Data, &varz); err != nil || varz.ServerName != "watched" || varz.JetStream.Config == nil {
				t.Fatalf("VARZ: %+v %v: %s", varz, err, r.Data)
			}
			var jsz struct {
				Streams  int    `json:"streams"`
				Messages uint64 `json:"messages"`
			}
			for _, subj := range []string{"$SYS.REQ.SERVER.PING.JSZ", "$SYS.REQ.SERVER." + ping.Server.ID + ".JSZ"} {
				r = sysRequest(t, nc, subj)
				if err := json.Unmarshal(r.Data, &jsz); err != nil || jsz.Streams != 1 || jsz.Messages != 3 {
					t.Fatalf("%s: %+v %v, want 1 stream and 3 messages: %s", subj, jsz, err, r.Data)
				}
			}

			msg, err := nc.Request("$SYS.REQ.USER.INFO", nil, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var info struct {
				Data struct {
					User    string `json:"user"`
					Account string `json:"account"`
				} `json:"data"`
			}
			if err := json.Unmarshal(msg.Data, &info); err != nil || info.Data.User != sysUser || info.Data.Account != "$SYS" {
				t.Fatalf("$SYS.REQ.USER.INFO: %+v %v: %s", info, err, msg.Data)
			}
		})
	}
}

// TestSystemUserCannotTouchTheStreams_S13: the system user cannot publish
// into orisun.events.> nor reach JetStream (stream info, an account purge
// of orisun's account, which the system account's JetStream API would
// take), nor change the server (kick a client, reload) or answer in its
// place; the stream keeps its three messages.
func TestSystemUserCannotTouchTheStreams_S13(t *testing.T) {
	t.Parallel()
	s, st := startWithStream(t, natsembed.Config{System: &natsembed.Auth{User: sysUser, Password: sysPassword}})
	vopt, violations := natstest.Violations()
	nc := natstest.Connect(t, s.ClientURL(), nats.UserInfo(sysUser, sysPassword), vopt)
	id := sysRequest(t, nc, "$SYS.REQ.SERVER.PING").Server.ID

	if err := nc.Publish("orisun.events.x.t", []byte(`{"forged":true}`)); err != nil {
		t.Fatal(err)
	}
	natstest.WaitViolation(t, violations, "Publish", "orisun.events.x.t")
	for _, subj := range []string{
		"$JS.API.STREAM.INFO.ORISUN_x",
		"$JS.API.ACCOUNT.PURGE.$G",
		"$JS.API.STREAM.DELETE.ORISUN_x",
		"$SYS.REQ.SERVER." + id + ".KICK",
		"$SYS.REQ.SERVER." + id + ".RELOAD",
		"$SYS.REQ.SERVER." + id + ".LDM",
	} {
		if _, err := nc.Request(subj, []byte(`{}`), 500*time.Millisecond); err == nil {
			t.Fatalf("%s: answered", subj)
		}
		natstest.WaitViolation(t, violations, "Publish", subj)
	}
	for _, subj := range []string{"$SYS.REQ.SERVER.PING", "orisun.events.>", "$SYS._INBOX.>"} {
		if _, err := nc.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
		natstest.WaitViolation(t, violations, "Subscription", subj)
	}
	if info := natstest.Info(t, st); info.State.Msgs != 3 {
		t.Fatalf("ORISUN_x holds %d messages, want the 3 orisun published", info.State.Msgs)
	}
	// Still in service after all that: not kicked, not in lame-duck mode.
	sysRequest(t, nc, "$SYS.REQ.SERVER.PING")
}

// TestSystemAccountIsTheSystemUsers_S13: the application, with or
// without credentials, and the admin get no answer on $SYS (the
// server's monitoring requests are the system user's); wrong system
// credentials are refused at connect, also by a server without
// application credentials that would otherwise take the client for the
// application.
func TestSystemAccountIsTheSystemUsers_S13(t *testing.T) {
	t.Parallel()
	sys := &natsembed.Auth{User: sysUser, Password: sysPassword}
	for name, tc := range map[string]struct {
		cfg  natsembed.Config
		opts []nats.Option
	}{
		"anonymous":   {natsembed.Config{System: sys}, nil},
		"application": {natsembed.Config{System: sys, Auth: &natsembed.Auth{User: "app", Password: "app-pass"}}, []nats.Option{nats.UserInfo("app", "app-pass")}},
		"admin":       {natsembed.Config{System: sys, Admin: &natsembed.Auth{User: "admin", Password: "admin-pass"}}, []nats.Option{nats.UserInfo("admin", "admin-pass")}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := natstest.Server(t, tc.cfg)
			vopt, violations := natstest.Violations()
			nc := natstest.Connect(t, s.ClientURL(), append(tc.opts, vopt)...)
			for _, subj := range []string{"$SYS.REQ.SERVER.PING", "$SYS.REQ.SERVER.PING.VARZ", "$SYS.REQ.SERVER.PING.JSZ"} {
				if msg, err := nc.Request(subj, nil, 500*time.Millisecond); err == nil {
					t.Fatalf("%s: answered %s", subj, msg.Data)
				}
				natstest.WaitViolation(t, violations, "Publish", subj)
			}
			for what, opts := range map[string][]nats.Option{
				"wrong password": {nats.UserInfo(sysUser, "wrong")},
				"no password":    {nats.UserInfo(sysUser, "")},
			} {
				natstest.Refused(t, s.ClientURL(), what, opts...)
			}
		})
	}
}

// TestSystemUserConfig: the system user needs a user and a password of
// its own: not a token, not orisun's names, not the application's or the
// admin's user name or secret.
func TestSystemUserConfig(t *testing.T) {
	t.Parallel()
	app := &natsembed.Auth{User: "app", Password: "app-pass"}
	admin := &natsembed.Auth{Token: "admin-token"}
	for _, tc := range []struct {
		sys  natsembed.Auth
		want string
	}{
		{natsembed.Auth{Token: "t"}, "not a token"},
		{natsembed.Auth{User: "op"}, "needs User and Password"},
		{natsembed.Auth{Password: "p"}, "needs User and Password"},
		{natsembed.Auth{User: natsembed.InternalUser, Password: "p"}, "reserved"},
		{natsembed.Auth{User: "app", Password: "p"}, `the system user and the application have the same user name "app"`},
		{natsembed.Auth{User: "op", Password: "app-pass"}, "the system user's password is also the application's"},
		{natsembed.Auth{User: "op", Password: "admin-token"}, "the system user's password is also the admin's"},
	} {
		_, err := natsembed.New(natsembed.Config{StoreDir: t.TempDir(), Auth: app, Admin: admin, System: &tc.sys})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("System %+v: %v, want %q", tc.sys, err, tc.want)
		}
	}
}

// runNATS runs the nats CLI against url (testutil.RunNATSCLI) and returns
// its output, standard error after standard output, and how it ended.
func runNATS(t *testing.T, url string, args ...string) (string, error) {
	t.Helper()
	out, stderr, err := testutil.RunNATSCLI(t, url, args...)
	return out + stderr, err
}

// TestSystemUserWithTheNATSCLI: the real nats CLI's `nats server ping`,
// `server info` and `server report jetstream` work with the system user's
// credentials, and `nats server ping` finds no server for the
// application.
func TestSystemUserWithTheNATSCLI(t *testing.T) {
	t.Parallel()
	s, _ := startWithStream(t, natsembed.Config{ServerName: "watched", System: &natsembed.Auth{User: sysUser, Password: sysPassword}})
	login := []string{"--user", sysUser, "--password", sysPassword}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"server", "ping", "1"}, []string{"watched"}},
		{[]string{"server", "list", "1"}, []string{"watched"}},
		{[]string{"server", "info", "watched"}, []string{"watched", "JetStream"}},
		// The row of the server: no cluster, 1 stream, 0 consumers, 3 messages.
		{[]string{"server", "report", "jetstream"}, []string{`watched\s*│\s*│\s*1\s*│\s*0\s*│\s*3\s*│`}},
	} {
		out, err := runNATS(t, s.ClientURL(), append(login, tc.args...)...)
		if err != nil {
			t.Fatalf("nats %s: %v\n%s", strings.Join(tc.args, " "), err, out)
		}
		for _, w := range tc.want {
			if !regexp.MustCompile(w).MatchString(out) {
				t.Fatalf("nats %s: no %q in\n%s", strings.Join(tc.args, " "), w, out)
			}
		}
	}
	out, err := runNATS(t, s.ClientURL(), "server", "ping", "1")
	if err == nil && strings.Contains(out, "watched") {
		t.Fatalf("nats server ping as the application found the server:\n%s", out)
	}
}
