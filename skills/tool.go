package skills

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"

	"agent/tools"
)

// ToolName is the tool that loads a skill.
const ToolName = "skill"

var toolDef = tools.Definition{
	Name: ToolName,
	Description: "Load a skill listed in the system prompt: its instructions and the list of its files. " +
		"Call it before you start a task the skill is for, and follow what it says. " +
		"With file, read one of the skill's files instead (a path from that list).",
	Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "name": {"type": "string", "description": "The skill's name, as listed."},
    "file": {"type": "string", "description": "A file of the skill, relative to its folder, e.g. reference.md."}
  },
  "required": ["name"],
  "additionalProperties": false
}`),
}

// Tool is the skill tool over the catalog's skills.
func (c *Catalog) Tool() tools.Tool { return tool{c} }

type tool struct{ c *Catalog }

func (t tool) Definition() tools.Definition { return toolDef }
func (t tool) ReadOnly() bool               { return true }

func (t tool) Run(_ context.Context, _ *tools.Workspace, args json.RawMessage) tools.Result {
	var a struct {
		Name string `json:"name"`
		File string `json:"file"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return tools.Result{IsError: true, Output: fmt.Sprintf("invalid arguments for skill: %v", err)}
	}
	s, ok := t.c.lookup(strings.TrimSpace(a.Name))
	if !ok {
		return tools.Result{IsError: true, Output: fmt.Sprintf("no skill %q; the skills are: %s", a.Name, t.c.names())}
	}
	if a.File != "" {
		return s.readFile(a.File)
	}
	return s.load()
}

func (c *Catalog) lookup(name string) (Skill, bool) {
	for _, s := range c.skills {
		if s.Name == name {
			return s, true
		}
	}
	return Skill{}, false
}

func (c *Catalog) names() string {
	if len(c.skills) == 0 {
		return "none"
	}
	names := make([]string, len(c.skills))
	for i, s := range c.skills {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

// load is the skill's instructions and the list of its files.
func (s Skill) load() tools.Result {
	data, size, err := readFile(s.fsys, path.Join(s.dir, skillFile), maxRead)
	if err != nil {
		return tools.Result{IsError: true, Output: fmt.Sprintf("skill %s could not be read: %v", s.Name, err)}
	}
	_, body, err := split(data)
	if err != nil {
		return tools.Result{IsError: true, Output: fmt.Sprintf("skill %s could not be read: %v", s.Name, err)}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Skill %s: %s\n", s.Name, s.Description)
	if s.InWorkspace {
		fmt.Fprintf(&b, "Folder: %s (in the workspace: read_file and bash reach its files there)\n\n", s.Folder)
	} else {
		fmt.Fprintf(&b, "Folder: %s (in agent's data directory, which read_file and bash do not reach: read its files with this tool's file argument)\n\n", s.Folder)
	}
	text := strings.TrimSpace(string(body))
	if len(text) > MaxBody || size > int64(len(data)) {
		text = strings.ToValidUTF8(text[:min(len(text), MaxBody)], "")
		text += fmt.Sprintf("\n\n[cut: SKILL.md is %d bytes; only its beginning is shown]", size)
	}
	b.WriteString(text)
	files, more := s.files()
	if len(files) > 0 {
		b.WriteString("\n\nFiles of this skill, relative to its folder:\n")
		for _, f := range files {
			fmt.Fprintf(&b, "- %s\n", f)
		}
		if more {
			fmt.Fprintf(&b, "(only the first %d are listed)\n", MaxFiles)
		}
		fmt.Fprintf(&b, "Read one with skill {\"name\": %q, \"file\": %q}.", s.Name, files[0])
	}
	return tools.Result{Output: strings.TrimSpace(b.String())}
}

// readFile is one of the skill's text files, confined to its folder.
func (s Skill) readFile(name string) tools.Result {
	clean := path.Clean(strings.TrimPrefix(name, "./"))
	if !fsValid(clean) {
		return tools.Result{IsError: true, Output: fmt.Sprintf("file %q is not inside skill %s: give a path from its list of files", name, s.Name)}
	}
	data, size, err := readFile(s.fsys, path.Join(s.dir, clean), maxFileRead)
	if err != nil {
		return tools.Result{IsError: true, Output: fmt.Sprintf("file %s of skill %s: %v", name, s.Name, err)}
	}
	if !utf8.Valid(data) && size <= int64(len(data)) || strings.ContainsRune(string(data), 0) {
		return tools.Result{IsError: true, Output: fmt.Sprintf("file %s of skill %s is not text", name, s.Name)}
	}
	out := strings.ToValidUTF8(string(data), "")
	if size > int64(len(data)) {
		out += fmt.Sprintf("\n\n[cut: %s is %d bytes; only the first %d are shown]", name, size, len(data))
	}
	return tools.Result{Output: out}
}

// fsValid reports whether a cleaned slash path stays inside its folder.
func fsValid(p string) bool {
	return p != "." && p != ".." && !strings.HasPrefix(p, "../") && !strings.HasPrefix(p, "/")
}
