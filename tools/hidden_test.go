package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// AGENT_HOME inside the workspace (agent run from $HOME): no file tool
// reads, lists, greps, writes or edits anything in it, by its path or
// through a symlink, and the rest of the workspace works as before.
func TestHiddenDataDirectoryInsideTheWorkspace(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		".local/share/agent/gateway.token": "s3cret-gateway-token\n",
		".local/share/agent/config.toml":   "model = \"x\"\n",
		".local/share/other.txt":           "s3cret-neighbour\n",
		"notes.txt":                        "hello\n",
	})
	home := filepath.Join(root, ".local", "share", "agent")
	if err := os.Symlink(".local/share/agent", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	ws, err := NewWorkspace(root, home)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSet(ws, Options{Deny: []string{"bash"}})
	if err != nil {
		t.Fatal(err)
	}
	refused := []struct {
		tool string
		args any
	}{
		{"read_file", map[string]any{"path": ".local/share/agent/gateway.token"}},
		{"read_file", map[string]any{"path": home + "/gateway.token"}},
		{"read_file", map[string]any{"path": "link/gateway.token"}},
		{"write_file", map[string]any{"path": ".local/share/agent/config.toml", "content": "[mcp_servers.evil]\ncommand = \"/bin/sh\"\n"}},
		{"write_file", map[string]any{"path": "link/new.toml", "content": "x"}},
		{"edit_file", map[string]any{"path": ".local/share/agent/config.toml", "old_string": "x", "new_string": "y"}},
		{"list_files", map[string]any{"path": ".local/share/agent"}},
		{"grep", map[string]any{"pattern": "s3cret", "path": ".local/share/agent"}},
	}
	for _, c := range refused {
		r := call(t, s, c.tool, c.args)
		if !r.IsError || strings.Contains(r.Output, "s3cret-gateway") || !strings.Contains(r.Output, "agent's own data directory") {
			t.Errorf("%s %v: %+v", c.tool, c.args, r)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(home, "config.toml")); string(b) != "model = \"x\"\n" {
		t.Errorf("config.toml changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(home, "new.toml")); err == nil {
		t.Error("a file was written into AGENT_HOME through a symlink")
	}
	// Walks over the whole workspace leave it out.
	if r := call(t, s, "grep", map[string]any{"pattern": "s3cret"}); strings.Contains(r.Output, "gateway") || !strings.Contains(r.Output, "s3cret-neighbour") {
		t.Errorf("grep over the workspace: %+v", r)
	}
	if r := call(t, s, "list_files", map[string]any{"path": "."}); strings.Contains(r.Output, ".local/share/agent") || !strings.Contains(r.Output, ".local/share/other.txt") {
		t.Errorf("list_files over the workspace: %+v", r)
	}
	// The rest works.
	if r := call(t, s, "write_file", map[string]any{"path": "at-root.txt", "content": "x"}); r.IsError {
		t.Errorf("write at the root: %+v", r)
	}
	if r := call(t, s, "read_file", map[string]any{"path": "notes.txt"}); r.IsError || !strings.Contains(r.Output, "hello") {
		t.Errorf("read a workspace file: %+v", r)
	}
}

// A workspace inside AGENT_HOME is refused, naming both.
func TestWorkspaceInsideHiddenIsRefused(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	ws := filepath.Join(home, "ws")
	os.Mkdir(ws, 0o755)
	_, err := NewWorkspace(ws, home)
	if err == nil || !strings.Contains(err.Error(), ws) || !strings.Contains(err.Error(), "set AGENT_HOME") {
		t.Errorf("err = %v", err)
	}
}

// The check on the descriptor: a directory that Resolve saw as a plain
// directory but that is a symlink into AGENT_HOME when opened is refused.
func TestRefuseOpenedInHidden(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeTree(t, root, map[string]string{"home/gateway.token": "s3cret\n"})
	ws, err := NewWorkspace(root, filepath.Join(root, "home"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := ws.OpenRoot()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	os.Symlink("home", filepath.Join(root, "swapped"))
	if _, _, err := openRegular(ws, r, "swapped/gateway.token"); err == nil || !strings.Contains(err.Error(), "agent's own data directory") {
		t.Errorf("openRegular through a swapped link: %v", err)
	}
	if err := writeAtomic(ws, r, "swapped/planted", []byte("x"), 0o644); err == nil {
		t.Error("writeAtomic through a swapped link wrote into AGENT_HOME")
	}
	if _, err := os.Stat(filepath.Join(root, "home", "planted")); err == nil {
		t.Error("the planted file is there")
	}
}
