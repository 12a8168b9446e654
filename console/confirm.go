package console

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// PlanConfirmation asks a person at the terminal in whether to run a new
// plan; nil when in is not a terminal, where nobody would answer.
func PlanConfirmation(in io.Reader, errw io.Writer) func(missionPath string) bool {
	if !IsTerminal(in) {
		return nil
	}
	return func(missionPath string) bool { return confirmPlan(in, errw, missionPath) }
}

// confirmPlan asks on errw whether to run the plan written to missionPath
// and reads the answer from in: yes, unless the person says otherwise.
func confirmPlan(in io.Reader, errw io.Writer, missionPath string) bool {
	// The path on a line of its own, relative when it is under the
	// working directory: a long one wraps there, not through the question.
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, missionPath); err == nil && filepath.IsLocal(rel) {
			missionPath = rel
		}
	}
	fmt.Fprintf(errw, "the plan is in %s\nRun this plan? [Y/n] ", missionPath)
	answer, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false
	}
	answer = strings.ToLower(strings.TrimSpace(answer))
	return answer == "" || answer == "y" || answer == "yes"
}
