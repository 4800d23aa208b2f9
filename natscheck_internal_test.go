package orisun

import "testing"

// TestWithoutUserinfo: what the node logs and probes of ORISUN_NATS_URL
// carries no user, password or token, whichever URL of the list holds
// them, and a URL that does not parse is not repeated (it may hold a
// password).
func TestWithoutUserinfo(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://orisun:pw@a:4222", "nats://a:4222"},
		{"nats://t0ken@a:4222, tls://u:p@b:4443", "nats://a:4222,tls://b:4443"},
		{"nats://u:secret@[::1", "(a URL that does not parse)"},
	} {
		if got := withoutUserinfo(c.in); got != c.want {
			t.Errorf("withoutUserinfo(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
