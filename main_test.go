package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"agent/llm/llmtest"
)

// TestMain lets the test binary act as the agent command, so scripts and
// end-to-end tests run the real CLI as separate processes.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"agent": func() { os.Exit(run(os.Args, os.Stdin, os.Stdout, os.Stderr)) },
	})
}

// TestScripts runs the CLI scenarios in testdata/script.
func TestScripts(t *testing.T) {
	t.Parallel()
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("AGENT_HOME", filepath.Join(env.WorkDir, ".agent-home"))
			env.Setenv("OPENAI_API_KEY", "")
			env.Setenv("OPENAI_BASE_URL", "")
			env.Setenv("AGENT_MODEL", "")
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"fakemodel": cmdFakeModel,
			"waitfile":  cmdWaitFile,
		},
	})
}

// cmdFakeModel starts a scripted model server for the rest of the script:
//
//	fakemodel SCRIPT.json
//
// It sets OPENAI_BASE_URL and logs every request to $WORK/requests.jsonl.
func cmdFakeModel(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: fakemodel SCRIPT.json")
	}
	script, err := llmtest.LoadScript(ts.MkAbs(args[0]))
	ts.Check(err)
	srv, err := llmtest.Start(script)
	ts.Check(err)
	ts.Defer(srv.Close)
	ts.Check(srv.SetLog(ts.MkAbs("requests.jsonl")))
	ts.Setenv("OPENAI_BASE_URL", srv.URL())
}

// cmdWaitFile waits up to 10 s for a file to exist:
//
//	waitfile PATH
func cmdWaitFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waitfile PATH")
	}
	path := ts.MkAbs(args[0])
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	ts.Fatalf("%s did not appear within 10s", args[0])
}
