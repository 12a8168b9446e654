package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxSymlinks bounds symlink expansion while resolving one path, like the
// kernel's ELOOP limit, so a link cycle ends in an error instead of a hang.
const maxSymlinks = 40

// Workspace is the directory the model's file tools are confined to.
//
// A file tool first maps its path argument with Resolve, which decides
// containment and gives the clear OutsideError for "..", an absolute path
// elsewhere or a symlink leading out. It then does the actual reading,
// writing or walking through an os.Root opened on the workspace (OpenRoot),
// never through a plain path: the kernel resolves every component relative
// to the root's directory descriptor and refuses one that leads out, so a
// directory swapped for a symlink between the check and the use cannot
// carry an operation outside.
//
// What this cannot prevent: a hard link inside the workspace to a file
// outside it is that file, so reading it reads the outside file (writes and
// edits replace the link through a rename and leave the outside file
// alone). Only someone who could already reach the file can make such a
// link. os.Root does not stop bind mounts or device files either; the file
// tools never open anything but regular files and directories.
type Workspace struct {
	root string // absolute, clean, symlinks resolved
	// hidden are agent's own paths the tools never reach, even inside the
	// workspace (AGENT_HOME when agent runs from $HOME): real absolute
	// paths, and those inside the workspace relative to it, slash form.
	hidden, hiddenRel []string
}

// OutsideError reports a path that resolves outside the workspace.
type OutsideError struct {
	Path     string // as the model gave it
	Resolved string // where it leads
	Symlink  bool   // a symlink on the way led out
}

func (e *OutsideError) Error() string {
	if e.Symlink {
		return fmt.Sprintf("path %q is outside the workspace (a symlink leads to %q)", e.Path, e.Resolved)
	}
	return fmt.Sprintf("path %q is outside the workspace", e.Path)
}

// HiddenError reports a path in agent's own data (AGENT_HOME), which the
// model's tools never reach.
type HiddenError struct {
	Path string // as the model gave it
}

func (e *HiddenError) Error() string {
	return fmt.Sprintf("path %q is in agent's own data directory, which the model's tools never reach", e.Path)
}

// NewWorkspace returns the workspace rooted at dir, which must be an
// existing directory, with hidden (config.Private: AGENT_HOME…) out of the
// tools' reach. The root is made absolute with symlinks resolved so that
// containment checks compare real paths. A workspace inside a hidden path
// is refused: its tools could reach nothing.
func NewWorkspace(dir string, hidden ...string) (*Workspace, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	root, err := filepath.EvalSymlinks(abs)
	var fi os.FileInfo
	if err == nil {
		fi, err = os.Stat(root)
	}
	var pe *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%s: no such directory", dir)
	case errors.As(err, &pe):
		return nil, fmt.Errorf("%s: %w", dir, pe.Err) // the cause, not the syscall
	case err != nil:
		return nil, fmt.Errorf("%s: %w", dir, err)
	case !fi.IsDir():
		return nil, fmt.Errorf("%s: not a directory", dir)
	}
	w := &Workspace{root: root}
	for _, h := range hidden {
		if h == "" {
			continue
		}
		h, err := filepath.Abs(h)
		if err != nil {
			continue
		}
		if real, err := filepath.EvalSymlinks(h); err == nil {
			h = real
		}
		if within(h, root) {
			return nil, fmt.Errorf("%s is inside %s, agent's own data, which the model's tools never reach; choose a workspace outside it, or set AGENT_HOME to another directory", dir, h)
		}
		w.hidden = append(w.hidden, h)
		if rel, err := filepath.Rel(root, h); err == nil && within(root, h) {
			w.hiddenRel = append(w.hiddenRel, filepath.ToSlash(rel))
		}
	}
	return w, nil
}

// isHidden reports whether the real absolute path p is in a hidden path.
func (w *Workspace) isHidden(p string) bool {
	for _, h := range w.hidden {
		if within(h, p) {
			return true
		}
	}
	return false
}

// isHiddenRel reports whether the workspace-relative slash path p is in
// a hidden path.
func (w *Workspace) isHiddenRel(p string) bool {
	for _, h := range w.hiddenRel {
		if p == h || strings.HasPrefix(p, h+"/") {
			return true
		}
	}
	return false
}

// MissingDir says why dir cannot be a workspace when it does not exist or
// is not a directory, in the words a user needs ("no such directory");
// "" when it is a directory, or when the reason is something else, which
// NewWorkspace then reports.
func MissingDir(dir string) string {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "no such directory"
	case err == nil && !fi.IsDir():
		return "not a directory"
	}
	return ""
}

// Root returns the absolute, symlink-free workspace directory.
func (w *Workspace) Root() string { return w.root }

// OpenRoot opens the workspace directory as an os.Root, through which all
// file access of a tool call goes; the caller closes it. It is opened per
// call, by path, so a workspace directory that was replaced (say by a
// fresh clone) is the one used, as it is for bash.
func (w *Workspace) OpenRoot() (*os.Root, error) {
	r, err := os.OpenRoot(w.root)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	return r, nil
}

// Resolve maps a path argument to a real absolute path inside the workspace
// and its workspace-relative slash form ("." for the root). Relative paths
// start at the root; absolute paths are accepted only when they lead inside.
//
// Every existing component is checked with Lstat and symlinks are expanded
// as the kernel would (including dangling ones, whose target is checked even
// though it does not exist), so the returned path contains no symlinks in
// its existing part and callers must operate on it, not on the argument.
// Components that do not exist yet are taken literally.
//
// Resolve is the check, not the use: the tree can change right after it
// (a directory swapped for a symlink), so the file tools use rel through
// OpenRoot, never abs through plain os calls, and the kernel keeps the use
// inside the workspace whatever happened in between.
func (w *Workspace) Resolve(path string) (abs string, rel string, err error) {
	if path == "" {
		return "", "", errors.New("path is empty")
	}
	if strings.IndexByte(path, 0) >= 0 {
		return "", "", fmt.Errorf("path %q contains a NUL byte", path)
	}
	start := w.root
	if filepath.IsAbs(path) {
		start = string(filepath.Separator)
	}
	resolved, viaLink, err := resolvePath(start, path)
	if err != nil {
		return "", "", fmt.Errorf("path %q: %w", path, err)
	}
	if !w.contains(resolved) {
		return "", "", &OutsideError{Path: path, Resolved: resolved, Symlink: viaLink}
	}
	if w.isHidden(resolved) {
		return "", "", &HiddenError{Path: path}
	}
	r, err := filepath.Rel(w.root, resolved)
	if err != nil {
		return "", "", fmt.Errorf("path %q: %w", path, err)
	}
	return resolved, filepath.ToSlash(r), nil
}

// contains reports whether the real absolute path p is the root or below it.
func (w *Workspace) contains(p string) bool { return within(w.root, p) }

// within reports whether the clean absolute path p is dir or below it,
// comparing whole path components: /x/ws contains /x/ws/a but not
// /x/ws-evil/a, which a bare string prefix test would accept.
func within(dir, p string) bool {
	d, q := splitPath(dir), splitPath(p)
	if len(q) < len(d) {
		return false
	}
	for i := range d {
		if d[i] != q[i] {
			return false
		}
	}
	return true
}

// escapeErr maps an os.Root refusal to the OutsideError the model would
// have got from Resolve: it happens when the tree changed between Resolve
// and the use (a directory swapped for a symlink), and err otherwise.
func (w *Workspace) escapeErr(path string, err error) error {
	if !isEscape(err) {
		return err
	}
	if _, _, rerr := w.Resolve(path); rerr != nil {
		var oe *OutsideError
		if errors.As(rerr, &oe) {
			return rerr
		}
	}
	return &OutsideError{Path: path}
}

// isEscape reports an os.Root error for a path that leads outside the root
// (through "..", or a symlink that is absolute or climbs out). os does not
// export that error, so it is recognised by its text.
func isEscape(err error) bool {
	for err != nil {
		if err.Error() == "path escapes from parent" {
			return true
		}
		err = errors.Unwrap(err)
	}
	return false
}

// resolvePath walks path component by component from the symlink-free
// directory start. ".." is applied to the already resolved prefix, which is
// what the kernel does, so "link/.." means the parent of the link's target.
// It reports whether any symlink was followed.
func resolvePath(start, path string) (string, bool, error) {
	cur := start
	pending := splitPath(path)
	links := 0
	viaLink := false
	for len(pending) > 0 {
		c := pending[0]
		pending = pending[1:]
		if c == ".." {
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if err != nil {
			// Not there (yet): the rest is taken literally, which is safe
			// because nothing below a missing component can be a symlink.
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				cur = next
				continue
			}
			return "", viaLink, err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		links++
		if links > maxSymlinks {
			return "", viaLink, errors.New("too many levels of symbolic links")
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", viaLink, err
		}
		viaLink = true
		if filepath.IsAbs(target) {
			cur = string(filepath.Separator)
		}
		pending = append(splitPath(target), pending...)
	}
	return cur, viaLink, nil
}

// splitPath splits a path into its components, dropping empty ones and ".".
func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, string(filepath.Separator)) {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}
