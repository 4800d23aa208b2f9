package orisun_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/client"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/natsembed"
	"github.com/orisun-io/orisun/stream"
)

// recipeNATS starts a nats-server in the test process from the
// configuration block of docs/security.md, "An existing NATS", with the
// passwords it takes from the environment, on a random port with JetStream.
func recipeNATS(t *testing.T) *server.Server {
	t.Helper()
	block := testutil.DocRecipe(t, "docs/security.md", "nats-server.conf")
	for k, v := range map[string]string{"ORISUN_NATS_PASSWORD": "orisun-pass", "APP_NATS_PASSWORD": "app-pass", "ADMIN_NATS_PASSWORD": "admin-pass"} {
		t.Setenv(k, v)
	}
	conf := filepath.Join(t.TempDir(), "nats-server.conf")
	if err := os.WriteFile(conf, []byte(block+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("docs/security.md's recipe does not load: %v", err)
	}
	opts.ServerName = "recipe-nats"
	ns := runNATS(t, opts)

	// The recipe's lists are natsembed's, so that the two cannot part.
	users := map[string]*server.User{}
	for _, u := range opts.Users {
		users[u.Username] = u
	}
	for name, want := range map[string]*server.Permissions{"app": natsembed.AppPermissions(), "admin": natsembed.AdminPermissions()} {
		u := users[name]
		if u == nil || u.Permissions == nil {
			t.Fatalf("the recipe has no user %s with permissions", name)
		}
		for _, l := range []struct {
			what      string
			got, want *server.SubjectPermission
		}{{"publish", u.Permissions.Publish, want.Publish}, {"subscribe", u.Permissions.Subscribe, want.Subscribe}} {
			if !sameSet(l.got.Allow, l.want.Allow) || !sameSet(l.got.Deny, l.want.Deny) {
				t.Fatalf("the recipe's %s %s lists differ from natsembed's:\n got %q / %q\nwant %q / %q",
					name, l.what, l.got.Allow, l.got.Deny, l.want.Allow, l.want.Deny)
			}
		}
	}
	return ns
}

// runNATS runs a NATS server with JetStream in the test process, with
// opts on a random loopback port and a store directory of the test's,
// until the test ends.
func runNATS(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	opts.Host, opts.Port, opts.NoSigs = "127.0.0.1", -1, true
	opts.JetStream, opts.StoreDir = true, t.TempDir()
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		t.Fatalf("the NATS server %s is not ready", opts.ServerName)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestExternalNATSRecipe_S13: the configuration of docs/security.md, "An
// existing NATS", loaded into a real nats-server, works. orisun, logged in
// as its user, relays; an application appends, reads and subscribes (the
// Go client goes live on the stream, and delivers exactly the store's
// events, I5); it may not publish into orisun.events.>, answer on
// orisun.api.> (plainly or in the service's queue group), create a stream
// or a boundary; the admin creates a boundary; and the node's start check
// finds nothing open to a client without credentials.
func TestExternalNATSRecipe_S13(t *testing.T) {
	ns := recipeNATS(t)
	logs := &syncBuffer{}
	n := setup(t, "", func(c *orisun.Config) {
		c.NATSURL, c.NATSUser, c.NATSPassword = ns.ClientURL(), "orisun", "orisun-pass"
	}, orisun.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	app := natstest.Client(t, ns.ClientURL(), client.UserInfo("app", "app-pass"))
	if _, err := app.Append(ctx, "default", events(5, "recipe.before", 32), nil); err != nil {
		t.Fatalf("the application's append: %v", err)
	}
	live := newLiveSignal()
	rec := newRecorder(0)
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- app.Subscribe(sctx, "default", 0, rec.handle, client.SubscribeOptions{OnCaughtUp: live.caughtUp})
	}()
	live.wait(t, "the application's subscription", done)
	if _, err := app.Append(ctx, "default", events(10, "recipe.after", 32), nil); err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, rec, 15, 30*time.Second)
	waitSettled(t, n, 30*time.Second)
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	checkAgainstStore(t, n, "default", 0, rec)
	if res, err := app.Read(ctx, "default", 0, 100, nil); err != nil || len(res.Events) != 15 {
		t.Fatalf("the application's read: %d events, %v", len(res.Events), err)
	}

	// What only orisun may do.
	errOpt, vio := natstest.Violations()
	hostile := natstest.Connect(t, ns.ClientURL(), nats.UserInfo("app", "app-pass"), errOpt)
	for _, subject := range []string{"orisun.events.default.recipe.forged", "orisun.api.boundaries.create", "$JS.API.STREAM.CREATE.SHADOW",
		"$JS.API.STREAM.PURGE." + stream.Name("default"), "_ORISUN_INBOX.x"} {
		if err := hostile.Publish(subject, []byte(`{"name":"sneaky"}`)); err != nil {
			t.Fatal(err)
		}
		waitForViolation(t, vio, "Publish", subject)
	}
	if _, err := hostile.QueueSubscribe("orisun.api.append.*", "orisun", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	waitForViolation(t, vio, "Subscription", "orisun.api.append.*")
	for _, subject := range []string{"orisun.api.>", "orisun.events.default.>", "_ORISUN_INBOX.>"} {
		if _, err := hostile.SubscribeSync(subject); err != nil {
			t.Fatal(err)
		}
		waitForViolation(t, vio, "Subscription", subject)
	}
	if _, err := n.Boundary(ctx, "sneaky"); err == nil {
		t.Fatal("the application created a boundary")
	}

	admin := natstest.Client(t, ns.ClientURL(), client.UserInfo("admin", "admin-pass"))
	if _, err := admin.CreateBoundary(ctx, "extra"); err != nil {
		t.Fatalf("the admin's boundary: %v", err)
	}
	// The stream is orisun's as before: the forged publish left nothing.
	js := natstest.JetStream(t, hostile)
	s, err := js.Stream(ctx, stream.Name("default"))
	if err != nil || s.CachedInfo().State.LastSeq != 15 {
		t.Fatalf("the stream after the attempts: %v", err)
	}
	if strings.Contains(logs.String(), "lets such a client") ||
		!strings.Contains(logs.String(), "refuses clients without credentials") {
		t.Fatalf("the start check of the recipe's server:\n%s", logs.String())
	}
}

// TestExternalNATSStartCheck_S13: with an external NATS whose clients
// without credentials may do anything (no_auth_user of full rights), the
// node warns at start, naming what such a client can do that only orisun
// should: publish into orisun.events.>, answer on orisun.api.> and
// $SRV.>, delete and purge streams, forge acknowledgements on
// orisun's inboxes, create boundaries.
func TestExternalNATSStartCheck_S13(t *testing.T) {
	ns := usersNATS(t)
	logs := &syncBuffer{}
	setup(t, "", func(c *orisun.Config) {
		c.NATSURL, c.NATSUser, c.NATSPassword = ns.ClientURL(), "orisun", "s3cret"
	}, orisun.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	var warning string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, "lets such a client") {
			warning = l
		}
	}
	if warning == "" {
		t.Fatalf("no warning about the open server:\n%s", logs.String())
	}
	for _, open := range []string{"in the account of clients without credentials", "publish into orisun.events.>",
		"subscribe to orisun.api.>", "subscribe to $SRV.>", "stream delete", "stream purge", "_ORISUN_INBOX.>",
		"create boundaries", "docs/security.md"} {
		if !strings.Contains(warning, open) {
			t.Errorf("the warning does not name %q: %s", open, warning)
		}
	}
	t.Log(warning)
}

// TestExternalNATSStartCheckURLCredentials_S13: orisun's user and password
// given in ORISUN_NATS_URL (nats://orisun:…@host) instead of
// ORISUN_NATS_USER. The start check connects without them: the server of
// docs/security.md's recipe refuses clients without credentials, and the
// check says so. Before, it logged in as orisun with the URL's password,
// every probe passed, it warned that any client could do everything, and
// it logged the password with the URL; so did "orisun started".
func TestExternalNATSStartCheckURLCredentials_S13(t *testing.T) {
	ns := recipeNATS(t)
	logs := &syncBuffer{}
	port := ns.Addr().(*net.TCPAddr).Port
	setup(t, "", func(c *orisun.Config) {
		c.NATSURL = fmt.Sprintf("nats://orisun:orisun-pass@127.0.0.1:%d", port)
	}, orisun.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	out := logs.String()
	if strings.Contains(out, "orisun-pass") {
		t.Fatalf("the log holds the password of ORISUN_NATS_URL:\n%s", out)
	}
	if strings.Contains(out, "lets such a client") || !strings.Contains(out, "refuses clients without credentials") {
		t.Fatalf("the start check did not probe without the URL's credentials:\n%s", out)
	}
	if want := fmt.Sprintf("nats_url=nats://127.0.0.1:%d", port); !strings.Contains(out, want) {
		t.Fatalf("the log does not name the server without its credentials (%s):\n%s", want, out)
	}
}

// TestBoundaryMemoryBudgetOfAccount_S13: on an external NATS whose
// JetStream account has a memory limit (max_mem), a new boundary whose
// stream would not fit the account's limit, with what its streams reserve
// and what the accepted boundaries without a stream will, is refused at
// creation, naming the account's limit.
func TestBoundaryMemoryBudgetOfAccount_S13(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "nats-server.conf")
	if err := os.WriteFile(conf, []byte(`
accounts {
  ORISUN {
    jetstream { max_mem: 10485760, max_file: 10485760 }
    users: [ { user: orisun, password: orisun-pass } ]
  }
}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	opts.ServerName = "account-nats"
	ns := runNATS(t, opts)
	n := setup(t, "", func(c *orisun.Config) {
		c.NATSURL, c.NATSUser, c.NATSPassword = ns.ClientURL(), "orisun", "orisun-pass"
		c.EventStreamMaxBytes = 4 << 20
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := n.CreateBoundary(ctx, "second"); err != nil {
		t.Fatalf("the second stream fits the account: %v", err)
	}
	_, err = n.CreateBoundary(ctx, "third")
	if err == nil || !errors.Is(err, event.ErrTooLarge) {
		t.Fatalf("the third boundary: %v, want refused as too large", err)
	}
	for _, want := range []string{"budget of 10 MiB (10485760 bytes) (the JetStream account's max_memory", "raise the account's JetStream memory limit"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("the refusal does not say %q: %v", want, err)
		}
	}
	t.Logf("refused: %v", err)
}
