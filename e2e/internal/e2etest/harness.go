package e2etest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"agent/event"
	"agent/llm/llmtest"
)

// PhaseMarker is what the prompt of phase id says, which routes the fake
// model's turns to it (llmtest.Turn.When).
func PhaseMarker(id string) string { return "Your phase: " + id + " —" }

// PlannerMarker is in the planner's prompt.
const PlannerMarker = "You are the planner"

// ForPhase routes turns to one phase's requests.
func ForPhase(id string, turns ...llmtest.Turn) []llmtest.Turn {
	for i := range turns {
		turns[i].When = PhaseMarker(id)
	}
	return turns
}

// WriteTurn is a turn writing content to path with write_file.
func WriteTurn(path, content string) llmtest.Turn {
	args, _ := json.Marshal(map[string]string{"path": path, "content": content})
	return llmtest.Turn{ToolCalls: []llmtest.Call{{Name: "write_file", Arguments: args}}}
}

// BashTurn is a turn running command with bash.
func BashTurn(command string) llmtest.Turn {
	args, _ := json.Marshal(map[string]string{"command": command})
	return llmtest.Turn{ToolCalls: []llmtest.Call{{Name: "bash", Arguments: args}}}
}

// NewHarness starts a fake model serving turns; a turn list that uses
// When everywhere may be concatenated from several phases.
func NewHarness(t *testing.T, turns ...llmtest.Turn) *Env {
	t.Helper()
	return New(t, turns...)
}

// WritePlan writes a mission.json into the test's temp dir (outside the
// workspace) and returns its path.
func (e *Env) WritePlan(t *testing.T, plan string) string {
	t.Helper()
	path := filepath.Join(filepath.Dir(e.Workspace), "mission.json")
	if err := os.WriteFile(path, []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// OfType is the events of type typ.
func OfType(evs []event.Event, typ string) []event.Event {
	var out []event.Event
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// MarkThenSleep, a bash command the model runs, says it started (the
// file started) and sleeps; WaitSandboxed then finds it.
const MarkThenSleep = "echo started > started; sleep 30"

// sandboxedCommand returns the process ids, as this machine numbers them,
// of the sandboxed command running in dir and of its parent (the process
// that ran it: the runner). Inside, the command cannot tell them: it is
// pid 1 of its PID namespace, with a /proc of its own. 0 when none runs.
func sandboxedCommand(dir string) (pid, parent int) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var nspid, ppid []string
		for _, line := range strings.Split(string(status), "\n") {
			if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
				nspid = strings.Fields(rest)
			}
			if rest, ok := strings.CutPrefix(line, "PPid:"); ok {
				ppid = strings.Fields(rest)
			}
		}
		if len(nspid) < 2 || nspid[len(nspid)-1] != "1" || len(ppid) != 1 {
			continue
		}
		if cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd"); err != nil || cwd != dir {
			continue
		}
		parent, _ = strconv.Atoi(ppid[0])
		return n, parent
	}
	return 0, 0
}

// WaitSandboxed waits for the sandboxed command in dir and returns its
// pid and its parent's.
func WaitSandboxed(t *testing.T, dir string) (pid, parent int) {
	t.Helper()
	WaitFor(t, "the sandboxed command in "+dir, func() bool {
		pid, parent = sandboxedCommand(dir)
		return pid > 1 && parent > 1
	})
	return pid, parent
}

// Alive reports whether a process exists and is not a zombie.
func Alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// FindRunnerChild returns the pid of parent's `agent runner` child, or 0.
func FindRunnerChild(parent int) int {
	for _, pid := range children()[parent] {
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if strings.Contains(string(cmdline), "runner") {
			return pid
		}
	}
	return 0
}

// Descendants returns the pids of pid's children, of theirs, and so on.
func Descendants(pid int) []int {
	kids := children()
	var out []int
	for queue := kids[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, kids[queue[0]]...)
	}
	return out
}

// children is every process's children, by the parent's pid.
func children() map[int][]int {
	out := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + ent.Name() + "/stat")
		if err != nil {
			continue
		}
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 1 {
			if parent, err := strconv.Atoi(fields[1]); err == nil {
				out[parent] = append(out[parent], pid)
			}
		}
	}
	return out
}

// NoRaceExitSleep keeps a -race child from sleeping a second when it
// exits 0 (the race runtime's atexit_sleep_ms), which would make each
// CLI call and each run take a second longer.
var NoRaceExitSleep = "GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")

// ToolOutputs is the output of each tool called, by the tool's name (the
// last call's when a tool was called more than once).
func ToolOutputs(evs []event.Event) map[string]string {
	out := map[string]string{}
	for _, ev := range OfType(evs, event.ToolCompleted) {
		var d event.ToolCompletedData
		_ = ev.Decode(&d)
		out[d.Name] = d.Output
	}
	return out
}

// WriteFiles makes files under dir, named by slash paths, with their
// folders: a workspace's or AGENT_HOME's content for a test.
func WriteFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
