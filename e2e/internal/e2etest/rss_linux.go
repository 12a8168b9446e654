//go:build linux

package e2etest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// PeakRSSMethod says, in the benchmarks' output, how peakRSS measures;
// %.1f is this process's own peak (selfPeakMiB).
const PeakRSSMethod = "ru_maxrss from wait4 on each run's process, which /bin/sh starts in the background " +
	"and this process reaps as child subreaper; a direct child's ru_maxrss would start at this process's " +
	"own peak, %.1f MiB (golang/go#32054)"

const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER, linux/prctl.h

// ReapOrphans makes this process the child subreaper of its descendants
// until the benchmark ends, so a process whose parent exits becomes its
// child and can be waited for.
func ReapOrphans(tb testing.TB) {
	tb.Helper()
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		tb.Skipf("prctl(PR_SET_CHILD_SUBREAPER): %v", e)
	}
	tb.Cleanup(func() { syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 0, 0) })
}

// PeakRSS runs name with args and env and returns the process's own peak
// resident set size in KiB, and its combined output. reapOrphans must have
// been called.
//
// The process must not be this process's direct child: its ru_maxrss
// would start at this process's peak (see peakRSSMethod). So /bin/sh
// forks a subshell in the background, says its pid on fd 3 and exits; the
// subshell, now this process's child, waits on fd 4 until this process
// has reaped /bin/sh (so no shell can reap it first) and then execs the
// command, whose rusage wait4 gives.
func PeakRSS(env []string, name string, args ...string) (kib int64, out []byte, err error) {
	pidR, pidW, err := os.Pipe()
	if err != nil {
		return 0, nil, err
	}
	defer pidR.Close()
	gateR, gateW, err := os.Pipe()
	if err != nil {
		pidW.Close()
		return 0, nil, err
	}
	defer gateW.Close()
	output, err := os.CreateTemp("", "peakrss-*.out")
	if err != nil {
		pidW.Close()
		gateR.Close()
		return 0, nil, err
	}
	defer os.Remove(output.Name())
	defer output.Close()

	const script = `{ exec 3>&-; read _ <&4; exec 4<&- "$@"; } & echo $! >&3`
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, "sh", name}, args...)...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = output, output // files: Wait waits for /bin/sh alone
	cmd.ExtraFiles = []*os.File{pidW, gateR}
	err = cmd.Start()
	pidW.Close()
	gateR.Close()
	if err != nil {
		return 0, nil, err
	}
	said, _ := io.ReadAll(pidR) // EOF once /bin/sh and the subshell closed fd 3
	shErr := cmd.Wait()
	pid, perr := strconv.Atoi(strings.TrimSpace(string(said)))
	if perr != nil {
		return 0, nil, fmt.Errorf("/bin/sh did not say the pid (%v): %q", shErr, said)
	}
	gateW.Close() // the subshell's parent is gone: let it exec
	var ws syscall.WaitStatus
	var ru syscall.Rusage
	for {
		_, err = syscall.Wait4(pid, &ws, 0, &ru)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	out, _ = os.ReadFile(output.Name())
	if err != nil {
		return 0, out, fmt.Errorf("wait4 %d (not reparented here?): %w", pid, err)
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return ru.Maxrss, out, fmt.Errorf("%s: %s", name, exitText(ws))
	}
	return ru.Maxrss, out, nil
}

func exitText(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "killed by " + ws.Signal().String()
	}
	return "exit status " + strconv.Itoa(ws.ExitStatus())
}

// SelfPeakMiB is this process's own peak RSS (VmHWM), in MiB; 0 if unknown.
func SelfPeakMiB() float64 {
	return ProcStatusMiB(os.Getpid(), "VmHWM:")
}

// ProcStatusMiB reads a kB field of /proc/PID/status, in MiB; 0 if unknown.
// VmRSS and VmHWM belong to the process's current address space, made at
// exec, so unlike ru_maxrss they owe nothing to its parent.
func ProcStatusMiB(pid int, field string) float64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return float64(kb) / 1024
		}
	}
	return 0
}
