//go:build linux

package main

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

// peakRSSMethod says, in the benchmarks' output, how peakRSS measures;
// %.1f is this process's own peak (selfPeakMiB).
const peakRSSMethod = "ru_maxrss from wait4 on each run's process, which /bin/sh starts in the background " +
	"and this process reaps as child subreaper; a direct child's ru_maxrss would start at this process's " +
	"own peak, %.1f MiB (golang/go#32054)"

const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER, linux/prctl.h

// reapOrphans makes this process the child subreaper of its descendants
// until the benchmark ends, so a process whose parent exits becomes its
// child and can be waited for.
func reapOrphans(tb testing.TB) {
	tb.Helper()
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		tb.Skipf("prctl(PR_SET_CHILD_SUBREAPER): %v", e)
	}
	tb.Cleanup(func() { syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 0, 0) })
}

// peakRSS runs name with args and env and returns the process's own peak
// resident set size in KiB, and its combined output. reapOrphans must have
// been called.
//
// The process must not be this process's direct child: its ru_maxrss
// would start at this process's peak (see peakRSSMethod). So /bin/sh
// forks a subshell in the background, says its pid on fd 3 and exits; the
// subshell, now this process's child, waits on fd 4 until this process
// has reaped /bin/sh (so no shell can reap it first) and then execs the
// command, whose rusage wait4 gives.
func peakRSS(env []string, name string, args ...string) (kib int64, out []byte, err error) {
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

// selfPeakMiB is this process's own peak RSS (VmHWM), in MiB; 0 if unknown.
func selfPeakMiB() float64 {
	return procStatusMiB(os.Getpid(), "VmHWM:")
}

// procStatusMiB reads a kB field of /proc/PID/status, in MiB; 0 if unknown.
// VmRSS and VmHWM belong to the process's current address space, made at
// exec, so unlike ru_maxrss they owe nothing to its parent.
func procStatusMiB(pid int, field string) float64 {
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

// TestPeakRSSIsTheChilds: peakRSS reports the process's own peak, not
// this test process's, which a direct child's ru_maxrss starts at. Not
// parallel: while it runs, orphans anywhere below this process become its
// children, and parallel tests wait until sequential ones end.
func TestPeakRSSIsTheChilds(t *testing.T) {
	for _, p := range []string{"/bin/sh", "/bin/true"} {
		if _, err := os.Stat(p); err != nil {
			t.Skip(err)
		}
	}
	reapOrphans(t)
	self := selfPeakMiB()
	small, out, err := peakRSS(nil, "/bin/true")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if mib := float64(small) / 1024; mib <= 0 || mib > 4 || mib >= self {
		t.Errorf("peak RSS of /bin/true = %.1f MiB (this process's peak: %.1f MiB), want its own, about 1 MiB", mib, self)
	}
	// A child that holds 24 MiB reports at least that.
	big, out, err := peakRSS(nil, "/bin/sh", "-c", `x=$(head -c 25165824 /dev/zero | tr '\0' a); echo ${#x}`)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if mib := float64(big) / 1024; mib < 24 {
		t.Errorf("peak RSS of a shell holding 24 MiB = %.1f MiB", mib)
	}
	if strings.TrimSpace(string(out)) != "25165824" {
		t.Errorf("output %q, want the output of the process measured", out)
	}
}
