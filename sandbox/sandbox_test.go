package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type fixture struct {
	ws, home, outside string
	tcp               net.Listener
	udp               net.PacketConn
	udpGot            chan []byte
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{ws: filepath.Join(dir, "ws"), home: filepath.Join(dir, "home"), outside: filepath.Join(dir, "outside"), udpGot: make(chan []byte, 1)}
	for _, d := range []string{f.ws, f.home, f.outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(f.home, "gateway.token"), []byte("s3cret-gateway-token"), 0o600)
	os.WriteFile(filepath.Join(f.home, "agent.db"), []byte("SQLite format 3"), 0o600)
	os.WriteFile(filepath.Join(f.outside, "readme.txt"), []byte("readable"), 0o644)
	var err error
	if f.tcp, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.tcp.Close() })
	go func() {
		for {
			c, err := f.tcp.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello from the host\n"))
			c.Close()
		}
	}()
	if f.udp, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.udp.Close() })
	go func() {
		b := make([]byte, 100)
		n, _, err := f.udp.ReadFrom(b)
		if err == nil {
			f.udpGot <- b[:n]
		}
	}()
	return f
}

func (f *fixture) sandbox(t *testing.T, mode Mode, network bool) *Sandbox {
	t.Helper()
	s, err := New(Policy{Mode: mode, Network: network, Workspace: f.ws, Hidden: []string{f.home},
		Env:  append(os.Environ(), "OPENAI_API_KEY=sk-live-123", "GITHUB_TOKEN=ghp_x", "MY_SETTING=visible", "PASSED_TOKEN=ok"),
		Pass: []string{"PASSED_TOKEN"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// sh runs script in the sandbox as the bash tool does (Spawn, through
// the helper server; Start when the sandbox is off) and returns its
// combined output and whether it exited 0.
func sh(t *testing.T, s *Sandbox, dir, script string) (string, bool) {
	t.Helper()
	if s.Mode() == Off {
		return shStart(t, s, dir, script)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	c, err := s.Spawn([]string{"/bin/sh", "-c", script}, dir, null, w, w)
	w.Close()
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	out, _ := io.ReadAll(r)
	ws := c.Wait()
	return string(out), ws.Exited() && ws.ExitStatus() == 0
}

// shStart is sh through Start: a helper per command, as MCP servers start.
func shStart(t *testing.T, s *Sandbox, dir, script string) (string, bool) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := s.Start(cmd); err != nil {
		t.Fatalf("start: %v", err)
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return out.String(), err == nil
}

func TestWorkspaceWrite(t *testing.T) {
	f := newFixture(t)
	s := f.sandbox(t, WorkspaceWrite, false)
	port := f.tcp.Addr().(*net.TCPAddr).Port
	udpPort := f.udp.LocalAddr().(*net.UDPAddr).Port
	for _, c := range []struct {
		what, script string
		ok           bool
	}{
		{"write in the workspace", "echo hi > in-ws.txt && cat in-ws.txt", true},
		{"write in TMPDIR", `echo hi > "$TMPDIR/t.txt" && cat "$TMPDIR/t.txt"`, true},
		{"write outside the workspace", fmt.Sprintf("echo x > %s/escape.txt", f.outside), false},
		{"truncate a file outside", fmt.Sprintf(": > %s/readme.txt", f.outside), false},
		{"write in /tmp outside TMPDIR", "echo x > /tmp/agent-sandbox-escape-test", false},
		{"read outside the workspace", fmt.Sprintf("cat %s/readme.txt", f.outside), true},
		{"read the gateway token", fmt.Sprintf("cat %s/gateway.token", f.home), false},
		{"read agent.db", fmt.Sprintf("cat %s/agent.db", f.home), false},
		{"TCP to a loopback listener", fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && cat <&3", port), false},
		{"write to agent's stdout through /proc", fmt.Sprintf("echo injected > /proc/%d/fd/1", os.Getpid()), false},
		{"signal agent", fmt.Sprintf("kill -0 %d", os.Getpid()), false},
	} {
		script := c.script
		if strings.Contains(script, "/dev/tcp") {
			script = "bash -c '" + script + "'"
		}
		out, ok := sh(t, s, f.ws, script)
		if ok != c.ok {
			t.Errorf("%s: ok = %v, want %v; output %q", c.what, ok, c.ok, out)
		}
	}
	if _, err := os.Stat(filepath.Join(f.outside, "escape.txt")); err == nil {
		t.Error("a file was written outside the workspace")
	}
	if b, _ := os.ReadFile(filepath.Join(f.outside, "readme.txt")); string(b) != "readable" {
		t.Errorf("readme.txt outside = %q", b)
	}
	// UDP: the datagram must not arrive.
	sh(t, s, f.ws, fmt.Sprintf("bash -c 'echo ping > /dev/udp/127.0.0.1/%d'", udpPort))
	select {
	case got := <-f.udpGot:
		t.Errorf("a UDP datagram left the sandbox: %q", got)
	case <-time.After(200 * time.Millisecond):
	}

	out, _ := sh(t, s, f.ws, "env")
	for _, secret := range []string{"sk-live-123", "ghp_x"} {
		if strings.Contains(out, secret) {
			t.Errorf("env shows a secret %q", secret)
		}
	}
	if !strings.Contains(out, "MY_SETTING=visible") || !strings.Contains(out, "PASSED_TOKEN=ok") || !strings.Contains(out, "TMPDIR="+s.TmpDir()) {
		t.Errorf("env lacks what it should pass:\n%s", out)
	}

	// A process that setsids away dies with the command.
	marker := filepath.Join(f.ws, "survivor")
	sh(t, s, f.ws, fmt.Sprintf("(setsid sh -c 'sleep 0.5; echo alive > %s' &) ; exit 0", marker))
	time.Sleep(1200 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Error("a setsid child outlived its command")
	}
}

func TestReadOnly(t *testing.T) {
	f := newFixture(t)
	s := f.sandbox(t, ReadOnly, false)
	if out, ok := sh(t, s, f.ws, "echo hi > in-ws.txt"); ok {
		t.Errorf("read-only allowed a workspace write: %q", out)
	}
	if out, ok := sh(t, s, f.ws, `echo hi > "$TMPDIR/x" && ls`); !ok {
		t.Errorf("read-only refused TMPDIR: %q", out)
	}
	if hint := s.Explain("sh: in-ws.txt: Permission denied"); !strings.Contains(hint, "the workspace is read-only") {
		t.Errorf("Explain = %q", hint)
	}
}

// The checks bite: with the sandbox off the same commands succeed.
func TestOffAllowsEverything(t *testing.T) {
	f := newFixture(t)
	s := f.sandbox(t, Off, false)
	port := f.tcp.Addr().(*net.TCPAddr).Port
	for _, script := range []string{
		fmt.Sprintf("echo x > %s/escape.txt", f.outside),
		fmt.Sprintf("cat %s/gateway.token", f.home),
		fmt.Sprintf("bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d && cat <&3'", port),
		"env | grep -q sk-live-123",
	} {
		if out, ok := sh(t, s, f.ws, script); !ok {
			t.Errorf("off refused %q: %s", script, out)
		}
	}
}

func TestNetworkOn(t *testing.T) {
	f := newFixture(t)
	s := f.sandbox(t, WorkspaceWrite, true)
	port := f.tcp.Addr().(*net.TCPAddr).Port
	if out, ok := sh(t, s, f.ws, fmt.Sprintf("bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d && cat <&3'", port)); !ok || !strings.Contains(out, "hello from the host") {
		t.Errorf("--network: %v %q", ok, out)
	}
	if _, ok := sh(t, s, f.ws, fmt.Sprintf("echo x > %s/escape.txt", f.outside)); ok {
		t.Error("--network lifted the file restrictions")
	}
}

func TestUnsupportedKernelFailsClearly(t *testing.T) {
	t.Setenv("AGENT_SANDBOX_SIMULATE_MISSING", "Landlock is not available: kernel 5.4")
	_, err := New(Policy{Mode: WorkspaceWrite, Workspace: t.TempDir()})
	var ue *UnsupportedError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "Landlock is not available: kernel 5.4; use --sandbox off") {
		t.Errorf("err = %v", err)
	}
	t.Setenv("AGENT_SANDBOX_SIMULATE_MISSING", "")
	t.Setenv("AGENT_SANDBOX_SIMULATE_NO_NAMESPACES", "1")
	if _, err := New(Policy{Mode: WorkspaceWrite, Workspace: t.TempDir()}); err == nil ||
		!strings.Contains(err.Error(), "user, PID, mount and network namespaces cannot be created") {
		t.Errorf("without namespaces: %v", err)
	}
	if _, err := New(Policy{Mode: Off, Workspace: t.TempDir()}); err != nil {
		t.Errorf("off needs nothing of the kernel: %v", err)
	}
}

func TestEnvironment(t *testing.T) {
	env := []string{"PATH=/bin", "OPENAI_API_KEY=x", "AWS_SECRET_ACCESS_KEY=x", "GITHUB_TOKEN=x", "DB_PASSWORD=x", "KEYBOARD=us",
		"MONKEY=x", "MCP_THING=x", "GITHUB_TOKEN_OK=x",
		// Short words count too, but only as whole words.
		"DB_PASS=x", "GITHUB_PAT=x", "MY_PAT_FILE=x", "SMTP_PASSWD=x", "GCP_CREDENTIALS=x", "PATTERN=x", "PASSPORT_NO=x",
		// agent's own store, and PostgreSQL's password variable.
		"AGENT_DATABASE_URL=postgres://agent:pw@db/agent", "PGPASSWORD=x"}
	got := strings.Join(Environment(env, []string{"MCP_THING"}, []string{"GITHUB_TOKEN_OK"}), " ")
	if got != "PATH=/bin KEYBOARD=us MONKEY=x GITHUB_TOKEN_OK=x PATTERN=x PASSPORT_NO=x" {
		t.Errorf("Environment = %s", got)
	}
}

// BenchmarkCommand is one `sh -c true` with and without the sandbox.
func BenchmarkCommand(b *testing.B) {
	ws := b.TempDir()
	for _, mode := range []Mode{Off, WorkspaceWrite} {
		b.Run(string(mode), func(b *testing.B) {
			s, err := New(Policy{Mode: mode, Workspace: ws, Env: os.Environ()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			for b.Loop() {
				cmd := exec.Command("/bin/sh", "-c", "true")
				if err := s.Start(cmd); err != nil {
					b.Fatal(err)
				}
				if err := cmd.Wait(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestWritableDirectories(t *testing.T) {
	f := newFixture(t)
	s, err := New(Policy{Mode: ReadOnly, Workspace: f.ws, Hidden: []string{f.home}, Writable: []string{f.outside}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if out, ok := sh(t, s, f.ws, fmt.Sprintf("echo cached > %s/cache.txt", f.outside)); !ok {
		t.Errorf("a sandbox_writable directory refused a write: %q", out)
	}
}

// Build caches land in the private TMPDIR when the user's cache is not
// writable, so a build works out of the box.
func TestCachesInTmpdir(t *testing.T) {
	f := newFixture(t)
	s := f.sandbox(t, WorkspaceWrite, false)
	out, ok := sh(t, s, f.ws, `mkdir -p "$XDG_CACHE_HOME/go-build" && echo "$XDG_CACHE_HOME"`)
	if !ok || !strings.HasPrefix(strings.TrimSpace(out), s.TmpDir()) {
		t.Errorf("XDG_CACHE_HOME = %q (ok %v), want under %s", out, ok, s.TmpDir())
	}
}
