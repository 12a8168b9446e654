package supervisor

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// excludeRunFiles keeps a harness's files for people (WORKSPACE/.agent/)
// out of `git status` when the workspace is a git repository's top: it
// adds /.agent/ to .git/info/exclude, the repository's own ignore list,
// which no commit carries. A workspace that is not one is left as it is.
func excludeRunFiles(workspace string) error {
	info := filepath.Join(workspace, ".git", "info")
	if fi, err := os.Stat(filepath.Join(workspace, ".git")); err != nil || !fi.IsDir() {
		return nil // not a repository's top, or a worktree's .git file
	}
	path := filepath.Join(info, "exclude")
	if f, err := os.Open(path); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); line == "/.agent/" || line == ".agent/" || line == ".agent" || line == "/.agent" {
				f.Close()
				return nil
			}
		}
		f.Close()
	}
	if err := os.MkdirAll(info, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintln(f, "# agent harness runs' files (mission.json, progress.md, logs): agent adds this line\n/.agent/")
	return err
}
