package agent

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// TestSdNotify sends to real unix datagram sockets, a path and an abstract
// name, and checks the no-op and the error of a missing socket.
func TestSdNotify(t *testing.T) {
	listen := func(t *testing.T, name string) *net.UnixConn {
		t.Helper()
		conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
		if err != nil {
			t.Fatalf("listen on %s: %v", name, err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	tests := []struct {
		name   string
		socket func(t *testing.T) string
	}{
		{name: "path", socket: func(t *testing.T) string { return filepath.Join(t.TempDir(), "notify.sock") }},
		{name: "abstract", socket: func(t *testing.T) string { return "@lifeboat-test-" + filepath.Base(t.TempDir()) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := tt.socket(t)
			conn := listen(t, sock)
			if err := sdNotify(sock, "READY=1"); err != nil {
				t.Fatalf("sdNotify: %v", err)
			}
			buf := make([]byte, 64)
			n, err := conn.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(buf[:n]); got != "READY=1" {
				t.Errorf("received %q, want READY=1", got)
			}
		})
	}
	t.Run("no socket", func(t *testing.T) {
		if err := sdNotify("", "READY=1"); err != nil {
			t.Errorf("sdNotify without a socket = %v, want nil", err)
		}
	})
	t.Run("missing socket", func(t *testing.T) {
		err := sdNotify(filepath.Join(t.TempDir(), "gone.sock"), "STOPPING=1")
		if err == nil || !strings.Contains(err.Error(), "sd_notify STOPPING=1") {
			t.Errorf("sdNotify to a missing socket = %v, want an error naming the state", err)
		}
	})
}
