package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// jwtNATS starts a NATS server secured by JWTs, as the nats CLI's users
// run them (operator mode: an operator, a system account, an application
// account with JetStream), and returns its URL and a user's credentials
// file (the user's JWT and NKey seed).
func jwtNATS(t *testing.T) (url, creds string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	okp, err := nkeys.CreateOperator()
	must(err)
	opub, err := okp.PublicKey()
	must(err)
	account := func(name string, js bool) (nkeys.KeyPair, string, string) {
		kp, err := nkeys.CreateAccount()
		must(err)
		pub, err := kp.PublicKey()
		must(err)
		ac := jwt.NewAccountClaims(pub)
		ac.Name = name
		if js {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		token, err := ac.Encode(okp)
		must(err)
		return kp, pub, token
	}
	_, sysPub, sysJWT := account("SYS", false)
	appKP, appPub, appJWT := account("APP", true)
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "orisun-test"
	oc.SystemAccount = sysPub

	ukp, err := nkeys.CreateUser()
	must(err)
	upub, err := ukp.PublicKey()
	must(err)
	uc := jwt.NewUserClaims(upub)
	uc.Name = "app"
	userJWT, err := uc.Encode(appKP)
	must(err)
	seed, err := ukp.Seed()
	must(err)
	file, err := jwt.FormatUserConfig(userJWT, seed)
	must(err)
	creds = filepath.Join(t.TempDir(), "app.creds")
	must(os.WriteFile(creds, file, 0o600))

	resolver := &server.MemAccResolver{}
	must(resolver.Store(sysPub, sysJWT))
	must(resolver.Store(appPub, appJWT))
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
		TrustedOperators: []*jwt.OperatorClaims{oc}, AccountResolver: resolver, SystemAccount: sysPub,
	})
	must(err)
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("the JWT-secured NATS server is not ready")
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return ns.ClientURL(), creds
}

// TestCLIWithCreds: against orisun on a NATS secured by JWTs (issue 18:
// the CLI could not talk to one), the client commands log in with --creds
// or the nats CLI's NATS_CREDS, and the server URL may come from NATS_URL;
// without credentials they are refused with the ways to log in.
func TestCLIWithCreds(t *testing.T) {
	url, creds := jwtNATS(t)
	p := start(t, t.TempDir(), "ORISUN_NATS_URL="+url, "ORISUN_NATS_CREDS="+creds)
	p.WaitLine(t, "orisun started", lineWait)

	code, out, errs := cli(t, "", "append", "default", "-s", url, "--creds", creds, "--type", "a", "--data", "1")
	if code != 0 || !strings.Contains(out, "appended positions 1–1") {
		t.Fatalf("append with --creds: %d %q %q", code, out, errs)
	}
	t.Setenv("ORISUN_URL", "")
	t.Setenv("NATS_URL", url)
	t.Setenv("NATS_CREDS", creds)
	code, out, errs = cli(t, "", "read", "default")
	if code != 0 || !strings.HasPrefix(out, "1\ta\t") {
		t.Fatalf("read with NATS_URL and NATS_CREDS: %d %q %q", code, out, errs)
	}
	t.Setenv("NATS_CREDS", "")
	code, _, errs = cli(t, "", "read", "default", "--timeout", "2s")
	if code != exitFailure || !strings.Contains(errs, "log in with --user and --password, --token or --creds") {
		t.Fatalf("read without credentials: %d %q; want 1 and the ways to log in", code, errs)
	}
}
