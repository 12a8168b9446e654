package cli

import (
	"slices"
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/llm/llmtest"
)

func skillFile(name, description, body string) string {
	return "---\nname: " + name + "\ndescription: " + description + "\n---\n" + body
}

// TestSkillUsedByModel: a workspace's skill is listed in the system
// prompt and offered as the skill tool; the model loads it and the next
// request carries its instructions and files; --deny-tools skill offers
// and lists none.
func TestSkillUsedByModel(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("skill", `{"name":"haiku"}`)}},
		llmtest.Turn{Text: "Wrote it in 5-7-5."},
		llmtest.Turn{Text: "No skills here."},
	)
	e2etest.WriteFiles(t, e.Workspace, map[string]string{
		".claude/skills/haiku/SKILL.md":    skillFile("haiku", "Write poems as haiku.", "Count syllables: 5, 7, 5. Read examples.md first."),
		".claude/skills/haiku/examples.md": "An old silent pond",
	})
	res := e.Run("run", "--json", "write a poem")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	reqs := e.Srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	if sys := reqs[0].Messages()[0].Content; !strings.Contains(sys, "- haiku: Write poems as haiku.") {
		t.Errorf("the system prompt does not list the skill:\n%s", sys)
	}
	if !slices.Contains(reqs[0].ToolNames(), "skill") {
		t.Errorf("tools offered: %v, want skill among them", reqs[0].ToolNames())
	}
	last := reqs[1].LastMessage()
	if last.Role != "tool" || !strings.Contains(last.Content, "Count syllables: 5, 7, 5.") ||
		!strings.Contains(last.Content, "- examples.md") || !strings.Contains(last.Content, ".claude/skills/haiku") {
		t.Errorf("the skill's result = %+v, want its body, its files and its folder", last)
	}

	res = e.Run("run", "--json", "--deny-tools", "skill", "write a poem")
	if res.Code != 0 {
		t.Fatalf("--deny-tools skill: exit %d: %s", res.Code, res.Stderr)
	}
	req := e.Srv.Requests()[2]
	if slices.Contains(req.ToolNames(), "skill") || strings.Contains(req.Messages()[0].Content, "haiku") {
		t.Errorf("a run denying skill was offered it, or shown the list")
	}
}

// TestSkillMalformedWarns: a SKILL.md without front matter is a warning
// naming the file, not a failed run; the skill is not offered.
func TestSkillMalformedWarns(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, llmtest.Turn{Text: "Done."}, llmtest.Turn{Text: "Done again."})
	e2etest.WriteFiles(t, e.Workspace, map[string]string{
		".agents/skills/broken/SKILL.md": "# Broken\nThis skill forgot its front matter.",
	})
	res := e.Run("run", "--json", "hi")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	warned := ""
	for _, ev := range e2etest.OfType(e2etest.DecodeEvents(t, res.Stdout), event.Warning) {
		var d event.WarningData
		if ev.Decode(&d) == nil && strings.Contains(d.Message, ".agents/skills/broken/SKILL.md") {
			warned = d.Message
		}
	}
	if !strings.Contains(warned, "no front matter") {
		t.Errorf("no warning naming the file and what is wrong; got %q", warned)
	}
	if slices.Contains(e.Srv.Requests()[0].ToolNames(), "skill") {
		t.Error("the skill tool was offered with no skill to load")
	}
	plain := e.Run("run", "hi again")
	if plain.Code != 0 || !strings.Contains(plain.Stderr, "warning: skill .agents/skills/broken/SKILL.md skipped") {
		t.Errorf("people are not told: %s", plain.Stderr)
	}
}

// TestSkillLocations: .agents/skills, .claude/skills and
// $AGENT_HOME/skills are all read; on a name clash the first wins, in
// that order; a home skill's files are read through the skill tool, as
// the model's file tools never reach AGENT_HOME.
func TestSkillLocations(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{
			e2etest.ToolCall("skill", `{"name":"deploy"}`),
			e2etest.ToolCall("skill", `{"name":"style","file":"rules/go.md"}`),
			e2etest.ToolCall("read_file", `{"path":"../home/skills/style/rules/go.md"}`),
		}},
		llmtest.Turn{Text: "Done."},
	)
	e2etest.WriteFiles(t, e.Workspace, map[string]string{
		".agents/skills/deploy/SKILL.md": skillFile("deploy", "Deploy (agents).", "Use the agents way."),
		".claude/skills/deploy/SKILL.md": skillFile("deploy", "Deploy (claude).", "Use the claude way."),
		".claude/skills/review/SKILL.md": skillFile("review", "Review code.", "Be kind."),
	})
	e2etest.WriteFiles(t, e.Home, map[string]string{
		"skills/deploy/SKILL.md":   skillFile("deploy", "Deploy (home).", "Use the home way."),
		"skills/style/SKILL.md":    skillFile("style", "House style.", "See rules/go.md."),
		"skills/style/rules/go.md": "gofmt everything",
	})
	res := e.Run("run", "--json", "ship it")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	reqs := e.Srv.Requests()
	sys := reqs[0].Messages()[0].Content
	for _, want := range []string{"- deploy: Deploy (agents).", "- review: Review code.", "- style: House style."} {
		if !strings.Contains(sys, want) {
			t.Errorf("the system prompt lacks %q:\n%s", want, sys)
		}
	}
	if strings.Contains(sys, "Deploy (claude)") || strings.Contains(sys, "Deploy (home)") {
		t.Errorf("a skill that lost its name clash is listed:\n%s", sys)
	}
	out := e2etest.ToolOutputs(e2etest.DecodeEvents(t, res.Stdout))
	var got []string
	for _, m := range reqs[1].Messages() {
		if m.Role == "tool" {
			got = append(got, m.Content)
		}
	}
	if len(got) != 3 || !strings.Contains(got[0], "Use the agents way.") || got[1] != "gofmt everything" || !strings.Contains(got[2], "outside the workspace") {
		t.Errorf("tool results = %q (events %v)", got, out)
	}
}
