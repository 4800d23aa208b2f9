package statushttp

// HostAllowed exposes the DNS-rebinding guard's decision, so a test can
// give the listener a name without depending on the machine's resolver.
var HostAllowed = hostAllowed
