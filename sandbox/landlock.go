package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The three Landlock system calls, applied to the calling thread only.
// go-landlock's enforcing API restricts every thread of the process (with
// cgo, through libpsx, which wraps pthread_create for the whole binary);
// the helper restricts just the thread that then executes the command,
// with the kernel's calls as x/sys/unix defines them.

func landlockABI() (int, error) {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0, errno
	}
	return int(v), nil
}

func landlockCreateRuleset(attr *unix.LandlockRulesetAttr) (int, error) {
	// The kernel reads only the fields it knows of; the size says how
	// many this program knows, and the rest are zero.
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(attr)), unsafe.Sizeof(*attr), 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

func landlockAddPath(ruleset, dir int, access uint64) error {
	attr := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(dir)}
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

func landlockRestrictThread(ruleset int) error {
	_, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// Access rights, by what they allow.
const (
	readFile  = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE
	readTree  = readFile | unix.LANDLOCK_ACCESS_FS_READ_DIR
	writeFile = unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE
	writeTree = writeFile | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
		unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR | unix.LANDLOCK_ACCESS_FS_MAKE_REG |
		unix.LANDLOCK_ACCESS_FS_MAKE_SOCK | unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_SYM | unix.LANDLOCK_ACCESS_FS_REFER
	// ioctlDev: ioctls on devices (ABI 5), granted only on the command's
	// own terminals.
	ioctlDev = unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
)

// rules makes the Landlock ruleset: list any directory, read anything
// but the hidden paths, write in the workspace (workspace-write), the
// temporary directory, the sandbox_writable directories and a few
// devices; ioctls on devices only on the command's own terminals (ptys).
func rules(spec helperSpec, ptys bool) (int, error) {
	abi, _ := landlockABI()
	attr := unix.LandlockRulesetAttr{Handled_access_fs: handled(abi)}
	if abi >= 6 {
		// No signals to processes outside, such as agent itself.
		attr.Scoped = unix.LANDLOCK_SCOPE_SIGNAL | unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
	}
	fd, err := landlockCreateRuleset(&attr)
	if err != nil {
		return -1, fmt.Errorf("the kernel refused the Landlock ruleset: %v", err)
	}
	add := func(path string, access uint64) error {
		f, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(f)
		var st unix.Stat_t
		if err := unix.Fstat(f, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			access &= readFile | writeFile | ioctlDev // what a file's rule can hold
		}
		return landlockAddPath(fd, f, access&attr.Handled_access_fs)
	}
	fail := func(err error) (int, error) {
		_ = unix.Close(fd)
		return -1, err
	}
	if err := add("/", unix.LANDLOCK_ACCESS_FS_READ_DIR); err != nil {
		return fail(err)
	}
	if err := readableBeneath("/", spec.Hidden, add); err != nil {
		return fail(err)
	}
	ws := uint64(readTree)
	if spec.Mode == WorkspaceWrite {
		ws |= writeTree
	}
	if err := add(spec.Workspace, ws); err != nil {
		return fail(fmt.Errorf("workspace: %w", err))
	}
	if err := add(spec.Tmp, readTree|writeTree); err != nil {
		return fail(err)
	}
	for _, dir := range spec.Writable {
		if err := add(dir, readTree|writeTree); err != nil {
			return fail(fmt.Errorf("sandbox_writable %s: %w", dir, err))
		}
	}
	// Never /dev/tty, nor the host's terminals: a command has no business
	// with the user's terminal.
	devices := []string{"/dev/null", "/dev/zero", "/dev/full"}
	for _, dev := range devices {
		_ = add(dev, readTree|writeFile) // a missing or odd device is no reason to fail
	}
	if ptys {
		for _, dev := range []string{"/dev/ptmx", "/dev/pts"} {
			_ = add(dev, readTree|writeFile|ioctlDev)
		}
	}
	return fd, nil
}

// handled is what a ruleset restricts on a kernel of this ABI.
func handled(abi int) uint64 {
	if abi >= 5 {
		return readTree | writeTree | ioctlDev
	}
	return readTree | writeTree
}

// ptyAccess is what rules grants on a command's own /dev/pts (dir) and
// /dev/ptmx (file).
func ptyAccess() (dir, file uint64) {
	abi, _ := landlockABI()
	h := handled(abi)
	return (readTree | writeFile | ioctlDev) & h, (readFile | writeFile | ioctlDev) & h
}

// readableBeneath grants reading everything under dir but the hidden
// paths: Landlock only grants, so each directory on the way to a hidden
// path is split into its other entries. (Mounts cover the hidden paths
// too; this keeps them out of reach wherever a mount could not.)
func readableBeneath(dir string, hidden []string, add func(string, uint64) error) error {
	var inside []string
	for _, h := range hidden {
		if h == dir {
			return nil
		}
		if within(h, dir) {
			inside = append(inside, h)
		}
	}
	if len(inside) == 0 {
		return add(dir, readTree)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil // unreadable to agent too: nothing to grant
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if err := readableBeneath(p, inside, add); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EACCES) {
			return err
		}
	}
	return nil
}
