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
