// Package prompts holds the text the agent sends to models, as embedded
// templates, so wording changes never touch code.
package prompts

import (
	"bytes"
	"embed"
	"fmt"
	"strings"
	"text/template"
)

//go:embed *.tmpl
var files embed.FS

var templates = template.Must(template.New("").Option("missingkey=error").
	Funcs(template.FuncMap{"join": strings.Join}).ParseFS(files, "*.tmpl"))

// Render executes the named template (file name without .tmpl) with data.
func Render(name string, data any) (string, error) {
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, name+".tmpl", data); err != nil {
		return "", fmt.Errorf("render prompt %s: %w", name, err)
	}
	return strings.TrimSpace(b.String()), nil
}

// System is the data of the system prompt.
type System struct {
	Tools        []string
	Instructions string // AGENTS.md, if the workspace has one
	Promise      string // Ralph loop completion promise, if any
}

// Continuation is the data of the prompt that opens a Ralph iteration
// after the first: the conversation was cleared, the workspace was not.
type Continuation struct {
	Objective     string
	Iteration     int
	MaxIterations int
	Promise       string
	Reason        string // why the previous iteration ended, if known
}
