package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/orisun-io/orisun"
)

// yamlNode is one node of the strict YAML subset docker-compose.yml is
// written in: block mappings ("key: value" or "key:" and an indented
// block), block lists of scalars ("- item"), scalars plain or
// double-quoted, and flow lists written as JSON arrays. Anchors, merges,
// multi-line scalars and tabs are refused, so the file stays readable by
// this test and nothing in it escapes the check.
type yamlNode struct {
	value    string
	children map[string]*yamlNode
	keys     []string
	items    []string
}

func (n *yamlNode) get(path ...string) *yamlNode {
	for _, k := range path {
		if n == nil {
			return nil
		}
		n = n.children[k]
	}
	return n
}

func parseYAML(text string) (*yamlNode, error) {
	root := &yamlNode{children: map[string]*yamlNode{}}
	type frame struct {
		indent int
		n      *yamlNode
	}
	stack := []frame{{-1, root}}
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if strings.ContainsAny(line, "\t&*|>") && !strings.HasPrefix(trimmed, "test:") {
			return nil, fmt.Errorf("line %d: %q uses YAML outside the subset (tabs, anchors, block scalars)", i+1, line)
		}
		indent := len(line) - len(trimmed)
		for stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		parent := stack[len(stack)-1].n
		if item, ok := strings.CutPrefix(trimmed, "- "); ok {
			parent.items = append(parent.items, scalar(item))
			continue
		}
		key, value, ok := strings.Cut(trimmed, ":")
		if !ok || (value != "" && value[0] != ' ') {
			return nil, fmt.Errorf("line %d: %q is not key: value", i+1, line)
		}
		child := &yamlNode{value: scalar(strings.TrimSpace(value)), children: map[string]*yamlNode{}}
		if _, dup := parent.children[key]; dup {
			return nil, fmt.Errorf("line %d: key %q repeated", i+1, key)
		}
		parent.children[key] = child
		parent.keys = append(parent.keys, key)
		stack = append(stack, frame{indent, child})
	}
	return root, nil
}

func scalar(s string) string {
	if strings.HasPrefix(s, `"`) {
		if u, err := strconv.Unquote(s); err == nil {
			return u
		}
	}
	return s
}

// configVariables maps every ORISUN_* variable of the configuration to its
// field.
func configVariables() map[string]reflect.StructField {
	vars := map[string]reflect.StructField{}
	typ := reflect.TypeOf(orisun.Config{})
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		vars["ORISUN_"+f.Tag.Get("envconfig")] = f
	}
	return vars
}

// TestComposeFileMatchesConfig checks docker-compose.yml against the code
// (there is no Docker engine here to run it): every ORISUN_* variable it
// sets exists in the configuration and the configuration of each node is
// valid; the published ports are the ports the nodes listen on; the nodes
// form one cluster (each is in the route list, with the cluster port, node
// ids unique, enough nodes for the replicas) on the compose file's
// PostgreSQL; the status listener is reachable from outside the container;
// and the health checks run the image's binary with the healthcheck
// command, as the Dockerfile does.
func TestComposeFileMatchesConfig(t *testing.T) {
	raw, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := parseYAML(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	services := doc.get("services")
	if services == nil {
		t.Fatal("docker-compose.yml has no services")
	}
	vars := configVariables()
	var nodes []string
	for _, name := range services.keys {
		if services.get(name, "environment", "ORISUN_BACKEND") != nil {
			nodes = append(nodes, name)
		}
	}
	if len(nodes) < 3 {
		t.Fatalf("orisun services %v: want three or more clustered nodes", nodes)
	}
	if services.get("postgres") == nil {
		t.Fatal("no postgres service")
	}
	nodeIDs := map[string]bool{}
	for _, name := range nodes {
		svc := services.get(name)
		env := map[string]string{}
		for _, k := range svc.get("environment").keys {
			if !strings.HasPrefix(k, "ORISUN_") {
				continue
			}
			if _, ok := vars[k]; !ok {
				t.Errorf("%s sets %s, which is not a configuration variable", name, k)
			}
			env[k] = svc.get("environment", k).value
		}
		t.Run(name, func(t *testing.T) {
			for k, v := range env {
				t.Setenv(k, v)
			}
			cfg, err := loadConfig()
			if err != nil {
				t.Fatalf("the configuration of %s is refused: %v", name, err)
			}
			if cfg.Backend != "postgres" || cfg.NATSClusterName == "" {
				t.Fatalf("%s: backend %q, cluster %q: want postgres and a cluster", name, cfg.Backend, cfg.NATSClusterName)
			}
			if nodeIDs[cfg.NodeID] || cfg.NodeID == "" {
				t.Errorf("%s: ORISUN_NODE_ID %q is empty or not unique (it names the JetStream peer)", name, cfg.NodeID)
			}
			nodeIDs[cfg.NodeID] = true
			if cfg.StreamReplicas > len(nodes) {
				t.Errorf("%s: %d replicas with %d nodes", name, cfg.StreamReplicas, len(nodes))
			}
			pg, err := url.Parse(cfg.PGURL)
			if err != nil || services.get(pg.Hostname()) == nil {
				t.Errorf("%s: ORISUN_PG_URL %q does not name a service of the compose file", name, cfg.PGURL)
			}
			wantRoute := fmt.Sprintf("nats-route://%s:%d", name, cfg.NATSClusterPort)
			if !slices.Contains(cfg.NATSClusterRoutes, wantRoute) {
				t.Errorf("%s: ORISUN_NATS_CLUSTER_ROUTES %v lacks %s", name, cfg.NATSClusterRoutes, wantRoute)
			}
			for _, r := range cfg.NATSClusterRoutes {
				u, _ := url.Parse(r)
				if services.get(u.Hostname()) == nil {
					t.Errorf("%s: route %s names no service", name, r)
				}
			}
			if cfg.NATSClusterHost != "0.0.0.0" || cfg.NATSHost != "0.0.0.0" {
				t.Errorf("%s: NATS listens on %s and routes on %s: other containers cannot reach loopback", name, cfg.NATSHost, cfg.NATSClusterHost)
			}
			host, httpPort, err := net.SplitHostPort(cfg.HTTPAddr)
			if err != nil || (host != "" && host != "0.0.0.0") {
				t.Errorf("%s: ORISUN_HTTP_ADDR %q is not reachable from outside the container (use :8990)", name, cfg.HTTPAddr)
			}
			if cfg.DataDir != "/data" || !slices.ContainsFunc(svc.get("volumes").items, func(v string) bool { return strings.HasSuffix(v, ":/data") }) {
				t.Errorf("%s: data directory %q is not a volume mounted at /data", name, cfg.DataDir)
			}
			published := map[string]bool{}
			for _, p := range svc.get("ports").items {
				parts := strings.Split(p, ":")
				published[parts[len(parts)-1]] = true
			}
			for what, port := range map[string]string{"NATS clients (ORISUN_NATS_PORT)": strconv.Itoa(cfg.NATSPort), "status (ORISUN_HTTP_ADDR)": httpPort} {
				if !published[port] {
					t.Errorf("%s: the %s port %s is not published (ports %v)", name, what, port, svc.get("ports").items)
				}
			}
			var test []string
			if hc := svc.get("healthcheck", "test"); hc == nil || json.Unmarshal([]byte(hc.value), &test) != nil {
				t.Fatalf("%s: no health check test as a JSON list", name)
			}
			if !reflect.DeepEqual(test, []string{"CMD", "/usr/local/bin/orisun", "healthcheck"}) {
				t.Errorf("%s: health check %v, want the image's binary: [CMD /usr/local/bin/orisun healthcheck]", name, test)
			}
		})
	}

	docker, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(docker)
	for _, want := range []string{
		`HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 CMD ["/usr/local/bin/orisun", "healthcheck"]`,
		"COPY --from=build /out/orisun /usr/local/bin/orisun",
		"CGO_ENABLED=0",
		"USER 65532:65532",
		"ORISUN_HTTP_ADDR=:8990",
		"EXPOSE 4222 6222 8990",
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	if regexp.MustCompile(`(?m)^USER (root|0)\b`).MatchString(df) {
		t.Error("the Dockerfile runs as root")
	}
}

// TestHealthcheckCommand: `orisun healthcheck` (the container health check)
// exits 0 against a ready node and 1 once nothing answers.
func TestHealthcheckCommand(t *testing.T) {
	p := start(t, t.TempDir())
	addr := httpAddrOf(t, p)
	p.WaitLine(t, "orisun started", lineWait)
	if code, out, errOut := runBin(t, "healthcheck", "--http", addr); code != 0 || !strings.Contains(out, "200") {
		t.Fatalf("healthcheck of a ready node: exit %d, %q %q", code, out, errOut)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.Wait()
	if code, _, _ := runBin(t, "healthcheck", "--http", addr); code != 1 {
		t.Fatalf("healthcheck of a stopped node: exit %d, want 1", code)
	}
}

// composeWiring lists what is wrong with how a compose file's services
// are wired together: an orisun service (one that sets ORISUN_BACKEND)
// that does not wait for the PostgreSQL service named in its ORISUN_PG_URL
// to be healthy (depends_on with condition: service_healthy, and that
// service has a health check), a named volume used but not declared under
// the top-level volumes, and a host port published by two services (or
// twice by one).
func composeWiring(doc *yamlNode) []string {
	var problems []string
	services := doc.get("services")
	if services == nil {
		return []string{"no services"}
	}
	declared := doc.get("volumes")
	hostPorts := map[string]string{}
	for _, name := range services.keys {
		svc := services.get(name)
		if pgURL := svc.get("environment", "ORISUN_PG_URL"); svc.get("environment", "ORISUN_BACKEND") != nil && pgURL != nil {
			u, err := url.Parse(pgURL.value)
			switch {
			case err != nil || u.Hostname() == "":
				problems = append(problems, fmt.Sprintf("%s: ORISUN_PG_URL %q names no host", name, pgURL.value))
			case svc.get("depends_on", u.Hostname(), "condition") == nil ||
				svc.get("depends_on", u.Hostname(), "condition").value != "service_healthy":
				problems = append(problems, fmt.Sprintf("%s: does not depend on %s with condition: service_healthy "+
					"(it would start before PostgreSQL accepts connections)", name, u.Hostname()))
			case services.get(u.Hostname(), "healthcheck", "test") == nil:
				problems = append(problems, fmt.Sprintf("%s: waits for %s to be healthy, which has no health check", name, u.Hostname()))
			}
		}
		for _, v := range itemsOf(svc.get("volumes")) {
			source, _, ok := strings.Cut(v, ":")
			if !ok || strings.HasPrefix(source, "/") || strings.HasPrefix(source, ".") || strings.HasPrefix(source, "~") {
				continue // a bind mount or an anonymous volume
			}
			if declared == nil || declared.children[source] == nil {
				problems = append(problems, fmt.Sprintf("%s: volume %q is not declared under the top-level volumes", name, source))
			}
		}
		for _, p := range itemsOf(svc.get("ports")) {
			parts := strings.Split(p, ":")
			if len(parts) < 2 {
				continue // a container port only: Docker picks the host port
			}
			host := strings.Join(parts[:len(parts)-1], ":")
			if len(parts) == 2 {
				host = "0.0.0.0:" + parts[0]
			}
			if other, dup := hostPorts[host]; dup {
				problems = append(problems, fmt.Sprintf("%s: host port %s is published by %s too", name, host, other))
			}
			hostPorts[host] = name
		}
	}
	return problems
}

// itemsOf returns a list node's items (none for a missing node).
func itemsOf(n *yamlNode) []string {
	if n == nil {
		return nil
	}
	return n.items
}

// TestComposeFileWiring: in docker-compose.yml every orisun node waits for
// PostgreSQL to be healthy, every named volume is declared and no two
// services publish the same host port. The check is shown to catch each
// fault on a broken copy of the file first.
func TestComposeFileWiring(t *testing.T) {
	raw, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	for _, broken := range []struct {
		what, old, new, want string
	}{
		{"a node that only waits for the container to start", "        condition: service_healthy\n    environment:\n      ORISUN_BACKEND: postgres\n      ORISUN_PG_URL: postgres://orisun:orisun@postgres:5432/orisun\n      ORISUN_NODE_ID: orisun2",
			"        condition: service_started\n    environment:\n      ORISUN_BACKEND: postgres\n      ORISUN_PG_URL: postgres://orisun:orisun@postgres:5432/orisun\n      ORISUN_NODE_ID: orisun2",
			"orisun2: does not depend on postgres with condition: service_healthy"},
		{"a volume not declared", "      - orisun3-data:/data", "      - orisun3-state:/data", `orisun3: volume "orisun3-state" is not declared`},
		{"a host port twice", `      - "8991:8990"`, `      - "8990:8990"`, "host port 0.0.0.0:8990 is published by orisun1 too"},
	} {
		if !strings.Contains(text, broken.old) {
			t.Fatalf("negative control %q: docker-compose.yml no longer contains %q; update the control", broken.what, broken.old)
		}
		doc, err := parseYAML(strings.Replace(text, broken.old, broken.new, 1))
		if err != nil {
			t.Fatal(err)
		}
		problems := composeWiring(doc)
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, broken.want) }) {
			t.Errorf("negative control %q: the check found %q, want %q", broken.what, problems, broken.want)
		}
	}
	doc, err := parseYAML(text)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range composeWiring(doc) {
		t.Error(p)
	}
}

// TestDeploymentDocVariables: every ORISUN_* variable docs/deployment.md
// names is one the configuration reads (or the CLI's ORISUN_URL), so the
// guide cannot tell anyone to set a variable that does nothing.
func TestDeploymentDocVariables(t *testing.T) {
	raw, err := os.ReadFile("../../docs/deployment.md")
	if err != nil {
		t.Fatal(err)
	}
	vars := configVariables()
	seen := 0
	for _, m := range regexp.MustCompile(`(?:^|[^_A-Za-z0-9])(ORISUN_[A-Z0-9_]*[A-Z0-9])`).FindAllStringSubmatch(string(raw), -1) {
		name := m[1]
		seen++
		if _, ok := vars[name]; !ok && name != "ORISUN_URL" {
			t.Errorf("docs/deployment.md names %s, which is not a configuration variable", name)
		}
	}
	if seen < 20 {
		t.Fatalf("found only %d variable names in docs/deployment.md; the pattern is broken", seen)
	}
}
