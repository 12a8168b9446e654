package cli

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// defaultNote is one "(default …" or ", default …" in a flag's help line.
var defaultNote = regexp.MustCompile(`[(,]\s*default\b`)

// TestHelpFlagDefaults: in every command's --help, each flag states one
// default. urfave appends "(default: X)" from the flag's Value, which for
// the flags whose real default lives elsewhere (config, runner) used to
// contradict the usage text: "(default 50) (default: 0)".
func TestHelpFlagDefaults(t *testing.T) {
	t.Parallel()
	var paths [][]string
	var walk func(prefix []string, cmds []*cli.Command)
	walk = func(prefix []string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden {
				continue
			}
			p := append(append([]string{}, prefix...), c.Name)
			paths = append(paths, p)
			walk(p, c.Subcommands)
		}
	}
	paths = append(paths, nil) // agent --help
	walk(nil, newApp(nil, io.Discard, io.Discard).Commands)
	flagLines := 0
	for _, p := range paths {
		var out, errb bytes.Buffer
		args := append(append([]string{"agent"}, p...), "--help")
		if code := Run(args, strings.NewReader(""), &out, &errb); code != 0 {
			t.Errorf("%s: exit %d: %s", strings.Join(args, " "), code, errb.String())
			continue
		}
		for _, line := range strings.Split(out.String(), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(line), "-") {
				continue
			}
			flagLines++
			if n := len(defaultNote.FindAllString(line, -1)); n > 1 {
				t.Errorf("%s: a flag with %d defaults:\n%s", strings.Join(args, " "), n, line)
			}
		}
	}
	if flagLines < 50 {
		t.Fatalf("only %d flag lines in all help; is the help output parsed right?", flagLines)
	}
}

// TestScriptsSayWhatTheyDo: the set-up scripts announce their slow steps
// (a first build compiles SQLite for minutes without output), and the
// README asks for the Go version go.mod does.
func TestScriptsSayWhatTheyDo(t *testing.T) {
	t.Parallel()
	read := func(path string) string { // relative to the repository's root
		data, err := os.ReadFile(filepath.Join("..", path))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	goLine := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(read("go.mod"))
	if goLine == nil {
		t.Fatal("go.mod has no go line")
	}
	readme := read("README.md")
	if !strings.Contains(readme, "Needs Go "+goLine[1]+" ") {
		t.Errorf("README.md does not say 'Needs Go %s', the version go.mod needs", goLine[1])
	}
	for _, m := range regexp.MustCompile(`Go (1\.\d+(?:\.\d+)?)`).FindAllStringSubmatch(readme, -1) {
		if m[1] != goLine[1] {
			t.Errorf("README.md names Go %s; go.mod needs %s", m[1], goLine[1])
		}
	}
	// Each slow step is preceded by an echo that says what happens and
	// how long it takes.
	for _, c := range []struct{ script, step string }{
		{"scripts/demo.sh", "scripts/build.sh"},
		{"scripts/test.sh", "go vet ./..."},
		{"scripts/test.sh", "go test -race"},
	} {
		lines := strings.Split(read(c.script), "\n")
		found := false
		for i, l := range lines {
			if !strings.HasPrefix(l, c.step) {
				continue
			}
			found = true
			if i == 0 || !strings.HasPrefix(lines[i-1], "echo ") || !strings.Contains(lines[i-1], "SQLite") || !strings.Contains(lines[i-1], "minutes") {
				t.Errorf("%s: %q runs without first saying what it does and how long it takes (an echo naming SQLite and the minutes)", c.script, c.step)
			}
		}
		if !found {
			t.Errorf("%s has no step %q any more; update this test", c.script, c.step)
		}
	}
}
