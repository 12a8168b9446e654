package sandbox

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The helper server makes the costly part of the sandbox once per
// Sandbox: it is this binary, started by the first Spawn in new user, PID,
// mount and (network off) network namespaces, where it hides the hidden
// paths, checks it can mount terminals of its own and builds the Landlock
// ruleset (type rulesets), as the per-command helper (helper.go) does for
// one command. Then it starts
// each command on request (spawn.go), as init of a PID namespace of its
// own, with its own /proc and terminals, in a session of its own, under
// its own Landlock domain (so no signal reaches another command, the
// server or agent), with no descriptor but 0-2, and waits for it. So a
// command still sees none of the others' processes, and what it leaves
// running dies with it.
//
// The server is init of its own PID namespace and dies with the thread of
// agent that started it (Pdeathsig): kill -9 of agent ends it, and so
// every command. A server that died is replaced at the next Spawn.
//
// Protocol: descriptor 3 is a SOCK_SEQPACKET socket. The server first
// says "ready", or why it cannot enforce the policy (helperFailed…). A
// request is one message carrying four descriptors: the command's stdin,
// stdout and stderr, and a stream socket on which agent writes the
// request as JSON and shuts its writing down. On that socket the server
// answers "S" with a pidfd of the command, or "E" and why it did not
// start; then, when the command has ended, its wait status (4 bytes, big
// endian).

const serverName = "agent-sandbox-server"

// request is one command for the server.
type request struct {
	Path string   `json:"path"`
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
}

// serve is the server's life: it returns the exit code.
func serve(specJSON string) int {
	const conn = 3
	spec, ptys, err := setUp(specJSON)
	if err != nil {
		_, _ = unix.Write(conn, []byte(err.Error()))
		return 127
	}
	rs := &rulesets{spec: spec, fd: -1}
	fd, err := rs.get()
	if err != nil {
		_, _ = unix.Write(conn, []byte(err.Error()))
		return 127
	}
	_ = unix.Close(fd)
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	if _, err := unix.Write(conn, []byte("ready")); err != nil {
		return 1
	}
	buf := make([]byte, 16)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		_, oobn, _, _, err := unix.Recvmsg(conn, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 1
		}
		fds := rights(oob[:oobn])
		if len(fds) == 0 { // agent closed its end: the run is over
			return 0
		}
		if len(fds) != 4 {
			closeAll(fds)
			continue
		}
		go serveOne(fds, rs, ptys)
	}
}

// setUp makes new namespaces ready for commands (a server's, or one
// command's in confine): mounts private, the hidden paths covered, and
// terminals of their own mounted if the kernel allows (ptys).
func setUp(specJSON string) (spec helperSpec, ptys bool, err error) {
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return spec, false, fmt.Errorf("%sthe sandbox helper's spec: %v", helperFailed, err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return spec, false, fmt.Errorf("%sa private mount namespace: %v", helperFailed, err)
	}
	for _, h := range spec.Hidden {
		if err := hide(h); err != nil {
			return spec, false, fmt.Errorf("%scannot hide %s from the command: %v", helperFailed, h, err)
		}
	}
	return spec, ownPtys(), nil // a server's commands each mount their own in turn
}

// rulesets hands out the Landlock ruleset the commands restrict
// themselves with. Building one walks the directories on the way to the
// hidden paths (thousands of entries in a busy /tmp: milliseconds), so a
// ruleset serves the commands of a second, 64 at most, and each adds the
// rules for its own terminals to it: another command's terminals are in
// a devpts mounted only where that command is, so such a rule reaches
// nothing. A new one, built again, sees the entries made since.
type rulesets struct {
	spec helperSpec

	mu    sync.Mutex
	fd    int // -1: none yet
	built time.Time
	uses  int
}

// get is a descriptor of the current ruleset, the caller's to close.
func (r *rulesets) get() (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fd < 0 || r.uses >= 64 || time.Since(r.built) > time.Second {
		fd, err := rules(r.spec, false)
		if err != nil {
			return -1, fmt.Errorf("%s%v", helperFailed, err)
		}
		if r.fd >= 0 {
			_ = unix.Close(r.fd)
		}
		r.fd, r.built, r.uses = fd, time.Now(), 0
	}
	r.uses++
	return unix.FcntlInt(uintptr(r.fd), unix.F_DUPFD_CLOEXEC, 3)
}

// serveOne reads one request from its socket, starts the command and
// reports how it ended.
func serveOne(fds []int, rs *rulesets, ptys bool) {
	sock := fds[3]
	defer unix.Close(sock)
	body, err := readAll(sock)
	var req request
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	ruleset := -1
	if err == nil {
		ruleset, err = rs.get()
	}
	var cmd spawned
	if err == nil {
		cmd, err = spawn(req.Path, req.Argv, req.Env, req.Dir, [3]int{fds[0], fds[1], fds[2]}, ruleset, ptys)
		_ = unix.Close(ruleset)
	}
	closeAll(fds[:3])
	if err != nil {
		_, _ = unix.Write(sock, []byte("E"+err.Error()))
		return
	}
	_ = unix.Sendmsg(sock, []byte("S"), unix.UnixRights(cmd.pidfd), nil, unix.MSG_NOSIGNAL)
	_ = unix.Close(cmd.pidfd)
	var ws unix.WaitStatus
	for {
		if _, err := unix.Wait4(cmd.pid, &ws, 0, nil); !errors.Is(err, unix.EINTR) {
			break
		}
	}
	_, _ = unix.Write(sock, binary.BigEndian.AppendUint32(nil, uint32(ws)))
}

func readAll(fd int) ([]byte, error) {
	var out []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, buf)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return nil, err
		case n == 0:
			return out, nil
		}
		out = append(out, buf[:n]...)
	}
}

// rights is the descriptors an SCM_RIGHTS message carried.
func rights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if got, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

// server is agent's side of a running helper server.
type server struct {
	conn   int // the SOCK_SEQPACKET socket
	proc   *os.Process
	exited chan struct{} // closed once it has exited and been reaped
}

// errServerGone: the server died before it started the command (it
// killed any command it had started): a new one may take the request.
var errServerGone = errors.New("the sandbox's helper server is gone")

// server is the sandbox's running helper server, started if there is none
// (or it died).
func (s *Sandbox) server() (*server, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		select {
		case <-s.srv.exited:
			s.srv.stop()
			s.srv = nil
		default:
			return s.srv, nil
		}
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	peer := os.NewFile(uintptr(pair[1]), "sandbox-server")
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{serverName, string(s.spec)}, Env: []string{}, ExtraFiles: []*os.File{peer}}
	err = startInNamespaces(cmd, s.policy.Network)
	peer.Close()
	if err != nil {
		_ = unix.Close(pair[0])
		return nil, err
	}
	srv := &server{conn: pair[0], proc: cmd.Process, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(srv.exited)
	}()
	buf := make([]byte, 4<<10)
	n, err := unix.Read(srv.conn, buf)
	for errors.Is(err, unix.EINTR) {
		n, err = unix.Read(srv.conn, buf)
	}
	if msg := string(buf[:max(n, 0)]); msg != "ready" {
		srv.stop()
		if msg == "" {
			return nil, fmt.Errorf("%sthe sandbox's helper server ended as it started (%v)", helperFailed, err)
		}
		return nil, helperError(msg)
	}
	s.srv = srv
	return srv, nil
}

// drop stops srv, which failed, if it is still the sandbox's server.
func (s *Sandbox) drop(srv *server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == srv {
		srv.stop()
		s.srv = nil
	}
}

// stop ends the server, and with it every command it started.
func (srv *server) stop() {
	_ = unix.Close(srv.conn)
	_ = srv.proc.Kill()
	<-srv.exited
}

// Command is a command started by Spawn.
type Command struct {
	sock int // the request's socket: the wait status comes on it

	mu    sync.Mutex // Kill may race Wait's end
	pidfd int        // -1 once Wait has returned
}

// Spawn starts argv in the sandbox, in dir, with the sandbox's
// environment and these stdin, stdout and stderr, through the sandbox's
// helper server: it costs a fraction of Start's new namespaces per
// command, with the same confinement (server.go). A sandbox that is off
// has no server: use Start. A nil file is /dev/null.
func (s *Sandbox) Spawn(argv []string, dir string, stdin, stdout, stderr *os.File) (*Command, error) {
	if s == nil || s.policy.Mode == Off {
		return nil, errors.New("sandbox: Spawn needs a sandboxed mode")
	}
	if stdin == nil || stdout == nil || stderr == nil {
		null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		defer null.Close()
		for _, f := range []**os.File{&stdin, &stdout, &stderr} {
			if *f == nil {
				*f = null
			}
		}
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, err
	}
	if err := s.prepare(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(request{Path: path, Argv: argv, Env: s.env, Dir: dir})
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		srv, err := s.server()
		if err != nil {
			return nil, err
		}
		c, err := srv.spawn(body, stdin, stdout, stderr)
		if errors.Is(err, errServerGone) {
			s.drop(srv)
			if attempt == 0 {
				continue // s.server starts a new one
			}
		}
		return c, err
	}
}

func (srv *server) spawn(body []byte, stdin, stdout, stderr *os.File) (*Command, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	mine := pair[0]
	err = unix.Sendmsg(srv.conn, []byte("c"),
		unix.UnixRights(int(stdin.Fd()), int(stdout.Fd()), int(stderr.Fd()), pair[1]), nil, unix.MSG_NOSIGNAL)
	_ = unix.Close(pair[1])
	if err != nil {
		_ = unix.Close(mine)
		if errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET) || errors.Is(err, unix.ECONNREFUSED) {
			return nil, errServerGone
		}
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	for len(body) > 0 {
		n, err := unix.Write(mine, body)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			_ = unix.Close(mine)
			return nil, fmt.Errorf("sandbox: the helper server took no request: %w", err)
		}
		body = body[n:]
	}
	_ = unix.Shutdown(mine, unix.SHUT_WR)
	buf := make([]byte, 1) // "S" or "E": the wait status may follow at once
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(mine, buf, oob, unix.MSG_CMSG_CLOEXEC)
	for errors.Is(err, unix.EINTR) {
		n, oobn, _, _, err = unix.Recvmsg(mine, buf, oob, unix.MSG_CMSG_CLOEXEC)
	}
	fds := rights(oob[:max(oobn, 0)])
	switch {
	case err == nil && n >= 1 && buf[0] == 'S' && len(fds) == 1:
		return &Command{sock: mine, pidfd: fds[0]}, nil
	case err == nil && n >= 1 && buf[0] == 'E':
		more, _ := readAll(mine)
		_ = unix.Close(mine)
		return nil, helperError(string(more))
	}
	closeAll(fds)
	_ = unix.Close(mine)
	return nil, errServerGone // it died before it could start the command

}

// Kill kills the command and everything it started; after Wait it does
// nothing.
func (c *Command) Kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pidfd >= 0 {
		_ = unix.PidfdSendSignal(c.pidfd, unix.SIGKILL, nil, 0)
	}
}

// Wait waits for the command to end and gives its wait status; a command
// whose helper server died was killed with it.
func (c *Command) Wait() syscall.WaitStatus {
	defer func() {
		c.mu.Lock()
		_ = unix.Close(c.pidfd)
		c.pidfd = -1
		c.mu.Unlock()
	}()
	defer unix.Close(c.sock)
	var b [4]byte
	got := 0
	for got < len(b) {
		n, err := unix.Read(c.sock, b[got:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			return syscall.WaitStatus(syscall.SIGKILL) // the server died, and its commands with it
		}
		got += n
	}
	return syscall.WaitStatus(binary.BigEndian.Uint32(b[:]))
}
