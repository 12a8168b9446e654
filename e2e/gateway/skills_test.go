package gateway

import (
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway/api"
	"agent/llm/llmtest"
)

// TestGatewaySkill: a gateway run, in an `agent runner` child as jobs'
// and workers' runs are, lists the workspace's skills and loads one; the
// malformed one is a warning in the session's stream.
func TestGatewaySkill(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("skill", `{"name":"triage"}`)}},
		llmtest.Turn{Text: "Triaged."},
	)
	e2etest.WriteFiles(t, e.Workspace, map[string]string{
		".agents/skills/triage/SKILL.md": "---\nname: triage\ndescription: Sort incoming bugs.\n---\nLabel each bug by area.",
		".agents/skills/broken/SKILL.md": "---\nname: broken\n",
	})
	srv, _ := e.InProcessGateway(nil)
	c := e2etest.GwDial(t, srv.Addr())
	run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{Input: "triage the bugs",
		Options: api.RunOptions{AskHuman: new(false)}})
	evs := e2etest.GwWait(t, c, run.RunID)
	if last := e2etest.LastFrame(evs); last.Event != event.RunCompleted {
		t.Fatalf("the run ended %s: %s", last.Event, last.Data)
	}
	warned := false
	for _, ev := range evs {
		warned = warned || ev.Event == event.Warning && strings.Contains(string(ev.Data), ".agents/skills/broken/SKILL.md")
	}
	if !warned {
		t.Errorf("no warning naming the malformed SKILL.md: %s", e2etest.FrameTypes(evs))
	}
	reqs := e.Srv.Requests()
	if len(reqs) != 2 || !strings.Contains(reqs[0].Messages()[0].Content, "- triage: Sort incoming bugs.") ||
		!strings.Contains(reqs[1].LastMessage().Content, "Label each bug by area.") {
		t.Errorf("the skill was not listed and loaded through the gateway")
	}
}
