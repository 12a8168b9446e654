package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"agent/sandbox"
)

// RunCommand runs command with bash -c (sh when bash is missing) in dir,
// the way the bash tool does: stdin empty, stdout and stderr combined, its
// own process group, and the whole group killed at the timeout or when ctx
// ends. output is the combined output cut in the middle to maxOutput bytes
// (0 means DefaultMaxOutput), keeping its beginning and end.
//
// A command that exits by itself gives its exit code and a nil error,
// whatever the code. Otherwise exitCode is -1 and err says why: it could
// not start, it was killed by a signal, or it ran out of time
// (errors.Is(err, context.DeadlineExceeded)) or was cancelled
// (errors.Is(err, context.Canceled)).
//
// sb, if not nil, confines the command (package sandbox).
func RunCommand(ctx context.Context, sb *sandbox.Sandbox, dir, command string, timeout time.Duration, maxOutput int) (output string, exitCode int, err error) {
	if timeout <= 0 {
		timeout = DefaultBashTimeout
	}
	if maxOutput <= 0 {
		maxOutput = DefaultMaxOutput
	}
	r := runShell(ctx, sb, dir, command, timeout, bashWaitDelay, maxOutput)
	output, _ = truncateTotal(r.text, r.total, maxOutput)
	switch {
	case !r.started:
		return output, -1, fmt.Errorf("start %s: %w", r.shell, r.err)
	case r.cancelled:
		return output, -1, fmt.Errorf("%s: %w", r.status(), context.Canceled)
	case r.timedOut:
		return output, -1, fmt.Errorf("%s: %w", r.status(), context.DeadlineExceeded)
	case r.ws.Signaled():
		return output, -1, errors.New(r.status())
	}
	return output, r.ws.ExitStatus(), nil
}

// shellRun is what runShell saw: the kept output and how the shell ended.
type shellRun struct {
	shell     string
	timeout   time.Duration
	text      string // head and tail of the combined output
	total     int    // bytes written in all
	started   bool
	ws        syscall.WaitStatus // how it ended, once started
	err       error              // from starting or waiting for it
	timedOut  bool
	cancelled bool
}

// runShell is the process handling shared by the bash tool and RunCommand.
func runShell(ctx context.Context, sb *sandbox.Sandbox, dir, command string, timeout, waitDelay time.Duration, maxOutput int) shellRun {
	shell := "bash"
	if _, err := exec.LookPath(shell); err != nil {
		shell = "sh"
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(tctx, shell, "-c", command)
	cmd.Dir = dir
	// Own process group, so that one signal reaches every process the
	// command started, including backgrounded grandchildren.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
	// A grandchild that keeps the pipe open must not hang the call forever.
	cmd.WaitDelay = waitDelay
	if cmd.WaitDelay <= 0 {
		cmd.WaitDelay = bashWaitDelay
	}
	// The agent's own stdin and stdout are a channel to its parent process
	// (events, the runner protocol), so the command must never inherit
	// them: stdin is /dev/null (exec opens it for a nil Stdin) and stdout
	// and stderr go to a pipe of their own, because out is not an *os.File.
	cmd.Stdin = nil
	out := &headTail{limit: maxOutput}
	cmd.Stdout = out // the same writer for both keeps their interleaving
	cmd.Stderr = out

	r := shellRun{shell: shell, timeout: timeout}
	if sb.Confined() {
		r.started, r.ws, r.err = runConfined(tctx, sb, shell, dir, command, cmd.WaitDelay, out)
	} else {
		r.err = sb.Start(cmd) // a nil sandbox starts it as it is
		if r.err == nil {
			r.err = cmd.Wait()
			r.started = true
			r.ws, _ = cmd.ProcessState.Sys().(syscall.WaitStatus)
		}
	}
	r.text, r.total = out.snapshot()
	if r.started && !r.success() && tctx.Err() != nil {
		r.cancelled = ctx.Err() != nil
		r.timedOut = !r.cancelled
	}
	return r
}

// runConfined runs the shell through the sandbox's helper server (the
// cheap way to start a sandboxed command): killed when tctx ends, with
// everything it started, since it is init of its own PID namespace.
func runConfined(tctx context.Context, sb *sandbox.Sandbox, shell, dir, command string, waitDelay time.Duration, out io.Writer) (started bool, ws syscall.WaitStatus, err error) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		return false, 0, err
	}
	defer null.Close()
	rd, wr, err := os.Pipe()
	if err != nil {
		return false, 0, err
	}
	defer rd.Close()
	c, err := sb.Spawn([]string{shell, "-c", command}, dir, null, wr, wr)
	wr.Close()
	if err != nil {
		return false, 0, err
	}
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(out, rd)
		close(copied)
	}()
	stop := context.AfterFunc(tctx, c.Kill)
	defer stop()
	ws = c.Wait()
	// Its processes are gone with it; a descriptor it passed on (over a
	// socket) may still hold the pipe.
	select {
	case <-copied:
		return true, ws, nil
	case <-time.After(waitDelay):
		rd.Close()
		<-copied
		return true, ws, exec.ErrWaitDelay
	}
}

// success: the shell exited 0.
func (r shellRun) success() bool { return r.ws.Exited() && r.ws.ExitStatus() == 0 }

// status describes how a started shell ended, or "" for a clean exit 0.
func (r shellRun) status() string {
	switch {
	case r.cancelled:
		return "command cancelled; the process group was killed"
	case r.timedOut:
		return fmt.Sprintf("command timed out after %s; the process group was killed", fmtSeconds(r.timeout))
	case !r.success():
		if r.ws.Signaled() {
			return fmt.Sprintf("terminated by signal %v", r.ws.Signal())
		}
		return fmt.Sprintf("exit status %d", r.ws.ExitStatus())
	case errors.Is(r.err, exec.ErrWaitDelay):
		return "[the command exited but left background processes holding its output; output after that was not captured]"
	}
	return ""
}
