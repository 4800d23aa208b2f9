package orisun

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/orisun-io/orisun/backend/postgres"
	"github.com/orisun-io/orisun/backend/sqlite"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/natsembed"
)

// TestConfigDefaultsMatchREADME keeps the three places that describe a
// variable in agreement: the envconfig tags of Config (the names), Defaults
// (built from the XDefault constants) and the table of README.md's
// "Configuration" section. Every variable has a row and every row is a
// variable. A default column that starts with a `literal` gives the
// variable's default: written as defaultText writes it, and read by
// envconfig, as the binary reads the environment, into Defaults' value. A
// column that does not (such as "(none)") belongs to a field whose default
// is its zero value. A `default` tag would be a second source of defaults,
// which envconfig would apply in place of Defaults' value: none may exist.
func TestConfigDefaultsMatchREADME(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{} // variable: default column
	for _, r := range testutil.ReadmeVariables(t, string(readme)) {
		rows[r.Name] = r.Default
	}
	defaults := reflect.ValueOf(Defaults())
	typ := defaults.Type()
	seen := map[string]bool{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		if tag, ok := f.Tag.Lookup("default"); ok {
			t.Errorf("Config.%s has the tag default:%q; defaults live in the %sDefault constants and Defaults", f.Name, tag, f.Name)
		}
		name := "ORISUN_" + f.Tag.Get("envconfig")
		seen[name] = true
		text, ok := rows[name]
		if !ok {
			t.Errorf("README.md's configuration table has no row for %s (Config.%s)", name, f.Name)
			continue
		}
		want := defaults.Field(i)
		literal, isLiteral := strings.CutPrefix(text, "`")
		if !isLiteral {
			if !want.IsZero() {
				t.Errorf("README.md gives %s no default (%q); Defaults().%s is %v", name, text, f.Name, want)
			}
			continue
		}
		literal, _, _ = strings.Cut(literal, "`")
		if canonical := defaultText(want.Interface()); literal != canonical {
			t.Errorf("README.md gives %s the default %q; Defaults().%s is %q", name, literal, f.Name, canonical)
		}
		t.Setenv(name, literal)
		var got Config
		err := envconfig.Process("ORISUN", &got)
		os.Unsetenv(name) // t.Setenv restores it at the end
		if err != nil {
			t.Errorf("README.md's default of %s, %q, is not a value of the variable: %v", name, literal, err)
			continue
		}
		if g := reflect.ValueOf(got).Field(i); !reflect.DeepEqual(g.Interface(), want.Interface()) {
			t.Errorf("README.md gives %s the default %q (%v); Defaults().%s is %v", name, literal, g, f.Name, want)
		}
	}
	for name := range rows {
		if !seen[name] {
			t.Errorf("README.md's configuration table has a row for %s, which is no field of Config", name)
		}
	}
}

// defaultText writes a default as README.md does: as the variable's value.
func defaultText(v any) string {
	switch v := v.(type) {
	case time.Duration:
		return strings.ReplaceAll(limitText(v), "µs", "us")
	case []string:
		return strings.Join(v, ",")
	default:
		return fmt.Sprint(v)
	}
}

// TestConfigWithDefaults: New fills every zero field with its default,
// except the two whose zero means something of its own.
func TestConfigWithDefaults(t *testing.T) {
	got := Config{}.withDefaults()
	want := Defaults()
	want.HTTPAddr = ""                            // no status listener for a Node embedded in Go
	want.EventStreamMaxMsgs = 0                   // unlimited, as -1 is
	want.AppendTxTimeout = AppendTxTimeoutDefault // follows the default lease TTL
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Config{}.withDefaults():\n got %+v\nwant %+v", got, want)
	}
	// Unset, the application transaction's bound stays below half the
	// lease TTL (a quarter of it when that is shorter than the default).
	for _, tc := range []struct{ ttl, want time.Duration }{
		{10 * time.Second, AppendTxTimeoutDefault}, {time.Minute, AppendTxTimeoutDefault},
		{2 * time.Second, 500 * time.Millisecond}, {LeaseTTLMin, 25 * time.Millisecond},
	} {
		c := Config{LeaseTTL: tc.ttl}.withDefaults()
		if c.AppendTxTimeout != tc.want {
			t.Errorf("LeaseTTL %s: the default AppendTxTimeout is %s, want %s", tc.ttl, c.AppendTxTimeout, tc.want)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("LeaseTTL %s with the default AppendTxTimeout: %v", tc.ttl, err)
		}
	}
	// A program that starts from Defaults and shortens the lease TTL is
	// not refused for a transaction bound it never set.
	short := Defaults()
	short.LeaseTTL = 2 * time.Second
	if err := short.Validate(); err != nil {
		t.Errorf("Defaults() with LeaseTTL 2s: %v", err)
	}
	if c := short.withDefaults(); c.AppendTxTimeout != 500*time.Millisecond {
		t.Errorf("Defaults() with LeaseTTL 2s: AppendTxTimeout %s, want 500ms", c.AppendTxTimeout)
	}
	short.AppendTxTimeout = time.Second
	if err := short.Validate(); err == nil || !strings.Contains(err.Error(), "ORISUN_APPEND_TX_TIMEOUT") {
		t.Errorf("AppendTxTimeout 1s with LeaseTTL 2s: %v, want it refused by name", err)
	}
	set := Config{PublishBatch: 7, Boundaries: []string{}, AppendGroupDelay: -1, EventStreamMaxMsgs: -1}.withDefaults()
	if set.PublishBatch != 7 || set.Boundaries == nil || set.AppendGroupDelay != -1 || set.EventStreamMaxMsgs != -1 {
		t.Errorf("withDefaults replaced a value that was set: %+v", set)
	}
}

// TestValidateMessages pins every message of Config.Validate, word for word:
// operators grep logs for them and the README quotes some. Each case starts
// from the defaults (sqlite) or from a valid PostgreSQL configuration and
// changes what it names.
func TestValidateMessages(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sqlite := func(change func(c *Config)) Config {
		c := Defaults()
		change(&c)
		return c
	}
	postgres := func(change func(c *Config)) Config {
		c := Defaults()
		c.Backend, c.PGURL = "postgres", "postgres://orisun@db:5432/orisun"
		change(&c)
		return c
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		// The store.
		{"sqlite cluster name", sqlite(func(c *Config) { c.NATSClusterName = "c" }), []string{
			`ORISUN_NATS_CLUSTER_NAME: "c": a NATS cluster of orisun nodes needs ORISUN_BACKEND=postgres; SQLite stays single-node (one process owns the data directory). Leave ORISUN_NATS_CLUSTER_NAME empty, or move the store to PostgreSQL`}},
		// One message per variable on SQLite, none that offers a way SQLite
		// refuses (the review of issue 18: replicas 2 got two that
		// contradicted each other).
		{"sqlite cluster routes", sqlite(func(c *Config) { c.NATSClusterRoutes = []string{"nats-route://n2:6222"} }), []string{
			`ORISUN_NATS_CLUSTER_ROUTES: a NATS cluster of orisun nodes needs ORISUN_BACKEND=postgres; SQLite stays single-node`}},
		{"sqlite cluster port", sqlite(func(c *Config) { c.NATSClusterPort = 7000 }), []string{
			`ORISUN_NATS_CLUSTER_PORT: is set, but SQLite stays single-node: there is no NATS cluster to join; unset it, or move the store to PostgreSQL`}},
		{"sqlite replicas", sqlite(func(c *Config) { c.StreamReplicas = 3 }), []string{
			`ORISUN_NATS_STREAM_REPLICAS: 3: SQLite stays single-node, so its streams have one replica; unset it (or set 1), or move the store to PostgreSQL for a cluster of orisun nodes, whose streams may have 3 or 5`}},
		{"sqlite replicas 2", sqlite(func(c *Config) { c.StreamReplicas = 2 }), []string{
			`ORISUN_NATS_STREAM_REPLICAS: 2: SQLite stays single-node, so its streams have one replica; unset it (or set 1), or move the store to PostgreSQL for a cluster of orisun nodes, whose streams may have 3 or 5`}},
		{"postgres without URL", postgres(func(c *Config) { c.PGURL = "" }), []string{
			`ORISUN_PG_URL: is required with ORISUN_BACKEND=postgres (e.g. postgres://user:pass@host:5432/db)`}},
		{"postgres bad URL", postgres(func(c *Config) { c.PGURL = "postgres://u:secret@db:notaport/x" }), []string{
			`ORISUN_PG_URL: is not a valid PostgreSQL connection string; use postgres://user:password@host:5432/database?sslmode=… or keyword=value pairs (the value is not repeated here: it may hold a password)`}},
		{"postgres pool_max_conns", postgres(func(c *Config) { c.PGURL = "postgres://db/x?pool_max_conns=4" }), []string{
			`ORISUN_PG_URL: sets pool_max_conns, which orisun does not use; remove it and set ORISUN_PG_MAX_CONNS instead`}},
		{"postgres pool below", postgres(func(c *Config) { c.PGMaxConns = 1 }), []string{`ORISUN_PG_MAX_CONNS: 1 is outside 2–1000`}},
		{"postgres pool above", postgres(func(c *Config) { c.PGMaxConns = 1001 }), []string{`ORISUN_PG_MAX_CONNS: 1001 is outside 2–1000`}},
		{"backend", sqlite(func(c *Config) { c.Backend = "oracle" }), []string{`ORISUN_BACKEND: "oracle" is not a backend; use sqlite or postgres`}},
		{"no boundaries", sqlite(func(c *Config) { c.Boundaries = []string{} }), []string{`ORISUN_BOUNDARIES: at least one boundary is required`}},
		{"bad boundary", sqlite(func(c *Config) { c.Boundaries = []string{"ok", "Bad"} }), []string{
			`ORISUN_BOUNDARIES: boundary name "Bad": byte 0 ('B') is not allowed; a name must match ^[a-z][a-z0-9_]{0,62}$`}},
		{"sqlite synchronous", sqlite(func(c *Config) { c.SQLiteSynchronous = "SOMETIMES" }), []string{
			`ORISUN_SQLITE_SYNCHRONOUS: "SOMETIMES" is not one of OFF, NORMAL, FULL, EXTRA`}},

		// NATS: the embedded server, access, an external NATS, a cluster.
		{"port above", sqlite(func(c *Config) { c.NATSPort = 65536 }), []string{`ORISUN_NATS_PORT: 65536 is not a port (1–65535, or -1 for a random one)`}},
		{"port below", sqlite(func(c *Config) { c.NATSPort = -2 }), []string{`ORISUN_NATS_PORT: -2 is not a port (1–65535, or -1 for a random one)`}},
		{"token and user", sqlite(func(c *Config) { c.NATSToken, c.NATSUser, c.NATSPassword = "t", "u", "p" }), []string{
			`ORISUN_NATS_TOKEN: cannot be combined with ORISUN_NATS_USER/ORISUN_NATS_PASSWORD; set a token or a user and password, not both`}},
		{"user without password", sqlite(func(c *Config) { c.NATSUser = "app" }), []string{`ORISUN_NATS_PASSWORD: is required with ORISUN_NATS_USER ("app")`}},
		{"password without user", sqlite(func(c *Config) { c.NATSPassword = "p" }), []string{`ORISUN_NATS_USER: is required with ORISUN_NATS_PASSWORD`}},
		{"internal user", sqlite(func(c *Config) { c.NATSUser, c.NATSPassword = "_orisun_internal", "p" }), []string{
			`ORISUN_NATS_USER: "_orisun_internal" is reserved for orisun's own connections; choose another name`}},
		{"admin token and user", sqlite(func(c *Config) { c.NATSAdminToken, c.NATSAdminUser, c.NATSAdminPassword = "t", "u", "p" }), []string{
			`ORISUN_NATS_ADMIN_TOKEN: cannot be combined with ORISUN_NATS_ADMIN_USER/ORISUN_NATS_ADMIN_PASSWORD; set a token or a user and password, not both`}},
		{"admin without password", sqlite(func(c *Config) { c.NATSAdminUser = "admin" }), []string{
			`ORISUN_NATS_ADMIN_PASSWORD: is required with ORISUN_NATS_ADMIN_USER ("admin")`}},
		{"admin password without user", sqlite(func(c *Config) { c.NATSAdminPassword = "p" }), []string{
			`ORISUN_NATS_ADMIN_USER: is required with ORISUN_NATS_ADMIN_PASSWORD`}},
		{"admin is the application", sqlite(func(c *Config) {
			c.NATSUser, c.NATSPassword, c.NATSAdminUser, c.NATSAdminPassword = "app", "p", "app", "q"
		}), []string{
			`ORISUN_NATS_ADMIN_USER: "app" is also ORISUN_NATS_USER; the admin needs a user of its own`}},
		{"admin token is the application's", sqlite(func(c *Config) { c.NATSToken, c.NATSAdminToken = "t", "t" }), []string{
			`ORISUN_NATS_ADMIN_TOKEN: is also ORISUN_NATS_TOKEN; the admin needs a token of its own`}},
		{"admin internal user", sqlite(func(c *Config) { c.NATSAdminUser, c.NATSAdminPassword = "_orisun_api", "p" }), []string{
			`ORISUN_NATS_ADMIN_USER: "_orisun_api" is reserved for orisun's own connections; choose another name`}},
		{"admin with an external NATS", sqlite(func(c *Config) { c.NATSURL, c.NATSAdminToken = "nats://n1:4222", "t" }), []string{
			`ORISUN_NATS_ADMIN_USER: ORISUN_NATS_ADMIN_USER, _PASSWORD and _TOKEN are users of the embedded server; with ORISUN_NATS_URL your deployment's users decide who may create boundaries (docs/security.md, "An existing NATS")`}},
		{"system user without password", sqlite(func(c *Config) { c.NATSSystemUser = "op" }), []string{
			`ORISUN_NATS_SYSTEM_PASSWORD: is required with ORISUN_NATS_SYSTEM_USER ("op")`}},
		{"system password without user", sqlite(func(c *Config) { c.NATSSystemPassword = "p" }), []string{
			`ORISUN_NATS_SYSTEM_USER: is required with ORISUN_NATS_SYSTEM_PASSWORD`}},
		{"system internal user", sqlite(func(c *Config) { c.NATSSystemUser, c.NATSSystemPassword = "_orisun_anonymous", "p" }), []string{
			`ORISUN_NATS_SYSTEM_USER: "_orisun_anonymous" is reserved for orisun's own connections; choose another name`}},
		{"system user is the application", sqlite(func(c *Config) {
			c.NATSUser, c.NATSPassword, c.NATSSystemUser, c.NATSSystemPassword = "app", "p", "app", "q"
		}), []string{`ORISUN_NATS_SYSTEM_USER: "app" is also ORISUN_NATS_USER; the system user needs a user of its own`}},
		{"system user is the admin", sqlite(func(c *Config) {
			c.NATSAdminUser, c.NATSAdminPassword, c.NATSSystemUser, c.NATSSystemPassword = "admin", "p", "admin", "q"
		}), []string{`ORISUN_NATS_SYSTEM_USER: "admin" is also ORISUN_NATS_ADMIN_USER; the system user needs a user of its own`}},
		{"system password is the admin's token", sqlite(func(c *Config) { c.NATSAdminToken, c.NATSSystemUser, c.NATSSystemPassword = "t", "op", "t" }), []string{
			`ORISUN_NATS_SYSTEM_PASSWORD: is also the application's or the admin's password or token; the system user needs a password of its own`}},
		{"system password is the application's", sqlite(func(c *Config) {
			c.NATSUser, c.NATSPassword, c.NATSSystemUser, c.NATSSystemPassword = "app", "p", "op", "p"
		}), []string{`ORISUN_NATS_SYSTEM_PASSWORD: is also the application's or the admin's password or token; the system user needs a password of its own`}},
		{"system user with an external NATS", sqlite(func(c *Config) { c.NATSURL, c.NATSSystemUser, c.NATSSystemPassword = "nats://n1:4222", "op", "p" }), []string{
			`ORISUN_NATS_SYSTEM_USER: ORISUN_NATS_SYSTEM_USER and _PASSWORD are a user of the embedded server's system account; with ORISUN_NATS_URL orisun starts no server: use your deployment's own system account user`}},
		{"system user with the application and the admin", sqlite(func(c *Config) {
			c.NATSUser, c.NATSPassword, c.NATSAdminToken, c.NATSSystemUser, c.NATSSystemPassword = "app", "p", "t", "op", "q"
		}), nil},
		{"admin alone, and the application with the admin", sqlite(func(c *Config) { c.NATSAdminUser, c.NATSAdminPassword, c.NATSToken = "admin", "p", "t" }), nil},
		{"max memory negative", sqlite(func(c *Config) { c.NATSMaxMemory = -1 }), []string{
			`ORISUN_NATS_MAX_MEMORY: -1 is negative; 0 leaves JetStream's default (75% of the host's memory)`}},
		{"max memory below one stream", sqlite(func(c *Config) { c.NATSMaxMemory = 64 << 20 }), []string{
			`ORISUN_NATS_MAX_MEMORY: 67108864 is below ORISUN_NATS_EVENT_STREAM_MAX_BYTES (536870912): not one boundary's stream fits`}},
		{"max memory of an external NATS", sqlite(func(c *Config) { c.NATSURL, c.NATSMaxMemory = "nats://n1:4222", 1<<30 }), []string{
			`ORISUN_NATS_MAX_MEMORY: is the embedded server's JetStream memory; with ORISUN_NATS_URL your servers' own limits apply`}},
		{"max memory with unlimited streams", sqlite(func(c *Config) { c.NATSMaxMemory, c.EventStreamMaxBytes = 1<<20, -1 }), nil},
		{"TLS cert without key", sqlite(func(c *Config) { c.NATSTLSCert = notPEM }), []string{`ORISUN_NATS_TLS_KEY: is required with ORISUN_NATS_TLS_CERT (` + notPEM + `)`}},
		{"TLS key without cert", sqlite(func(c *Config) { c.NATSTLSKey = notPEM }), []string{`ORISUN_NATS_TLS_CERT: is required with ORISUN_NATS_TLS_KEY (` + notPEM + `)`}},
		{"TLS CA of an external NATS unreadable", sqlite(func(c *Config) { c.NATSURL, c.NATSTLSCA = "nats://n1:4222", missing }), []string{
			`ORISUN_NATS_TLS_CA: cannot read ` + missing + `: open ` + missing + `: no such file or directory`}},
		{"TLS CA of an external NATS not PEM", sqlite(func(c *Config) { c.NATSURL, c.NATSTLSCA = "nats://n1:4222", notPEM }), []string{
			`ORISUN_NATS_TLS_CA: ` + notPEM + ` holds no PEM certificate`}},
		{"TLS CA without cert", sqlite(func(c *Config) { c.NATSTLSCA = notPEM }), []string{
			`ORISUN_NATS_TLS_CA: needs ORISUN_NATS_TLS_CERT and ORISUN_NATS_TLS_KEY: client certificates are verified only over TLS`}},
		{"TLS files unreadable", sqlite(func(c *Config) { c.NATSTLSCert, c.NATSTLSKey = missing, missing }), []string{
			`ORISUN_NATS_TLS_CERT: cannot read ` + missing + `: open ` + missing + `: no such file or directory`,
			`ORISUN_NATS_TLS_KEY: cannot read ` + missing + `: open ` + missing + `: no such file or directory`}},
		{"TLS not a pair, CA not PEM", sqlite(func(c *Config) { c.NATSTLSCert, c.NATSTLSKey, c.NATSTLSCA = notPEM, notPEM, notPEM }), []string{
			`ORISUN_NATS_TLS_CERT: certificate ` + notPEM + ` and key ` + notPEM + ` (ORISUN_NATS_TLS_KEY) do not load as a pair: tls: failed to find any PEM data in certificate input`,
			`ORISUN_NATS_TLS_CA: ` + notPEM + ` holds no PEM certificate`}},
		{"max payload below", sqlite(func(c *Config) { c.NATSMaxPayload = 1023 }), []string{`ORISUN_NATS_MAX_PAYLOAD: 1023 is outside 1024–67108864 bytes`}},
		{"max payload above", sqlite(func(c *Config) { c.NATSMaxPayload = 64<<20 + 1 }), []string{`ORISUN_NATS_MAX_PAYLOAD: 67108865 is outside 1024–67108864 bytes`}},
		{"URL and cluster", postgres(func(c *Config) { c.NATSURL, c.NATSClusterName = "nats://n1:4222", "c" }), []string{
			`ORISUN_NATS_CLUSTER_NAME: cannot be combined with ORISUN_NATS_URL: with an external NATS orisun starts no server; set one or the other`}},
		{"bad NATS URL", sqlite(func(c *Config) { c.NATSURL = "nats://n1:4222, http://n2" }), []string{
			`ORISUN_NATS_URL: " http://n2" is not a NATS URL (e.g. nats://nats1:4222,nats://nats2:4222)`}},
		{"creds without URL", sqlite(func(c *Config) { c.NATSCreds = notPEM }), []string{
			`ORISUN_NATS_CREDS: is the credentials file for ORISUN_NATS_URL, which is not set`}},
		{"creds and token", sqlite(func(c *Config) { c.NATSURL, c.NATSCreds, c.NATSToken = "nats://n1:4222", notPEM, "t" }), []string{
			`ORISUN_NATS_CREDS: cannot be combined with ORISUN_NATS_USER or ORISUN_NATS_TOKEN; use one way to log in`}},
		{"creds unreadable", sqlite(func(c *Config) { c.NATSURL, c.NATSCreds = "nats://n1:4222", missing }), []string{
			`ORISUN_NATS_CREDS: cannot read ` + missing + `: open ` + missing + `: no such file or directory`}},
		{"cluster variables without a name", postgres(func(c *Config) {
			c.NATSClusterHost, c.NATSClusterPort = "0.0.0.0", 7222
			c.NATSClusterUser, c.NATSClusterPassword = "u", "p"
			c.NATSClusterTLSCert, c.NATSClusterTLSKey, c.NATSClusterTLSCA = "c", "k", "ca"
		}), []string{
			`ORISUN_NATS_CLUSTER_HOST: is set but ORISUN_NATS_CLUSTER_NAME is not: name the cluster to join the embedded servers`,
			`ORISUN_NATS_CLUSTER_PORT: is set but ORISUN_NATS_CLUSTER_NAME is not: name the cluster to join the embedded servers`,
			`ORISUN_NATS_CLUSTER_USER: is set but ORISUN_NATS_CLUSTER_NAME is not: name the cluster to join the embedded servers`,
			`ORISUN_NATS_CLUSTER_PASSWORD: is set but ORISUN_NATS_CLUSTER_NAME is not: name the cluster to join the embedded servers`,
			`ORISUN_NATS_CLUSTER_TLS_CERT: is set but ORISUN_NATS_CLUSTER_NAME is not: name the cluster to join the embedded servers`,
			`ORISUN_NATS_CLUSTER_TLS_KEY: is set but ORISUN_NATS_CLUSTER_NAME is not: name the cluster to join the embedded servers`,
			`ORISUN_NATS_CLUSTER_TLS_CA: is set but ORISUN_NATS_CLUSTER_NAME is not: name the cluster to join the embedded servers`}},
		{"cluster host and port at their defaults or zero", sqlite(func(c *Config) { c.NATSClusterHost, c.NATSClusterPort = "", 0 }), nil},
		{"cluster name", postgres(func(c *Config) { c.NATSClusterName = "a.b" }), []string{`ORISUN_NATS_CLUSTER_NAME: "a.b": use letters, digits, - and _ only`}},
		{"cluster port", postgres(func(c *Config) { c.NATSClusterName, c.NATSClusterPort = "c", 65536 }), []string{
			`ORISUN_NATS_CLUSTER_PORT: 65536 is not a port (1–65535, or -1 for a random one)`}},
		{"cluster route", postgres(func(c *Config) { c.NATSClusterName, c.NATSClusterRoutes = "c", []string{"nats-route://n2:6222", "n3"} }), []string{
			`ORISUN_NATS_CLUSTER_ROUTES: "n3" is not a route URL (e.g. nats-route://orisun2:6222)`}},
		{"cluster user without password", postgres(func(c *Config) { c.NATSClusterName, c.NATSClusterUser = "c", "u" }), []string{
			`ORISUN_NATS_CLUSTER_PASSWORD: is required with ORISUN_NATS_CLUSTER_USER ("u")`}},
		{"cluster password without user", postgres(func(c *Config) { c.NATSClusterName, c.NATSClusterPassword = "c", "p" }), []string{
			`ORISUN_NATS_CLUSTER_USER: is required with ORISUN_NATS_CLUSTER_PASSWORD`}},
		{"cluster TLS cert without key", postgres(func(c *Config) { c.NATSClusterName, c.NATSClusterTLSCert = "c", notPEM }), []string{
			`ORISUN_NATS_CLUSTER_TLS_KEY: ORISUN_NATS_CLUSTER_TLS_CERT and ORISUN_NATS_CLUSTER_TLS_KEY go together`}},
		{"cluster TLS CA without cert", postgres(func(c *Config) { c.NATSClusterName, c.NATSClusterTLSCA = "c", notPEM }), []string{
			`ORISUN_NATS_CLUSTER_TLS_CA: needs ORISUN_NATS_CLUSTER_TLS_CERT and ORISUN_NATS_CLUSTER_TLS_KEY`}},
		{"cluster TLS files unreadable", postgres(func(c *Config) {
			c.NATSClusterName, c.NATSClusterTLSCert, c.NATSClusterTLSKey, c.NATSClusterTLSCA = "c", missing, notPEM, missing
		}), []string{
			`ORISUN_NATS_CLUSTER_TLS_CERT: cannot read ` + missing + `: open ` + missing + `: no such file or directory`,
			`ORISUN_NATS_CLUSTER_TLS_CA: cannot read ` + missing + `: open ` + missing + `: no such file or directory`}},
		{"cluster TLS not a pair", postgres(func(c *Config) { c.NATSClusterName, c.NATSClusterTLSCert, c.NATSClusterTLSKey = "c", notPEM, notPEM }), []string{
			`ORISUN_NATS_CLUSTER_TLS_CERT: certificate ` + notPEM + ` and key ` + notPEM + ` do not load as a pair: tls: failed to find any PEM data in certificate input`}},
		{"replicas", postgres(func(c *Config) { c.StreamReplicas = 2 }), []string{`ORISUN_NATS_STREAM_REPLICAS: 2 is not 1, 3 or 5`}},
		{"replicas without a shared NATS", postgres(func(c *Config) { c.StreamReplicas = 5 }), []string{
			`ORISUN_NATS_STREAM_REPLICAS: 5: only 1 is possible with a single embedded server; set ORISUN_NATS_CLUSTER_NAME (embedded cluster) or ORISUN_NATS_URL (an existing NATS cluster)`}},
		{"replicas on a shared NATS", postgres(func(c *Config) { c.StreamReplicas, c.NATSURL = 3, "nats://n1:4222" }), nil},

		// The publisher and the store's limits.
		{"publish batch below", sqlite(func(c *Config) { c.PublishBatch = 0 }), []string{`ORISUN_PUBLISH_BATCH: 0 is outside 1–100000`}},
		{"publish batch above", sqlite(func(c *Config) { c.PublishBatch = 100001 }), []string{`ORISUN_PUBLISH_BATCH: 100001 is outside 1–100000`}},
		{"publish window", sqlite(func(c *Config) { c.PublishWindow = 65537 }), []string{`ORISUN_PUBLISH_WINDOW: 65537 is outside 1–65536`}},
		{"poll interval", sqlite(func(c *Config) { c.PollInterval = 2 * time.Hour }), []string{`ORISUN_POLL_INTERVAL: 2h0m0s is outside 1ms–1h`}},
		{"poll backstop", sqlite(func(c *Config) { c.PollBackstop = time.Microsecond }), []string{`ORISUN_POLL_BACKSTOP: 1µs is outside 1ms–24h`}},
		{"lease TTL", sqlite(func(c *Config) { c.LeaseTTL = 50 * time.Millisecond }), []string{`ORISUN_LEASE_TTL: 50ms is outside 100ms–1h`}},
		{"append group max", sqlite(func(c *Config) { c.AppendGroupMax = 0 }), []string{`ORISUN_APPEND_GROUP_MAX: 0 is outside 1–100000`}},
		// Node.AppendTx holds the SQLite writer that the lease renewals need.
		{"append tx timeout at half the lease TTL", sqlite(func(c *Config) { c.AppendTxTimeout, c.LeaseTTL = 5*time.Second, 10*time.Second }), []string{
			`ORISUN_APPEND_TX_TIMEOUT: 5s is not below half of ORISUN_LEASE_TTL (10s): an application transaction (Node.AppendTx) ` +
				`holds the SQLite writer's only connection, which the lease renewals need; set ORISUN_APPEND_TX_TIMEOUT below 5s or raise ORISUN_LEASE_TTL`}},
		{"append tx timeout beyond the lease TTL", sqlite(func(c *Config) { c.AppendTxTimeout, c.LeaseTTL = time.Minute, time.Second }), []string{
			`ORISUN_APPEND_TX_TIMEOUT: 1m is not below half of ORISUN_LEASE_TTL (1s): an application transaction (Node.AppendTx) ` +
				`holds the SQLite writer's only connection, which the lease renewals need; set ORISUN_APPEND_TX_TIMEOUT below 500ms or raise ORISUN_LEASE_TTL`}},
		{"append tx timeout below half the lease TTL", sqlite(func(c *Config) { c.AppendTxTimeout, c.LeaseTTL = 4999*time.Millisecond, 10*time.Second }), nil},
		{"append tx timeout on postgres", postgres(func(c *Config) { c.AppendTxTimeout, c.LeaseTTL = time.Minute, time.Second }), nil},
		{"append group delay", sqlite(func(c *Config) { c.AppendGroupDelay = time.Second }), []string{
			`ORISUN_APPEND_GROUP_DELAY: 1s is above 100ms (a negative value turns the wait off)`}},
		{"append group delay off", sqlite(func(c *Config) { c.AppendGroupDelay = -time.Second }), nil},
		{"max append events", sqlite(func(c *Config) { c.MaxAppendEvents = 100001 }), []string{`ORISUN_MAX_APPEND_EVENTS: 100001 is outside 1–100000`}},
		{"max append bytes", sqlite(func(c *Config) { c.MaxAppendBytes = 1023 }), []string{`ORISUN_MAX_APPEND_BYTES: 1023 is outside 1024–1073741824`}},

		// The status listener and the logs.
		{"HTTP address without port", sqlite(func(c *Config) { c.HTTPAddr = "localhost" }), []string{
			`ORISUN_HTTP_ADDR: "localhost" is not host:port (e.g. 127.0.0.1:8990, :8990 for every interface, or off)`}},
		{"HTTP port", sqlite(func(c *Config) { c.HTTPAddr = "127.0.0.1:65536" }), []string{
			`ORISUN_HTTP_ADDR: "127.0.0.1:65536" is not host:port (e.g. 127.0.0.1:8990, :8990 for every interface, or off)`}},
		{"HTTP host", sqlite(func(c *Config) { c.HTTPAddr = "a b:8990" }), []string{`ORISUN_HTTP_ADDR: "a b:8990": "a b" is not a host name or address`}},
		{"HTTP off", sqlite(func(c *Config) { c.HTTPAddr = "OFF" }), nil},
		{"NATS monitor port", sqlite(func(c *Config) { c.NATSMonitorAddr = "127.0.0.1:65536" }), []string{
			`ORISUN_NATS_MONITOR_ADDR: "127.0.0.1:65536" is not host:port or a port (e.g. 8222 or 127.0.0.1:8222 for loopback, 0.0.0.0:8222 for every interface, or off): port "65536" is not 0–65535`}},
		{"NATS monitor named port", sqlite(func(c *Config) { c.NATSMonitorAddr = "localhost:http" }), []string{
			`ORISUN_NATS_MONITOR_ADDR: "localhost:http" is not host:port or a port (e.g. 8222 or 127.0.0.1:8222 for loopback, 0.0.0.0:8222 for every interface, or off): port "http" is not 0–65535`}},
		{"NATS monitor host", sqlite(func(c *Config) { c.NATSMonitorAddr = "a b:8222" }), []string{
			`ORISUN_NATS_MONITOR_ADDR: "a b:8222" is not host:port or a port (e.g. 8222 or 127.0.0.1:8222 for loopback, 0.0.0.0:8222 for every interface, or off): "a b" is not a host name or address`}},
		{"NATS monitor with external NATS", sqlite(func(c *Config) { c.NATSURL, c.NATSMonitorAddr = "nats://n1:4222", "8222" }), []string{
			`ORISUN_NATS_MONITOR_ADDR: "8222": with ORISUN_NATS_URL orisun starts no NATS server; monitor the external servers themselves (their own http_port), or unset it`}},
		{"NATS monitor off", sqlite(func(c *Config) { c.NATSURL, c.NATSMonitorAddr = "nats://n1:4222", "off" }), nil},
		{"stall threshold", sqlite(func(c *Config) { c.StallThreshold = 25 * time.Hour }), []string{`ORISUN_STALL_THRESHOLD: 25h0m0s is outside 100ms–24h`}},
		{"metrics boundaries above", sqlite(func(c *Config) { c.MetricsBoundaries = 10_001 }), []string{
			`ORISUN_METRICS_BOUNDARIES: 10001 is outside -1–10000 (-1: no boundary has series of its own)`}},
		{"metrics boundaries below", sqlite(func(c *Config) { c.MetricsBoundaries = -2 }), []string{
			`ORISUN_METRICS_BOUNDARIES: -2 is outside -1–10000 (-1: no boundary has series of its own)`}},
		{"metrics boundaries none", sqlite(func(c *Config) { c.MetricsBoundaries = -1 }), nil},
		{"metrics boundaries zero", sqlite(func(c *Config) { c.MetricsBoundaries = 0 }), []string{
			`ORISUN_METRICS_BOUNDARIES: 0 would give every boundary's series to boundary="_other": write -1 for that ` +
				`(no boundary has series of its own), 1–10000 for that many, or leave it unset for the default 100`}},
		{"console user without password", sqlite(func(c *Config) { c.ConsoleUser = "ops" }), []string{
			`ORISUN_CONSOLE_PASSWORD: is required with ORISUN_CONSOLE_USER ("ops")`}},
		{"console password without user", sqlite(func(c *Config) { c.ConsolePassword = "long enough" }), []string{
			`ORISUN_CONSOLE_USER: is required with ORISUN_CONSOLE_PASSWORD`}},
		{"console user with a colon", sqlite(func(c *Config) { c.ConsoleUser, c.ConsolePassword = "ops:1", "long enough" }), []string{
			`ORISUN_CONSOLE_USER: "ops:1" holds a colon or a control character, which HTTP basic auth cannot carry`}},
		{"console password short", sqlite(func(c *Config) { c.ConsoleUser, c.ConsolePassword = "ops", "short" }), []string{
			`ORISUN_CONSOLE_PASSWORD: has 5 characters; at least 8`}},
		{"console without listener", sqlite(func(c *Config) { c.ConsoleUser, c.ConsolePassword, c.HTTPAddr = "ops", "long enough", "off" }), []string{
			`ORISUN_CONSOLE_USER: is set but the listener is off (ORISUN_HTTP_ADDR="off"): set ORISUN_HTTP_ADDR, or unset the console's credentials`}},
		{"console credentials", sqlite(func(c *Config) { c.ConsoleUser, c.ConsolePassword = "ops", "long enough" }), nil},
		{"log level", sqlite(func(c *Config) { c.LogLevel = "loud" }), []string{`ORISUN_LOG_LEVEL: "loud" is not one of debug, info, warn, error`}},
		{"log format", sqlite(func(c *Config) { c.LogFormat = "xml" }), []string{`ORISUN_LOG_FORMAT: "xml" is not one of text, json`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if want := strings.Join(tc.want, "\n"); got != want {
				t.Errorf("Validate():\n got %s\nwant %s", got, want)
			}
		})
	}
}

// TestNATSMonitorAddr: what ORISUN_NATS_MONITOR_ADDR turns into. A port
// alone or an empty host is loopback; only an address that says so
// listens beyond it; empty and off are off.
func TestNATSMonitorAddr(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want *natsembed.Monitor
	}{
		{"", nil},
		{"off", nil},
		{"OFF", nil},
		{"8222", &natsembed.Monitor{Host: "127.0.0.1", Port: 8222}},
		{":8222", &natsembed.Monitor{Host: "127.0.0.1", Port: 8222}},
		{"0", &natsembed.Monitor{Host: "127.0.0.1", Port: 0}},
		{"0.0.0.0:8222", &natsembed.Monitor{Host: "0.0.0.0", Port: 8222}},
		{"[::1]:8222", &natsembed.Monitor{Host: "::1", Port: 8222}},
		{"monitor.internal:9000", &natsembed.Monitor{Host: "monitor.internal", Port: 9000}},
	} {
		c := Defaults()
		c.NATSMonitorAddr = tc.addr
		if err := c.Validate(); err != nil {
			t.Errorf("%q: %v", tc.addr, err)
		}
		if got := c.natsMonitor(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: monitor %+v, want %+v", tc.addr, got, tc.want)
		}
	}
}

// TestConfigDefaultsMatchBackends: the node's defaults for the store are
// the backends' own defaults for a zero field, so a store opened by a
// test or the bench behaves as a node's does.
func TestConfigDefaultsMatchBackends(t *testing.T) {
	if PGMaxConnsDefault != postgres.DefaultMaxConns {
		t.Errorf("PGMaxConnsDefault is %d, postgres.DefaultMaxConns %d", PGMaxConnsDefault, postgres.DefaultMaxConns)
	}
	if SQLiteSynchronousDefault != sqlite.DefaultSynchronous {
		t.Errorf("SQLiteSynchronousDefault is %q, sqlite.DefaultSynchronous %q", SQLiteSynchronousDefault, sqlite.DefaultSynchronous)
	}
}

// TestConsoleAccessRule: the console's event pages need its credentials
// whenever NATS has credentials, NATS is external, or the listener is not
// on loopback (docs/console.md, "Access"); only a loopback listener in
// front of an embedded NATS without credentials leaves them open.
func TestConsoleAccessRule(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(c *Config)
		want   string // "" open, else a part of the reason
	}{
		{"loopback, no credentials", func(c *Config) {}, ""},
		{"localhost", func(c *Config) { c.HTTPAddr = "localhost:8990" }, ""},
		{"IPv6 loopback", func(c *Config) { c.HTTPAddr = "[::1]:8990" }, ""},
		{"127.0.0.2", func(c *Config) { c.HTTPAddr = "127.0.0.2:0" }, ""},
		{"every interface", func(c *Config) { c.HTTPAddr = ":8990" }, "ORISUN_HTTP_ADDR=:8990) is not on loopback"},
		{"0.0.0.0", func(c *Config) { c.HTTPAddr = "0.0.0.0:8990" }, "is not on loopback"},
		{"a host name", func(c *Config) { c.HTTPAddr = "relay.internal:8990" }, "is not on loopback"},
		{"an interface address", func(c *Config) { c.HTTPAddr = "10.0.0.5:8990" }, "is not on loopback"},
		{"NATS user", func(c *Config) { c.NATSUser, c.NATSPassword = "app", "p" }, "NATS credentials are configured"},
		{"NATS token", func(c *Config) { c.NATSToken = "t" }, "NATS credentials are configured"},
		{"NATS admin", func(c *Config) { c.NATSAdminUser, c.NATSAdminPassword = "admin", "p" }, "NATS credentials are configured"},
		{"NATS admin token", func(c *Config) { c.NATSAdminToken = "t" }, "NATS credentials are configured"},
		{"NATS system user", func(c *Config) { c.NATSSystemUser, c.NATSSystemPassword = "op", "p" }, "NATS credentials are configured"},
		{"external NATS", func(c *Config) { c.NATSURL = "nats://n1:4222" }, "NATS is external (ORISUN_NATS_URL)"},
		{"external NATS with a credentials file", func(c *Config) { c.NATSURL, c.NATSCreds = "nats://n1:4222", "/x.creds" }, "NATS is external"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			tc.change(&c)
			a := c.consoleAccess()
			if tc.want == "" && a.NeedCredentials != "" || tc.want != "" && !strings.Contains(a.NeedCredentials, tc.want) {
				t.Errorf("%s: NeedCredentials %q, want %q", c.HTTPAddr, a.NeedCredentials, tc.want)
			}
			c.ConsoleUser, c.ConsolePassword = "ops", "long enough"
			if a := c.consoleAccess(); a.User != "ops" || a.Password != "long enough" {
				t.Errorf("credentials not passed on: %+v", a)
			}
		})
	}
}
