package evidence

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"agent/tools"
)

// commandOutputMax is how much of a check command's output a note keeps,
// half from the beginning and half from the end.
const commandOutputMax = 4096

// Programmatic runs Evidence.Command with bash -c in the workspace root and
// passes when it exits 0. The command runs in its own process group, which
// is killed as a whole at Input.CommandTimeout.
type Programmatic struct{}

// Evaluate returns one check for the command.
func (Programmatic) Evaluate(ctx context.Context, in Input) []Check {
	command := in.Evidence.Command
	c := Check{Ref: command}
	if strings.TrimSpace(command) == "" {
		c.Note = "no command to run"
		return []Check{c}
	}
	if in.Workspace == nil {
		c.Note = "no workspace to run the command in"
		return []Check{c}
	}
	timeout := in.CommandTimeout
	if timeout <= 0 {
		timeout = DefaultCommandTimeout
	}
	output, code, err := tools.RunCommand(ctx, in.Sandbox, in.Workspace.Root(), command, timeout, commandOutputMax)
	quoted := "`" + clip(command, 200) + "`"
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		c.Note = fmt.Sprintf("%s timed out after %s; the process group was killed", quoted, timeout)
	case errors.Is(err, context.Canceled):
		c.Note = fmt.Sprintf("%s was cancelled; the process group was killed", quoted)
	case err != nil:
		c.Note = fmt.Sprintf("%s did not finish: %v", quoted, err)
	default:
		c.OK = code == 0
		c.Note = fmt.Sprintf("%s exited with code %d", quoted, code)
		if why := in.Sandbox.Explain(output); !c.OK && why != "" {
			c.Note += " " + why
		}
	}
	if output = strings.TrimRight(output, "\n"); output != "" {
		c.Note += "\n" + output
	} else {
		c.Note += " (no output)"
	}
	return []Check{c}
}
