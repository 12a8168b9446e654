// Package sandbox confines the processes a run starts for the model
// (DESIGN.md §13): bash commands and programmatic evidence. A sandboxed
// command runs in new user, PID and (network off) network namespaces, so
// it has no network, not even the host's loopback, and every process it
// starts dies with it; Landlock lets it write only in the workspace and a
// private temporary directory, and read anything but AGENT_HOME; its
// environment has none of agent's secrets.
//
// Landlock is applied to one locked OS thread, which then starts the
// command and is thrown away: agent itself stays unrestricted, and no
// helper process is needed.
package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Mode is how much a run's commands may do.
type Mode string

// Modes (DESIGN.md §13).
const (
	WorkspaceWrite Mode = "workspace-write"
	ReadOnly       Mode = "read-only"
	Off            Mode = "off"
)

// Default is the mode of a run that does not say.
const Default = WorkspaceWrite

// ParseMode reads a --sandbox value; "" is the default.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "":
		return Default, nil
	case WorkspaceWrite, ReadOnly, Off:
		return m, nil
	}
	return "", fmt.Errorf("%q is not a sandbox mode; use workspace-write, read-only or off", s)
}

// Policy is what a run's commands may do.
type Policy struct {
	Mode    Mode
	Network bool // on in a sandboxed mode: no network namespace
	// Workspace is where workspace-write commands may write.
	Workspace string
	// Hidden are never readable: AGENT_HOME (the database, the gateway
	// token, blobs).
	Hidden []string
	// Writable are more directories commands may write in (config.toml's
	// sandbox_writable), in both sandboxed modes.
	Writable []string
	// Env is the commands' environment before the secrets are taken out
	// (Secrets, Pass) and TMPDIR is set.
	Env []string
	// Secrets are more variable names never passed (e.g. the ones MCP
	// servers' configuration references); Pass are names passed although
	// they look secret, because the user said so.
	Secrets, Pass []string
}

// UnsupportedError is a mode this machine cannot enforce: the run fails
// before it starts (exit 5).
type UnsupportedError struct{ What string }

func (e *UnsupportedError) Error() string {
	return "the sandbox cannot be enforced here: " + e.What + "; use --sandbox off to run unsandboxed (agent sandbox check says what this machine supports)"
}

// Sandbox is a run's sandbox: its private temporary directory and its
// Landlock ruleset, made once and used for every command.
type Sandbox struct {
	policy Policy

	once    sync.Once // prepare
	err     error     // of prepare
	tmp     string
	ruleset int // -1 when off or not yet prepared
	env     []string
}

// minABI is the Landlock ABI a sandbox needs: 3 (Linux 6.2) is the first
// that stops truncating files a command may not write.
const minABI = 3

// New checks that this machine can enforce p. The ruleset and the private
// temporary directory are made when the first command starts, so a run
// that runs none pays only for the checks. Close removes the directory.
func New(p Policy) (*Sandbox, error) {
	s := &Sandbox{policy: p, ruleset: -1}
	if p.Mode == "" {
		s.policy.Mode = Default
	}
	if s.policy.Mode == Off {
		s.env = p.Env
		return s, nil
	}
	if err := probe(); err != nil {
		return nil, err
	}
	if err := namespacesUsable(); err != nil {
		return nil, err
	}
	return s, nil
}

// prepare makes the temporary directory and the ruleset, once.
func (s *Sandbox) prepare() error {
	s.once.Do(func() {
		tmp, err := os.MkdirTemp("", "agent-sandbox-")
		if err != nil {
			s.err = fmt.Errorf("sandbox: private temporary directory: %w", err)
			return
		}
		s.tmp = tmp
		if s.ruleset, err = s.rules(); err != nil {
			s.err = err
			return
		}
		s.env = append(Environment(s.policy.Env, s.policy.Secrets, s.policy.Pass), "TMPDIR="+tmp)
		s.env = append(s.env, s.caches()...)
	})
	return s.err
}

// Mode is the mode enforced.
func (s *Sandbox) Mode() Mode { return s.policy.Mode }

// Network reports whether commands have the network.
func (s *Sandbox) Network() bool { return s.policy.Mode == Off || s.policy.Network }

// TmpDir is the private temporary directory ("" when off, or before
// the first command).
func (s *Sandbox) TmpDir() string { return s.tmp }

// Close releases the ruleset and removes the temporary directory.
func (s *Sandbox) Close() {
	if s == nil {
		return
	}
	if s.ruleset >= 0 {
		_ = unix.Close(s.ruleset)
		s.ruleset = -1
	}
	if s.tmp != "" {
		_ = os.RemoveAll(s.tmp)
	}
}

// Start starts cmd in the sandbox: its environment replaced by the
// sandbox's, in new namespaces, from a thread Landlock restricts. cmd's
// SysProcAttr may set Setpgid; the rest is the sandbox's.
func (s *Sandbox) Start(cmd *exec.Cmd) error {
	if s == nil {
		return cmd.Start()
	}
	if s.policy.Mode == Off {
		cmd.Env = s.env
		return cmd.Start()
	}
	if err := s.prepare(); err != nil {
		return err
	}
	cmd.Env = s.env
	attr := cmd.SysProcAttr
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	attr.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID
	if !s.policy.Network {
		attr.Cloneflags |= syscall.CLONE_NEWNET
	}
	// The command is init of its PID namespace: when it dies, everything it
	// started dies, setsid or not. It dies when the thread that started it
	// does, which lives until it has exited: so a kill -9 of agent ends it.
	attr.Pdeathsig = syscall.SIGKILL
	// No id mappings: writing them from this thread is what Landlock
	// forbids, and without them the command keeps its own uid for files
	// while it holds no capability over anything outside its namespaces.
	cmd.SysProcAttr = attr

	started := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine, and the
		// restriction with it; only the command inherits it.
		runtime.LockOSThread()
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			started <- fmt.Errorf("sandbox: no_new_privs: %w", err)
			return
		}
		if err := landlockRestrictThread(s.ruleset); err != nil {
			started <- fmt.Errorf("sandbox: landlock_restrict_self: %w", err)
			return
		}
		if err := cmd.Start(); err != nil {
			if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSPC) {
				err = namespaceError(err) // the namespaces, refused after all
			}
			started <- err
			return
		}
		started <- nil
		// Live as long as the command (without reaping it: its Wait does).
		var info unix.Siginfo
		for unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil) == unix.EINTR {
		}
	}()
	return <-started
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
)

// rules makes the Landlock ruleset: list any directory, read anything
// but the hidden paths, write in the workspace (workspace-write), the
// temporary directory and the usual devices.
func (s *Sandbox) rules() (int, error) {
	attr := unix.LandlockRulesetAttr{Handled_access_fs: readTree | writeTree}
	if abi, _ := landlockABI(); abi >= 6 {
		// No signals to processes outside, such as agent itself.
		attr.Scoped = unix.LANDLOCK_SCOPE_SIGNAL | unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
	}
	fd, err := landlockCreateRuleset(&attr)
	if err != nil {
		return -1, &UnsupportedError{What: fmt.Sprintf("Landlock refused the ruleset: %v", err)}
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
			access &= readFile | writeFile // what a file's rule can hold
		}
		return landlockAddPath(fd, f, access)
	}
	fail := func(err error) (int, error) {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("sandbox: %w", err)
	}
	if err := add("/", unix.LANDLOCK_ACCESS_FS_READ_DIR); err != nil {
		return fail(err)
	}
	if err := readableBeneath("/", s.hidden(), add); err != nil {
		return fail(err)
	}
	if s.policy.Mode == WorkspaceWrite {
		if err := add(s.policy.Workspace, readTree|writeTree); err != nil {
			return fail(fmt.Errorf("workspace: %w", err))
		}
	} else if err := add(s.policy.Workspace, readTree); err != nil {
		return fail(fmt.Errorf("workspace: %w", err))
	}
	if err := add(s.tmp, readTree|writeTree); err != nil {
		return fail(err)
	}
	for _, dir := range s.policy.Writable {
		if err := add(dir, readTree|writeTree); err != nil {
			return fail(fmt.Errorf("sandbox_writable %s: %w", dir, err))
		}
	}
	for _, dev := range []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/ptmx", "/dev/pts"} {
		if _, err := os.Stat(dev); err == nil {
			_ = add(dev, readTree|writeFile) // a missing or odd device is no reason to fail
		}
	}
	return fd, nil
}

// caches points the usual build and package caches into the private
// temporary directory when the user's own cache directory is not
// writable here, so `go build`, pip and npm work out of the box (with a
// cold cache; sandbox_writable = ["~/.cache"] keeps the warm one).
func (s *Sandbox) caches() []string {
	if dir, err := os.UserCacheDir(); err == nil {
		for _, w := range s.policy.Writable {
			if dir == filepath.Clean(w) || within(dir, filepath.Clean(w)) {
				return nil
			}
		}
	}
	cache := filepath.Join(s.tmp, "cache")
	return []string{"XDG_CACHE_HOME=" + cache, "npm_config_cache=" + filepath.Join(cache, "npm")}
}

// hidden is the policy's hidden paths, resolved.
func (s *Sandbox) hidden() []string {
	var out []string
	for _, h := range s.policy.Hidden {
		if h == "" {
			continue
		}
		if real, err := filepath.EvalSymlinks(h); err == nil {
			h = real
		}
		out = append(out, filepath.Clean(h))
	}
	return out
}

// readableBeneath grants reading everything under dir but the hidden
// paths: Landlock only grants, so each directory on the way to a hidden
// path is split into its other entries.
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

// within reports whether path is strictly beneath dir.
func within(path, dir string) bool {
	if dir == "/" {
		return path != "/"
	}
	return strings.HasPrefix(path, dir+"/")
}

// probe checks the kernel's Landlock.
func probe() error {
	if v := os.Getenv("AGENT_SANDBOX_SIMULATE_MISSING"); v != "" { // for tests of this failure
		return &UnsupportedError{What: v}
	}
	abi, err := landlockABI()
	switch {
	case err != nil:
		return &UnsupportedError{What: fmt.Sprintf("Landlock is not available (kernel %s: %v)", kernel(), err)}
	case abi < minABI:
		return &UnsupportedError{What: fmt.Sprintf("Landlock ABI %d on kernel %s; the sandbox needs ABI %d (Linux 6.2)", abi, kernel(), minABI)}
	}
	return nil
}

// namespaceError explains a command that could not start in the
// namespaces: containers often forbid them.
func namespaceError(err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EACCES) {
		return &UnsupportedError{What: fmt.Sprintf("user, PID and network namespaces cannot be created (%v): "+
			"in a container, allow them (e.g. docker run --security-opt seccomp=unconfined), or check "+
			"kernel.unprivileged_userns_clone, user.max_user_namespaces and AppArmor's userns restriction", err)}
	}
	return &UnsupportedError{What: fmt.Sprintf("a sandboxed command could not start: %v", err)}
}

func kernel() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// namespacesUsable checks, cheaply, that commands can get their own user,
// PID and network namespaces. Where a seccomp filter or an AppArmor
// restriction may forbid them, which the settings cannot tell, it tries.
func namespacesUsable() error {
	if os.Getenv("AGENT_SANDBOX_SIMULATE_NO_NAMESPACES") != "" { // for tests of this failure
		return namespaceError(unix.EPERM)
	}
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	if read("/proc/sys/user/max_user_namespaces") == "0" {
		return namespaceError(fmt.Errorf("user.max_user_namespaces is 0: %w", unix.ENOSPC))
	}
	if os.Getuid() != 0 && read("/proc/sys/kernel/unprivileged_userns_clone") == "0" {
		return namespaceError(fmt.Errorf("kernel.unprivileged_userns_clone is 0: %w", unix.EPERM))
	}
	status := read("/proc/self/status")
	filtered := strings.Contains(status, "Seccomp:\t2") || strings.Contains(status, "Seccomp:\t1")
	if filtered || os.Getuid() != 0 && read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1" {
		return namespacesWork()
	}
	return nil
}

// namespacesWork starts a command in new user, PID and network
// namespaces, without Landlock.
func namespacesWork() error {
	cmd := exec.Command("/bin/sh", "-c", "exit 0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET}
	if err := cmd.Run(); err != nil {
		return namespaceError(err)
	}
	return nil
}
