// Package pgtest starts throwaway PostgreSQL servers for tests, as llmtest
// serves a fake model: a real server, initialised in the test's temporary
// directory, listening on 127.0.0.1, and stopped when the test ends.
package pgtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// startDeadline bounds how long a server may take to accept connections.
const startDeadline = 30 * time.Second

// Start starts a PostgreSQL server for t and returns the DSN of its
// database "postgres", whose user "postgres" is a superuser needing no
// password. The server is stopped, and its files removed, when t ends. It
// skips t when no PostgreSQL server is installed. It does not sync to
// disk: tests lose nothing by it and run faster.
func Start(t testing.TB) string {
	t.Helper()
	return start(t, false)
}

// StartDurable is Start with PostgreSQL's defaults for durability (fsync,
// synchronous commit), as a production server runs: for benchmarks that
// compare the cost of a durable write with SQLite's.
func StartDurable(t testing.TB) string {
	t.Helper()
	return start(t, true)
}

func start(t testing.TB, durable bool) string {
	t.Helper()
	bin := BinDir()
	if bin == "" {
		t.Skip("pgtest: no PostgreSQL server in /usr/lib/postgresql/*/bin; scripts/deps.sh installs it")
	}
	cred, err := credential()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	dir := t.TempDir()
	if err := traversable(dir); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	data, sock := filepath.Join(dir, "data"), filepath.Join(dir, "sock")
	for _, d := range []string{data, sock} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		if cred != nil {
			if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
				t.Fatalf("pgtest: %v", err)
			}
		}
	}

	initdb := command(bin, "initdb", cred, "-D", data, "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}

	// The port is free when we look, but another process may take it
	// before the server binds it; then the server exits and we try again.
	var lastErr error
	for range 3 {
		dsn, err := serve(t, bin, cred, data, sock, durable)
		if err == nil {
			return dsn
		}
		lastErr = err
	}
	t.Fatalf("pgtest: %v", lastErr)
	return ""
}

// Database creates a database on the server at server (a DSN from
// Start), empty or copied from template when template is not "", and
// returns its DSN. It is dropped when t ends. Copying a migrated template
// is much faster than migrating each database.
func Database(t testing.TB, server, template string) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), databases.Add(1))
	if err := Create(server, name, template); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if admin, err := pgconn.Connect(ctx, server); err == nil {
			_ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)").Close()
			admin.Close(ctx)
		}
	})
	return WithDatabase(server, name)
}

// Create creates database name on server, copied from template unless it
// is "". It lives as long as the server.
func Create(server, name, template string) error {
	ctx := context.Background()
	admin, err := pgconn.Connect(ctx, server)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	create := "CREATE DATABASE " + name
	if template != "" {
		create += " TEMPLATE " + template
	}
	if _, err := admin.Exec(ctx, create).ReadAll(); err != nil {
		return fmt.Errorf("%s: %w", create, err)
	}
	return nil
}

// WithDatabase returns server's DSN naming database name instead.
func WithDatabase(server, name string) string {
	return strings.Replace(server, "/postgres?", "/"+name+"?", 1)
}

// databases numbers the databases Database creates.
var databases atomic.Int64

// BinDir returns the directory of the newest installed PostgreSQL's
// server programs, or "" when there is none.
func BinDir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	var found []string
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			found = append(found, d)
		}
	}
	major := func(d string) int {
		n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		return n
	}
	sort.Slice(found, func(i, j int) bool { return major(found[i]) < major(found[j]) })
	if len(found) == 0 {
		return ""
	}
	return found[len(found)-1]
}

// serve starts postgres on a free port and waits until it accepts
// connections. On success the server is stopped at t's cleanup.
func serve(t testing.TB, bin string, cred *syscall.Credential, data, sock string, durable bool) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	args := []string{"-D", data, "-k", sock, "-h", "127.0.0.1", "-p", strconv.Itoa(port),
		"-c", "shared_buffers=16MB", "-c", "max_connections=300", "-c", "logging_collector=off",
		"-c", "log_min_messages=warning"}
	if !durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	cmd := command(bin, "postgres", cred, args...)
	var log syncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()

	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	if err := ready(dsn, exited); err != nil {
		stop(cmd, exited)
		return "", fmt.Errorf("postgres on port %d: %w\n%s", port, err, log.String())
	}
	t.Cleanup(func() { stop(cmd, exited) })
	return dsn, nil
}

// ready waits until the server at dsn accepts a connection, it exits, or
// startDeadline passes.
func ready(dsn string, exited <-chan struct{}) error {
	deadline := time.Now().Add(startDeadline)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgconn.Connect(ctx, dsn)
		cancel()
		if err == nil {
			return conn.Close(context.Background())
		}
		select {
		case <-exited:
			return fmt.Errorf("exited before accepting connections")
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not accepting connections after %s: %w", startDeadline, err)
		}
	}
}

// stop asks the server for a fast shutdown and, if it is not gone within
// a few seconds, kills its whole process group.
func stop(cmd *exec.Cmd, exited <-chan struct{}) {
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
}

// command runs a PostgreSQL program in its own process group, as cred's
// user when cred is not nil.
func command(bin, name string, cred *syscall.Credential, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "TZ=UTC"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	return cmd
}

// credential returns the unprivileged user to run PostgreSQL as when we
// are root, which PostgreSQL refuses to run as: the postgres system user,
// else nobody. It returns nil when we are not root.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
	}
	return nil, fmt.Errorf("running as root, and neither a postgres nor a nobody user exists to run PostgreSQL as")
}

// traversable makes sure another user can reach dir: the directories the
// test created on the way from the temporary directory (t.TempDir makes
// its top one 0700) get the search bit for others; the temporary
// directory and its ancestors must already have it.
func traversable(dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	tmp := filepath.Clean(os.TempDir())
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if d != tmp && strings.HasPrefix(d, tmp+string(filepath.Separator)) {
				if err := os.Chmod(d, fi.Mode().Perm()|0o001); err != nil {
					return err
				}
			} else {
				return fmt.Errorf("%s is not searchable by other users, so PostgreSQL (run as an unprivileged user) cannot reach its files; set TMPDIR to a directory that is (such as /tmp)", d)
			}
		}
		if d == "/" || d == filepath.Dir(d) {
			return nil
		}
	}
}

// freePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// syncBuffer collects the server's log, written while we may read it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
