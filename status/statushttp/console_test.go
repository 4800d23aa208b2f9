package statushttp_test

import (
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun/status"
	"github.com/orisun-io/orisun/status/statushttp"
)

// startConsole serves a fixed status with the given access rule.
func startConsole(t *testing.T, access statushttp.ConsoleAccess) *statushttp.Server {
	t.Helper()
	src := &fixed{st: status.Status{NodeID: "n1", Store: status.Health{OK: true}, NATS: status.Health{OK: true}}}
	s := statushttp.NewServer(src, statushttp.Options{Addr: "127.0.0.1:0", Console: access})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// TestConsoleFiles: the console's page, script and style are served from
// the binary with their types and a policy that keeps them self-contained,
// and the listener's root leads to it.
func TestConsoleFiles(t *testing.T) {
	s := startConsole(t, statushttp.ConsoleAccess{})
	for path, ctype := range map[string]string{
		"/console/":            "text/html",
		"/console/console.js":  "text/javascript",
		"/console/console.css": "text/css",
		"/console/boundary.js": "text/javascript",
		"/console/boundary/a":  "text/html",
	} {
		resp, err := http.Get("http://" + s.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype) {
			t.Errorf("%s: %d %q, want 200 %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), ctype)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
	}
	code, body := get(t, s.Addr(), "/console/")
	if code != 200 || !strings.Contains(body, `<script src="console.js"`) || !strings.Contains(body, `<table id="boundaries">`) {
		t.Fatalf("/console/: %d %s", code, body)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get("http://" + s.Addr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/console/" {
		t.Fatalf("/: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// TestConsoleLoadsNothingFromElsewhere: no page, script or style names
// another origin (no CDN, no web fonts), and the script never writes HTML
// from data (names and reasons are shown as text).
func TestConsoleLoadsNothingFromElsewhere(t *testing.T) {
	far := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}|@import|url\(|innerHTML|outerHTML|insertAdjacentHTML|document\.write`)
	err := filepath.WalkDir("console", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if m := far.FindString(string(b)); m != "" {
			t.Errorf("%s: %q", path, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestConsoleEventAccess: the rule of the event pages (docs/console.md,
// "Access"). Open when nothing needs credentials; off, saying why and how
// to turn them on, when credentials are needed and none are configured;
// with credentials configured, a wrong or missing password is refused and
// the right one passes. The page's own requests (X-Orisun-Console: fetch)
// get no challenge, so that the browser does not prompt from a background
// request.
func TestConsoleEventAccess(t *testing.T) {
	events := func(s *statushttp.Server, user, password string, hdr ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+s.Addr()+"/console/events", nil)
		if len(hdr) == 2 {
			req.Header.Set(hdr[0], hdr[1])
		}
		if user != "" {
			req.SetBasicAuth(user, password)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b) + " " + resp.Header.Get("WWW-Authenticate")
	}
	need := "NATS credentials are configured"

	open := startConsole(t, statushttp.ConsoleAccess{})
	if code, body := events(open, "", ""); code != http.StatusOK {
		t.Errorf("open: %d %s", code, body)
	}
	if _, body := get(t, open.Addr(), "/console/access"); !strings.Contains(body, `"events": "open"`) {
		t.Errorf("open: /console/access %s", body)
	}

	off := startConsole(t, statushttp.ConsoleAccess{NeedCredentials: need})
	code, body := events(off, "", "")
	if code != http.StatusForbidden || !strings.Contains(body, need) || !strings.Contains(body, "ORISUN_CONSOLE_USER and ORISUN_CONSOLE_PASSWORD") {
		t.Errorf("off: %d %s", code, body)
	}
	if _, body := get(t, off.Addr(), "/console/access"); !strings.Contains(body, `"events": "off"`) || !strings.Contains(body, need) {
		t.Errorf("off: /console/access %s", body)
	}

	for _, need := range []string{need, ""} {
		login := startConsole(t, statushttp.ConsoleAccess{NeedCredentials: need, User: "ops", Password: "right password"})
		for _, bad := range [][2]string{{"", ""}, {"ops", "wrong password"}, {"ops", "right passwor"}, {"other", "right password"}} {
			if code, body := events(login, bad[0], bad[1]); code != http.StatusUnauthorized || !strings.Contains(body, `Basic realm="orisun console"`) {
				t.Errorf("need %q, %q/%q: %d %s", need, bad[0], bad[1], code, body)
			}
		}
		if code, body := events(login, "ops", "wrong password", "X-Orisun-Console", "fetch"); code != http.StatusUnauthorized || strings.Contains(body, "Basic") {
			t.Errorf("need %q, the page's own request with a wrong password: %d %s, want 401 without a challenge", need, code, body)
		}
		if code, body := events(login, "ops", "right password"); code != http.StatusOK {
			t.Errorf("need %q, right password: %d %s", need, code, body)
		}
		// A wrong password waits FailedLoginDelay before its 401 (guessing
		// is slowed down); no password, the page's first request, does not
		// need to.
		start := time.Now()
		if code, _ := events(login, "ops", "wrong password"); code != http.StatusUnauthorized {
			t.Errorf("need %q, wrong password: %d", need, code)
		}
		if took := time.Since(start); took < statushttp.FailedLoginDelay {
			t.Errorf("need %q: a wrong password answered in %s, before the delay of %s", need, took, statushttp.FailedLoginDelay)
		}
		if _, body := get(t, login.Addr(), "/console/access"); !strings.Contains(body, `"events": "login"`) || strings.Contains(body, "right password") {
			t.Errorf("login: /console/access %s", body)
		}
		// The overview needs no login.
		if code, _ := get(t, login.Addr(), "/console/"); code != 200 {
			t.Errorf("overview with a login configured: %d", code)
		}
	}
}

// TestConsoleLoopbackHost: a loopback listener answers only to its own
// names (a guard against DNS rebinding: another site's page whose name
// resolves to 127.0.0.1 would read the events with the operator's
// browser). A forged Host is refused with 421 on the status, the console,
// its event pages, history and tail, and the metrics; localhost, the
// loopback addresses and the listener's own address pass with any port or
// none; /healthz and /readyz answer any Host, /readyz without its reasons
// (they name boundaries, event ids, the store's address and user).
func TestConsoleLoopbackHost(t *testing.T) {
	secret := `store failing: dial tcp 10.1.2.3:5432: password authentication failed for user "orisun"`
	src := &fixed{st: status.Status{NodeID: "n1", Store: status.Health{OK: false, Error: secret}, NATS: status.Health{OK: true}}}
	s := statushttp.NewServer(src, statushttp.Options{Addr: "127.0.0.1:0"})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	do := func(host, path string) (int, string) {
		t.Helper()
		return getHost(t, s.Addr(), host, path)
	}
	guarded := []string{"/status", "/console/", "/console/events", "/console/events/default", "/console/events/default/tail",
		"/console/history/default", "/console/boundary/default", "/console/access", "/metrics"}
	for _, host := range []string{"attacker.example", "attacker.example:" + strings.Split(s.Addr(), ":")[1], "localhost.attacker.example", "127.0.0.1.attacker.example"} {
		for _, path := range guarded {
			if code, body := do(host, path); code != http.StatusMisdirectedRequest || !strings.Contains(body, "DNS rebinding") || !strings.Contains(body, host) {
				t.Errorf("Host %s, %s: %d %s, want 421 naming the guard", host, path, code, body)
			}
		}
		for _, path := range []string{"/healthz", "/readyz"} {
			if code, body := do(host, path); code == http.StatusMisdirectedRequest {
				t.Errorf("Host %s, %s: %d %s, want it answered", host, path, code, body)
			}
		}
		if code, body := do(host, "/readyz"); code != http.StatusServiceUnavailable || strings.Contains(body, "10.1.2.3") || strings.Contains(body, "reasons") {
			t.Errorf("Host %s, /readyz: %d %s, want 503 without the reasons", host, code, body)
		}
	}
	if code, body := do("localhost", "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "10.1.2.3") {
		t.Errorf("Host localhost, /readyz: %d %s, want 503 with the reasons", code, body)
	}
	for _, host := range []string{s.Addr(), "localhost", "LOCALHOST:9000", "127.0.0.1", "[::1]", "[::1]:8080", "127.0.0.2:1"} {
		for _, path := range guarded {
			if code, body := do(host, path); code == http.StatusMisdirectedRequest {
				t.Errorf("Host %s, %s: %d %s, want it served", host, path, code, body)
			}
		}
	}
}

// TestWildcardListenerServesEveryHost: a listener on every address is
// reached by other names by design (its event pages need the console's
// credentials), also over loopback: the host's own name, which Debian
// maps to 127.0.1.1, was refused with 421 as if the listener were on
// loopback.
func TestWildcardListenerServesEveryHost(t *testing.T) {
	src := &fixed{st: status.Status{NodeID: "n1", Store: status.Health{OK: true}, NATS: status.Health{OK: true}}}
	s := statushttp.NewServer(src, statushttp.Options{Addr: "0.0.0.0:0"})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	_, port, err := net.SplitHostPort(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"myhost", "myhost.example:" + port} {
		if code, b := getHost(t, "127.0.0.1:"+port, host, "/status"); code != http.StatusOK {
			t.Errorf("Host %s over loopback to a wildcard listener: %d %s, want 200", host, code, b)
		}
	}
}

// TestLoopbackListenerAnswersItsOwnName: a listener told to listen on a
// name (ORISUN_HTTP_ADDR=myhost:8080) that resolves to loopback (Debian
// maps the host's own name to 127.0.1.1) answers to that name: the
// operator chose it. Other names are still refused.
func TestLoopbackListenerAnswersItsOwnName(t *testing.T) {
	local := &net.TCPAddr{IP: net.ParseIP("127.0.1.1"), Port: 8080}
	for _, tc := range []struct {
		host, own string
		want      bool
	}{
		{"myhost:8080", "myhost", true},
		{"MyHost", "myhost", true},
		{"myhost:9000", "myhost", true},
		{"myhost", "", false},
		{"attacker.example", "myhost", false},
		{"myhost.attacker.example", "myhost", false},
	} {
		if got := statushttp.HostAllowed(tc.host, local, tc.own); got != tc.want {
			t.Errorf("Host %s on a loopback listener named %q: allowed %v, want %v", tc.host, tc.own, got, tc.want)
		}
	}

	// The same through a real listener, by this machine's own name where
	// it resolves to loopback.
	name, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	ips, _ := net.LookupIP(name)
	if len(ips) == 0 || !ips[0].IsLoopback() {
		t.Logf("%s resolves to %v, not loopback: the listener part is not run here", name, ips)
		return
	}
	src := &fixed{st: status.Status{NodeID: "n1", Store: status.Health{OK: true}, NATS: status.Health{OK: true}}}
	s := statushttp.NewServer(src, statushttp.Options{Addr: net.JoinHostPort(name, "0")})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	for host, want := range map[string]int{name: http.StatusOK, "attacker.example": http.StatusMisdirectedRequest} {
		if code, b := getHost(t, s.Addr(), host, "/status"); code != want {
			t.Errorf("Host %s on a listener at %s (%s): %d %s, want %d", host, name, s.Addr(), code, b, want)
		}
	}
}
