package tools

import (
	"context"
	"encoding/json"
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

	"agent/sandbox"
)

func TestBash(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		args  map[string]any
		want  string
		isErr bool
		opts  Options
	}{
		{name: "stdout", args: map[string]any{"command": "echo hello"}, want: "hello\n"},
		{name: "stderr combined in order", args: map[string]any{"command": "echo out; echo err >&2; echo out2"},
			want: "out\nerr\nout2\n"},
		{name: "runs in the workspace root", args: map[string]any{"command": "pwd -P"}, want: "ROOT\n"},
		{name: "no output", args: map[string]any{"command": "true"}, want: "(no output)"},
		{name: "stdin is empty", args: map[string]any{"command": "cat; echo done"}, want: "done\n"},
		{name: "environment inherited", args: map[string]any{"command": `test -n "$PATH" && echo ok`}, want: "ok\n"},
		{name: "exit status", args: map[string]any{"command": "echo failing; exit 3"}, want: "failing\nexit status 3", isErr: true},
		{name: "exit status without output", args: map[string]any{"command": "exit 1"}, want: "exit status 1", isErr: true},
		{name: "signal", args: map[string]any{"command": "kill -TERM $$"}, want: "terminated by signal terminated", isErr: true},
		// What the command printed before the timeout is kept; the
		// timeout is generous, as a loaded machine may take seconds to
		// start bash.
		{name: "timeout", args: map[string]any{"command": "echo started; sleep 120", "timeout_s": 3},
			want: "started\ncommand timed out after 3s; the process group was killed", isErr: true},
		{name: "default timeout from options", opts: Options{BashTimeout: 300 * time.Millisecond}, args: map[string]any{"command": "sleep 120"},
			want: "command timed out after 0.3s; the process group was killed", isErr: true},
		{name: "timeout too long", args: map[string]any{"command": "true", "timeout_s": 601}, want: "timeout_s must be at most 600, not 601", isErr: true},
		{name: "timeout not positive", args: map[string]any{"command": "true", "timeout_s": -1}, want: "timeout_s must be more than 0, not -1", isErr: true},
		{name: "empty command", args: map[string]any{"command": "  "}, want: "command is empty", isErr: true},
		{name: "missing command", args: map[string]any{}, want: `invalid arguments for bash: missing required argument "command"`, isErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, root := newTestSet(t, tt.opts, nil)
			start := time.Now()
			res := call(t, s, "bash", tt.args)
			// Nothing waits for the sleeps, nor for a stdin that never ends.
			if d := time.Since(start); d > patience {
				t.Fatalf("took %v, want under %v", d, patience)
			}
			want := strings.ReplaceAll(tt.want, "ROOT", root)
			if res.IsError != tt.isErr {
				t.Fatalf("IsError = %v, output %q", res.IsError, res.Output)
			}
			if res.Output != want {
				t.Fatalf("output = %q, want %q", res.Output, want)
			}
		})
	}
}

func TestBashTruncation(t *testing.T) {
	t.Parallel()
	s, _ := newTestSet(t, Options{MaxOutput: 2000}, nil)
	res := call(t, s, "bash", map[string]any{"command": "seq 1 100000; exit 2"})
	if !res.Truncated || !res.IsError {
		t.Fatalf("Truncated=%v IsError=%v", res.Truncated, res.IsError)
	}
	if len(res.Output) > 2000 {
		t.Fatalf("output is %d bytes, over the budget", len(res.Output))
	}
	if !strings.HasPrefix(res.Output, "1\n2\n3\n") || !strings.HasSuffix(res.Output, "\n99999\n100000\nexit status 2") {
		t.Fatalf("head or tail missing:\n%s", res.Output)
	}
	// seq 1 100000 prints 588895 bytes.
	if !strings.Contains(res.Output, "… [truncated ") || !strings.Contains(res.Output, "; showing first ") {
		t.Fatalf("no truncation note:\n%s", res.Output)
	}
	head, rest, _ := strings.Cut(res.Output, "\n… [truncated ")
	dropped, _, _ := strings.Cut(rest, " ")
	n, err := strconv.Atoi(dropped)
	if err != nil {
		t.Fatal(err)
	}
	tail := rest[strings.Index(rest, "] …\n")+len("] …\n"):]
	tail = strings.TrimSuffix(tail, "exit status 2")
	if got := len(head) + n + len(tail); got != 588895 {
		t.Fatalf("kept %d + dropped %d + kept %d = %d, want 588895", len(head), n, len(tail), got)
	}
}

// processGone reports whether pid no longer runs. Zombies count as gone:
// the test's PID 1 may not reap orphans.
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return os.IsNotExist(err)
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] == "Z"
}

// patience bounds a wait for what a command or the tool does: long, as
// a loaded machine may take seconds to start or stop a process, and only
// a failing test waits it out.
const patience = time.Minute

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d survived", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(readString(t, path)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestBashTimeoutKillsGrandchildren(t *testing.T) {
	t.Parallel()
	s, root := newTestSet(t, Options{}, nil)
	start := time.Now()
	// A generous timeout: bash must have started the sleep by then.
	res := call(t, s, "bash", map[string]any{"command": "sleep 120 & echo $! > pid; wait", "timeout_s": 3})
	if d := time.Since(start); d > patience {
		t.Fatalf("took %v", d)
	}
	if !res.IsError || res.Output != "command timed out after 3s; the process group was killed" {
		t.Fatalf("result = %+v", res)
	}
	waitGone(t, readPid(t, filepath.Join(root, "pid")))
}

// A sandboxed command (started through the sandbox's helper server) is
// killed at its timeout too, with what it started, and its output kept.
func TestSandboxedBashTimeout(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	box, err := sandbox.New(sandbox.Policy{Mode: sandbox.WorkspaceWrite, Workspace: ws, Env: os.Environ()})
	if err != nil {
		t.Skip(err) // this machine cannot sandbox: the sandbox package's tests say so
	}
	defer box.Close()
	start := time.Now()
	out, code, err := RunCommand(context.Background(), box, ws, "echo before; sleep 600 & wait", time.Second, 0)
	if d := time.Since(start); d > patience {
		t.Fatalf("took %v", d)
	}
	if code != -1 || !errors.Is(err, context.DeadlineExceeded) || out != "before\n" {
		t.Fatalf("RunCommand = %q, %d, %v; want the output so far and the timeout", out, code, err)
	}
	// The next command runs as usual.
	if out, code, err := RunCommand(context.Background(), box, ws, "echo after", time.Minute, 0); out != "after\n" || code != 0 || err != nil {
		t.Fatalf("then RunCommand = %q, %d, %v", out, code, err)
	}
}

func TestBashCancelKillsGroup(t *testing.T) {
	t.Parallel()
	s, root := newTestSet(t, Options{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	// Cancelled once the command has started its grandchild.
	go func() {
		for deadline := time.Now().Add(patience); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if b, err := os.ReadFile(filepath.Join(root, "pid")); err == nil && strings.HasSuffix(string(b), "\n") {
				break
			}
		}
		cancel()
	}()
	start := time.Now()
	res := s.Run(ctx, "bash", `{"command":"sleep 120 & echo $! > pid; wait"}`)
	if d := time.Since(start); d > patience {
		t.Fatalf("took %v", d)
	}
	if !res.IsError || res.Output != "command cancelled; the process group was killed" {
		t.Fatalf("result = %+v", res)
	}
	waitGone(t, readPid(t, filepath.Join(root, "pid")))
}

// A background process that keeps the output pipe open must not hold the
// call past the wait delay.
func TestBashBackgroundHoldingPipe(t *testing.T) {
	t.Parallel()
	_, root := newTestSet(t, Options{}, nil)
	ws, err := NewWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	tool := &bashTool{timeout: 10 * time.Minute, maxOutput: 1000, waitDelay: 200 * time.Millisecond}
	start := time.Now()
	res := tool.Run(context.Background(), ws, json.RawMessage(`{"command":"sleep 120 & echo $! > bgpid; echo started"}`))
	t.Cleanup(func() { syscall.Kill(readPid(t, filepath.Join(root, "bgpid")), syscall.SIGKILL) })
	if d := time.Since(start); d > patience {
		t.Fatalf("took %v", d)
	}
	if res.IsError || !strings.HasPrefix(res.Output, "started\n") || !strings.Contains(res.Output, "background processes") {
		t.Fatalf("result = %+v", res)
	}
}

func TestHeadTail(t *testing.T) {
	t.Parallel()
	b := &headTail{limit: 4}
	for _, s := range []string{"ab", "cdef", "ghijklmnop", "qr", "st"} {
		b.Write([]byte(s))
	}
	got, total := b.snapshot()
	if got != "abcdqrst" || total != 20 {
		t.Fatalf("snapshot = %q, %d", got, total)
	}
}

// TestBashStdio runs the tools in a child process standing in for the
// agent, whose stdin is a pipe that stays open and whose stdout and stderr
// are pipes to this test (the agent's are its event channel to a parent).
// A command must get /dev/null as stdin (cat returns at once instead of
// waiting on the agent's stdin) and its output must come back as the
// result, never reach the agent's own stdout or stderr.
func TestBashStdio(t *testing.T) {
	const command = `cat; echo OUT-MARK; echo ERR-MARK >&2; if [ -e /proc/$$/fd/0 ]; then readlink /proc/$$/fd/0; else echo /dev/null; fi`
	const want = "OUT-MARK\nERR-MARK\n/dev/null\n"
	if out := os.Getenv("TOOLS_TEST_BASH_STDIO"); out != "" {
		// The child: report what the command gave through a file.
		s, _ := newTestSet(t, Options{}, nil)
		// A cat waiting on the agent's stdin would hang until these
		// timeouts, which only bound that failure.
		res := call(t, s, "bash", map[string]any{"command": command, "timeout_s": 30})
		text, code, err := RunCommand(context.Background(), nil, t.TempDir(), command, 30*time.Second, 0)
		report := fmt.Sprintf("bash: %q\nRunCommand: %q %d %v\n", res.Output, text, code, err)
		if err := os.WriteFile(out, []byte(report), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(t.TempDir(), "report")
	ctx, cancel := context.WithTimeout(context.Background(), 3*patience) // a safety net
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestBashStdio$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TOOLS_TEST_BASH_STDIO="+report)
	stdin, err := cmd.StdinPipe() // held open, never written: reading it would block
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	got := readString(t, report)
	if wantReport := fmt.Sprintf("bash: %q\nRunCommand: %q 0 <nil>\n", want, want); got != wantReport {
		t.Errorf("child reported\n%s\nwant\n%s", got, wantReport)
	}
	for _, mark := range []string{"OUT-MARK", "ERR-MARK"} {
		if strings.Contains(stdout.String()+stderr.String(), mark) {
			t.Errorf("%s reached the agent's own stdout or stderr:\nstdout: %s\nstderr: %s", mark, stdout.String(), stderr.String())
		}
	}
}
