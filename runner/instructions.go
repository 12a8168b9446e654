package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// instructionsLimit bounds how much of AGENTS.md reaches the model.
const instructionsLimit = 64 << 10

// Instructions returns the workspace's AGENTS.md, the project's own
// instructions to the model, if it has one, and a warning for people when
// it could not be read whole.
func Instructions(workspace string) (text, warning string) {
	b, err := os.ReadFile(filepath.Join(workspace, "AGENTS.md"))
	if errors.Is(err, os.ErrNotExist) {
		return "", ""
	}
	if err != nil {
		return "", fmt.Sprintf("AGENTS.md not read: %v", err)
	}
	if len(b) > instructionsLimit {
		return string(b[:instructionsLimit]), fmt.Sprintf("AGENTS.md is %d bytes; only the first %d were used", len(b), instructionsLimit)
	}
	return string(b), ""
}
