package orisun

import (
	"reflect"
	"strings"
	"testing"
)

// TestVariables: Variables lists every field of Config with its variable,
// the default of Defaults as the variable takes it, and README.md's meaning
// as plain text; the values that may hold a password are marked secret.
func TestVariables(t *testing.T) {
	vars := Variables()
	typ := reflect.TypeOf(Config{})
	if len(vars) != typ.NumField() {
		t.Fatalf("%d variables for %d fields of Config", len(vars), typ.NumField())
	}
	byName := map[string]Variable{}
	for i, v := range vars {
		f := typ.Field(i)
		if v.Field != f.Name || v.Name != "ORISUN_"+f.Tag.Get("envconfig") {
			t.Errorf("variable %d is %s (%s), want Config.%s's", i, v.Name, v.Field, f.Name)
		}
		if v.Meaning == "" || strings.ContainsAny(v.Meaning, "`|") || strings.Contains(v.Meaning, "](") {
			t.Errorf("%s: meaning %q: want README.md's text without Markdown", v.Name, v.Meaning)
		}
		byName[v.Name] = v
	}
	for name, want := range map[string]string{
		"ORISUN_DATA_DIR":                   DataDirDefault,
		"ORISUN_NATS_PORT":                  "4222",
		"ORISUN_NATS_EVENT_STREAM_MAX_AGE":  "5m",
		"ORISUN_APPEND_GROUP_DELAY":         "200us",
		"ORISUN_NATS_EVENT_STREAM_MAX_MSGS": "-1",
		"ORISUN_BOUNDARIES":                 "default",
		"ORISUN_PG_URL":                     "",
		"ORISUN_NATS_DISABLE_MSG_ID":        "",
	} {
		if got := byName[name].Default; got != want {
			t.Errorf("%s: default %q, want %q", name, got, want)
		}
	}
	for name, secret := range map[string]bool{
		"ORISUN_PG_URL": true, "ORISUN_NATS_PASSWORD": true, "ORISUN_NATS_TOKEN": true, "ORISUN_NATS_URL": true,
		"ORISUN_NATS_CLUSTER_PASSWORD": true, "ORISUN_NATS_USER": false, "ORISUN_DATA_DIR": false, "ORISUN_NATS_TLS_KEY": false,
	} {
		if byName[name].Secret != secret {
			t.Errorf("%s: secret %v, want %v", name, byName[name].Secret, secret)
		}
	}
	if m := byName["ORISUN_HTTP_ADDR"].Meaning; !strings.Contains(m, "/status, /healthz") || !strings.Contains(m, "(see docs/operations.md)") {
		t.Errorf("ORISUN_HTTP_ADDR's meaning %q: want README's text, a link to a file as the file", m)
	}
	if m := byName["ORISUN_NATS_HOST"].Meaning; !strings.Contains(m, "see Access control for") {
		t.Errorf("ORISUN_NATS_HOST's meaning %q: want a link to a section as its text", m)
	}
}
