package gateway

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"agent/e2e/internal/e2etest"
	"agent/gateway"
)

// startGatewayWithFDLimit is StartGateway with the process limited to
// nofile open files, as a default shell's `ulimit -n` limits it.
func startGatewayWithFDLimit(e *e2etest.Env, nofile int, args ...string) *e2etest.GatewayProc {
	e.T.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		e.T.Skip("no sh to set the limit with")
	}
	return e.StartGatewayWith(func(cmd *exec.Cmd) {
		agent := cmd.Path
		cmd.Path = sh
		cmd.Args = append([]string{"sh", "-c", `ulimit -n "$0" && exec "$@"`, strconv.Itoa(nofile), agent}, cmd.Args[1:]...)
	}, args...)
}

// TestGatewayIdleConnectionsUnderFDLimit is the lock-out an adversary
// found: 1,100 idle TCP connections against a gateway limited to 1,024
// open files made authorised requests time out, with no token needed.
// With the default connection cap the gateway keeps its descriptors and
// answers at once.
func TestGatewayIdleConnectionsUnderFDLimit(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t)
	g := startGatewayWithFDLimit(e, 1024)
	idle := make([]net.Conn, 0, 1100)
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range cap(idle) {
		c, err := net.DialTimeout("tcp", g.Addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", len(idle), err)
		}
		idle = append(idle, c)
	}
	start := time.Now()
	hc := &http.Client{Timeout: e2etest.Patience, Transport: &http.Transport{}}
	for _, path := range []string{"/healthz", "/v1/sessions"} {
		req, _ := http.NewRequest("GET", "http://"+g.Addr+path, nil)
		req.Header.Set("Authorization", "Bearer "+e2etest.GwToken)
		resp, err := hc.Do(req)
		if err != nil {
			data, _ := os.ReadFile(g.Stderr)
			t.Fatalf("GET %s behind %d idle connections, after %s: %v\n%s", path, len(idle), time.Since(start), err, data)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
	}
	c := e2etest.GwDial(t, g.Addr)
	e2etest.GwCall[json.RawMessage](t, c, "session.list", nil)
	// Answered long before the idle connections' header timeout could
	// free a descriptor, however loaded the machine.
	if d := time.Since(start); d >= gateway.DefaultReadHeaderTimeout {
		t.Errorf("authorised clients took %s behind idle connections", d)
	}
}
