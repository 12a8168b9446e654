package e2etest

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"agent/gateway"
	"agent/store"
)

// JobsGateway starts an in-process gateway with a scheduler, on or off.
func (e *Env) JobsGateway(enabled bool) (*gateway.Server, *store.DB) {
	return e.InProcessGateway(func(c *gateway.Config) {
		c.Scheduler = &gateway.SchedulerConfig{Enabled: enabled, PollInterval: 200 * time.Millisecond}
		c.Env = append(c.Env, NoRaceExitSleep)
	})
}

// Jobs runs `agent jobs ARGS` against the gateway at addr.
func (e *Env) Jobs(addr string, args ...string) Result {
	e.T.Helper()
	cmd := e.Command(append([]string{"jobs"}, args...)...)
	cmd.Env = append(cmd.Env, e.GatewayEnv(addr)...)
	cmd.Env = append(cmd.Env, NoRaceExitSleep)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	_ = cmd.Run()
	return Result{Stdout: out.String(), Stderr: errb.String(), Code: cmd.ProcessState.ExitCode()}
}

// MustJobs runs `agent jobs ARGS`, which must succeed.
func (e *Env) MustJobs(addr string, args ...string) string {
	e.T.Helper()
	res := e.Jobs(addr, args...)
	if res.Code != 0 {
		e.T.Fatalf("agent jobs %s: exit %d: %s", strings.Join(args, " "), res.Code, res.Stderr)
	}
	return res.Stdout
}

// JSONLines decodes one JSON object per line.
func JSONLines[T any](t *testing.T, out string) []T {
	t.Helper()
	var vs []T
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var v T
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("not a JSON line: %q: %v", line, err)
		}
		vs = append(vs, v)
	}
	return vs
}

// JobRuns is a job's runs, as the store has them.
func JobRuns(t *testing.T, db *store.DB, jobID string) []store.JobRun {
	t.Helper()
	runs, err := db.JobRuns(context.Background(), jobID, 0)
	if err != nil {
		t.Fatal(err)
	}
	return runs
}
