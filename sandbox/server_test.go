package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// What the helper server shares between commands must not let one reach
// another: each command still has its own PID namespace and /proc.
func TestCommandsSeeNoOtherCommand(t *testing.T) {
	f := newFixture(t)
	s := f.sandbox(t, WorkspaceWrite, false)
	running := spawnSleep(t, s, f.ws)
	defer running.Kill()
	out, ok := sh(t, s, f.ws, `for p in /proc/[0-9]*; do cat $p/comm; done 2>/dev/null | sort | tr '\n' ' '`)
	if !ok || strings.Contains(out, "sleep") || strings.Contains(out, "agent") || strings.Contains(out, "sandbox") {
		t.Errorf("a command saw processes not its own: %q", out)
	}
	// Its own are all it sees, with itself as init.
	if out, _ := sh(t, s, f.ws, `echo $$`); strings.TrimSpace(out) != "1" {
		t.Errorf("the command's pid is %q, not 1 (init of its own PID namespace)", out)
	}
}

// What a command leaves running in the background dies with it: it does
// not live on into the next call.
func TestLeftoverBackgroundProcessDies(t *testing.T) {
	f := newFixture(t)
	s := f.sandbox(t, WorkspaceWrite, false)
	fifo := filepath.Join(f.ws, "held")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// The test reads the FIFO; the leftover holds it open for writing, so
	// the FIFO hangs up when the leftover is gone.
	rd, err := unix.Open(fifo, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rd)
	out, ok := sh(t, s, f.ws, `(exec 3>held; touch up; exec sleep 600) >/dev/null 2>&1 & until [ -e up ]; do :; done; echo started`)
	if !ok || !strings.Contains(out, "started") {
		t.Fatalf("the command did not start its leftover: %q", out)
	}
	if !hangsUp(rd) {
		t.Fatal("a background process outlived its command by a minute")
	}
}

// A helper server that died (killed, out of memory) takes its running
// commands with it, and the next command starts a new one.
func TestDeadHelperServerIsReplaced(t *testing.T) {
	f := newFixture(t)
	s := f.sandbox(t, WorkspaceWrite, false)
	running := spawnSleep(t, s, f.ws)
	first := s.srv.proc.Pid
	if err := s.srv.proc.Kill(); err != nil {
		t.Fatal(err)
	}
	if ws := running.Wait(); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("the running command ended with %v, not killed with its server", ws)
	}
	out, ok := sh(t, s, f.ws, "echo still confined; cat "+filepath.Join(f.home, "gateway.token"))
	if ok || !strings.Contains(out, "still confined") || strings.Contains(out, "s3cret") {
		t.Errorf("after the server died: ok %v, %q", ok, out)
	}
	if s.srv == nil || s.srv.proc.Pid == first {
		t.Error("no new helper server took over")
	}
}

// kill -9 of agent ends the helper server, and so every command it
// started: nothing is left behind.
func TestKillingAgentEndsTheHelperServer(t *testing.T) {
	endsWithItsParent(t, roleServerParent, "the helper server")
}

// endsWithItsParent starts this test binary as role, which prints the pid
// of a process it started (what) and waits; it kills that parent with
// kill -9 and fails unless what ends within a minute.
func endsWithItsParent(t *testing.T, role, what string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), roleEnv+"="+role, "SANDBOX_TEST_WS="+t.TempDir())
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the parent said nothing: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("the parent said %q", line)
	}
	// A pidfd becomes readable when the process exits, and names this
	// process even if its pid is reused.
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("%s %d is not running: %v", what, pid, err)
	}
	defer unix.Close(pidfd)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if !hangsUp(pidfd) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("%s %d outlived the kill -9 of its parent by a minute", what, pid)
	}
}

// serverParent spawns a long sandboxed sleep, prints its helper server's
// pid and waits to be killed.
func serverParent() int {
	s, err := New(Policy{Mode: WorkspaceWrite, Workspace: os.Getenv("SANDBOX_TEST_WS"), Env: os.Environ()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c, err := s.Spawn([]string{"/bin/sh", "-c", "sleep 600"}, os.Getenv("SANDBOX_TEST_WS"), os.Stdin, os.Stderr, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(s.srv.proc.Pid)
	c.Wait()
	return 0
}

// spawnSleep starts a sandboxed sleep that runs until killed.
func spawnSleep(t *testing.T, s *Sandbox, dir string) *Command {
	t.Helper()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	c, err := s.Spawn([]string{"/bin/sh", "-c", "exec sleep 600"}, dir, null, null, null)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// hangsUp waits, a generous minute at most, for fd to be readable or hung
// up: a pidfd whose process has exited, a FIFO whose last writer is gone.
func hangsUp(fd int) bool {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(time.Until(deadline).Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return n > 0 && fds[0].Revents&(unix.POLLIN|unix.POLLHUP) != 0
	}
	return false
}

// Each command has terminals of its own, through the helper server too:
// it can open one (numbered from 0 in a devpts of its own), and does not
// see one another command holds open.
func TestEachCommandHasItsOwnTerminals(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 opens the terminals: not installed")
	}
	f := newFixture(t)
	s := f.sandbox(t, WorkspaceWrite, false)
	const open = `import os, pty, time; m, s = pty.openpty(); print(os.ttyname(s), flush=True); time.sleep(%s)`
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	holder, err := s.Spawn([]string{"python3", "-c", fmt.Sprintf(open, "600")}, f.ws, null, w, w)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Kill()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "/dev/pts/0" {
		t.Fatalf("the first command's terminal: %q, %v", line, err)
	}
	for range 2 {
		out, ok := sh(t, s, f.ws, "ls /dev/pts | tr '\\n' ' '; python3 -c '"+fmt.Sprintf(open, "0")+"'")
		if !ok || strings.TrimSpace(out) != "ptmx /dev/pts/0" {
			t.Errorf("another command: ok %v, %q; want only its own terminal, /dev/pts/0", ok, out)
		}
	}
}
