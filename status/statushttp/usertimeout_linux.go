package statushttp

import (
	"net"
	"syscall"
	"time"
)

// tcpUserTimeout is Linux's TCP_USER_TIMEOUT socket option (linux/tcp.h),
// which package syscall does not name.
const tcpUserTimeout = 0x12

// setUserTimeout makes the kernel abort c's connection when data it sent
// stays unacknowledged for d: a client that vanished without closing (a
// laptop gone to sleep, a dropped network) then fails the next write of a
// live tail, whose keep-alive every 15 s is such data, instead of after
// TCP's retransmissions (about 15 minutes on Linux).
func setUserTimeout(c net.Conn, d time.Duration) error {
	tcp, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(d.Milliseconds()))
	}); err != nil {
		return err
	}
	return serr
}
