package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"agent/sandbox"
)

// conn is one server for the life of a run: started once, restarted at
// most once after it died, stopped with its whole process group.
type conn struct {
	srv  Server
	opts Options

	mu        sync.Mutex
	live      *session // nil after the server died
	restarted bool
	closed    bool

	// What the server asks of agent (requests.go): its tool list changed
	// since it was last read; the call it has open.
	changed atomic.Bool
	called  atomic.Bool // a call was made since Refresh last looked
	callMu  sync.Mutex
	inCall  *running
	calls   int
	// taskWarned are the tools said once to need MCP tasks.
	taskWarned map[string]bool
	resources  bool // the server has resources (resources.go)
	// listChanges: the server says its tools may change (its
	// tools.listChanged capability).
	listChanges bool
}

// session is one started server process or HTTP session.
type session struct {
	cs     *sdk.ClientSession
	proc   *exec.Cmd        // nil for an HTTP server
	box    *sandbox.Sandbox // the sandbox proc runs in; nil when unconfined
	exited chan struct{}    // closed when proc has exited
	stderr *tail
	tasks  *taskSniffer // what a stdio server lists as needing MCP tasks
}

// stderrTail is the end of what the server wrote to stderr once it has
// stopped, waiting a moment for the last of it to be read.
func (s *session) stderrTail() string {
	if s.stderr == nil {
		return ""
	}
	select {
	case <-s.stderr.done:
	case <-time.After(500 * time.Millisecond): // a grandchild keeps it open
	}
	return s.stderr.String()
}

// hasResources reports whether the session's server said, when it
// started, that it has resources.
func (s *session) hasResources() bool {
	init := s.cs.InitializeResult()
	return init != nil && init.Capabilities != nil && init.Capabilities.Resources != nil
}

// listsChanges reports whether the session's server said, when it
// started, that its tools may change.
func (s *session) listsChanges() bool {
	init := s.cs.InitializeResult()
	return init != nil && init.Capabilities != nil && init.Capabilities.Tools != nil && init.Capabilities.Tools.ListChanged
}

// errDown is a server that died and could not be restarted (again).
type errDown struct{ msg string }

func (e *errDown) Error() string { return e.msg }

// start starts the server and initializes the MCP session within the
// server's startup timeout.
func (c *conn) start(ctx context.Context) (*session, error) {
	ctx, cancel := context.WithTimeout(ctx, c.srv.StartupTimeout)
	defer cancel()
	if c.srv.HTTP() {
		tasks := newTaskSniffer(nil)
		hc, err := c.httpClient(tasks)
		if err != nil {
			return nil, err
		}
		t := &sdk.StreamableClientTransport{Endpoint: c.srv.URL, HTTPClient: hc, MaxRetries: 1}
		cs, err := c.client().Connect(ctx, t, nil)
		if err != nil {
			return nil, c.startError(ctx, err, nil)
		}
		return &session{cs: cs, tasks: tasks}, nil
	}
	return c.spawn(ctx)
}

// httpClient sends the server's headers and bearer token with every
// request, references to the environment expanded now, and shows tasks
// the answers to tools/list.
func (c *conn) httpClient(tasks *taskSniffer) (*http.Client, error) {
	headers := http.Header{}
	for k, v := range c.srv.Headers {
		val, err := expand(v, c.opts.getenv)
		if err != nil {
			return nil, fmt.Errorf("header %s: %w", k, err)
		}
		headers.Set(k, val)
	}
	if name := c.srv.BearerTokenEnv; name != "" {
		tok := c.opts.getenv(name)
		if tok == "" {
			return nil, fmt.Errorf("bearer_token_env: $%s is not set", name)
		}
		headers.Set("Authorization", "Bearer "+tok)
	}
	return &http.Client{Transport: &withHeaders{base: http.DefaultTransport, headers: headers, tasks: tasks}}, nil
}

type withHeaders struct {
	base    http.RoundTripper
	headers http.Header
	tasks   *taskSniffer
}

func (t *withHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.headers {
		r.Header[k] = v
	}
	listing := false
	if r.Body != nil && r.Method == http.MethodPost {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxFrame))
		_ = r.Body.Close()
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		listing = bytes.Contains(body, []byte(`"tools/list"`))
	}
	resp, err := t.base.RoundTrip(r)
	if err == nil && listing {
		resp.Body = &listingBody{ReadCloser: resp.Body, t: t.tasks, sse: strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")}
	}
	return resp, err
}

// startError says why a server did not start, with the tail of its
// stderr, which is where servers say what is wrong.
func (c *conn) startError(ctx context.Context, err error, s *session) error {
	if ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("no answer to initialize within %s (startup_timeout_s)", c.srv.StartupTimeout)
	}
	if s != nil {
		s.stop()
		if t := s.stderrTail(); t != "" {
			err = fmt.Errorf("%w; its stderr ends: %s", err, t)
		}
	}
	return err
}

// passEnv is what a stdio server inherits from agent's environment; the
// rest, the model provider's key and agent's other secrets included, it
// gets only if its env names it.
var passEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TMPDIR", "TZ",
	"XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR"}

// spawn starts a stdio server in its own process group and connects.
func (c *conn) spawn(ctx context.Context) (*session, error) {
	env := make([]string, 0, len(passEnv)+len(c.srv.Env))
	for _, k := range passEnv {
		if v := c.opts.getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	for k, v := range c.srv.Env {
		val, err := expand(v, c.opts.getenv)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", k, err)
		}
		env = append(env, k+"="+val)
	}
	cmd := exec.Command(c.srv.Command, c.srv.Args...)
	cmd.Env = env
	cmd.Dir = c.srv.Cwd
	if cmd.Dir == "" {
		cmd.Dir = c.opts.Dir
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// In the run's sandbox unless the operator said sandbox = false: a
	// server that runs commands must not be a way out of it (nor to the
	// runner's stdout, nor to AGENT_HOME).
	var box *sandbox.Sandbox
	if c.srv.Sandboxed && c.opts.Confine != nil {
		var err error
		if box, err = c.opts.Confine(c.srv.Network); err != nil {
			return nil, fmt.Errorf("its sandbox: %w (set sandbox = false for this server to run it unconfined)", err)
		}
	}

	// Plain pipes, so that waiting for the process never waits for a
	// grandchild that keeps one open.
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	if err := box.Start(cmd); err != nil { // a nil box starts it as it is
		closeAll(inR, inW, outR, outW, errR, errW)
		box.Close()
		return nil, fmt.Errorf("run %s: %w", c.srv.Command, unwrapExec(err))
	}
	closeAll(inR, outW, errW)
	s := &session{proc: cmd, box: box, exited: make(chan struct{}), stderr: &tail{done: make(chan struct{})}}
	go s.stderr.drain(errR)
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	if err := c.connect(ctx, s, inW, outR); err != nil {
		return nil, err
	}
	return s, nil
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// unwrapExec drops exec's repetition of the command's name.
func unwrapExec(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// maxFrame bounds one message from a server: a hostile server cannot make
// agent buffer without end.
const maxFrame = 16 << 20

func (c *conn) connect(ctx context.Context, s *session, in, out *os.File) error {
	s.tasks = newTaskSniffer(&sdk.IOTransport{Reader: out, Writer: in, MaxLineLength: maxFrame})
	cs, err := c.client().Connect(ctx, s.tasks, nil)
	if err != nil {
		var syntax *json.SyntaxError
		switch {
		case errors.As(err, &syntax) || strings.Contains(err.Error(), "invalid character"):
			// The SDK's error does not always wrap it.
			err = fmt.Errorf("it wrote something that is not MCP to stdout, which is for the protocol only (%v)", err)
		case errors.Is(err, sdk.ErrConnectionClosed) || strings.Contains(err.Error(), "EOF"):
			err = errors.New("it exited before answering initialize")
		}
		return c.startError(ctx, err, s)
	}
	s.cs = cs
	return nil
}

// stop ends the session and the server's whole process group: closing
// stdin asks it to exit; what is left a moment later is killed.
func (s *session) stop() {
	if s.cs != nil {
		done := make(chan struct{})
		go func() {
			_ = s.cs.Close()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
	}
	if s.proc == nil || s.proc.Process == nil {
		return
	}
	pgid := s.proc.Process.Pid
	select {
	case <-s.exited:
	case <-time.After(time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(time.Second):
		}
	}
	// The leader is gone; whatever it started in its group goes too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-s.exited
	s.box.Close()
}

// dead reports whether the server process has exited.
func (s *session) dead() bool {
	if s.exited == nil {
		return false
	}
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// tail keeps the last bytes a server wrote to stderr.
type tail struct {
	mu   sync.Mutex
	buf  []byte
	done chan struct{} // closed when stderr is closed on every side
}

const tailSize = 2048

func (t *tail) drain(f *os.File) {
	defer close(t.done)
	defer f.Close()
	b := make([]byte, 4096)
	for {
		n, err := f.Read(b)
		if n > 0 {
			t.mu.Lock()
			t.buf = append(t.buf, b[:n]...)
			if len(t.buf) > tailSize {
				t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailSize:]...)
			}
			t.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// String is the tail on one line.
func (t *tail) String() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(strings.Fields(strings.ToValidUTF8(string(t.buf), "?")), " ")
}
