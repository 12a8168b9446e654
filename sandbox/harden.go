package sandbox

import "golang.org/x/sys/unix"

// Harden protects agent's own process from the processes it starts, once,
// before it starts any:
//   - non-dumpable, so that /proc/PID/fd of it (its stdout: the runner
//     protocol, a terminal) needs ptrace rights over it, which an
//     unconfined process of the same user (an MCP server that runs
//     commands) does not have;
//   - every descriptor it inherited beyond 0-2 closed on exec: a shell's
//     `exec 7>>file; agent run …` must not hand file 7 to the model's
//     commands, sandboxed or not.
func Harden() {
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	_ = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
}
