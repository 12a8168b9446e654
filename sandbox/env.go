package sandbox

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// Secrets are agent's own: never given to the model's processes.
var Secrets = []string{"OPENAI_API_KEY", "AGENT_SMTP_PASS", "AGENT_SMTP_USER", "AGENT_SLACK_TOKEN", "AGENT_GATEWAY_TOKEN",
	"AGENT_DATABASE_URL", "PGPASSWORD"}

// looksSecret matches names that usually hold a credential: a word KEY,
// TOKEN, SECRET, PASSWORD, PASS, PASSWD, CREDENTIAL(S) or PAT.
var looksSecret = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?i)(^|_)(API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|CREDENTIALS?|PAT)(_|$)`)
})

// Environment is env without agent's secrets, the extra names, and every
// variable whose name looks like a credential, except those pass names.
func Environment(env, extra, pass []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case slices.Contains(pass, name):
		case slices.Contains(Secrets, name), slices.Contains(extra, name), looksSecret().MatchString(name):
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Explain says why a failed command's output may be the sandbox's doing,
// so the model can adapt; "" when nothing in it looks like a refusal.
func (s *Sandbox) Explain(output string) string {
	if s == nil || s.policy.Mode == Off {
		return ""
	}
	var why []string
	if strings.Contains(output, "Permission denied") || strings.Contains(output, "Operation not permitted") ||
		strings.Contains(output, "Read-only file system") {
		switch s.policy.Mode {
		case WorkspaceWrite:
			why = append(why, fmt.Sprintf("commands may write only in the workspace (%s) and $TMPDIR (%s)", s.policy.Workspace, s.tmp))
		case ReadOnly:
			why = append(why, fmt.Sprintf("commands may write only in $TMPDIR (%s): the workspace is read-only", s.tmp))
		}
		why = append(why, "agent's data directory cannot be read")
	}
	if !s.policy.Network {
		for _, sign := range []string{"Network is unreachable", "Could not resolve", "Temporary failure in name resolution",
			"Name or service not known", "Connection refused", "Cannot assign requested address", "network is unreachable"} {
			if strings.Contains(output, sign) {
				why = append(why, "the network is off, loopback included (the user can allow it with --network)")
				break
			}
		}
	}
	if len(why) == 0 {
		return ""
	}
	return fmt.Sprintf("[the sandbox (%s) may have refused this: %s]", s.policy.Mode, strings.Join(why, "; "))
}

// Support is what this machine can enforce (agent sandbox check).
type Support struct {
	Kernel     string   `json:"kernel"`
	LandlockV  int      `json:"landlock_abi"` // 0: none
	Namespaces bool     `json:"namespaces"`   // user, PID and network
	Modes      []Mode   `json:"modes"`        // the modes that work here
	Problems   []string `json:"problems,omitempty"`
	StartMS    float64  `json:"start_ms"` // one sandboxed `sh -c 'exit 0'`
}

// Check finds out what this machine supports, by trying.
func Check() Support {
	sup := Support{Kernel: kernel(), Modes: []Mode{Off}}
	if abi, err := landlockABI(); err == nil {
		sup.LandlockV = abi
	}
	nsErr := namespacesWork()
	sup.Namespaces = nsErr == nil
	if nsErr != nil {
		sup.Problems = append(sup.Problems, nsErr.(*UnsupportedError).What)
	}
	if err := probe(); err != nil {
		sup.Problems = append(sup.Problems, err.(*UnsupportedError).What)
	}
	if len(sup.Problems) > 0 {
		return sup
	}
	dir, err := os.MkdirTemp("", "agent-sandbox-check-")
	if err != nil {
		sup.Problems = append(sup.Problems, err.Error())
		return sup
	}
	defer os.RemoveAll(dir)
	s, err := New(Policy{Mode: WorkspaceWrite, Workspace: dir})
	if err != nil {
		sup.Problems = append(sup.Problems, strings.TrimPrefix(err.Error(), "the sandbox cannot be enforced here: "))
		return sup
	}
	defer s.Close()
	// The first command starts the run's helper server; the second costs
	// what every later one does.
	for range 2 {
		began := time.Now()
		c, err := s.Spawn([]string{"/bin/sh", "-c", "exit 0"}, dir, nil, nil, nil)
		if err != nil {
			sup.Problems = append(sup.Problems, err.Error())
			return sup
		}
		if ws := c.Wait(); ws.ExitStatus() != 0 {
			sup.Problems = append(sup.Problems, fmt.Sprintf("a sandboxed command failed: %v", ws))
			return sup
		}
		sup.StartMS = float64(time.Since(began).Microseconds()) / 1000
	}
	sup.Modes = []Mode{WorkspaceWrite, ReadOnly, Off}
	return sup
}
