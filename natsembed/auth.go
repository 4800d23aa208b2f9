package natsembed

import (
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/orisun-io/orisun/api"
)

// Auth makes application clients authenticate: either User and Password,
// or Token; a client without them is refused. Without Auth a client that
// connects without credentials is the application principal all the same
// (AppPermissions). Either way orisun's own in-process connections
// (Connect, ConnectAPI) authenticate as internal users with a random
// password generated at Start, which never leaves the process.
type Auth struct {
	User     string
	Password string
	Token    string
}

// TLS turns on TLS for TCP clients. CAFile, when set, makes the server
// require and verify client certificates signed by that CA. In-process
// connections never use TLS (they do not leave the process).
type TLS struct {
	CertFile string
	KeyFile  string
	CAFile   string
}

// InternalUser is the user name of orisun's own in-process connections.
// Application users may not take it.
const InternalUser = "_orisun_internal"

// AnonymousUser is the user name under which a server without Auth
// registers a client that is not one of orisun's own: the application
// principal, with AppPermissions (AdminPermissions when no Admin is
// configured either). Credentials such a client presents are ignored, as a
// NATS server without authorization ignores them, unless they are the
// admin's user name or a token while an Admin is configured: wrong admin
// credentials are refused, never taken for no credentials.
const AnonymousUser = "_orisun_anonymous"

// AdminTokenUser is the user name under which a client that presented the
// admin token is registered (and "token" for the application's token).
const AdminTokenUser = "admin-token"

// APIUser is the user name of the API service's in-process connection. It
// publishes replies to subjects its callers choose, so it may publish
// neither into the event subjects nor to JetStream's API nor to orisun's
// own inboxes: a request whose reply subject is orisun.events.b.x must not
// become a message in a stream (I2).
const APIUser = "_orisun_api"

// InternalInboxPrefix is the inbox prefix of orisun's own connections.
// Application users may publish to _INBOX.> (their own replies and
// acknowledgements) but not here, so they cannot forge a JetStream
// acknowledgement to the relay's publisher (I3).
const InternalInboxPrefix = "_ORISUN_INBOX"

// APIPermissions are the permissions of the API's connection.
func APIPermissions() *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{
			Allow: []string{">"},
			Deny: []string{
				"orisun.events.>", "orisun.api.>", "$JS.>", "$KV.>", "$O.>", "$SYS.>", "$MQTT.>",
				InternalInboxPrefix + ".>",
			},
		},
		Subscribe: &server.SubjectPermission{
			Allow: []string{"orisun.api.>", "$SRV.>", "_INBOX.>", InternalInboxPrefix + ".>"},
		},
	}
}

// AppPermissions are the permissions of the application principal: every
// client that is not one of orisun's own, whether it authenticated (Auth)
// or, on a server without Auth, connected without credentials
// (docs/design.md §6, §11, §12; docs/test-plan.md S13). It may use the API
// (requests on orisun.api.>, replies on _INBOX.>, service discovery by
// requests on $SRV.>) except boundary creation (orisun.api.boundaries.create,
// see AdminPermissions), and read the event streams (stream info and lists,
// message get, direct get, consumers of every kind including ordered ones),
// but never write into an event stream: no publish on orisun.events.>, and
// no stream create, update, delete, purge, message delete, snapshot or
// restore. Stream creation is denied entirely, not only for ORISUN_*
// streams: a stream of the application's own that captured orisun.events.>
// would take those subjects from the event streams. The JetStream cluster
// operations (leader step-down, peer removal, meta and server requests) are
// denied too: they are the operator's.
//
// Only orisun answers on orisun.api.> and $SRV.>: an application client may
// not subscribe there, so it cannot impersonate the API service, in its
// queue group or in discovery.
//
// The deny lists repeat what the allow lists already leave out, so that
// widening an allow list later cannot open the event streams by accident.
func AppPermissions() *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{
			Allow: []string{
				"orisun.api.>",
				"_INBOX.>",
				// Service discovery (nats micro ls/info/stats): the
				// requests reach the API's $SRV handlers, which answer
				// on the caller's inbox.
				"$SRV.>",
				"$JS.API.INFO",
				"$JS.API.STREAM.NAMES",
				"$JS.API.STREAM.LIST",
				"$JS.API.STREAM.INFO.*",
				"$JS.API.STREAM.MSG.GET.*",
				"$JS.API.DIRECT.GET.>",
				"$JS.API.CONSUMER.>",
				// Acknowledgements of explicit-ack consumers and flow
				// control replies of push consumers.
				"$JS.ACK.>",
				"$JS.FC.>",
			},
			Deny: []string{
				// Every boundary's stream reserves JetStream memory:
				// creating boundaries is the admin's (AdminPermissions).
				api.SubjectCreateBoundary,
				"orisun.events.>",
				"$JS.API.STREAM.CREATE.>",
				"$JS.API.STREAM.UPDATE.>",
				"$JS.API.STREAM.DELETE.>",
				"$JS.API.STREAM.PURGE.>",
				"$JS.API.STREAM.MSG.DELETE.>",
				"$JS.API.STREAM.SNAPSHOT.>",
				"$JS.API.STREAM.RESTORE.>",
				"$JS.API.STREAM.LEADER.>",
				"$JS.API.STREAM.PEER.>",
				"$JS.API.CONSUMER.LEADER.>",
				"$JS.API.CONSUMER.PEER.>",
				"$JS.API.META.>",
				"$JS.API.ACCOUNT.>",
				"$JS.API.SERVER.>",
			},
		},
		// No core subscription on orisun.events.>, although it would only
		// read: a push consumer that an application creates on one
		// boundary's stream with a deliver subject inside another
		// boundary's subjects is refused nothing by JetStream (its cycle
		// check covers the consumer's own stream only), and it delivers as
		// soon as a subscription on exactly that subject exists. What it
		// delivers, messages and, without any, its idle heartbeats, is
		// then written into the other boundary's stream. A subscription
		// permission cannot tell orisun.events.b.> (harmless) from
		// orisun.events.b.x (the interest such a consumer needs), so
		// neither is allowed. Applications read events through JetStream
		// consumers (pull and ordered consumers deliver to their _INBOX).
		Subscribe: &server.SubjectPermission{
			Allow: []string{
				"_INBOX.>",
			},
			Deny: []string{
				"orisun.api.>",
				"orisun.events.>",
				"$SRV.>",
			},
		},
	}
}

// AdminPermissions are the permissions of the admin principal: the
// application's, and boundary creation (orisun.api.boundaries.create). The
// API service cannot see who sent a request, so the server's subject
// permission is what keeps the application from creating boundaries: each
// one's stream reserves JetStream memory (docs/security.md, "Limits").
// With no credentials configured at all (neither Auth nor Admin) every
// client gets these, so that `orisun boundaries --create` works without
// configuration.
func AdminPermissions() *server.Permissions {
	p := AppPermissions()
	p.Publish.Deny = slices.DeleteFunc(p.Publish.Deny, func(s string) bool { return s == api.SubjectCreateBoundary })
	return p
}

// Validate checks the authentication settings.
func (a *Auth) Validate() error {
	if a == nil {
		return nil
	}
	switch {
	case a.Token != "" && (a.User != "" || a.Password != ""):
		return errors.New("natsembed: Token and User/Password exclude each other")
	case a.Token == "" && a.User == "":
		return errors.New("natsembed: Auth needs User and Password, or Token")
	case a.User != "" && a.Password == "":
		return fmt.Errorf("natsembed: user %q has no password", a.User)
	case a.User == InternalUser || a.User == APIUser || a.User == AnonymousUser:
		return fmt.Errorf("natsembed: user name %q is reserved for orisun's own connections", a.User)
	}
	return nil
}

// systemMonitorRequests are the names of the server's own monitoring
// requests the system user may send, to one server
// ($SYS.REQ.SERVER.<id>.<name>) or to every server of a cluster
// ($SYS.REQ.SERVER.PING.<name>): what the HTTP endpoint's pages of the same
// names show. PROFILEZ (a CPU profile, seconds of the server's time) is not
// among them, nor RELOAD, KICK and LDM, which change the server.
var systemMonitorRequests = []string{
	"IDZ", "STATSZ", "VARZ", "SUBSZ", "CONNZ", "ROUTEZ", "GATEWAYZ", "LEAFZ",
	"ACCOUNTZ", "JSZ", "HEALTHZ", "EXPVARZ", "IPQUEUESZ", "RAFTZ",
}

// systemAccountRequests are the names of the per-account monitoring
// requests ($SYS.REQ.ACCOUNT.<account>.<name>, and
// $SYS.REQ.ACCOUNT.PING.STATZ for every account) the system user may send.
var systemAccountRequests = []string{"SUBSZ", "CONNZ", "LEAFZ", "JSZ", "INFO", "STATZ", "CONNS"}

// SystemPermissions are the permissions of the system user (Config.System),
// a client of the server's system account ($SYS), not of the global
// account where orisun, the API and the application are: the event
// subjects, the streams and the API do not exist for it. It may send the
// server's read-only monitoring requests, which the `nats server` commands
// of the nats CLI use ($SYS.REQ.SERVER.PING for server ls and ping,
// $SYS.REQ.SERVER.<id>|PING.VARZ for server info, .JSZ for server report
// jetstream, systemMonitorRequests, systemAccountRequests,
// $SYS.REQ.USER.INFO), receive their replies on _INBOX.>, and watch the
// server's events ($SYS.SERVER.>, $SYS.ACCOUNT.>: connects, disconnects,
// statistics). It may not send what changes the server (reload, kicking a
// client, lame-duck mode, account claims) nor anything to JetStream: in
// the system account the JetStream API takes cluster requests that act on
// every account (peer removal, meta leader step-down, an account's purge),
// which would delete the event streams. Nor may it subscribe to the
// requests ($SYS.REQ.>) or the server's own inboxes, where it could answer
// in the servers' place.
func SystemPermissions() *server.Permissions {
	allow := []string{"$SYS.REQ.SERVER.PING", "$SYS.REQ.USER.INFO"}
	for _, n := range systemMonitorRequests {
		allow = append(allow, "$SYS.REQ.SERVER.*."+n)
	}
	for _, n := range systemAccountRequests {
		allow = append(allow, "$SYS.REQ.ACCOUNT.*."+n)
	}
	return &server.Permissions{
		Publish: &server.SubjectPermission{
			Allow: allow,
			Deny: []string{
				"$SYS.REQ.SERVER.*.RELOAD",
				"$SYS.REQ.SERVER.*.KICK",
				"$SYS.REQ.SERVER.*.LDM",
				"$SYS.REQ.SERVER.*.PROFILEZ",
				"$SYS.REQ.CLAIMS.>",
				"$SYS.REQ.ACCOUNT.*.CLAIMS.>",
				"$SYS.ACCOUNT.>",
				"$SYS.SERVER.>",
				"$JS.>",
				"orisun.>",
			},
		},
		Subscribe: &server.SubjectPermission{
			Allow: []string{"_INBOX.>", "$SYS.SERVER.>", "$SYS.ACCOUNT.>"},
			Deny:  []string{"$SYS.REQ.>", "$SYS._INBOX.>", "$SYS._INBOX_.>", "$JS.>", "orisun.>"},
		},
	}
}

// validateSystem checks the system user's credentials: a user and a
// password, neither orisun's own user names nor the application's or the
// admin's user name or secret, so that no other principal's credentials
// log into the system account, nor the system user's into theirs.
func validateSystem(app, admin, sys *Auth) error {
	if sys == nil {
		return nil
	}
	switch {
	case sys.Token != "":
		return errors.New("natsembed: the system user logs in with User and Password, not a token")
	case sys.User == "" || sys.Password == "":
		return errors.New("natsembed: System needs User and Password")
	case sys.User == InternalUser || sys.User == APIUser || sys.User == AnonymousUser:
		return fmt.Errorf("natsembed: user name %q is reserved for orisun's own connections", sys.User)
	}
	for _, other := range []struct {
		who string
		a   *Auth
	}{{"application", app}, {"admin", admin}} {
		switch {
		case other.a == nil:
		case other.a.User != "" && other.a.User == sys.User:
			return fmt.Errorf("natsembed: the system user and the %s have the same user name %q", other.who, sys.User)
		case other.a.Password != "" && other.a.Password == sys.Password || other.a.Token != "" && other.a.Token == sys.Password:
			return fmt.Errorf("natsembed: the system user's password is also the %s's", other.who)
		}
	}
	return nil
}

// validateAdmin checks the admin's credentials and that they cannot be
// mistaken for the application's.
func validateAdmin(app, admin *Auth) error {
	if admin == nil {
		return nil
	}
	if err := admin.Validate(); err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	switch {
	case app == nil:
		return nil
	case admin.User != "" && admin.User == app.User:
		return fmt.Errorf("natsembed: the admin and the application have the same user name %q", admin.User)
	case admin.Token != "" && admin.Token == app.Token:
		return errors.New("natsembed: the admin and the application have the same token")
	}
	return nil
}

// tlsConfig loads the certificate, key and optional CA.
func (t *TLS) tlsConfig() (*tls.Config, error) {
	if t.CertFile == "" || t.KeyFile == "" {
		return nil, errors.New("natsembed: TLS needs CertFile and KeyFile")
	}
	cfg, err := server.GenTLSConfig(&server.TLSConfigOpts{
		CertFile: t.CertFile,
		KeyFile:  t.KeyFile,
		CaFile:   t.CAFile,
		Verify:   t.CAFile != "",
	})
	if err != nil {
		return nil, fmt.Errorf("natsembed: TLS: %w", err)
	}
	return cfg, nil
}

// authenticator is the server's client authentication, installed whether
// or not Auth is set: it tells orisun's own in-process connections from
// everyone else, who is the application principal. A custom authenticator
// rather than server.Options.Users: the server cannot combine a token with
// a users list, nor a user list with anonymous clients of limited rights
// next to users of full rights, and orisun needs its internal users next to
// either. It still hands the server a server.User with server.Permissions,
// so the server enforces them as for configured users.
type authenticator struct {
	app              *Auth // nil: no credentials; every other client is anonymous
	admin            *Auth // nil: no admin; boundary creation as below
	system           *Auth // nil: nobody in the system account
	internalPassword string
	// srv is the server, set before it starts: its system account is the
	// system user's.
	srv *server.Server
}

func newAuthenticator(app, admin, system *Auth) (*authenticator, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("natsembed: internal password: %w", err)
	}
	return &authenticator{app: app, admin: admin, system: system, internalPassword: hex.EncodeToString(b[:])}, nil
}

// Check authenticates a client and registers its permissions.
func (a *authenticator) Check(c server.ClientAuthentication) bool {
	if c.Kind() != server.CLIENT {
		return false
	}
	o := c.GetOpts()
	if o == nil {
		return false
	}
	if o.Username == InternalUser || o.Username == APIUser {
		// orisun's own users may only connect in process (nats-server's
		// InProcessConn is a net.Pipe): even a leaked password is of no
		// use over TCP.
		if addr := c.RemoteAddress(); addr == nil || addr.Network() != "pipe" {
			return false
		}
		if !equal(o.Password, a.internalPassword) {
			return false
		}
		var perms *server.Permissions // nil: everything
		if o.Username == APIUser {
			perms = APIPermissions()
		}
		c.RegisterUser(&server.User{Username: o.Username, Permissions: perms})
		return true
	}
	if a.system != nil && o.Username == a.system.User {
		// The system user, or a wrong password for it: refused, never
		// taken for the application (a server without Auth would
		// otherwise let it in as the anonymous principal, and the
		// operator would see no server answer and not know why).
		name, ok := matches(a.system, o, "")
		if !ok || a.srv == nil {
			return false
		}
		sys := a.srv.SystemAccount()
		if sys == nil {
			return false
		}
		c.RegisterUser(&server.User{Username: name, Account: sys, Permissions: SystemPermissions()})
		return true
	}
	if name, ok := matches(a.admin, o, AdminTokenUser); ok {
		c.RegisterUser(&server.User{Username: name, Permissions: AdminPermissions()})
		return true
	}
	if a.app == nil {
		if a.admin != nil && (o.Username == a.admin.User && o.Username != "" || o.Token != "" && a.admin.Token != "") {
			// Wrong admin credentials: refused, not taken for none (the
			// client would find its boundary creation dropped instead).
			return false
		}
		// No application credentials configured: not refused, but never
		// more than the application principal (docs/design.md §12), and
		// the admin's too while no admin is configured.
		perms := AppPermissions()
		if a.admin == nil {
			perms = AdminPermissions()
		}
		c.RegisterUser(&server.User{Username: AnonymousUser, Permissions: perms})
		return true
	}
	name, ok := matches(a.app, o, "token")
	if !ok {
		return false
	}
	c.RegisterUser(&server.User{Username: name, Permissions: AppPermissions()})
	return true
}

// matches reports whether the client's credentials are want's, and the user
// name to register it under (tokenUser for a token).
func matches(want *Auth, o *server.ClientOpts, tokenUser string) (string, bool) {
	switch {
	case want == nil:
		return "", false
	case want.Token != "":
		return tokenUser, o.Username == "" && equal(o.Token, want.Token)
	default:
		return want.User, o.Token == "" && equal(o.Username, want.User) && equal(o.Password, want.Password)
	}
}

// equal compares in constant time (for equal lengths).
func equal(got, want string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
