// Package skills finds the skills a run offers: folders holding a SKILL.md
// (YAML front matter with name and description, then instructions), in
// the workspace's .agents/skills and .claude/skills and in
// $AGENT_HOME/skills, the convention of Claude Code, Codex and the Agent
// Skills format (README.md#skills). The system prompt lists their names
// and descriptions; the skill tool loads one when the model asks.
package skills

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"agent/tools"
)

// Limits: what a skill may bring into the model's context.
const (
	MaxSkills      = 100        // listed in the system prompt, the first found first
	MaxDescription = 1024       // characters of a description (the Agent Skills limit)
	MaxBody        = 20_000     // bytes of instructions one skill call returns
	MaxFiles       = 100        // files listed for a skill
	maxRead        = 256 << 10  // bytes of a SKILL.md read at all
	maxFileRead    = MaxBody    // bytes of one of its files the tool returns
	maxDepth       = 4          // folders deep its files are listed
	skillFile      = "SKILL.md" // the file that makes a folder a skill
)

// The folders skills are found in, in the order they win a name clash.
var workspaceDirs = []string{".agents/skills", ".claude/skills"}

// HomeDir is the skills folder of a data directory.
func HomeDir(home string) string { return filepath.Join(home, "skills") }

// validName is a name as the Agent Skills format allows it: lowercase
// letters, digits and single hyphens.
var validName = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// Skill is one skill found.
type Skill struct {
	Name        string
	Description string
	// Folder is where its files are, as the model is told: relative to
	// the workspace, or under $AGENT_HOME/skills.
	Folder      string
	InWorkspace bool

	fsys fs.FS  // the file system it was found in
	dir  string // its folder in fsys
}

// source is one folder skills are found in.
type source struct {
	fsys        fs.FS
	dir         string // the skills folder in fsys
	label       string // how it is named to people and the model
	inWorkspace bool
}

// Catalog is the skills of a run. Close releases the folders they are
// read from.
type Catalog struct {
	skills []Skill
	closes []func() error
}

// Find finds the skills of a run in workspace ws, with data directory
// home (empty: none there), and says for people what it skipped and why:
// one warning per file at fault. The workspace's folders win a name
// clash, in the order of workspaceDirs, then home's.
func Find(ws *tools.Workspace, home string) (*Catalog, []string) {
	c := &Catalog{}
	var sources []source
	var warnings []string
	if fsys, closeFS, err := ws.FS(); err != nil {
		warnings = append(warnings, fmt.Sprintf("skills in the workspace not read: %v", err))
	} else {
		c.closes = append(c.closes, closeFS)
		for _, d := range workspaceDirs {
			sources = append(sources, source{fsys: fsys, dir: d, label: d, inWorkspace: true})
		}
	}
	if home != "" {
		root, err := os.OpenRoot(HomeDir(home))
		switch {
		case err == nil:
			c.closes = append(c.closes, root.Close)
			sources = append(sources, source{fsys: root.FS(), dir: ".", label: HomeDir(home)})
		case !errors.Is(err, fs.ErrNotExist):
			warnings = append(warnings, fmt.Sprintf("skills in %s not read: %v", HomeDir(home), err))
		}
	}
	found, more := find(sources)
	c.skills = found
	return c, append(warnings, more...)
}

// Close releases what Find opened.
func (c *Catalog) Close() {
	for _, f := range c.closes {
		_ = f()
	}
}

// Skills are the skills found, in the order they are listed.
func (c *Catalog) Skills() []Skill { return c.skills }

// find reads the skills of sources, the first of a name winning.
func find(sources []source) ([]Skill, []string) {
	var out []Skill
	var warnings []string
	seen := map[string]bool{}
	for _, src := range sources {
		entries, err := fs.ReadDir(src.fsys, src.dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("skills in %s not read: %v", src.label, err))
			continue
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") {
				continue
			}
			dir := path.Join(src.dir, e.Name())
			if st, err := fs.Stat(src.fsys, dir); err != nil || !st.IsDir() {
				continue // a file beside the skills, or a link to nothing
			}
			file := src.label + "/" + e.Name() + "/" + skillFile
			s, warning, ok := read(src, dir, file)
			if warning != "" {
				warnings = append(warnings, warning)
			}
			if !ok || seen[s.Name] {
				continue
			}
			if len(out) == MaxSkills {
				warnings = append(warnings, fmt.Sprintf("skill %s not listed: a run lists at most %d skills", file, MaxSkills))
				continue
			}
			seen[s.Name] = true
			s.Folder = src.label + "/" + e.Name()
			out = append(out, s)
		}
	}
	return out, warnings
}

// read reads the front matter of the skill in dir: ok says it is a
// skill; warning, when not empty, says for people what is wrong with its
// file, named by file.
func read(src source, dir, file string) (s Skill, warning string, ok bool) {
	data, _, err := readFile(src.fsys, path.Join(dir, skillFile), maxRead)
	if errors.Is(err, fs.ErrNotExist) {
		return s, "", false // a folder that is no skill
	}
	if err != nil {
		return s, fmt.Sprintf("skill %s skipped: %v", file, err), false
	}
	front, _, err := split(data)
	if err != nil {
		return s, fmt.Sprintf("skill %s skipped: %v", file, err), false
	}
	var meta map[string]any
	if err := yaml.Unmarshal(front, &meta); err != nil {
		return s, fmt.Sprintf("skill %s skipped: its front matter is not valid YAML: %v", file, err), false
	}
	name, _ := meta["name"].(string)
	desc, _ := meta["description"].(string)
	name, desc = strings.TrimSpace(name), strings.Join(strings.Fields(desc), " ")
	switch {
	case name == "":
		return s, fmt.Sprintf("skill %s skipped: its front matter has no name", file), false
	case len(name) > 64 || !validName.MatchString(name):
		return s, fmt.Sprintf("skill %s skipped: name %q must be 1 to 64 lowercase letters, digits and single hyphens", file, name), false
	case desc == "":
		return s, fmt.Sprintf("skill %s skipped: its front matter has no description, which says when to use it", file), false
	}
	if r := []rune(desc); len(r) > MaxDescription {
		desc = string(r[:MaxDescription]) + "…"
		warning = fmt.Sprintf("skill %s: its description is cut to %d characters", file, MaxDescription)
	}
	return Skill{Name: name, Description: desc, InWorkspace: src.inWorkspace, fsys: src.fsys, dir: dir}, warning, true
}

// split parts a SKILL.md into its front matter and its body.
func split(data []byte) (front, body []byte, err error) {
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	first, rest, _ := bytes.Cut(data, []byte("\n"))
	if string(bytes.TrimSpace(first)) != "---" {
		return nil, nil, errors.New("no front matter: it must begin with a --- line, then name: and description:, then ---")
	}
	for off := 0; off <= len(rest); {
		line, _, _ := bytes.Cut(rest[off:], []byte("\n"))
		if string(bytes.TrimSpace(line)) == "---" {
			end := min(off+len(line)+1, len(rest))
			return rest[:off], rest[end:], nil
		}
		if off+len(line) >= len(rest) {
			break
		}
		off += len(line) + 1
	}
	return nil, nil, errors.New("its front matter has no closing --- line")
}

// readFile reads at most limit bytes of a regular file, and says how big
// it is.
func readFile(fsys fs.FS, name string, limit int) ([]byte, int64, error) {
	st, err := fs.Stat(fsys, name)
	if err != nil {
		return nil, 0, err
	}
	if !st.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("not a regular file")
	}
	f, err := fsys.Open(name)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)))
	return data, st.Size(), err
}

// files lists a skill's files but SKILL.md, relative to its folder: not
// hidden ones, MaxFiles at most (more says so), maxDepth deep.
func (s Skill) files() (list []string, more bool) {
	_ = fs.WalkDir(s.fsys, s.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == s.dir {
			return nil
		}
		rel := strings.TrimPrefix(p, s.dir+"/")
		if strings.HasPrefix(d.Name(), ".") || d.IsDir() && strings.Count(rel, "/") >= maxDepth-1 {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() || rel == skillFile {
			return nil
		}
		if len(list) == MaxFiles {
			more = true
			return fs.SkipAll
		}
		list = append(list, rel)
		return nil
	})
	sort.Strings(list)
	return list, more
}
