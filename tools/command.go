package tools

import (
	"context"
	"errors"
	"fmt"
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
	case r.state == nil:
		return output, -1, fmt.Errorf("start %s: %w", r.shell, r.err)
	case r.cancelled:
		return output, -1, fmt.Errorf("%s: %w", r.status(), context.Canceled)
	case r.timedOut:
		return output, -1, fmt.Errorf("%s: %w", r.status(), context.DeadlineExceeded)
	case r.state.ExitCode() < 0: // killed by a signal
		return output, -1, errors.New(r.status())
	}
	return output, r.state.ExitCode(), nil
}

// shellRun is what runShell saw: the kept output and how the shell ended.
type shellRun struct {
	shell     string
	timeout   time.Duration
	text      string // head and tail of the combined output
	total     int    // bytes written in all
	state     *os.ProcessState
	err       error // from cmd.Run; state is nil when the shell did not start
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

	err := sb.Start(cmd) // a nil sandbox starts it as it is
	if err == nil {
		err = cmd.Wait()
	}
	r := shellRun{shell: shell, timeout: timeout, state: cmd.ProcessState, err: err}
	r.text, r.total = out.snapshot()
	if r.state != nil && !r.state.Success() && tctx.Err() != nil {
		r.cancelled = ctx.Err() != nil
		r.timedOut = !r.cancelled
	}
	return r
}

// status describes how a started shell ended, or "" for a clean exit 0.
func (r shellRun) status() string {
	switch {
	case r.cancelled:
		return "command cancelled; the process group was killed"
	case r.timedOut:
		return fmt.Sprintf("command timed out after %s; the process group was killed", fmtSeconds(r.timeout))
	case !r.state.Success():
		wst, _ := r.state.Sys().(syscall.WaitStatus)
		if wst.Signaled() {
			return fmt.Sprintf("terminated by signal %v", wst.Signal())
		}
		return fmt.Sprintf("exit status %d", r.state.ExitCode())
	case errors.Is(r.err, exec.ErrWaitDelay):
		return "[the command exited but left background processes holding its output; output after that was not captured]"
	}
	return ""
}
