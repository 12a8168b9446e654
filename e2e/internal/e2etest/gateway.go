package e2etest

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"agent/event"
	"agent/gateway"
	"agent/gateway/api"
	"agent/gateway/gatewaytest"
	"agent/store"
)

// GwToken is the token of the gateways the tests start.
const GwToken = "e2e-gateway-token-0123456789"

// GatewayEnv is the environment that points the CLI at the gateway at
// addr.
func (e *Env) GatewayEnv(addr string) []string {
	return []string{"AGENT_GATEWAY=http://" + addr, "AGENT_GATEWAY_TOKEN=" + GwToken}
}

// InProcessGateway starts a gateway in the test process on e's home; its
// children are real `agent runner` processes (of the binary Main built).
func (e *Env) InProcessGateway(change func(*gateway.Config)) (*gateway.Server, *store.DB) {
	e.T.Helper()
	db, err := store.Open(filepath.Join(e.Home, "agent.db"))
	if err != nil {
		e.T.Fatal(err)
	}
	cfg := gateway.Config{
		Listen: "127.0.0.1:0", Token: GwToken, DB: db, Version: "e2e", DefaultWorkspace: e.Workspace, Home: e.Home,
		Model:  gateway.ModelDefaults{Name: "test-model", BaseURL: e.Srv.URL()},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Env:    append(os.Environ(), "OPENAI_API_KEY=", "AGENT_HOME="+e.Home),
		Exe:    Bin(),
	}
	if change != nil {
		change(&cfg)
	}
	srv, err := gateway.New(cfg)
	if err != nil {
		e.T.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), Patience)
		defer cancel()
		if err := srv.Stop(ctx); err != nil {
			e.T.Errorf("stop: %v", err)
		}
		db.Close()
	})
	return srv, db
}

// GwDial connects a gateway client to addr with GwToken.
func GwDial(t *testing.T, addr string) *gatewaytest.Client {
	t.Helper()
	ctx, cancel := gatewaytest.Timeout(10 * time.Second)
	defer cancel()
	c, err := gatewaytest.Dial(ctx, addr, gatewaytest.Options{Token: GwToken})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// GwCall calls method and decodes its answer.
func GwCall[T any](t *testing.T, c *gatewaytest.Client, method string, params any) T {
	t.Helper()
	ctx, cancel := gatewaytest.Timeout(20 * time.Second)
	defer cancel()
	var out T
	if err := c.Call(ctx, method, params, &out); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return out
}

// GwWait waits for run runID to end and returns its events.
func GwWait(t *testing.T, c *gatewaytest.Client, runID string) []api.EventFrame {
	t.Helper()
	ctx, cancel := gatewaytest.Timeout(30 * time.Second)
	defer cancel()
	evs, err := c.WaitTerminal(ctx, runID)
	if err != nil {
		t.Fatalf("run %s: %v", runID, err)
	}
	var out []api.EventFrame
	for _, ev := range evs {
		if ev.RunID == runID {
			out = append(out, ev)
		}
	}
	return out
}

// FrameTypes is the frames' event types, space-separated.
func FrameTypes(evs []api.EventFrame) string {
	var ts []string
	for _, ev := range evs {
		ts = append(ts, ev.Event)
	}
	return strings.Join(ts, " ")
}

// FinishedFrame is the data of a terminal event frame.
func FinishedFrame(t *testing.T, ev api.EventFrame) event.RunFinishedData {
	t.Helper()
	var d event.RunFinishedData
	if err := json.Unmarshal(ev.Data, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// LastFrame is the last of evs.
func LastFrame(evs []api.EventFrame) api.EventFrame { return evs[len(evs)-1] }

// GatewayProc is `agent gateway` as a separate process.
type GatewayProc struct {
	Cmd    *exec.Cmd
	Addr   string
	Stderr string // path of its stderr
	Done   chan struct{}
	Err    error
}

// StartGateway starts `agent gateway` with args, listening on a free
// port, and waits until it says where.
func (e *Env) StartGateway(args ...string) *GatewayProc {
	e.T.Helper()
	return e.StartGatewayWith(nil, args...)
}

// StartGatewayWith is StartGateway with the command adjusted by change.
func (e *Env) StartGatewayWith(change func(*exec.Cmd), args ...string) *GatewayProc {
	e.T.Helper()
	cmd := e.Command(append([]string{"gateway", "--listen", "127.0.0.1:0", "--json"}, args...)...)
	cmd.Env = append(cmd.Env, "AGENT_GATEWAY_TOKEN="+GwToken)
	if change != nil {
		change(cmd)
	}
	g := &GatewayProc{Cmd: cmd, Stderr: filepath.Join(e.T.TempDir(), "gateway.stderr"), Done: make(chan struct{})}
	errf, err := os.Create(g.Stderr)
	if err != nil {
		e.T.Fatal(err)
	}
	defer errf.Close()
	cmd.Stderr = errf
	out, err := cmd.StdoutPipe()
	if err != nil {
		e.T.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		e.T.Fatal(err)
	}
	go func() {
		g.Err = cmd.Wait()
		close(g.Done)
	}()
	e.T.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-g.Done
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		data, _ := os.ReadFile(g.Stderr)
		e.T.Fatalf("gateway did not start: %v: %s", err, data)
	}
	var hello struct {
		Listen string `json:"listen"`
	}
	if err := json.Unmarshal([]byte(line), &hello); err != nil || hello.Listen == "" {
		e.T.Fatalf("gateway --json printed %q", line)
	}
	g.Addr = hello.Listen
	return g
}

// Signal sends the gateway sig.
func (g *GatewayProc) Signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := g.Cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// Wait waits up to Patience for the gateway to exit and returns its code.
func (g *GatewayProc) Wait(t *testing.T) int {
	t.Helper()
	select {
	case <-g.Done:
	case <-time.After(Patience):
		t.Fatal("the gateway did not exit")
	}
	if g.Cmd.ProcessState == nil {
		t.Fatalf("gateway: %v", g.Err)
	}
	return g.Cmd.ProcessState.ExitCode()
}

// HTTPJSON makes a request with GwToken, decodes the answer into out
// (unless nil) and returns the status code.
func HTTPJSON(t *testing.T, method, url, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+GwToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, data)
		}
	}
	return resp.StatusCode
}
