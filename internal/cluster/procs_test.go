// Package cluster tests scale-out with real processes: three orisun
// processes (the binary of cmd/orisun) on one PostgreSQL, with their
// embedded NATS servers clustered or against a three-server NATS cluster
// (nats-server, built from the module's own dependency) that the test
// starts, faulted with SIGKILL.
package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orisun-io/orisun/backend/postgres"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/storetest"
	"github.com/orisun-io/orisun/status"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// openStore opens a store of the test's own on the PostgreSQL database
// at pgURL that the nodes share, with at most maxConns connections, and
// closes it when the test ends.
func openStore(t *testing.T, pgURL string, maxConns int32) *postgres.Store {
	t.Helper()
	store := storetest.Postgres(t, postgres.Config{URL: pgURL, MaxConns: maxConns})
	return store
}

// natsServerBinary is nats-server, the version go.mod pins.
func natsServerBinary(t testing.TB) string {
	return testutil.Build(t, testutil.Binary{Pkg: "github.com/nats-io/nats-server/v2"})
}

// startAttempts is how many times startGroup starts a group of children,
// each time on new ports, before it gives up on ports taken under it.
const startAttempts = 4

// startGroup starts a group of children that bind nPorts loopback ports
// between them: launch starts them on the ports pick gives, up is true
// once a child runs with its ports bound by itself. When a child exits
// before the whole group is up because a port was taken (between pick and
// its bind, by another process on this shared machine), every child of the
// attempt is killed and the group starts again on new ports. It returns
// the group and how many attempts it took; any other early exit, or no
// group up within timeout, fails the test.
func startGroup(t *testing.T, what string, nPorts int, pick func(t testing.TB, n int) []int,
	launch func(ports []int) []*proc, up func(*proc) bool, timeout time.Duration) ([]*proc, int) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		group := launch(pick(t, nPorts))
		failed := waitUp(t, what, group, up, timeout)
		if failed == nil {
			return group, attempt
		}
		for _, p := range group {
			p.Stop(0)
		}
		if !failed.bindFailed() {
			t.Fatalf("%s exited while %s started:\n%s", failed.Name, what, failed.Tail(50))
		}
		if attempt == startAttempts {
			t.Fatalf("%s: a port was taken under a child in each of %d attempts; the last:\n%s", what, attempt, failed.Tail(20))
		}
		t.Logf("%s could not bind a port picked for it (another process took it meanwhile): starting %s again on new ports",
			failed.Name, what)
	}
}

// waitUp waits until up holds for every process of group, and returns
// nil, or returns the first process that exited meanwhile.
func waitUp(t *testing.T, what string, group []*proc, up func(*proc) bool, timeout time.Duration) *proc {
	t.Helper()
	isUp := make([]bool, len(group))
	begin := time.Now()
	for {
		all := true
		for i, p := range group {
			if p.Exited() {
				return p
			}
			if !isUp[i] {
				isUp[i] = up(p)
				all = all && isUp[i]
			}
		}
		if all {
			// Once more: a child that found a port taken after another
			// process answered on it has exited by now.
			for _, p := range group {
				if p.Exited() {
					return p
				}
			}
			return nil
		}
		if time.Since(begin) > timeout {
			t.Fatalf("timed out after %s waiting for %s to start", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// proc is one child process: an orisun node or a nats-server.
type proc struct {
	*testutil.Process
	// nats is the client URL of the NATS server the process runs (orisun
	// with the embedded server, or nats-server); http the status
	// listener's host:port (orisun).
	nats, http string
}

// start runs bin with args and the environment env, and ends it when the
// test ends (testutil.StartProcess).
func start(t *testing.T, name, bin string, args, env []string) *proc {
	t.Helper()
	return &proc{Process: testutil.StartProcess(t, testutil.Command{Name: name, Path: bin, Args: args, Env: env})}
}

// bindFailed reports whether the process exited because an address it was
// to listen on was in use (orisun's status listener or embedded NATS, or
// nats-server).
func (p *proc) bindFailed() bool {
	return p.Exited() && p.Logged("address already in use")
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// status reads the node's GET /status.
func (p *proc) status() (status.Status, error) {
	var st status.Status
	if p.Exited() {
		return st, fmt.Errorf("%s is not running", p.Name)
	}
	resp, err := httpClient.Get("http://" + p.http + "/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return st, err
	}
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s /status: %d %s", p.Name, resp.StatusCode, body)
	}
	return st, json.Unmarshal(body, &st)
}

// boundary returns a boundary's entry of a status.
func boundary(st status.Status, name string) (status.BoundaryStatus, bool) {
	for _, b := range st.Boundaries {
		if b.Name == name {
			return b, true
		}
	}
	return status.BoundaryStatus{}, false
}

// orisunEnv is what every orisun node of these tests runs with: PostgreSQL,
// a short lease, its own data directory and status port.
func orisunEnv(t *testing.T, pgURL, id string, httpPort int, ttl time.Duration) []string {
	return []string{
		"ORISUN_BACKEND=postgres", "ORISUN_PG_URL=" + pgURL, "ORISUN_NODE_ID=" + id,
		"ORISUN_DATA_DIR=" + t.TempDir(), "ORISUN_HTTP_ADDR=127.0.0.1:" + strconv.Itoa(httpPort),
		"ORISUN_LEASE_TTL=" + ttl.String(), "ORISUN_POLL_INTERVAL=200ms", "ORISUN_PUBLISH_BATCH=200",
		"ORISUN_NATS_EVENT_STREAM_MAX_BYTES=67108864", "ORISUN_LOG_FORMAT=text",
	}
}

// embeddedCluster starts n orisun nodes whose embedded NATS servers form
// one cluster (every node is given every route, its own included, as in
// docker-compose.yml), with streams of three replicas.
func embeddedCluster(t *testing.T, pgURL string, n int, ttl time.Duration, extra ...string) []*proc {
	t.Helper()
	nodes, _ := startGroup(t, fmt.Sprintf("%d orisun nodes", n), 3*n, testutil.FreePorts, func(ports []int) []*proc {
		var routes []string
		for i := range n {
			routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
		}
		var nodes []*proc
		for i := range n {
			id := fmt.Sprintf("node-%d", i+1)
			env := append(orisunEnv(t, pgURL, id, ports[2*n+i], ttl),
				"ORISUN_NATS_PORT="+strconv.Itoa(ports[i]),
				"ORISUN_NATS_CLUSTER_NAME=orisun_test",
				"ORISUN_NATS_CLUSTER_PORT="+strconv.Itoa(ports[n+i]),
				"ORISUN_NATS_CLUSTER_ROUTES="+strings.Join(routes, ","),
				"ORISUN_NATS_STREAM_REPLICAS=3")
			bin := testutil.OrisunBinary(t)
			if slices.ContainsFunc(extra, func(e string) bool { return strings.HasPrefix(e, "ORISUN_FAULT_") }) {
				bin = testutil.OrisunBinary(t, "faultinject")
			}
			p := start(t, id, bin, nil, append(env, extra...))
			p.nats = fmt.Sprintf("nats://127.0.0.1:%d", ports[i])
			p.http = fmt.Sprintf("127.0.0.1:%d", ports[2*n+i])
			nodes = append(nodes, p)
		}
		return nodes
	}, orisunUp, 120*time.Second)
	return nodes
}

// orisunUp is true once the node has started: its status listener answers
// with its own node id (it binds the status port first and every other
// port before it starts, and exits when one is taken).
func orisunUp(p *proc) bool {
	st, err := p.status()
	return err == nil && st.NodeID == p.Name
}

// Users of the external NATS cluster: orisun logs in as one, the test's
// clients (the application) as the other.
const (
	natsOrisunUser, natsOrisunPassword = "orisun", "orisun-secret"
	natsAppUser, natsAppPassword       = "app", "app-secret"
)

// natsCluster starts n nats-server processes with JetStream, joined into
// one cluster by routes, each from a configuration file. It returns them;
// each proc's nats is its client URL.
func natsCluster(t *testing.T, n int) []*proc {
	t.Helper()
	servers, _ := startGroup(t, fmt.Sprintf("%d nats-server processes", n), 2*n, testutil.FreePorts,
		func(ports []int) []*proc { return launchNATSCluster(t, n, ports) }, natsUp, 60*time.Second)
	return servers
}

// launchNATSCluster starts n nats-server processes, clustered by routes,
// on the client ports ports[:n] and the route ports ports[n:2n].
func launchNATSCluster(t *testing.T, n int, ports []int) []*proc {
	t.Helper()
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
	}
	var servers []*proc
	for i := range n {
		cluster := fmt.Sprintf(`cluster {
  name: ext
  listen: 127.0.0.1:%d
  routes: [%s]
}
`, ports[n+i], strings.Join(routes, ", "))
		servers = append(servers, startNATSServer(t, i+1, ports[i], cluster))
	}
	return servers
}

// startNATSServer starts nats-server number i (server name ext-i, process
// nats-i) with JetStream and the two users, listening on port, with the
// extra configuration (a cluster block) given.
func startNATSServer(t *testing.T, i, port int, extra string) *proc {
	t.Helper()
	dir := t.TempDir()
	conf := fmt.Sprintf(`server_name: ext-%d
listen: 127.0.0.1:%d
jetstream {
  store_dir: %q
}
authorization {
  users: [
    {user: %q, password: %q}
    {user: %q, password: %q}
  ]
}
`, i, port, filepath.Join(dir, "js"), natsOrisunUser, natsOrisunPassword, natsAppUser, natsAppPassword) + extra
	file := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	p := start(t, fmt.Sprintf("nats-%d", i), natsServerBinary(t), []string{"-c", file}, nil)
	p.nats = fmt.Sprintf("nats://127.0.0.1:%d", port)
	return p
}

// natsUp is true once the nats-server accepts a client on its port and is
// the one that answers there (the server's name is its process's). A
// broken configuration fails here, by name; JetStream is usable once the
// servers elect a meta leader, which orisun's start-up waits for itself.
func natsUp(p *proc) bool {
	nc, err := nats.Connect(p.nats, nats.UserInfo(natsAppUser, natsAppPassword), nats.Timeout(time.Second),
		nats.NoReconnect())
	if err != nil {
		return false
	}
	defer nc.Close()
	return "nats-"+strings.TrimPrefix(nc.ConnectedServerName(), "ext-") == p.Name
}

// externalNodes starts n orisun nodes against the external NATS servers
// (ORISUN_NATS_URL lists them all, each node's list starting at a
// different server), logged in as natsOrisunUser.
func externalNodes(t *testing.T, pgURL string, servers []*proc, n int, ttl time.Duration, extra ...string) []*proc {
	t.Helper()
	nodes, _ := startGroup(t, fmt.Sprintf("%d orisun nodes", n), n, testutil.FreePorts, func(ports []int) []*proc {
		var nodes []*proc
		for i := range n {
			var urls []string
			for j := range servers {
				urls = append(urls, servers[(i+j)%len(servers)].nats)
			}
			id := fmt.Sprintf("node-%d", i+1)
			env := append(orisunEnv(t, pgURL, id, ports[i], ttl),
				"ORISUN_NATS_URL="+strings.Join(urls, ","),
				"ORISUN_NATS_USER="+natsOrisunUser, "ORISUN_NATS_PASSWORD="+natsOrisunPassword)
			p := start(t, id, testutil.OrisunBinary(t), nil, append(env, extra...))
			p.nats = servers[i%len(servers)].nats
			p.http = fmt.Sprintf("127.0.0.1:%d", ports[i])
			nodes = append(nodes, p)
		}
		return nodes
	}, orisunUp, 120*time.Second)
	return nodes
}

// statuses yields the index and the /status of each running node whose
// status can be read; the others are passed over.
func statuses(nodes []*proc) iter.Seq2[int, status.Status] {
	return func(yield func(int, status.Status) bool) {
		for i, p := range nodes {
			if p.Exited() {
				continue
			}
			st, err := p.status()
			if err != nil {
				continue
			}
			if !yield(i, st) {
				return
			}
		}
	}
}

// leading returns the indexes of the running nodes whose /status says
// their publisher leads the boundary.
func leading(nodes []*proc, name string) []int {
	var out []int
	for i, st := range statuses(nodes) {
		if b, ok := boundary(st, name); ok && b.State == "leading" {
			out = append(out, i)
		}
	}
	return out
}

// waitLeading waits until exactly one running node's /status says it
// leads the boundary default, and returns its index.
func waitLeading(t *testing.T, nodes []*proc, what string, timeout time.Duration) int {
	t.Helper()
	var lead int
	testutil.Eventually(t, what, timeout, 50*time.Millisecond, func() bool {
		l := leading(nodes, "default")
		if len(l) == 1 {
			lead = l[0]
		}
		return len(l) == 1
	})
	return lead
}

func contextFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
