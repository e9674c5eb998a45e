package agent

import (
	"fmt"
	"net"
	"time"
)

// Systemd configures the service manager protocol (sd_notify) for
// Type=notify units. The zero value disables it.
type Systemd struct {
	// Socket is $NOTIFY_SOCKET: a unix datagram socket path, or an
	// abstract socket name starting with '@'.
	Socket string
	// Watchdog is the interval from $WATCHDOG_USEC; when set, the agent
	// sends WATCHDOG=1 every half of it.
	Watchdog time.Duration
}

// sdNotify sends state (e.g. "READY=1") to the service manager. It does
// nothing when socket is empty.
//
// It is go-systemd's daemon.SdNotify (github.com/coreos/go-systemd/v22,
// in the module graph through etcd's client) with the socket as an
// argument: SdNotify reads $NOTIFY_SOCKET from the process environment on
// every call and has no variant that takes the address, while the agent
// takes its configuration as Go values (cmd/lifeboat reads the
// environment, systemdFromEnv) and its tests give each agent its own
// socket. The protocol is the same one datagram to the same unixgram
// socket, '@' mapping to the abstract namespace in both.
func sdNotify(socket, state string) error {
	if socket == "" {
		return nil
	}
	// Go maps a leading '@' to the abstract namespace.
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sd_notify %s: %w", state, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify %s: %w", state, err)
	}
	return nil
}
