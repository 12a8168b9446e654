package sandbox

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// The helper is the first process of a sandboxed command: this binary,
// started by Start in the command's new namespaces under a name no user
// types. It runs from this package's init, before anything else of the
// binary, and never returns: it confines itself and then executes the
// command in its place, so the command is the same process (init of its
// PID namespace, the thread agent watches).
//
// Its arguments: the helper's name, the helperSpec as JSON, the
// program's path, then the program's argv. Descriptor 3 is the status
// pipe: what fails before the command starts is written there.

const helperName = "agent-sandbox-helper"

// helperSpec is what the helper must set up.
type helperSpec struct {
	Mode      Mode     `json:"mode"`
	Workspace string   `json:"workspace"`
	Tmp       string   `json:"tmp"`
	Writable  []string `json:"writable,omitempty"`
	Hidden    []string `json:"hidden,omitempty"` // resolved
}

// helperFailed prefixes what the helper reports when a policy cannot be
// enforced, rather than the command not starting.
const helperFailed = "unsupported: "

func init() {
	if len(os.Args) == 2 && os.Args[0] == serverName {
		os.Exit(serve(os.Args[1]))
	}
	if len(os.Args) < 4 || os.Args[0] != helperName {
		return
	}
	// Every step below that is per thread (capabilities, no_new_privs,
	// Landlock) must happen on the thread that executes the command.
	runtime.LockOSThread()
	err := confine(os.Args[1], os.Args[2], os.Args[3:])
	status := os.NewFile(3, "status")
	_, _ = status.WriteString(err.Error())
	os.Exit(127)
}

// confine sets up the sandbox from specJSON and executes path with argv;
// it returns only when something failed.
func confine(specJSON, path string, argv []string) error {
	spec, ptys, err := setUp(specJSON)
	if err != nil {
		return err
	}
	// Only the sandbox's own processes in /proc; where the kernel will
	// not mount one, Landlock still keeps agent's processes out of reach.
	_ = unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	ruleset, err := rules(spec, ptys)
	if err != nil {
		return fmt.Errorf("%s%v", helperFailed, err)
	}
	// Descriptors agent inherited or opened are not the command's: Landlock
	// checks only what is opened after it, so an inherited one would lead
	// outside. Close-on-exec, so the status pipe still works until then.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("%sclose inherited descriptors: %v", helperFailed, err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("%sdrop capabilities: %v", helperFailed, err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("%sno_new_privs: %v", helperFailed, err)
	}
	if err := landlockRestrictThread(ruleset); err != nil {
		return fmt.Errorf("%slandlock_restrict_self: %v", helperFailed, err)
	}
	err = unix.Exec(path, argv, os.Environ())
	return fmt.Errorf("fork/exec %s: %w", path, err)
}

// hide covers path with nothing: an empty read-only directory over a
// directory, /dev/null over a file (read-only where the kernel allows the
// remount). A path that does not exist has nothing to hide.
func hide(path string) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	const flags = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return unix.Mount("tmpfs", path, "tmpfs", flags, "size=4k,nr_inodes=1,mode=0555")
	}
	if err := unix.Mount("/dev/null", path, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	// A bind's remount must keep the flags its source is locked with.
	var fs unix.Statfs_t
	if unix.Statfs(path, &fs) == nil {
		_ = unix.Mount("", path, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|uintptr(lockedFlags(fs.Flags)), "")
	}
	return nil
}

// lockedFlags are the mount flags of statfs's f_flags a remount in a user
// namespace must repeat.
func lockedFlags(f int64) int {
	var out int
	for st, ms := range map[int64]int{
		unix.ST_NOSUID: unix.MS_NOSUID, unix.ST_NODEV: unix.MS_NODEV, unix.ST_NOEXEC: unix.MS_NOEXEC,
		unix.ST_NOATIME: unix.MS_NOATIME, unix.ST_NODIRATIME: unix.MS_NODIRATIME, unix.ST_RELATIME: unix.MS_RELATIME,
	} {
		if f&st != 0 {
			out |= ms
		}
	}
	return out
}

// ownPtys gives the command a devpts of its own, so it can open
// terminals without reaching the user's (/dev/pts/N). False: it has none,
// and gets no access to the host's.
func ownPtys() bool {
	if err := unix.Mount("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return false
	}
	if err := unix.Mount("/dev/pts/ptmx", "/dev/ptmx", "", unix.MS_BIND, ""); err != nil {
		_ = unix.Unmount("/dev/pts", unix.MNT_DETACH)
		return false
	}
	return true
}

// helperError turns what the helper reported into Start's error.
func helperError(msg string) error {
	if rest, ok := strings.CutPrefix(msg, helperFailed); ok {
		return &UnsupportedError{What: rest}
	}
	return errors.New(msg)
}
