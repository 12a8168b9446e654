package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"unsafe"

	"golang.org/x/sys/unix"
)

// The escapes of issue "trust, round three", each tried from inside the
// sandbox. Some need a process of their own (a controlling terminal, a
// parent to kill): the test binary plays it, chosen by an environment
// variable that TestMain reads.

const (
	roleEnv      = "SANDBOX_TEST_ROLE"
	roleTTYOwner = "tty-owner" // a session on a pty that runs a sandboxed TIOCSTI
	roleTIOCSTI  = "tiocsti"   // pushes input into /dev/tty and fds 0-2
	roleParent   = "parent"    // starts a sandboxed sleep, prints its pid, waits
	// spawns a sandboxed sleep, prints its helper server's pid, waits
	roleServerParent = "server-parent"
)

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case roleTTYOwner:
		os.Exit(ttyOwner())
	case roleTIOCSTI:
		os.Exit(pushInput())
	case roleParent:
		os.Exit(sandboxedSleeper())
	case roleServerParent:
		os.Exit(serverParent())
	}
	os.Exit(m.Run())
}

// AGENT_HOME inside the workspace (agent run from $HOME): the commands may
// write at the workspace's root, but see nothing of AGENT_HOME and change
// nothing in it; a hidden file reads empty and keeps its content.
func TestHiddenInsideTheWorkspace(t *testing.T) {
	ws := t.TempDir()
	home := filepath.Join(ws, ".local", "share", "agent")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(home, "gateway.token")
	config := filepath.Join(home, "config.toml")
	pgpass := filepath.Join(ws, ".pgpass")
	os.WriteFile(token, []byte("s3cret-gateway-token"), 0o600)
	os.WriteFile(config, []byte("model = \"x\"\n"), 0o600)
	os.WriteFile(pgpass, []byte("db:5432:*:agent:pgsecret\n"), 0o600)
	s, err := New(Policy{Mode: WorkspaceWrite, Workspace: ws, Hidden: []string{home, pgpass}, Env: os.Environ()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct {
		what, script string
		ok           bool
	}{
		{"write at the workspace's root", "echo hi > at-root.txt && cat at-root.txt", true},
		{"make a directory in the workspace", "mkdir -p .local/other && echo x > .local/other/f", true},
		{"read the gateway token", "cat .local/share/agent/gateway.token", false},
		{"list AGENT_HOME", "ls -A .local/share/agent | grep .", false},
		{"write config.toml", "printf '[mcp_servers.evil]\\ncommand = \"/bin/sh\"\\n' >> .local/share/agent/config.toml", false},
		{"replace config.toml", "echo x > .local/share/agent/new && mv .local/share/agent/new .local/share/agent/config.toml", false},
		{"move AGENT_HOME away", "mv .local/share/agent .local/share/moved", false},
		{"read a hidden file", "grep pgsecret .pgpass", false},
		{"unmount the cover", "umount .local/share/agent", false},
	} {
		out, ok := sh(t, s, ws, c.script)
		if ok != c.ok {
			t.Errorf("%s: ok = %v, want %v; output %q", c.what, ok, c.ok, out)
		}
	}
	if b, _ := os.ReadFile(config); string(b) != "model = \"x\"\n" {
		t.Errorf("config.toml was changed: %q", b)
	}
	if b, _ := os.ReadFile(pgpass); !strings.Contains(string(b), "pgsecret") {
		t.Errorf(".pgpass was changed: %q", b)
	}
	if _, err := os.Stat(token); err != nil {
		t.Errorf("the token is gone: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "at-root.txt")); err != nil {
		t.Errorf("the write at the workspace's root did not land: %v", err)
	}
}

// A workspace inside AGENT_HOME could not be seen by its own commands:
// refused before anything runs, naming both.
func TestWorkspaceInsideHiddenIsRefused(t *testing.T) {
	home := t.TempDir()
	ws := filepath.Join(home, "ws")
	os.Mkdir(ws, 0o755)
	_, err := New(Policy{Mode: WorkspaceWrite, Workspace: ws, Hidden: []string{home}})
	var hw *HiddenWorkspaceError
	if !errors.As(err, &hw) || !strings.Contains(err.Error(), ws) || !strings.Contains(err.Error(), home) {
		t.Errorf("err = %v", err)
	}
}

// A descriptor agent inherited (exec 7>>outside; agent run …) does not
// reach the command: Landlock checks only what is opened after it.
func TestInheritedDescriptorsAreClosed(t *testing.T) {
	f := newFixture(t)
	target := filepath.Join(f.outside, "via-fd.txt")
	fd, err := unix.Open(target, unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND, 0o644) // no O_CLOEXEC, as a shell leaves it
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	// bash, not sh: dash cannot redirect to a descriptor of two digits
	// ("Bad fd number"), which a busy test process may well hand out.
	write := fmt.Sprintf("bash -c 'echo ESCAPED >&%d'", fd)
	s := f.sandbox(t, WorkspaceWrite, false)
	out, ok := sh(t, s, f.ws, write)
	if ok {
		t.Errorf("the inherited descriptor %d was writable: %q", fd, out)
	}
	if b, _ := os.ReadFile(target); len(b) != 0 {
		t.Errorf("%s was written through the inherited descriptor: %q", target, b)
	}
	// The check bites: unsandboxed, the same command writes.
	off := f.sandbox(t, Off, false)
	if out, ok := sh(t, off, f.ws, write); !ok {
		t.Fatalf("unsandboxed, the descriptor was not inherited either: %q", out)
	}
}

// A sandboxed command cannot push keystrokes into the user's terminal
// (TIOCSTI): it has no controlling terminal and no device ioctls. Run
// under a real pty, in a session that has it as its controlling terminal.
func TestNoKeystrokesIntoTheTerminal(t *testing.T) {
	if b, err := os.ReadFile("/proc/sys/dev/tty/legacy_tiocsti"); err == nil && strings.TrimSpace(string(b)) == "0" {
		t.Skip("dev.tty.legacy_tiocsti is 0: this kernel refuses TIOCSTI to everyone")
	}
	ws := t.TempDir()
	for _, c := range []struct {
		mode    Mode
		pending bool
	}{{Off, true}, {WorkspaceWrite, false}, {ReadOnly, false}} {
		got := runTTYOwner(t, ws, c.mode)
		if got.pending != c.pending {
			t.Errorf("%s: input pending in the terminal after the command = %v, want %v (%s)", c.mode, got.pending, c.pending, got.report)
		}
	}
}

type ttyResult struct {
	pending bool
	report  string
}

// runTTYOwner starts the test binary as a session leader whose
// controlling terminal is a new pty, and has it run the TIOCSTI command
// in mode; it reports whether input was left pending in the terminal.
func runTTYOwner(t *testing.T, ws string, mode Mode) ttyResult {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	defer ptmx.Close()
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pts.Close()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), roleEnv+"="+roleTTYOwner, "SANDBOX_TEST_WS="+ws, "SANDBOX_TEST_MODE="+string(mode))
	cmd.Stdin = pts
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: the terminal's owner: %v (%s)", mode, err, out)
	}
	report := strings.TrimSpace(string(out))
	return ttyResult{pending: strings.HasPrefix(report, "pending "), report: report}
}

// ttyOwner runs in a session whose controlling terminal is its stdin: it
// runs the TIOCSTI command in the sandbox and says whether input is left
// pending in the terminal ("pending N" or "none").
func ttyOwner() int {
	s, err := New(Policy{Mode: Mode(os.Getenv("SANDBOX_TEST_MODE")), Workspace: os.Getenv("SANDBOX_TEST_WS"),
		Env: append(os.Environ(), roleEnv+"="+roleTIOCSTI)})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer s.Close()
	cmd := exec.Command(os.Args[0])
	cmd.Stdin = os.Stdin // the terminal itself, as a careless start would pass it
	cmd.Stderr = os.Stderr
	var out strings.Builder
	cmd.Stdout = &out
	if err := s.Start(cmd); err != nil {
		fmt.Println("error", err)
		return 1
	}
	_ = cmd.Wait()
	n, err := unix.IoctlGetInt(0, unix.TIOCINQ)
	switch {
	case err != nil:
		fmt.Println("error TIOCINQ:", err)
		return 1
	case n > 0:
		fmt.Printf("pending %d bytes; the command said: %s\n", n, strings.TrimSpace(out.String()))
	default:
		fmt.Printf("none; the command said: %s\n", strings.TrimSpace(out.String()))
	}
	return 0
}

// pushInput tries TIOCSTI on /dev/tty and on fds 0-2 and says what worked.
func pushInput() int {
	push := func(fd int) error {
		for _, c := range []byte("echo INJECTED\n") {
			b := c
			if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCSTI, uintptr(unsafe.Pointer(&b))); errno != 0 {
				return errno
			}
		}
		return nil
	}
	var said []string
	if tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0); err != nil {
		said = append(said, "/dev/tty: "+err.Error())
	} else {
		said = append(said, fmt.Sprintf("/dev/tty: %v", push(int(tty.Fd()))))
	}
	for fd := 0; fd <= 2; fd++ {
		said = append(said, fmt.Sprintf("fd %d: %v", fd, push(fd)))
	}
	fmt.Println(strings.Join(said, "; "))
	return 0
}

// kill -9 of the process that started a sandboxed command ends the
// command too (Pdeathsig), with everything it started.
func TestKillingAgentEndsTheCommand(t *testing.T) {
	endsWithItsParent(t, roleParent, "the sandboxed command")
}

// sandboxedSleeper starts a long sandboxed sleep, prints its pid and
// waits to be killed.
func sandboxedSleeper() int {
	s, err := New(Policy{Mode: WorkspaceWrite, Workspace: os.Getenv("SANDBOX_TEST_WS"), Env: os.Environ()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cmd := exec.Command("/bin/sh", "-c", "sleep 600")
	if err := s.Start(cmd); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(cmd.Process.Pid)
	_ = cmd.Wait()
	return 0
}
