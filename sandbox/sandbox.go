// Package sandbox confines the processes a run starts for the model
// (README.md#the-sandbox): bash commands, programmatic evidence and MCP stdio
// servers. A sandboxed command runs in new user, PID, mount and (network
// off) network namespaces, so it has no network, not even the host's
// loopback, and every process it starts dies with it; it leads a session
// of its own with no controlling terminal; AGENT_HOME and the other hidden
// paths are covered by empty, read-only mounts, wherever they are (inside
// the workspace too); Landlock lets it write only in the workspace and a
// private temporary directory; no file descriptor but 0-2 reaches it; its
// environment has none of agent's secrets.
//
// The confinement is applied by this same binary, in one of two ways. A
// run's bash and evidence commands go through its helper server
// (server.go, Spawn): started with the first command, it makes the
// namespaces and the mounts once and starts each command in a PID
// namespace, /proc, terminals and Landlock domain of its own (spawn.go),
// at about a millisecond a command. An MCP server, started once, gets a
// helper of its own (helper.go, Start), started as its first process: it
// sets up the mounts, closes the descriptors, restricts itself with
// Landlock and then becomes the server. agent itself stays unrestricted.
package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// Modes (README.md#the-sandbox).
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
	// Hidden are never readable nor writable, even inside the workspace:
	// AGENT_HOME (the database, the gateway token, config.toml, blobs) and
	// a PostgreSQL client's files.
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
	// KeepEnv: a command keeps the environment it is started with (an MCP
	// server's, which its configuration chose) instead of Env; only
	// TMPDIR and the caches point into the sandbox.
	KeepEnv bool
}

// UnsupportedError is a mode this machine cannot enforce: the run fails
// before it starts (exit 5).
type UnsupportedError struct{ What string }

func (e *UnsupportedError) Error() string {
	return "the sandbox cannot be enforced here: " + e.What + "; use --sandbox off to run unsandboxed (agent sandbox check says what this machine supports)"
}

// HiddenWorkspaceError is a workspace inside a hidden path (AGENT_HOME):
// the model's commands could not see their own workspace.
type HiddenWorkspaceError struct{ Workspace, Hidden string }

func (e *HiddenWorkspaceError) Error() string {
	return fmt.Sprintf("the workspace %s is inside %s, which the model's tools never reach: choose a workspace outside it, or set AGENT_HOME to another directory", e.Workspace, e.Hidden)
}

// Sandbox is a run's sandbox: its policy and private temporary
// directory, made once and used for every command.
type Sandbox struct {
	policy Policy

	once sync.Once // prepare
	err  error     // of prepare
	tmp  string
	env  []string
	spec []byte // the helper's spec, the same for every command

	mu  sync.Mutex
	srv *server // Spawn's helper server, started by the first Spawn
}

// minABI is the Landlock ABI a sandbox needs: 3 (Linux 6.2) is the first
// that stops truncating files a command may not write.
const minABI = 3

// New checks that this machine can enforce p. The private temporary
// directory is made when the first command starts, so a run that runs
// none pays only for the checks. Close removes the directory.
func New(p Policy) (*Sandbox, error) {
	s := &Sandbox{policy: p}
	if p.Mode == "" {
		s.policy.Mode = Default
	}
	if s.policy.Mode == Off {
		s.env = p.Env
		return s, nil
	}
	if ws := realPath(p.Workspace); ws != "" {
		for _, h := range s.hidden() {
			if ws == h || within(ws, h) {
				return nil, &HiddenWorkspaceError{Workspace: p.Workspace, Hidden: h}
			}
		}
	}
	if err := probe(); err != nil {
		return nil, err
	}
	if err := namespacesUsable(); err != nil {
		return nil, err
	}
	return s, nil
}

// prepare makes the temporary directory, the environment and the
// helper's spec (hidden paths resolved), once.
func (s *Sandbox) prepare() error {
	s.once.Do(func() {
		tmp, err := os.MkdirTemp("", "agent-sandbox-")
		if err != nil {
			s.err = fmt.Errorf("sandbox: private temporary directory: %w", err)
			return
		}
		s.tmp = tmp
		if !s.policy.KeepEnv {
			s.env = Environment(s.policy.Env, s.policy.Secrets, s.policy.Pass)
		}
		s.env = append(s.env, "TMPDIR="+tmp)
		s.env = append(s.env, s.caches()...)
		s.spec, s.err = json.Marshal(helperSpec{
			Mode: s.policy.Mode, Workspace: s.policy.Workspace, Tmp: tmp, Writable: s.policy.Writable, Hidden: s.hidden(),
		})
	})
	return s.err
}

// Mode is the mode enforced.
func (s *Sandbox) Mode() Mode { return s.policy.Mode }

// Confined reports whether commands are confined: started with Spawn
// rather than Start. False for a nil sandbox.
func (s *Sandbox) Confined() bool { return s != nil && s.policy.Mode != Off }

// Network reports whether commands have the network.
func (s *Sandbox) Network() bool { return s.policy.Mode == Off || s.policy.Network }

// TmpDir is the private temporary directory ("" when off, or before
// the first command).
func (s *Sandbox) TmpDir() string { return s.tmp }

// Close stops the helper server, and so every command it started, and
// removes the temporary directory.
func (s *Sandbox) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.srv != nil {
		s.srv.stop()
		s.srv = nil
	}
	s.mu.Unlock()
	if s.tmp != "" {
		_ = os.RemoveAll(s.tmp)
	}
}

// Start starts cmd in the sandbox: its environment replaced by the
// sandbox's, in new user, PID, mount and (network off) network
// namespaces, in a session of its own with no controlling terminal. cmd is
// started through this binary's sandbox helper (helper.go), which hides
// the policy's hidden paths, applies Landlock, closes every descriptor but
// 0-2 and then becomes the command. cmd's SysProcAttr and ExtraFiles are
// the sandbox's: the command leads its own session and process group, and
// extra files never reach it.
func (s *Sandbox) Start(cmd *exec.Cmd) error {
	if s == nil {
		return cmd.Start()
	}
	if s.policy.Mode == Off {
		cmd.Env = s.env
		return cmd.Start()
	}
	if cmd.Err != nil {
		return cmd.Err // exec.Command could not find the program
	}
	if err := s.prepare(); err != nil {
		return err
	}
	cmd.Args = append([]string{helperName, string(s.spec), cmd.Path}, cmd.Args...)
	cmd.Path = "/proc/self/exe" // this very binary, even if replaced on disk meanwhile
	if s.policy.KeepEnv {
		if cmd.Env == nil {
			cmd.Env = os.Environ()
		}
		cmd.Env = append(cmd.Env[:len(cmd.Env):len(cmd.Env)], s.env...) // the last of a name wins
	} else {
		cmd.Env = s.env
	}
	// The helper says on this pipe what failed before it became the
	// command; the command never sees it (it is closed on exec).
	status, report, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	defer status.Close()
	cmd.ExtraFiles = []*os.File{report}
	err = startInNamespaces(cmd, s.policy.Network)
	report.Close()
	if err != nil {
		return err
	}
	// EOF with nothing said: the helper became the command.
	msg, _ := io.ReadAll(io.LimitReader(status, 4<<10))
	if len(msg) == 0 {
		return nil
	}
	_ = cmd.Wait()
	return helperError(string(msg))
}

// startInNamespaces starts cmd (this binary as a helper) in new user, PID,
// mount and (network off) network namespaces, in a session of its own with
// no controlling terminal, from a thread that lives as long as cmd: a kill
// -9 of agent ends it.
func startInNamespaces(cmd *exec.Cmd, network bool) error {
	attr := &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
		// A session of its own: no controlling terminal, so nothing can be
		// pushed into the user's terminal (TIOCSTI) and /dev/tty opens
		// nothing.
		Setsid: true,
		// The helper is init of its PID namespace: when it dies, everything
		// it started dies, setsid or not. It dies when the thread that
		// started it does, which lives until it has exited: so a kill -9 of
		// agent ends it.
		Pdeathsig: syscall.SIGKILL,
		// For the helper's mounts in its own mount namespace; it drops it
		// before it becomes the command. No id mappings: without them the
		// command keeps its own uid for files while it holds no capability
		// over anything outside its namespaces.
		AmbientCaps: []uintptr{unix.CAP_SYS_ADMIN},
	}
	if !network {
		attr.Cloneflags |= syscall.CLONE_NEWNET
	}
	cmd.SysProcAttr = attr

	started := make(chan error, 1)
	go func() {
		// Never unlocked: Pdeathsig follows the thread that started the
		// helper, so this one lives as long as the helper does.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSPC) {
				err = namespaceError(err) // the namespaces, refused after all
			}
			started <- err
			return
		}
		started <- nil
		// Live as long as the helper (without reaping it: its Wait does).
		var info unix.Siginfo
		for unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil) == unix.EINTR {
		}
	}()
	return <-started
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
		if real := realPath(h); real != "" {
			h = real
		}
		out = append(out, filepath.Clean(h))
	}
	return out
}

// realPath is path absolute with its symlinks resolved, "" when it cannot
// be resolved (it does not exist).
func realPath(path string) string {
	if path == "" {
		return ""
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return ""
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return ""
	}
	return real
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
		return &UnsupportedError{What: fmt.Sprintf("user, PID, mount and network namespaces cannot be created (%v): "+
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

// namespacesWork starts a command in new user, PID, mount and network
// namespaces, without Landlock.
func namespacesWork() error {
	cmd := exec.Command("/bin/sh", "-c", "exit 0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWNET}
	if err := cmd.Run(); err != nil {
		return namespaceError(err)
	}
	return nil
}
