package main

import (
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

	"go.yaml.in/yaml/v3"

	"github.com/orisun-io/orisun"
)

// composeFile is what the tests read of a compose file, decoded by a YAML
// parser (anchors and merge keys resolved, as compose resolves them).
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Build       any                          `yaml:"build"`
	Image       string                       `yaml:"image"`
	PullPolicy  string                       `yaml:"pull_policy"`
	DependsOn   map[string]map[string]string `yaml:"depends_on"`
	Environment map[string]any               `yaml:"environment"`
	Ports       []string                     `yaml:"ports"`
	Volumes     []string                     `yaml:"volumes"`
	Healthcheck struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	Deploy struct {
		Resources struct {
			Limits struct {
				Memory string `yaml:"memory"`
			} `yaml:"limits"`
		} `yaml:"resources"`
	} `yaml:"deploy"`
}

// env is the service's environment with compose's interpolation done: a
// required variable (${NAME:?message}) is given "test-NAME".
func (s composeService) env() map[string]string {
	out := map[string]string{}
	for k, v := range s.Environment {
		out[k] = interpolate(fmt.Sprint(v))
	}
	return out
}

// orisun reports whether the service is an orisun node.
func (s composeService) orisun() bool { return s.Environment["ORISUN_BACKEND"] != nil }

var composeVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?([?-])([^}]*))?\}`)

// interpolate does what compose does with ${NAME:?msg} (a required
// variable: here "test-NAME") and ${NAME:-default}.
func interpolate(s string) string {
	return composeVar.ReplaceAllStringFunc(s, func(m string) string {
		p := composeVar.FindStringSubmatch(m)
		if p[2] == "-" {
			return p[3]
		}
		return "test-" + p[1]
	})
}

func readCompose(t *testing.T, text string) composeFile {
	t.Helper()
	var f composeFile
	if err := yaml.Unmarshal([]byte(text), &f); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	if len(f.Services) == 0 {
		t.Fatal("docker-compose.yml has no services")
	}
	return f
}

func composeText(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
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

// nodeMemoryOverhead is what a node needs in memory beside its streams'
// contents (the process, the store's pool, JetStream's own state):
// measured RSS of an idle node is under 100 MiB; this leaves room.
const nodeMemoryOverhead = 256 << 20

// TestComposeFileMatchesConfig checks docker-compose.yml against the code
// (there is no Docker engine here to run it): every ORISUN_* variable it
// sets exists in the configuration and the configuration of each node is
// valid; the published ports are the ports the nodes listen on, bound to
// loopback; no password is written in the file; one service builds the
// image the others run; every node's JetStream memory budget is set, holds
// its boundaries' streams at their byte limit and fits its memory limit
// with the process (memoryProblem); the nodes form one cluster (each is in the
// route list, with the cluster port, node ids unique, enough nodes for the
// replicas) on the compose file's PostgreSQL; the status listener is
// reachable from outside the container; and the health checks run the
// image's binary with the healthcheck command, as the Dockerfile does.
func TestComposeFileMatchesConfig(t *testing.T) {
	doc := readCompose(t, composeText(t))
	vars := configVariables()
	var nodes []string
	for name, svc := range doc.Services {
		if svc.orisun() {
			nodes = append(nodes, name)
		}
	}
	slices.Sort(nodes)
	if len(nodes) < 3 {
		t.Fatalf("orisun services %v: want three or more clustered nodes", nodes)
	}
	if _, ok := doc.Services["postgres"]; !ok {
		t.Fatal("no postgres service")
	}
	for _, p := range composeProblems(doc) {
		t.Error(p)
	}
	nodeIDs := map[string]bool{}
	for _, name := range nodes {
		svc := doc.Services[name]
		env := svc.env()
		for k := range env {
			if _, ok := vars[k]; !ok && strings.HasPrefix(k, "ORISUN_") {
				t.Errorf("%s sets %s, which is not a configuration variable", name, k)
			}
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
			if _, ok := doc.Services[pg.Hostname()]; err != nil || !ok {
				t.Errorf("%s: ORISUN_PG_URL does not name a service of the compose file", name)
			}
			wantRoute := fmt.Sprintf("nats-route://%s:%d", name, cfg.NATSClusterPort)
			if !slices.Contains(cfg.NATSClusterRoutes, wantRoute) {
				t.Errorf("%s: ORISUN_NATS_CLUSTER_ROUTES %v lacks %s", name, cfg.NATSClusterRoutes, wantRoute)
			}
			for _, r := range cfg.NATSClusterRoutes {
				u, _ := url.Parse(r)
				if _, ok := doc.Services[u.Hostname()]; !ok {
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
			if cfg.DataDir != "/data" || !slices.ContainsFunc(svc.Volumes, func(v string) bool { return strings.HasSuffix(v, ":/data") }) {
				t.Errorf("%s: data directory %q is not a volume mounted at /data", name, cfg.DataDir)
			}
			published := map[string]bool{}
			for _, p := range svc.Ports {
				parts := strings.Split(p, ":")
				published[parts[len(parts)-1]] = true
			}
			for what, port := range map[string]string{"NATS clients (ORISUN_NATS_PORT)": strconv.Itoa(cfg.NATSPort), "status (ORISUN_HTTP_ADDR)": httpPort} {
				if !published[port] {
					t.Errorf("%s: the %s port %s is not published (ports %v)", name, what, port, svc.Ports)
				}
			}
			if p := memoryProblem(svc, cfg, len(nodes)); p != "" {
				t.Errorf("%s: %s", name, p)
			}
			if !reflect.DeepEqual(svc.Healthcheck.Test, []string{"CMD", "/usr/local/bin/orisun", "healthcheck"}) {
				t.Errorf("%s: health check %v, want the image's binary: [CMD /usr/local/bin/orisun healthcheck]", name, svc.Healthcheck.Test)
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

// memoryProblem says why a node's memory does not hold its streams (""
// when it does). The streams live in memory on every node that holds a
// replica (with replicas on every node, all of them), each up to its byte
// limit, which JetStream reserves out of its budget, ORISUN_NATS_MAX_MEMORY.
// Unset, that budget is 75% of the host's memory, not of the container's
// limit, and the node accepts boundaries whose streams the container
// cannot hold: the budget must be set, below the limit with room for the
// process, and hold the configured boundaries. The node checks a new
// boundary against the budget only where every node holds every stream
// (replicas equal to the nodes; memory.go), so that must hold too.
func memoryProblem(svc composeService, cfg orisun.Config, nodes int) string {
	limit, err := memoryBytes(svc.Deploy.Resources.Limits.Memory)
	streams := int64(len(cfg.Boundaries)) * cfg.EventStreamMaxBytes
	switch {
	case err != nil:
		return fmt.Sprintf("memory limit: %v", err)
	case cfg.EventStreamMaxBytes <= 0:
		return fmt.Sprintf("the streams have no byte limit (ORISUN_NATS_EVENT_STREAM_MAX_BYTES %d): no memory limit holds them", cfg.EventStreamMaxBytes)
	case cfg.NATSMaxMemory <= 0:
		return "ORISUN_NATS_MAX_MEMORY is not set: JetStream's budget would be 75% of the host's memory, not of the container's " +
			"limit, and boundaries beyond the limit would be accepted"
	case limit < cfg.NATSMaxMemory+nodeMemoryOverhead:
		return fmt.Sprintf("memory limit %s holds less than ORISUN_NATS_MAX_MEMORY %d + %d MiB for the process",
			svc.Deploy.Resources.Limits.Memory, cfg.NATSMaxMemory, nodeMemoryOverhead>>20)
	case cfg.NATSMaxMemory < streams:
		return fmt.Sprintf("ORISUN_NATS_MAX_MEMORY %d holds less than %d boundaries × ORISUN_NATS_EVENT_STREAM_MAX_BYTES %d",
			cfg.NATSMaxMemory, len(cfg.Boundaries), cfg.EventStreamMaxBytes)
	case cfg.StreamReplicas != nodes:
		return fmt.Sprintf("ORISUN_NATS_STREAM_REPLICAS %d with %d nodes: a node checks a new boundary against its memory "+
			"budget only when every node holds every stream", cfg.StreamReplicas, nodes)
	}
	return ""
}

// memoryBytes reads a compose memory size: 512M, 1G, 1gb, 1073741824.
func memoryBytes(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("none set (deploy.resources.limits.memory)")
	}
	t := strings.TrimSuffix(strings.ToLower(s), "b")
	mult := int64(1)
	switch {
	case strings.HasSuffix(t, "k"):
		mult = 1 << 10
	case strings.HasSuffix(t, "m"):
		mult = 1 << 20
	case strings.HasSuffix(t, "g"):
		mult = 1 << 30
	}
	n, err := strconv.ParseInt(strings.TrimRight(t, "kmg"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size", s)
	}
	return n * mult, nil
}

// requiredVar is a value that is one required variable: compose refuses
// to start when it is not set.
var requiredVar = regexp.MustCompile(`^\$\{[A-Za-z_][A-Za-z0-9_]*:\?[^}]+\}$`)

// composeProblems lists what makes a compose file unsafe to copy or
// miswired: a port published beyond loopback, a password written in the
// file, more than one build of the orisun image or a node that may pull
// it, an orisun node that does not wait for the PostgreSQL service named
// in its ORISUN_PG_URL to be healthy (depends_on with condition:
// service_healthy, and that service has a health check), a named volume
// used but not declared, and a host port published twice.
func composeProblems(doc composeFile) []string {
	var problems []string
	names := make([]string, 0, len(doc.Services))
	for name := range doc.Services {
		names = append(names, name)
	}
	slices.Sort(names)
	hostPorts := map[string]string{}
	builds, image := 0, ""
	for _, name := range names {
		svc := doc.Services[name]
		for k, v := range svc.Environment {
			raw := fmt.Sprint(v)
			secret := strings.Contains(k, "PASSWORD") || strings.Contains(k, "TOKEN") || strings.Contains(k, "SECRET")
			if secret && !requiredVar.MatchString(raw) {
				problems = append(problems, fmt.Sprintf("%s: %s is written in the file; make it a required variable, ${%s:?…}", name, k, k))
			}
			if u, err := url.Parse(raw); err == nil && u.User != nil {
				if pw, ok := u.User.Password(); ok && !requiredVar.MatchString(pw) {
					problems = append(problems, fmt.Sprintf("%s: %s holds a password written in the file; use a required variable", name, k))
				}
			}
		}
		if svc.orisun() {
			if svc.Build != nil {
				builds++
			} else if svc.PullPolicy != "never" {
				problems = append(problems, fmt.Sprintf("%s: runs the image another service builds but may pull it (pull_policy %q, want never)", name, svc.PullPolicy))
			}
			if image == "" {
				image = svc.Image
			} else if svc.Image != image {
				problems = append(problems, fmt.Sprintf("%s: image %q, the other nodes run %q", name, svc.Image, image))
			}
			if pgURL := svc.env()["ORISUN_PG_URL"]; pgURL != "" {
				u, err := url.Parse(pgURL)
				switch {
				case err != nil || u.Hostname() == "":
					problems = append(problems, fmt.Sprintf("%s: ORISUN_PG_URL names no host", name))
				case svc.DependsOn[u.Hostname()]["condition"] != "service_healthy":
					problems = append(problems, fmt.Sprintf("%s: does not depend on %s with condition: service_healthy "+
						"(it would start before PostgreSQL accepts connections)", name, u.Hostname()))
				case len(doc.Services[u.Hostname()].Healthcheck.Test) == 0:
					problems = append(problems, fmt.Sprintf("%s: waits for %s to be healthy, which has no health check", name, u.Hostname()))
				}
			}
		}
		for _, v := range svc.Volumes {
			source, _, ok := strings.Cut(v, ":")
			if !ok || strings.HasPrefix(source, "/") || strings.HasPrefix(source, ".") || strings.HasPrefix(source, "~") {
				continue // a bind mount or an anonymous volume
			}
			if _, ok := doc.Volumes[source]; !ok {
				problems = append(problems, fmt.Sprintf("%s: volume %q is not declared under the top-level volumes", name, source))
			}
		}
		for _, p := range svc.Ports {
			parts := strings.Split(p, ":")
			if len(parts) < 3 || parts[0] != "127.0.0.1" {
				problems = append(problems, fmt.Sprintf("%s: port %q is published on every interface; bind it to 127.0.0.1 (127.0.0.1:%s)",
					name, p, strings.Join(parts[max(0, len(parts)-2):], ":")))
			}
			host := strings.Join(parts[:len(parts)-1], ":")
			if other, dup := hostPorts[host]; dup {
				problems = append(problems, fmt.Sprintf("%s: host port %s is published by %s too", name, host, other))
			}
			hostPorts[host] = name
		}
	}
	if builds != 1 {
		problems = append(problems, fmt.Sprintf("the orisun image is built by %d services, want one", builds))
	}
	return problems
}

// TestComposeFileSafeToCopy: docker-compose.yml is safe to copy as it is
// and wired right: composeProblems finds nothing in it, and is shown to
// catch each fault on a broken copy of the file first (issue 18: ports on
// every interface, fixed passwords, the image built three times).
func TestComposeFileSafeToCopy(t *testing.T) {
	text := composeText(t)
	for _, broken := range []struct {
		what, old, new, want string
	}{
		{"a fixed password", "ORISUN_NATS_PASSWORD: ${ORISUN_NATS_PASSWORD:?", "ORISUN_NATS_PASSWORD: app-secret\n  X_UNUSED: ${ORISUN_NATS_PASSWORD:?",
			"ORISUN_NATS_PASSWORD is written in the file"},
		{"a fixed password in the URL", "postgres://orisun:${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD (letters and digits)}@", "postgres://orisun:orisun@",
			"ORISUN_PG_URL holds a password written in the file"},
		{"a port on every interface", `"127.0.0.1:4223:4222"`, `"4223:4222"`, `orisun2: port "4223:4222" is published on every interface`},
		{"a second build", "    pull_policy: never\n    environment:\n      <<: *orisun-env\n      ORISUN_NODE_ID: orisun3",
			"    build: .\n    environment:\n      <<: *orisun-env\n      ORISUN_NODE_ID: orisun3", "built by 2 services"},
		{"a node that may pull", "    # The image orisun1 builds; never pulled from a registry.\n    pull_policy: never\n", "",
			`orisun2: runs the image another service builds but may pull it`},
		{"a node that only waits for the container to start", "      condition: service_healthy\n  healthcheck:",
			"      condition: service_started\n  healthcheck:", "does not depend on postgres with condition: service_healthy"},
		{"a volume not declared", "      - orisun3-data:/data", "      - orisun3-state:/data", `orisun3: volume "orisun3-state" is not declared`},
		{"a host port twice", `"127.0.0.1:8991:8990"`, `"127.0.0.1:8990:8990"`, "host port 127.0.0.1:8990 is published by orisun1 too"},
	} {
		if !strings.Contains(text, broken.old) {
			t.Fatalf("negative control %q: docker-compose.yml no longer contains %q; update the control", broken.what, broken.old)
		}
		problems := composeProblems(readCompose(t, strings.Replace(text, broken.old, broken.new, 1)))
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, broken.want) }) {
			t.Errorf("negative control %q: the check found %q, want %q", broken.what, problems, broken.want)
		}
	}
	for _, p := range composeProblems(readCompose(t, text)) {
		t.Error(p)
	}
}

// TestComposeMemoryCheck: the memory check refuses a limit that does not
// hold the budget and the process (a copy of a node with 512 MiB), a
// budget left unset (75% of the host's memory) or one that does not hold
// the configured boundaries, no limit, streams without a byte limit, and
// fewer replicas than nodes (no budget check at creation), and accepts the
// file's node.
func TestComposeMemoryCheck(t *testing.T) {
	doc := readCompose(t, composeText(t))
	svc := doc.Services["orisun1"]
	file := orisun.Defaults()
	file.EventStreamMaxBytes, file.NATSMaxMemory, file.StreamReplicas = 128<<20, 704<<20, 3
	if p := memoryProblem(svc, file, 3); p != "" {
		t.Fatalf("the file's node: %s", p)
	}
	if env := svc.env(); env["ORISUN_NATS_MAX_MEMORY"] != strconv.FormatInt(file.NATSMaxMemory, 10) ||
		env["ORISUN_NATS_EVENT_STREAM_MAX_BYTES"] != strconv.FormatInt(file.EventStreamMaxBytes, 10) {
		t.Fatalf("docker-compose.yml's budget and stream limit are %q and %q; update this test's copy",
			env["ORISUN_NATS_MAX_MEMORY"], env["ORISUN_NATS_EVENT_STREAM_MAX_BYTES"])
	}
	small := svc
	small.Deploy.Resources.Limits.Memory = "512M"
	none := svc
	none.Deploy.Resources.Limits.Memory = ""
	unlimited := file
	unlimited.EventStreamMaxBytes = -1
	unset := file
	unset.NATSMaxMemory = 0
	crowded := file
	crowded.Boundaries = []string{"a", "b", "c", "d", "e", "f"}
	for _, c := range []struct {
		svc   composeService
		cfg   orisun.Config
		nodes int
		want  string
	}{
		{small, file, 3, "memory limit 512M holds less than ORISUN_NATS_MAX_MEMORY 738197504 + 256 MiB"},
		{none, file, 3, "none set"},
		{svc, unlimited, 3, "the streams have no byte limit"},
		{svc, unset, 3, "ORISUN_NATS_MAX_MEMORY is not set"},
		{svc, crowded, 3, "ORISUN_NATS_MAX_MEMORY 738197504 holds less than 6 boundaries"},
		{svc, file, 5, "ORISUN_NATS_STREAM_REPLICAS 3 with 5 nodes"},
	} {
		if p := memoryProblem(c.svc, c.cfg, c.nodes); !strings.Contains(p, c.want) {
			t.Errorf("memoryProblem: %q, want %q", p, c.want)
		}
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
		// ORISUN_URL is the CLI's; ORISUN_TEST_* are scripts/test's, for
		// the commands that reproduce a measurement.
		if _, ok := vars[name]; !ok && name != "ORISUN_URL" && !strings.HasPrefix(name, "ORISUN_TEST_") {
			t.Errorf("docs/deployment.md names %s, which is not a configuration variable", name)
		}
	}
	if seen < 20 {
		t.Fatalf("found only %d variable names in docs/deployment.md; the pattern is broken", seen)
	}
}
