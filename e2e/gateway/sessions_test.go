package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/gateway/api"
	"agent/llm/llmtest"
)

// TestRefusedGatewayRunsLeaveNoSession: `agent run --gateway` with
// options the gateway refuses leaves no session behind, however many
// times; one it accepts has its session, which `agent sessions delete`
// then deletes with its run.
func TestRefusedGatewayRunsLeaveNoSession(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: "Paris."})
	srv, _ := e.InProcessGateway(nil)
	gw := e.GatewayEnv(srv.Addr())
	for _, args := range [][]string{
		{"run", "--base-url", "https://elsewhere.example/v1", "capital of France?"},
		{"run", "--workspace", "/", "capital of France?"},
		{"run", "--until", "DONE", "--max-iterations", "-3", "capital of France?"},
	} {
		res, _ := e.RunWith(gw, args...)
		if res.Code == 0 {
			t.Errorf("agent %v through the gateway: exit 0, want refused\n%s", args, res.Stderr)
		}
	}
	if list := e.Run("sessions", "list", "--all", "--json"); list.Stdout != "" {
		t.Fatalf("refused runs left sessions behind:\n%s", list.Stdout)
	}

	res, _ := e.RunWith(gw, "run", "--json", "capital of France?")
	if res.Code != 0 {
		t.Fatalf("run: exit %d\n%s", res.Code, res.Stderr)
	}
	session := e2etest.DecodeEvents(t, res.Stdout)[0].SessionID
	var v e2etest.SessionView
	list := e.Run("sessions", "list", "--json")
	if err := json.Unmarshal([]byte(list.Stdout), &v); err != nil || v.ID != session || v.Title != "capital of France?" {
		t.Fatalf("sessions list after one run: %v %s", err, list.Stdout)
	}

	del := e.Run("sessions", "delete", session[:8])
	if del.Code != 0 || strings.TrimSpace(del.Stdout) != session || !strings.Contains(del.Stderr, "deleted session "+session[:8]+" (capital of France?) with 1 run") {
		t.Errorf("sessions delete: exit %d %q %q", del.Code, del.Stdout, del.Stderr)
	}
	if list := e.Run("sessions", "list", "--all", "--json"); list.Stdout != "" {
		t.Errorf("sessions list after delete:\n%s", list.Stdout)
	}
	if runs := e.Run("runs", "list", "--json"); strings.Contains(runs.Stdout, session) {
		t.Errorf("its run is still listed:\n%s", runs.Stdout)
	}
	if again := e.Run("sessions", "delete", session); again.Code != 2 || !strings.Contains(again.Stderr, "not found") {
		t.Errorf("deleting it again: exit %d %q", again.Code, again.Stderr)
	}
}

// TestSessionsDeleteKeepsABusySession: a session whose run is running is
// kept (exit 4, saying which run); once the run has ended it goes.
func TestSessionsDeleteKeepsABusySession(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: "Thinking, one piece at a time, until stopped.", Hang: true})
	srv, _ := e.InProcessGateway(nil)
	c := e2etest.GwDial(t, srv.Addr())
	run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{Input: "think"})

	busy := e.Run("sessions", "delete", run.SessionID)
	if busy.Code != 4 || !strings.Contains(busy.Stderr, "its run "+run.RunID+" is running") {
		t.Errorf("deleting a session whose run runs: exit %d %q, want 4 naming the run", busy.Code, busy.Stderr)
	}
	e2etest.GwCall[api.RunInfo](t, c, api.MethodRunCancel, api.RunCancelParams{RunID: run.RunID})
	if del := e.Run("sessions", "delete", run.SessionID, "--json"); del.Code != 0 || !strings.Contains(del.Stdout, `"deleted":true`) {
		t.Errorf("once the run ended: exit %d %q %q", del.Code, del.Stdout, del.Stderr)
	}
}
