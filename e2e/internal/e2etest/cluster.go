package e2etest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"agent/config"
	"agent/gateway/api"
	"agent/gateway/gatewaytest"
	"agent/store/pgtest"
)

// LogFile is a file for a process's output, kept with the test's files.
func LogFile(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			data, _ := os.ReadFile(f.Name())
			t.Logf("%s:\n%s", name, tail(string(data), 4000))
		}
		f.Close()
	})
	return f
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// SmallCluster starts a gateway and a worker on a new PostgreSQL database,
// both with env added to their environment, and returns the database, a
// client of the gateway and a session it is attached to.
func (e *Env) SmallCluster(t *testing.T, env ...string) (dsn string, c *gatewaytest.Client, sessionID string) {
	dsn = pgtest.Database(t, pgtest.Start(t), "")
	extra := append([]string{config.DatabaseEnv + "=" + dsn}, env...)
	withEnv := func(cmd *exec.Cmd) { cmd.Env = append(cmd.Env, extra...) }
	gw := e.StartGatewayWith(withEnv)
	worker := e.Command("worker", "--poll", "100ms")
	withEnv(worker)
	worker.Stderr = LogFile(t, "worker.stderr")
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = worker.Process.Kill(); _ = worker.Wait() })
	c = GwDial(t, gw.Addr)
	sessionID = GwCall[api.SessionInfo](t, c, api.MethodSessionCreate, nil).SessionID
	GwCall[api.SessionResumeResult](t, c, api.MethodSessionResume, api.SessionResumeParams{SessionID: sessionID})
	return dsn, c, sessionID
}
