// Package prompts holds the text the agent sends to models, as embedded
// templates, so wording changes never touch code.
package prompts

import (
	"bytes"
	"embed"
	"fmt"
	"strings"
	"sync"
	"text/template"
)

//go:embed *.tmpl
var files embed.FS

// parsed caches each template on first use: every process starts with
// this package, but a runner child renders one or two of the templates.
var (
	parsedMu sync.Mutex
	parsed   = map[string]*template.Template{}
)

func lookup(name string) (*template.Template, error) {
	parsedMu.Lock()
	defer parsedMu.Unlock()
	if t, ok := parsed[name]; ok {
		return t, nil
	}
	t, err := template.New(name+".tmpl").Option("missingkey=error").
		Funcs(template.FuncMap{"join": strings.Join}).ParseFS(files, name+".tmpl")
	if err != nil {
		return nil, err
	}
	parsed[name] = t
	return t, nil
}

// Render executes the named template (file name without .tmpl) with data.
func Render(name string, data any) (string, error) {
	t, err := lookup(name)
	if err != nil {
		return "", fmt.Errorf("render prompt %s: %w", name, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("render prompt %s: %w", name, err)
	}
	return strings.TrimSpace(b.String()), nil
}

// System is the data of the system prompt.
type System struct {
	Tools        []string
	Instructions string // AGENTS.md, if the workspace has one
	Promise      string // Ralph loop completion promise, if any
	OutputSchema string // the JSON Schema the final answer must satisfy, if any
	Skills       []Skill
}

// Skill is a skill the model may load with the skill tool.
type Skill struct {
	Name, Description string
}

// SchemaFix is the data of the message that sends back a final answer
// its output schema refused (README.md#structured-output).
type SchemaFix struct {
	Why  string // what is wrong with it
	Left int    // fixes left after this one
}

// SchemaFixHeading opens that message, so a resumed run can count the
// fixes it already asked for.
const SchemaFixHeading = "[Your final answer does not satisfy the output schema]"

// Heading is SchemaFixHeading, for the template.
func (SchemaFix) Heading() string { return SchemaFixHeading }

// Continuation is the data of the prompt that opens a Ralph iteration
// after the first: the conversation was cleared, the workspace was not.
type Continuation struct {
	Objective     string
	Iteration     int
	MaxIterations int
	Promise       string
	Reason        string // why the previous iteration ended, if known
}

// Planner is the data of the planner's first message.
type Planner struct {
	Request  string
	Tools    []string // read-only tools the planner may use first
	AskHuman bool     // it may ask the person with ask_human
}

// Phase is the data of a phase attempt's first message: everything the
// fresh context needs and nothing else.
type Phase struct {
	Objective    string
	Phase        PhaseInfo
	Attempt      int
	MaxAttempts  int
	Checks       []string // how the phase will be verified, in words
	Dependencies []Dependency
	Learnings    []string
	Guardrails   []string // failed approaches and verification notes of earlier attempts
	Receipts     []string // side effects already done in this phase
}

// PhaseInfo is the phase as the plan states it.
type PhaseInfo struct {
	ID, Title, Instructions string
}

// Dependency is a finished phase this one builds on.
type Dependency struct {
	ID, Title string
	Output    string
	Artifacts []string
}

// Compaction is the data of the request that summarises the part of a
// conversation compaction replaces (README.md#context-and-spend).
type Compaction struct {
	Transcript string // the replaced messages, as text
	Prior      bool   // earlier runs of the session are among them
}

// SummaryHeading opens the message that stands for a compacted span.
const SummaryHeading = "[Summary of the earlier conversation, compacted to fit the context window]"
