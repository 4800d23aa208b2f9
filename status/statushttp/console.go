package statushttp

import (
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"fmt"
	"io/fs"
	"net/http"
	"time"
)

// consoleFiles are the console's pages: plain HTML, CSS and JavaScript,
// embedded in the binary, with no build step and nothing loaded from
// elsewhere (the Content-Security-Policy below forbids it too).
//
//go:embed console
var consoleFiles embed.FS

// ConsoleAccess decides who may open the console's pages that show events
// (docs/console.md, "Access"). The overview shows what /status shows, to
// anyone who reaches the listener; event bodies may hold personal data, so
// the event pages need the console's own credentials whenever the node is
// reachable by others or guards NATS with credentials.
type ConsoleAccess struct {
	// NeedCredentials is why the event pages need the console's
	// credentials ("" when they do not: a loopback listener in front of
	// an embedded NATS without credentials).
	NeedCredentials string
	// User and Password are the console's credentials (HTTP basic auth);
	// empty when not configured.
	User, Password string
}

// eventsDecision is the answer of the access rule for one request.
type eventsDecision int

const (
	eventsOpen    eventsDecision = iota // no credentials needed
	eventsAllowed                       // the right credentials were given
	eventsAsk                           // credentials configured, none or wrong given: 401
	eventsOff                           // credentials needed, none configured: 403, say how
)

// decide applies the access rule to a request.
func (a ConsoleAccess) decide(r *http.Request) eventsDecision {
	if a.User == "" || a.Password == "" {
		if a.NeedCredentials == "" {
			return eventsOpen
		}
		return eventsOff
	}
	user, password, ok := r.BasicAuth()
	// Both compared, always, and combined without a branch: the time
	// taken does not tell whether the user was right.
	if same := equal(user, a.User) & equal(password, a.Password); ok && same == 1 {
		return eventsAllowed
	}
	return eventsAsk
}

// equal compares in constant time, whatever the lengths: 1 when a and b
// are equal, else 0.
func equal(a, b string) int {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:])
}

// FailedLoginDelay is how long a request with wrong credentials waits
// before its 401: guessing passwords over the listener is slowed down (a
// request without credentials, the page's first, does not wait).
const FailedLoginDelay = 250 * time.Millisecond

// consoleHeaders keep the pages self-contained: scripts, styles and data
// only from this listener, no framing by other sites.
func consoleHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

// consoleHandlers adds the console's routes to mux.
func (s *Server) consoleHandlers(mux *http.ServeMux) {
	files, err := fs.Sub(consoleFiles, "console")
	if err != nil {
		panic(err) // the directory is embedded at build time
	}
	mux.Handle("GET /{$}", http.RedirectHandler("/console/", http.StatusFound))
	mux.Handle("GET /console/", consoleHeaders(http.StripPrefix("/console/", http.FileServerFS(files))))
	mux.Handle("GET /console/access", consoleHeaders(http.HandlerFunc(s.consoleAccess)))
	// The pages ask here whether they may show events (200), need the
	// login (401) or are off (403), before they ask for any.
	mux.Handle("GET /console/events", consoleHeaders(s.eventPage(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"events": "allowed"})
	}))))
	s.boundaryHandlers(mux, files)
}

// consoleAccess tells the page whether its event pages are open, need a
// login, or are off and how to turn them on. It never tells the
// credentials.
func (s *Server) consoleAccess(w http.ResponseWriter, _ *http.Request) {
	a := s.opts.Console
	doc := map[string]any{"events": "open"}
	switch {
	case a.User != "" && a.Password != "":
		doc["events"] = "login"
	case a.NeedCredentials != "":
		doc["events"] = "off"
		doc["why"] = a.NeedCredentials
		doc["how"] = consoleHowTo
	}
	writeJSON(w, http.StatusOK, doc)
}

// consoleHowTo says how to turn the event pages on.
const consoleHowTo = "set ORISUN_CONSOLE_USER and ORISUN_CONSOLE_PASSWORD and restart the node; " +
	"the event pages then ask for them (HTTP basic auth)"

// eventPage guards a page that shows events with the access rule.
func (s *Server) eventPage(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch s.opts.Console.decide(r) {
		case eventsOpen, eventsAllowed:
			h.ServeHTTP(w, r)
		case eventsAsk:
			if _, _, given := r.BasicAuth(); given {
				t := time.NewTimer(FailedLoginDelay)
				select {
				case <-t.C:
				case <-r.Context().Done():
					t.Stop()
					return
				}
			}
			// The console's own scripts ask without the challenge, so
			// that the browser does not prompt from a background request:
			// the page offers its login link (/console/login) instead.
			if r.Header.Get("X-Orisun-Console") != "fetch" {
				w.Header().Set("WWW-Authenticate", `Basic realm="orisun console", charset="UTF-8"`)
			}
			http.Error(w, "the event pages need the console's credentials (ORISUN_CONSOLE_USER, ORISUN_CONSOLE_PASSWORD)", http.StatusUnauthorized)
		case eventsOff:
			http.Error(w, fmt.Sprintf("the event pages are off: %s; to turn them on, %s", s.opts.Console.NeedCredentials, consoleHowTo), http.StatusForbidden)
		}
	})
}
