package orisun

// What the node can check of an external NATS's access control at start
// (ORISUN_NATS_URL, docs/security.md "An existing NATS"). Its permissions
// are the deployment's: orisun cannot read them, and it cannot log in as an
// application (it has no application credentials). What it can do honestly
// is try, as a client without credentials, the operations only orisun may
// do, where trying harms nothing, and warn about each that the server lets
// through. Such a client is in the account the server gives clients
// without credentials (no_auth_user's), which may be orisun's or one of
// its own: the warning says what is open in that account.

import (
	"errors"
	neturl "net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/natsembed"
)

// probeTimeout bounds the anonymous connection and its round trip.
const probeTimeout = 3 * time.Second

// natsProbe is one operation tried without credentials. Each touches
// nothing of orisun's: "_orisun_check" is never a boundary's name (those
// start with a letter) nor an inbox or stream of anyone's, and a create
// request with an empty name is refused by the API as invalid.
type natsProbe struct {
	sub     bool   // a subscription, else a publish
	subject string // what the server's violation names
	body    string
	open    string // what it means when allowed
}

var natsProbes = []natsProbe{
	{false, "orisun.events._orisun_check.x", "", "publish into orisun.events.> (forged events in the streams)"},
	{true, "orisun.api._orisun_check", "", "subscribe to orisun.api.> (answer API requests in orisun's place)"},
	{true, "$SRV._orisun_check", "", "subscribe to $SRV.> (answer service discovery in orisun's place)"},
	{false, "$JS.API.STREAM.DELETE.ORISUN__orisun_check", "", "send stream delete requests ($JS.API.STREAM.DELETE.>)"},
	{false, "$JS.API.STREAM.PURGE.ORISUN__orisun_check", "", "send stream purge requests ($JS.API.STREAM.PURGE.>)"},
	{false, natsembed.InternalInboxPrefix + "._orisun_check", "", "publish to " + natsembed.InternalInboxPrefix +
		".> (forged JetStream acknowledgements to the relay)"},
	{false, api.SubjectCreateBoundary, `{"name":""}`, "create boundaries (" + api.SubjectCreateBoundary + ")"},
}

// checkExternalNATS connects to the external NATS without credentials and
// tries natsProbes. It logs a warning naming what is open to such a client,
// or that such clients are refused; what authenticated applications may do
// is the deployment's and cannot be seen from here, which it says too.
func (n *Node) checkExternalNATS() {
	// Without the URL's user and password (nats://user:pw@host), which
	// nats.Connect would log in with: the probe would pass as orisun, and
	// the log would carry the password.
	url := withoutUserinfo(n.cfg.NATSURL)
	open, err := probeAnonymous(url, n.cfg.NATSTLSCA)
	const recipe = "configure the server's permissions as docs/security.md, \"An existing NATS\", shows"
	switch {
	case err != nil && errors.Is(err, nats.ErrAuthorization):
		n.log.Info("the external NATS refuses clients without credentials; what the applications' users may do is the "+
			"deployment's, which orisun cannot see: "+recipe, "nats_url", url)
	case err != nil:
		n.log.Info("could not check the external NATS as a client without credentials", "nats_url", url, "err", err)
	case len(open) > 0:
		n.log.Warn("in the account of clients without credentials, the external NATS lets such a client "+
			strings.Join(open, "; ")+" (this reaches orisun only if that account is orisun's; no_auth_user of an account "+
			"of its own keeps them apart): "+recipe, "nats_url", url)
	default:
		n.log.Info("the external NATS accepts clients without credentials but refused each of orisun's own operations "+
			"tried as one", "nats_url", url)
	}
}

// withoutUserinfo is the comma-separated NATS URLs without their user
// information (user and password, or a token). One that does not parse is
// replaced by a placeholder: it may hold a password, and nothing connects
// to it anyway.
func withoutUserinfo(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := neturl.Parse(strings.TrimSpace(p))
		if err != nil {
			parts[i] = "(a URL that does not parse)"
			continue
		}
		u.User = nil
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}

// probe sends natsProbes and waits for the server to have read them.
func probe(nc *nats.Conn) error {
	for _, p := range natsProbes {
		if p.sub {
			if _, err := nc.SubscribeSync(p.subject); err != nil {
				return err
			}
		} else if err := nc.Publish(p.subject, []byte(p.body)); err != nil {
			return err
		}
	}
	return nc.FlushTimeout(probeTimeout)
}

// probeAnonymous connects to url without credentials (verifying the
// servers against ca, when set) and returns what of natsProbes the server
// allowed. The server checks a publish or a subscription when it reads it
// and sends its violation before it answers a later ping, so one flush
// after the probes sees every refusal.
func probeAnonymous(url, ca string) ([]string, error) {
	var mu sync.Mutex
	denied := map[string]bool{}
	closed := make(chan struct{})
	opts := []nats.Option{
		nats.Name("orisun-access-check"),
		nats.MaxReconnects(0),
		nats.Timeout(probeTimeout),
		// The connection's callbacks run in order on one goroutine: once
		// the closed callback ran, every violation before it was counted.
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if !errors.Is(err, nats.ErrPermissionViolation) {
				return
			}
			// `Permissions Violation for Publish to "subject"`
			if _, rest, ok := strings.Cut(err.Error(), `"`); ok {
				if subject, _, ok := strings.Cut(rest, `"`); ok {
					mu.Lock()
					denied[subject] = true
					mu.Unlock()
				}
			}
		}),
	}
	if ca != "" {
		opts = append(opts, nats.RootCAs(ca))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, err
	}
	err = probe(nc)
	nc.Close()
	if err != nil {
		return nil, err
	}
	select {
	case <-closed:
	case <-time.After(probeTimeout):
		return nil, errors.New("the connection's callbacks did not finish")
	}
	mu.Lock()
	defer mu.Unlock()
	var open []string
	for _, p := range natsProbes {
		if !denied[p.subject] {
			open = append(open, p.open)
		}
	}
	return open, nil
}
