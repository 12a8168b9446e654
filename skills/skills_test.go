package skills

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"agent/tools"
)

// write makes files under dir, by slash path.
func write(t testing.TB, dir string, files map[string]string) {
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

func skillMD(name, desc, body string) string {
	return "---\nname: " + name + "\ndescription: " + desc + "\n---\n" + body
}

// found makes a workspace and a home with files and finds their skills.
func found(t *testing.T, wsFiles, homeFiles map[string]string) (*Catalog, []string, *tools.Workspace, string) {
	t.Helper()
	ws, home := t.TempDir(), t.TempDir()
	write(t, ws, wsFiles)
	write(t, home, homeFiles)
	w, err := tools.NewWorkspace(ws, home)
	if err != nil {
		t.Fatal(err)
	}
	c, warnings := Find(w, home)
	t.Cleanup(c.Close)
	return c, warnings, w, home
}

func call(t *testing.T, c *Catalog, w *tools.Workspace, args string) tools.Result {
	t.Helper()
	return c.Tool().Run(context.Background(), w, json.RawMessage(args))
}

// The three folders, the first found winning a name: .agents/skills,
// then .claude/skills, then $AGENT_HOME/skills.
func TestFindPrecedence(t *testing.T) {
	t.Parallel()
	c, warnings, w, _ := found(t, map[string]string{
		".agents/skills/dup/SKILL.md":     skillMD("dup", "from .agents", "agents body"),
		".claude/skills/dup/SKILL.md":     skillMD("dup", "from .claude", "claude body"),
		".claude/skills/pdf/SKILL.md":     skillMD("pdf", "Read PDFs.", "Use pdftotext."),
		".claude/skills/notes.txt":        "not a skill",
		".claude/skills/empty/readme":     "a folder without SKILL.md",
		".claude/skills/.hidden/SKILL.md": skillMD("hidden", "no", "no"),
	}, map[string]string{
		"skills/dup/SKILL.md":      skillMD("dup", "from home", "home body"),
		"skills/mine/SKILL.md":     skillMD("mine", "A home skill.", "Mine."),
		"skills/mine/ref/notes.md": "home notes",
		"skills/mine/data.bin":     "a\x00b",
	})
	if len(warnings) != 0 {
		t.Errorf("warnings: %q", warnings)
	}
	var got []string
	for _, s := range c.Skills() {
		got = append(got, s.Name+"="+s.Description)
	}
	if want := "dup=from .agents,pdf=Read PDFs.,mine=A home skill."; strings.Join(got, ",") != want {
		t.Errorf("skills = %s, want %s", strings.Join(got, ","), want)
	}
	if r := call(t, c, w, `{"name":"dup"}`); r.IsError || !strings.Contains(r.Output, "agents body") || !strings.Contains(r.Output, "Folder: .agents/skills/dup (in the workspace") {
		t.Errorf("skill dup: %+v", r)
	}
	r := call(t, c, w, `{"name":"mine"}`)
	if r.IsError || !strings.Contains(r.Output, "Mine.") || !strings.Contains(r.Output, "- ref/notes.md") || !strings.Contains(r.Output, "file argument") {
		t.Errorf("skill mine: %+v", r)
	}
	if r := call(t, c, w, `{"name":"mine","file":"ref/notes.md"}`); r.IsError || r.Output != "home notes" {
		t.Errorf("a home skill's file: %+v", r)
	}
	for _, bad := range []string{"../dup/SKILL.md", "/etc/passwd", "../../agent.db", "data.bin", "missing.md"} {
		if r := call(t, c, w, `{"name":"mine","file":"`+bad+`"}`); !r.IsError {
			t.Errorf("file %s read: %q", bad, r.Output)
		}
	}
	if r := call(t, c, w, `{"name":"nope"}`); !r.IsError || !strings.Contains(r.Output, "dup, pdf, mine") {
		t.Errorf("an unknown skill: %+v", r)
	}
}

// A malformed SKILL.md is skipped with a warning naming it; the others
// are found.
func TestFindMalformed(t *testing.T) {
	t.Parallel()
	c, warnings, _, _ := found(t, map[string]string{
		".claude/skills/nofront/SKILL.md":  "# Just a title\nno front matter",
		".claude/skills/noname/SKILL.md":   "---\ndescription: nameless\n---\nbody",
		".claude/skills/badyaml/SKILL.md":  "---\nname: [unclosed\ndescription: x\n---\n",
		".claude/skills/unclosed/SKILL.md": "---\nname: unclosed\ndescription: never closed\n",
		".claude/skills/upper/SKILL.md":    skillMD("Upper_Case", "bad name", ""),
		".claude/skills/nodesc/SKILL.md":   "---\nname: nodesc\n---\n",
		".claude/skills/good/SKILL.md":     skillMD("good", "Fine.", "ok"),
	}, nil)
	if len(c.Skills()) != 1 || c.Skills()[0].Name != "good" {
		t.Errorf("skills = %+v, want only good", c.Skills())
	}
	all := strings.Join(warnings, "\n")
	for _, want := range []string{
		".claude/skills/nofront/SKILL.md skipped: no front matter",
		".claude/skills/noname/SKILL.md skipped: its front matter has no name",
		".claude/skills/badyaml/SKILL.md skipped: its front matter is not valid YAML",
		".claude/skills/unclosed/SKILL.md skipped: its front matter has no closing ---",
		".claude/skills/upper/SKILL.md skipped: name \"Upper_Case\"",
		".claude/skills/nodesc/SKILL.md skipped: its front matter has no description",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no warning %q in:\n%s", want, all)
		}
	}
}

// A huge SKILL.md is cut with a note; a long description too, with a
// warning; a multi-line YAML description is one line.
func TestBounds(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("d", MaxDescription+50)
	c, warnings, w, _ := found(t, map[string]string{
		".agents/skills/big/SKILL.md":    skillMD("big", "Big.", strings.Repeat("line of instructions\n", 30_000)),
		".agents/skills/wordy/SKILL.md":  skillMD("wordy", long, "x"),
		".agents/skills/folded/SKILL.md": "---\nname: folded\ndescription: >\n  Two lines\n  folded.\n---\nbody",
	}, nil)
	r := call(t, c, w, `{"name":"big"}`)
	if r.IsError || len(r.Output) > MaxBody+1000 || !strings.Contains(r.Output, "[cut: SKILL.md is") {
		t.Errorf("a huge skill: %d bytes, error %t, ends %q", len(r.Output), r.IsError, r.Output[max(0, len(r.Output)-100):])
	}
	for _, s := range c.Skills() {
		switch s.Name {
		case "wordy":
			if len([]rune(s.Description)) != MaxDescription+1 {
				t.Errorf("a long description is %d characters", len([]rune(s.Description)))
			}
		case "folded":
			if s.Description != "Two lines folded." {
				t.Errorf("folded description %q", s.Description)
			}
		}
	}
	if !strings.Contains(strings.Join(warnings, "\n"), ".agents/skills/wordy/SKILL.md: its description is cut") {
		t.Errorf("warnings: %q", warnings)
	}
}

// A skill folder that is a symlink out of the workspace is not followed:
// the workspace's skills are read as the file tools read.
func TestWorkspaceConfinement(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	write(t, outside, map[string]string{"evil/SKILL.md": skillMD("evil", "From outside.", "secret")})
	ws, home := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, ".claude", "skills"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "evil"), filepath.Join(ws, ".claude", "skills", "evil")); err != nil {
		t.Fatal(err)
	}
	w, err := tools.NewWorkspace(ws, home)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := Find(w, home)
	defer c.Close()
	if len(c.Skills()) != 0 {
		t.Errorf("a skill outside the workspace was found: %+v", c.Skills())
	}
}

// BenchmarkFind is what skills cost a run's start: finding 100 skills
// (their front matter read and parsed), as every run and phase does.
func BenchmarkFind(b *testing.B) {
	ws, home := b.TempDir(), b.TempDir()
	files := map[string]string{}
	for i := range 100 {
		name := fmt.Sprintf("skill-%d", i)
		files[".claude/skills/"+name+"/SKILL.md"] = skillMD(name, "Does thing "+name+".", strings.Repeat("Step.\n", 200))
	}
	write(b, ws, files)
	w, err := tools.NewWorkspace(ws, home)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		c, _ := Find(w, home)
		if len(c.Skills()) != 100 {
			b.Fatalf("%d skills", len(c.Skills()))
		}
		c.Close()
	}
}
