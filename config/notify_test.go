package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A [[notify]] block or public_url that cannot work is refused in one
// line that names the block and the key.
func TestNotifyBlocksAreChecked(t *testing.T) {
	ok := `public_url = "https://agent.example.com"
[[notify]]
on = ["waiting", "failed"]
webhook = "https://hooks.slack.com/services/T0/B0/secret"
format = "slack"
[[notify]]
on = ["completed"]
command = ["notify-send", "agent"]
[[notify]]
on = ["job_failed"]
email = "ops@example.com"
[[notify]]
on = ["waiting"]
slack_channel = "#ops"
`
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(ok), 0o600); err != nil {
		t.Fatal(err)
	}
	f, _, err := ReadFile(home)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Notify) != 4 || !f.Notify[0].Wants(NotifyFailed) || f.Notify[0].Wants(NotifyCompleted) || f.PublicURL != "https://agent.example.com" {
		t.Fatalf("read %+v", f)
	}
	if got := f.Notify[0].Channel(); got != "webhook https://hooks.slack.com/… (slack)" || strings.Contains(got, "secret") {
		t.Errorf("a webhook is shown as %q: its path is often its secret", got)
	}

	for content, want := range map[string]string{
		"[[notify]]\nwebhook = \"https://x\"\n":                                                            `notify[1]: on: say which events`,
		"[[notify]]\non = [\"done\"]\nwebhook = \"https://x\"\n":                                           `notify[1]: on: "done" is not an event`,
		"[[notify]]\non = [\"failed\"]\n":                                                                  `notify[1]: give one channel`,
		"[[notify]]\non = [\"failed\"]\nwebhook = \"https://x\"\nemail = \"a@b\"\n":                        `notify[1]: give one channel`,
		"[[notify]]\non = [\"failed\"]\nwebhook = \"ftp://x\"\n":                                           `notify[1]: webhook "ftp://x"`,
		"[[notify]]\non = [\"failed\"]\nwebhook = \"https://x\"\nformat = \"teams\"\n":                     `notify[1]: format "teams"`,
		"[[notify]]\non = [\"failed\"]\nemail = \"a@b\"\nformat = \"slack\"\n":                             `notify[1]: format applies to a webhook only`,
		"[[notify]]\non = [\"failed\"]\nemail = \"not an address\"\n":                                      `notify[1]: email "not an address"`,
		"[[notify]]\non = [\"failed\"]\ncommand = [\"\"]\n":                                                `notify[1]: command: the program is empty`,
		"[[notify]]\non = [\"failed\"]\nwebhook = \"https://x\"\nchannel = \"#a\"\n":                       `unknown key notify.channel`,
		"public_url = \"agent.example.com\"\n":                                                             `public_url "agent.example.com"`,
		"[[notify]]\non = [\"failed\"]\ncommand = [\"true\"]\n[[notify]]\non = []\ncommand = [\"true\"]\n": `notify[2]: on`,
	} {
		home := t.TempDir()
		if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := ReadFile(home)
		var cfgErr *Error
		if !errors.As(err, &cfgErr) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v; want one line with %q", content, err, want)
		}
	}
}
