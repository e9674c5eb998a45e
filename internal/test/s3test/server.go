package s3test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/lifeboat-dev/lifeboat/internal/syncbuf"
)

// InstallCommand installs the versitygw binary where Start looks for it
// (run in the module root).
const InstallCommand = "GOBIN=$PWD/.bin go install github.com/versity/versitygw/cmd/versitygw@v1.8.0"

// Server is a running versitygw process.
type Server struct {
	// Endpoint is the server's base URL, http://127.0.0.1:PORT.
	Endpoint string
	// AccessKey and SecretKey are the root credentials of the server.
	AccessKey string
	SecretKey string
	// Region is the region to sign requests for.
	Region string
	// Dir holds everything the server stores: its buckets and objects
	// (data/) and their versions (versions/). Removing it after Stop
	// loses the store, as a deleted bucket or a lost region does.
	Dir string

	bin      string
	args     []string
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the process has exited
	output   *syncbuf.Buffer
	stopOnce sync.Once
}

// Env points the AWS SDK's default chain at s's credentials, see Env.
func (s *Server) Env(t testing.TB) {
	t.Helper()
	Env(t, s.AccessKey, s.SecretKey)
}

// Env points the AWS SDK's default chain at the given credentials and at
// nothing else on this machine (no shared config, no instance metadata)
// for the rest of the test, so that tests exercise the same
// environment-variable path users configure.
func Env(t testing.TB, accessKey, secretKey string) {
	t.Helper()
	none := filepath.Join(t.TempDir(), "no-such-aws-file")
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":           accessKey,
		"AWS_SECRET_ACCESS_KEY":       secretKey,
		"AWS_SESSION_TOKEN":           "",
		"AWS_PROFILE":                 "",
		"AWS_REGION":                  "",
		"AWS_DEFAULT_REGION":          "",
		"AWS_ENDPOINT_URL":            "",
		"AWS_ENDPOINT_URL_S3":         "",
		"AWS_CONFIG_FILE":             none,
		"AWS_SHARED_CREDENTIALS_FILE": none,
		"AWS_EC2_METADATA_DISABLED":   "true",
		"AWS_WEB_IDENTITY_TOKEN_FILE": "",
		"AWS_ROLE_ARN":                "",
	} {
		t.Setenv(k, v)
	}
}

// startTimeout bounds how long Start waits for /health. versitygw is usually
// ready in well under a second; the machine may be busy.
const startTimeout = 30 * time.Second

// Pid is the server process's id (a benchmark reads its CPU time).
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Start launches versitygw on a free loopback port and stops it at cleanup.
func Start(t testing.TB) *Server { return StartWith(t, Options{}) }

// Options are how a benchmark may start versitygw.
type Options struct {
	// KeepAlive keeps connections open between requests, as S3 does
	// (versitygw closes each by default: a TCP connection per request);
	// Quiet drops its log line per request. Tests keep both off (the
	// log is printed when a test fails).
	KeepAlive, Quiet bool
}

// StartWith is Start with o.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	bin := findBinary(t)
	var lastErr error
	// The port is chosen by binding :0 and releasing it, so another process
	// may grab it in between: try a few ports.
	for range 3 {
		s, err := start(t, bin, o)
		if err == nil {
			return s
		}
		lastErr = err
	}
	t.Fatalf("start versitygw: %v", lastErr)
	return nil
}

func start(t testing.TB, bin string, o Options) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	versions := filepath.Join(dir, "versions")
	for _, d := range []string{data, versions} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	s := &Server{
		Endpoint:  "http://127.0.0.1:" + strconv.Itoa(port),
		AccessKey: "lifeboat-test-access",
		SecretKey: "lifeboat-test-secret-" + strconv.Itoa(port),
		Region:    "us-east-1",
		Dir:       dir,
		exited:    make(chan struct{}),
		output:    &syncbuf.Buffer{},
	}
	s.args = []string{
		"--port", "127.0.0.1:" + strconv.Itoa(port),
		"--access", s.AccessKey, "--secret", s.SecretKey,
		"--region", s.Region,
		"--health", "/health"}
	if o.KeepAlive {
		s.args = append(s.args, "--keep-alive")
	}
	if o.Quiet {
		s.args = append(s.args, "--quiet")
	}
	s.args = append(s.args, "posix", "--versioning-dir", versions, data)
	s.bin = bin
	if err := s.launch(); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("versitygw output:\n%s", s.output.String())
		}
	})
	if err := s.waitHealthy(); err != nil {
		s.Stop()
		return nil, fmt.Errorf("%w; output:\n%s", err, s.output.String())
	}
	return s, nil
}

// launch starts the server process with s.args.
func (s *Server) launch() error {
	s.cmd = exec.Command(s.bin, s.args...)
	s.cmd.Stdout = s.output
	s.cmd.Stderr = s.output
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("run %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	s.exited = exited
	cmd := s.cmd
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	return nil
}

// Restart starts the server again on the same port, with the same
// credentials and data directories: a store that went down and came back
// with every object it had. A server still running is killed first (as
// Stop does); a test that wants it down for a while calls Stop, then
// Restart. It waits until the server is healthy again. Not safe to call
// concurrently with Stop.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	// The port was just freed by the killed process: retry the bind.
	var err error
	for range 20 {
		if err = s.launch(); err != nil {
			break
		}
		if err = s.waitHealthy(); err == nil {
			s.stopOnce = sync.Once{}
			return
		}
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	t.Fatalf("restart versitygw: %v; output:\n%s", err, s.output.String())
}

func (s *Server) waitHealthy() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint+"/health", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.exited:
			return fmt.Errorf("versitygw exited before it was healthy (%s)", s.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("versitygw not healthy at %s/health within %v", s.Endpoint, startTimeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop kills the server and waits for it to exit. It is safe to call more
// than once.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		_ = s.cmd.Process.Kill()
		<-s.exited
	})
}

// Client returns a raw S3 client for the server (path style, root
// credentials), for setting up and checking what the code under test did.
func (s *Server) Client(t testing.TB) *s3.Client {
	t.Helper()
	return s3.New(s3.Options{
		Region:       s.Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
	})
}

// CreateBucket creates a bucket, with Object Lock (and so versioning) enabled
// when objectLock is true.
func (s *Server) CreateBucket(t testing.TB, name string, objectLock bool) {
	t.Helper()
	in := &s3.CreateBucketInput{Bucket: aws.String(name)}
	if objectLock {
		in.ObjectLockEnabledForBucket = aws.Bool(true)
	}
	if _, err := s.Client(t).CreateBucket(context.Background(), in); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
	if objectLock {
		// Creating a bucket with Object Lock enables versioning on AWS; make
		// sure it is on here too, whatever the server's default.
		_, err := s.Client(t).PutBucketVersioning(context.Background(), &s3.PutBucketVersioningInput{
			Bucket:                  aws.String(name),
			VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled},
		})
		if err != nil {
			t.Fatalf("enable versioning on bucket %s: %v", name, err)
		}
	}
}

// findBinary returns the versitygw binary, or ends the test: Fatal under
// CI=true, Skip otherwise.
func findBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("VERSITYGW"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("VERSITYGW=%s: %v", p, err)
		}
		return p
	}
	if root, err := moduleRoot(); err == nil {
		p := filepath.Join(root, ".bin", "versitygw")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	msg := "versitygw not found in $VERSITYGW, <module root>/.bin or PATH; install it with: " + InstallCommand
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// moduleRoot walks up from the working directory to the directory holding
// go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found")
		}
		dir = parent
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
