package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"agent/sandbox"
)

const (
	// bashMaxTimeout is the longest timeout_s a call may ask for, unless the
	// operator configured a longer default.
	bashMaxTimeout = 600 * time.Second
	// bashWaitDelay is how long we keep reading after the shell exits while
	// a background process still holds the output pipe.
	bashWaitDelay = 2 * time.Second
)

type bashTool struct {
	timeout   time.Duration
	maxOutput int
	waitDelay time.Duration
	sandbox   *sandbox.Sandbox // nil: unconfined
}

func (t *bashTool) Definition() Definition {
	def := t.timeout
	if def <= 0 {
		def = DefaultBashTimeout
	}
	max := bashMaxTimeout
	if def > max {
		max = def
	}
	return Definition{
		Name: "bash",
		Description: fmt.Sprintf(`Run a shell command with bash -c in the workspace root and return its combined stdout and stderr.

Each call starts a fresh shell: cd, variables and other shell state do not carry over to the next call, so chain steps with && ("cd web && npm test"). stdin is empty (/dev/null), so anything that waits for input fails or hangs until the timeout; use non-interactive flags such as -y, --yes or --no-pager.

The command and every process it started are killed after timeout_s seconds (default %s, max %s). A non-zero exit status is reported as an error, with the output followed by "exit status N". Very long output is cut in the middle, keeping the beginning and the end; for big outputs redirect to a file and use grep or read_file on it. To start a server that outlives the call, run it with nohup in the background and redirect its output to a file.

For files in the workspace prefer read_file, list_files, grep, write_file and edit_file over cat, find, sed and echo.`,
			fmtSeconds(def), fmtSeconds(max)),
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "command": {"type": "string", "description": "The shell command to run."},
    "timeout_s": {"type": "number", "exclusiveMinimum": 0, "description": "Timeout in seconds; the default is usually enough."}
  },
  "required": ["command"],
  "additionalProperties": false
}`),
	}
}

func (t *bashTool) ReadOnly() bool { return false }

func (t *bashTool) Run(ctx context.Context, ws *Workspace, args json.RawMessage) Result {
	def := t.Definition()
	var a struct {
		Command  string   `json:"command"`
		TimeoutS *float64 `json:"timeout_s"`
	}
	if err := decodeArgs(def, args, &a); err != nil {
		return errorf("%v", err)
	}
	if strings.TrimSpace(a.Command) == "" {
		return errorf("command is empty")
	}
	timeout := t.timeout
	if timeout <= 0 {
		timeout = DefaultBashTimeout
	}
	max := bashMaxTimeout
	if timeout > max {
		max = timeout
	}
	if a.TimeoutS != nil {
		s := *a.TimeoutS
		if s <= 0 {
			return errorf("timeout_s must be more than 0, not %v", s)
		}
		if s > max.Seconds() {
			return errorf("timeout_s must be at most %v, not %v", max.Seconds(), s)
		}
		timeout = time.Duration(s * float64(time.Second))
	}

	maxOut := t.maxOutput
	if maxOut <= 0 {
		maxOut = DefaultMaxOutput
	}
	r := runShell(ctx, t.sandbox, ws.Root(), a.Command, timeout, t.waitDelay, maxOut)
	if !r.started {
		return errorf("start %s: %v", r.shell, r.err)
	}
	status := r.status()
	// Leftover background processes get a status note but are not a failure.
	isErr := !r.success()

	reserve := 0
	// Say when the sandbox may have refused something, so the model can
	// adapt: a pipeline can exit 0 with a refusal inside.
	if why := t.sandbox.Explain(r.text); why != "" {
		status = strings.TrimSpace(status + "\n" + why)
	}
	if status != "" {
		reserve = len(status) + 1
	}
	body, cut := truncateTotal(r.text, r.total, maxOut-reserve)
	if status != "" {
		if body != "" && !strings.HasSuffix(body, "\n") {
			body += "\n"
		}
		body += status
	}
	if body == "" {
		body = "(no output)"
	}
	return Result{Output: body, IsError: isErr, Truncated: cut}
}

// fmtSeconds formats a duration as "120s" or "0.5s".
func fmtSeconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}

// headTail is an io.Writer that keeps the first and the last limit bytes
// written and counts the rest, so a command that prints gigabytes costs a
// bounded amount of memory.
type headTail struct {
	mu    sync.Mutex
	limit int
	head  []byte
	tail  []byte
	total int
}

func (b *headTail) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	b.total += n
	if room := b.limit - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	if len(p) > 0 {
		b.tail = append(b.tail, p...)
		if len(b.tail) > 2*b.limit { // trim in batches so appends stay amortized O(1)
			copy(b.tail, b.tail[len(b.tail)-b.limit:])
			b.tail = b.tail[:b.limit]
		}
	}
	return n, nil
}

// snapshot returns the kept bytes (head then tail) and the total written.
func (b *headTail) snapshot() (string, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	tail := b.tail
	if len(tail) > b.limit {
		tail = tail[len(tail)-b.limit:]
	}
	return string(b.head) + string(tail), b.total
}
