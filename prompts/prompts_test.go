package prompts

import (
	"strings"
	"testing"
)

func TestRenderSystem(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		data    System
		want    []string
		wantNot []string
	}{
		{"plain", System{Tools: []string{"read_file", "bash"}}, []string{"read_file, bash"}, []string{"AGENTS.md", "iterations"}},
		{"instructions", System{Instructions: "Use tabs."}, []string{"AGENTS.md", "Use tabs."}, nil},
		{"promise", System{Promise: "ALL DONE"}, []string{"\nALL DONE\n"}, nil},
		{"skills", System{Skills: []Skill{{"pdf", "Read PDFs."}}}, []string{"skill tool", "\n- pdf: Read PDFs."}, []string{"JSON Schema"}},
		{"output schema", System{OutputSchema: `{"type":"object"}`}, []string{"single JSON value", "\n{\"type\":\"object\"}"}, []string{"Skills:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Render("system", tt.data)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("missing %q in:\n%s", w, got)
				}
			}
			for _, w := range tt.wantNot {
				if strings.Contains(got, w) {
					t.Errorf("unexpected %q in:\n%s", w, got)
				}
			}
		})
	}
}

func TestRenderSchemaFix(t *testing.T) {
	t.Parallel()
	got, err := Render("schema_fix", SchemaFix{Why: "missing properties: [\"age\"]", Left: 0})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{SchemaFixHeading + "\n", `missing properties: ["age"]`, "last attempt"} {
		if !strings.Contains(got, w) {
			t.Errorf("missing %q in:\n%s", w, got)
		}
	}
}

func TestRenderContinuation(t *testing.T) {
	t.Parallel()
	got, err := Render("continuation", Continuation{Objective: "Make tests pass", Iteration: 2, MaxIterations: 5, Promise: "DONE"})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Make tests pass", "iteration 2 of 5", "inspecting the workspace", "\nDONE"} {
		if !strings.Contains(got, w) {
			t.Errorf("missing %q in:\n%s", w, got)
		}
	}
}

func TestRenderUnknown(t *testing.T) {
	t.Parallel()
	if _, err := Render("nope", nil); err == nil {
		t.Fatal("want error for unknown template")
	}
}

func TestRenderPhase(t *testing.T) {
	t.Parallel()
	got, err := Render("phase", Phase{
		Objective: "Market report", Phase: PhaseInfo{ID: "write", Title: "Write it", Instructions: "Write report.md."},
		Attempt: 2, MaxAttempts: 3, Checks: []string{"file report.md exists and is not empty"},
		Dependencies: []Dependency{{ID: "gather", Title: "Gather", Output: "Found 3 sources.", Artifacts: []string{"sources.md"}}},
		Learnings:    []string{"gather: sources are in sources.md"},
		Guardrails:   []string{"verification failed: report.md is missing"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Market report", "write — Write it", "Attempt 2 of 3", "Write report.md.", "- file report.md exists",
		"## gather — Gather", "Files: sources.md", "Found 3 sources.", "- gather: sources are in sources.md",
		"GUARDRAILS", "- verification failed: report.md is missing"} {
		if !strings.Contains(got, w) {
			t.Errorf("missing %q in:\n%s", w, got)
		}
	}
	if strings.Contains(got, "Side effects already done") {
		t.Errorf("empty receipts section rendered:\n%s", got)
	}
}

func TestRenderPlanner(t *testing.T) {
	t.Parallel()
	got, err := Render("planner", Planner{Request: "Build a CLI", Tools: []string{"read_file", "list_files"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Build a CLI", "submit_plan", "read_file, list_files", "programmatic"} {
		if !strings.Contains(got, w) {
			t.Errorf("missing %q in:\n%s", w, got)
		}
	}
}
