package e2etest

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSourceKeyCoversTheBuild: every file of this module a build of agent
// reads, as go list names them, is one sourceKey hashes, so a change to
// any of them makes Main build agent again.
func TestSourceKeyCoversTheBuild(t *testing.T) {
	t.Parallel()
	dir := Root()
	cmd := exec.Command(goTool(), "list", "-deps", "-f",
		`{{if and .Module .Module.Main}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .CgoFiles}}{{$d}}/{{.}}
{{end}}{{range .CFiles}}{{$d}}/{{.}}
{{end}}{{range .HFiles}}{{$d}}/{{.}}
{{end}}{{range .SFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}{{end}}`, "agent")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	files := strings.Fields(string(out))
	if len(files) < 100 {
		t.Fatalf("go list named only %d files", len(files))
	}
	for _, f := range files {
		rel, err := filepath.Rel(dir, f)
		if err != nil {
			t.Fatal(err)
		}
		rel = filepath.ToSlash(rel)
		skipped := false
		for d := filepath.ToSlash(filepath.Dir(rel)); d != "."; d = filepath.ToSlash(filepath.Dir(d)) {
			skipped = skipped || skipDir(d)
		}
		if !inBuild(rel) || skipped {
			t.Errorf("%s is in the build but not in the source key", rel)
		}
	}
}
