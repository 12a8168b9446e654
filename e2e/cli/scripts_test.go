package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"agent/e2e/internal/e2etest"
	"agent/llm/llmtest"
	"agent/store"
)

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
			for _, k := range []string{"AGENT_SMTP_ADDR", "AGENT_SMTP_FROM", "AGENT_SMTP_USER", "AGENT_SMTP_PASS", "AGENT_SLACK_TOKEN", "AGENT_SLACK_API_URL"} {
				env.Setenv(k, "")
			}
			// agent-code runs agent and appends "exit N" to stderr, so
			// scripts can assert the exact exit code.
			bin := filepath.Join(env.WorkDir, ".bin")
			if err := os.MkdirAll(bin, 0o755); err != nil {
				return err
			}
			wrapper := "#!/bin/sh\nagent \"$@\"\necho \"exit $?\" >&2\n"
			if err := os.WriteFile(filepath.Join(bin, "agent-code"), []byte(wrapper), 0o755); err != nil {
				return err
			}
			env.Setenv("PATH", bin+string(filepath.ListSeparator)+env.Getenv("PATH"))
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"fakemodel": cmdFakeModel,
			"waitfile":  cmdWaitFile,
			"modelreqs": cmdModelRequests,
			"lastrun":   cmdLastRun,
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

// cmdWaitFile waits up to e2etest.Patience for a file to exist:
//
//	waitfile PATH
func cmdWaitFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waitfile PATH")
	}
	path := ts.MkAbs(args[0])
	deadline := time.Now().Add(e2etest.Patience)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	ts.Fatalf("%s did not appear within %s", args[0], e2etest.Patience)
}

// cmdModelRequests writes one readable file per logged model request,
// req/1.txt, req/2.txt, …, so scripts can cmp what the model was sent:
//
//	modelreqs
//
// Each file has a "tools:" line, then one line per message, "role: text"
// with newlines shown as \n, tool calls as [name args] and tool results
// as "tool: output".
func cmdModelRequests(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: modelreqs")
	}
	f, err := os.Open(ts.MkAbs("requests.jsonl"))
	ts.Check(err)
	defer f.Close()
	ts.Check(os.MkdirAll(ts.MkAbs("req"), 0o755))
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for n := 1; sc.Scan(); n++ {
		var req struct {
			Messages []struct {
				Role      string `json:"role"`
				Content   string `json:"content"`
				ToolCalls []struct {
					Function struct{ Name, Arguments string } `json:"function"`
				} `json:"tool_calls"`
			} `json:"messages"`
			Tools []struct {
				Function struct{ Name string } `json:"function"`
			} `json:"tools"`
		}
		ts.Check(json.Unmarshal(sc.Bytes(), &req))
		var b strings.Builder
		var names []string
		for _, t := range req.Tools {
			names = append(names, t.Function.Name)
		}
		fmt.Fprintf(&b, "tools: %s\n", strings.Join(names, ","))
		for _, m := range req.Messages {
			line := m.Role + ": " + strings.ReplaceAll(m.Content, "\n", `\n`)
			for _, c := range m.ToolCalls {
				line += " [" + c.Function.Name + " " + c.Function.Arguments + "]"
			}
			b.WriteString(line + "\n")
		}
		ts.Check(os.WriteFile(ts.MkAbs(fmt.Sprintf("req/%d.txt", n)), []byte(b.String()), 0o644))
	}
	ts.Check(sc.Err())
}

// cmdLastRun sets an environment variable to the id of the newest run:
//
//	lastrun VAR
func cmdLastRun(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: lastrun VAR")
	}
	db, err := store.Open(filepath.Join(ts.Getenv("AGENT_HOME"), "agent.db"))
	ts.Check(err)
	defer db.Close()
	runs, err := db.ListRuns(context.Background(), 1)
	ts.Check(err)
	if len(runs) == 0 {
		ts.Fatalf("no runs yet")
	}
	ts.Setenv(args[0], runs[0].ID)
}
