package evidence

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// WriteFindings writes f to dir/PHASE-ATTEMPT.json as indented JSON,
// creating dir. The caller passes WORKSPACE/.agent/runs/RUN/verification.
// The findings are also stored with verification.completed, which is the
// durable record; this file is their readable copy.
func WriteFindings(dir string, f Findings) (string, error) {
	// The phase id becomes a file name: refuse anything that could leave dir.
	if f.TaskID == "" || f.TaskID == "." || f.TaskID == ".." || strings.ContainsAny(f.TaskID, `/\`) {
		return "", fmt.Errorf("write findings: task id %q is not a file name", f.TaskID)
	}
	if f.Attempt < 1 {
		return "", fmt.Errorf("write findings %s: attempt %d is not positive", f.TaskID, f.Attempt)
	}
	// Lists are [] rather than null, so readers need no special case.
	if f.EvidenceRefs == nil {
		f.EvidenceRefs = []string{}
	}
	if f.Notes == nil {
		f.Notes = []string{}
	}
	if f.Checks == nil {
		f.Checks = []Check{}
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return "", fmt.Errorf("write findings %s: %w", f.TaskID, err)
	}
	data = append(data, '\n')

	name := fmt.Sprintf("%s-%d.json", f.TaskID, f.Attempt)
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("write findings %s: %w", name, err)
	}
	// The findings are stored with verification.completed; this file is
	// their readable copy, so it is not worth an fsync on every attempt.
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return "", fmt.Errorf("write findings %s: %w", name, err)
	}
	return path, nil
}
