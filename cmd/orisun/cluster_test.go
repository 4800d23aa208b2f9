package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/orisun-io/orisun/internal/testcert"
)

// TestClusterConfig: the cluster and external NATS variables that go
// together, exclude each other, or cannot work are refused with the
// variable that must change; a cluster on SQLite is refused.
func TestClusterConfig(t *testing.T) {
	dir := t.TempDir()
	certs := testcert.Write(t, dir)
	creds := writeFile(t, dir, "orisun.creds", "creds")
	pg := map[string]string{"ORISUN_BACKEND": "postgres", "ORISUN_PG_URL": "postgres://db/orisun"}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	cluster := with(pg, "ORISUN_NATS_CLUSTER_NAME", "orisun", "ORISUN_NATS_CLUSTER_ROUTES", "nats-route://a:6222,nats-route://b:6222")
	checkEnvCases(t, []envCase{
		{"cluster on postgres", cluster, ""},
		{"cluster with replicas 3", with(cluster, "ORISUN_NATS_STREAM_REPLICAS", "3"), ""},
		{"cluster with route auth and tls", with(cluster, "ORISUN_NATS_CLUSTER_USER", "route", "ORISUN_NATS_CLUSTER_PASSWORD", "pw",
			"ORISUN_NATS_CLUSTER_TLS_CERT", certs.Cert, "ORISUN_NATS_CLUSTER_TLS_KEY", certs.Key, "ORISUN_NATS_CLUSTER_TLS_CA", certs.CA), ""},
		{"cluster on sqlite", map[string]string{"ORISUN_NATS_CLUSTER_NAME": "orisun"}, "ORISUN_NATS_CLUSTER_NAME"},
		{"routes on sqlite", map[string]string{"ORISUN_NATS_CLUSTER_ROUTES": "nats-route://a:6222"}, "ORISUN_NATS_CLUSTER_ROUTES"},
		{"replicas 3 without a shared nats", with(pg, "ORISUN_NATS_STREAM_REPLICAS", "3"), "ORISUN_NATS_STREAM_REPLICAS"},
		{"replicas 2", with(cluster, "ORISUN_NATS_STREAM_REPLICAS", "2"), "ORISUN_NATS_STREAM_REPLICAS"},
		{"routes without a cluster name", with(pg, "ORISUN_NATS_CLUSTER_ROUTES", "nats-route://a:6222"), "ORISUN_NATS_CLUSTER_ROUTES"},
		// Every cluster variable without a cluster name is refused, not
		// ignored; host and port only when they differ from the defaults.
		{"route user without a cluster name", with(pg, "ORISUN_NATS_CLUSTER_USER", "route"), "ORISUN_NATS_CLUSTER_USER"},
		{"route password without a cluster name", with(pg, "ORISUN_NATS_CLUSTER_PASSWORD", "pw"), "ORISUN_NATS_CLUSTER_PASSWORD"},
		{"route tls cert without a cluster name", with(pg, "ORISUN_NATS_CLUSTER_TLS_CERT", certs.Cert), "ORISUN_NATS_CLUSTER_TLS_CERT"},
		{"route tls key without a cluster name", with(pg, "ORISUN_NATS_CLUSTER_TLS_KEY", certs.Key), "ORISUN_NATS_CLUSTER_TLS_KEY"},
		{"route tls ca without a cluster name", with(pg, "ORISUN_NATS_CLUSTER_TLS_CA", certs.CA), "ORISUN_NATS_CLUSTER_TLS_CA"},
		{"cluster host without a cluster name", with(pg, "ORISUN_NATS_CLUSTER_HOST", "0.0.0.0"), "ORISUN_NATS_CLUSTER_HOST"},
		{"cluster port without a cluster name", with(pg, "ORISUN_NATS_CLUSTER_PORT", "7222"), "ORISUN_NATS_CLUSTER_PORT"},
		{"cluster host and port at their defaults without a cluster name", with(pg, "ORISUN_NATS_CLUSTER_HOST", "127.0.0.1",
			"ORISUN_NATS_CLUSTER_PORT", "6222"), ""},
		{"cluster port on sqlite", map[string]string{"ORISUN_NATS_CLUSTER_PORT": "7222"}, "ORISUN_NATS_CLUSTER_PORT"},
		{"bad route", with(cluster, "ORISUN_NATS_CLUSTER_ROUTES", "orisun2"), "ORISUN_NATS_CLUSTER_ROUTES"},
		{"bad cluster port", with(cluster, "ORISUN_NATS_CLUSTER_PORT", "70000"), "ORISUN_NATS_CLUSTER_PORT"},
		{"route user without password", with(cluster, "ORISUN_NATS_CLUSTER_USER", "route"), "ORISUN_NATS_CLUSTER_PASSWORD"},
		{"route cert without key", with(cluster, "ORISUN_NATS_CLUSTER_TLS_CERT", certs.Cert), "ORISUN_NATS_CLUSTER_TLS_KEY"},
		{"external nats", with(pg, "ORISUN_NATS_URL", "nats://n1:4222,nats://n2:4222", "ORISUN_NATS_STREAM_REPLICAS", "3"), ""},
		{"external nats on sqlite", map[string]string{"ORISUN_NATS_URL": "nats://n1:4222"}, ""},
		{"replicated streams on sqlite", map[string]string{"ORISUN_NATS_URL": "nats://n1:4222", "ORISUN_NATS_STREAM_REPLICAS": "3"}, "ORISUN_NATS_STREAM_REPLICAS"},
		{"external nats with creds", with(pg, "ORISUN_NATS_URL", "nats://n1:4222", "ORISUN_NATS_CREDS", creds), ""},
		{"external nats with a ca only", with(pg, "ORISUN_NATS_URL", "tls://n1:4222", "ORISUN_NATS_TLS_CA", certs.CA), ""},
		{"external nats and a cluster", with(cluster, "ORISUN_NATS_URL", "nats://n1:4222"), "ORISUN_NATS_CLUSTER_NAME"},
		{"bad external url", with(pg, "ORISUN_NATS_URL", "http://n1"), "ORISUN_NATS_URL"},
		{"creds with a user", with(pg, "ORISUN_NATS_URL", "nats://n1:4222", "ORISUN_NATS_CREDS", creds,
			"ORISUN_NATS_USER", "app", "ORISUN_NATS_PASSWORD", "pw"), "ORISUN_NATS_CREDS"},
		{"creds without url", with(pg, "ORISUN_NATS_CREDS", creds), "ORISUN_NATS_CREDS"},
		{"unreadable creds", with(pg, "ORISUN_NATS_URL", "nats://n1:4222", "ORISUN_NATS_CREDS", filepath.Join(dir, "missing")), "ORISUN_NATS_CREDS"},
	})
}

// TestSQLiteClusterRefusedAtStart runs the binary: a clustered
// configuration on SQLite exits 2 before it starts anything, with a message
// that names the variable and says SQLite stays single-node.
func TestSQLiteClusterRefusedAtStart(t *testing.T) {
	p := start(t, t.TempDir(), "ORISUN_NATS_CLUSTER_NAME=orisun", "ORISUN_NATS_CLUSTER_ROUTES=nats-route://127.0.0.1:6222")
	line := p.WaitLine(t, "ORISUN_NATS_CLUSTER_NAME", lineWait)
	if code := p.Wait().ExitCode(); code != 2 {
		t.Fatalf("exit code %d, want 2 (configuration refused)", code)
	}
	if !strings.Contains(line, "SQLite stays single-node") || !strings.Contains(line, "ORISUN_BACKEND=postgres") {
		t.Fatalf("message does not say what to do: %s", line)
	}
}
