package console

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// GuardCommand is the hidden command a terminal guard runs as: the
// binary's own, so the guard needs nothing installed.
const GuardCommand = "terminal-guard"

// The guard's environment: the terminal's settings to put back, and what
// to write to it then (e.g. bracketed paste off).
const (
	guardStateEnv = "AGENT_TERMINAL_STATE"
	guardResetEnv = "AGENT_TERMINAL_RESET"
)

// release is what a process that restored its terminal itself tells its
// guard, which then leaves the terminal alone: a shell may have taken it
// over since.
const released = "released"

// GuardTerminal starts a guard for tty: a child of this binary that puts
// the terminal's settings back as they are now, and writes reset to it,
// if this process dies without saying it restored them (kill -9, a
// crash); a line editor's raw mode would otherwise outlive it. The
// returned release, called after this process restored the terminal,
// stops the guard without touching it.
func GuardTerminal(tty *os.File, reset string) (release func(), err error) {
	state, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		return nil, fmt.Errorf("terminal guard: %w", err)
	}
	saved, err := json.Marshal(state)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("terminal guard: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, GuardCommand)
	cmd.Stdin, cmd.ExtraFiles = r, []*os.File{tty} // the terminal is its fd 3
	cmd.Env = append(os.Environ(), guardStateEnv+"="+string(saved), guardResetEnv+"="+reset)
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("terminal guard: %w", err)
	}
	r.Close()
	return func() {
		_, _ = io.WriteString(w, released)
		w.Close()
		_ = cmd.Wait()
	}, nil
}

// ServeGuard is the guard (GuardCommand): it waits for its parent to end,
// and puts the terminal back unless the parent said it had. Signals meant
// for the parent's process group (Ctrl-C, Ctrl-Z, a hang-up) do not stop it.
func ServeGuard() error {
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGTTOU, syscall.SIGTTIN, syscall.SIGHUP, syscall.SIGTERM)
	var state unix.Termios
	if err := json.Unmarshal([]byte(os.Getenv(guardStateEnv)), &state); err != nil {
		return fmt.Errorf("terminal guard: no terminal state: %w", err)
	}
	said, _ := io.ReadAll(os.Stdin) // until the parent closes it, or dies
	if string(said) == released {
		return nil
	}
	tty := os.NewFile(3, "tty")
	if err := unix.IoctlSetTermios(int(tty.Fd()), unix.TCSETS, &state); err != nil {
		return fmt.Errorf("terminal guard: %w", err)
	}
	_, err := io.WriteString(tty, os.Getenv(guardResetEnv))
	return err
}
