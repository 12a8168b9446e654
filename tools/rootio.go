package tools

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// openReadFlags open a file for reading without ever blocking in open(2):
// a FIFO with no writer, or a device, returns at once (then fstat refuses
// it), and a terminal never becomes the controlling one.
const openReadFlags = os.O_RDONLY | syscall.O_NONBLOCK | syscall.O_NOCTTY

// notRegularError is a path that exists but is not a regular file.
type notRegularError struct {
	mode fs.FileMode
}

func (e *notRegularError) Error() string { return "not a regular file: " + fileKind(e.mode) }

// isDir reports whether the refused path is a directory, which the tools
// explain in their own words.
func (e *notRegularError) isDir() bool { return e.mode.IsDir() }

// fileKind names the type of a file for an error message.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	}
	return "irregular file"
}

// openRegular opens name (relative to root, native separators) for reading
// and returns it with its fstat, refusing with *notRegularError anything
// that is not a regular file. It never blocks: the type is checked before
// opening, so a device is not even opened, and the open itself is
// non-blocking, so a FIFO swapped in after the check is refused by the
// fstat of what was actually opened.
//
// What it opened must not be agent's own (ws's hidden paths): the check is
// made on the descriptor, so a directory swapped for a symlink into
// AGENT_HOME after Resolve is refused too.
func openRegular(ws *Workspace, root *os.Root, name string) (*os.File, fs.FileInfo, error) {
	fi, err := root.Stat(name)
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fi, &notRegularError{fi.Mode()}
	}
	f, err := root.OpenFile(name, openReadFlags, 0)
	if err != nil {
		return nil, nil, err
	}
	if err := ws.refuseOpened(f, name); err != nil {
		f.Close()
		return nil, nil, err
	}
	fi, err = f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fi, &notRegularError{fi.Mode()}
	}
	return f, fi, nil
}

// writeAtomic replaces name in root with data through a temporary file in
// the same directory and a rename, both inside root, so a crash leaves the
// old file or the new one, never a torn one, and nothing is written
// outside root even if a directory on the way is swapped for a symlink. The
// temporary file is fsynced before the rename and the directory after it.
//
// ws, when not nil, refuses a temporary file that landed in one of its
// hidden paths (a directory swapped for a symlink into AGENT_HOME).
func writeAtomic(ws *Workspace, root *os.Root, name string, data []byte, mode fs.FileMode) (err error) {
	dir, base := filepath.Split(name)
	var (
		f   *os.File
		tmp string
	)
	for try := 0; ; try++ {
		tmp = filepath.Join(dir, "."+base+".tmp"+strconv.FormatUint(uint64(rand.Uint32()), 10))
		f, err = root.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || try == 100 {
			return err
		}
	}
	defer func() {
		if err != nil {
			f.Close()
			root.Remove(tmp)
		}
	}()
	if err = ws.refuseOpened(f, name); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(mode); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = root.Rename(tmp, name); err != nil {
		return err
	}
	if dir == "" {
		dir = "."
	}
	if d, derr := root.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY, 0); derr == nil {
		d.Sync() // best effort: not every filesystem supports it
		d.Close()
	}
	return nil
}

// walkFS is the workspace seen through its os.Root for fs.WalkDir. It
// implements fs.StatFS and fs.ReadDirFS so that the walk never opens
// anything but directories, and those with O_DIRECTORY|O_NONBLOCK: a
// directory swapped for a FIFO during the walk fails instead of blocking,
// and one swapped for a symlink leading out is refused by the root.
//
// Agent's own paths (Workspace.hidden) are not there: left out of
// listings, and not found when named.
type walkFS struct {
	root *os.Root
	ws   *Workspace
}

func (w walkFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if w.ws.isHiddenRel(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return w.root.OpenFile(filepath.FromSlash(name), openReadFlags, 0)
}

func (w walkFS) Stat(name string) (fs.FileInfo, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrInvalid}
	}
	if w.ws.isHiddenRel(name) {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	}
	return w.root.Stat(filepath.FromSlash(name))
}

func (w walkFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrInvalid}
	}
	d, err := w.root.OpenFile(filepath.FromSlash(name), os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if err := w.ws.refuseOpened(d, name); err != nil {
		return nil, err
	}
	ents, err := d.ReadDir(-1)
	ents = slices.DeleteFunc(ents, func(e fs.DirEntry) bool { return w.ws.isHiddenRel(path.Join(name, e.Name())) })
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, err
}

// underSlash returns the slash path p relative to the slash directory dir
// that contains it ("." for the workspace root).
func underSlash(dir, p string) string {
	if dir == "." {
		return p
	}
	if p == dir {
		return "."
	}
	return strings.TrimPrefix(p, dir+"/")
}

// refuseOpened refuses f, opened for name, when the kernel says it is in
// one of w's hidden paths. Nil w refuses nothing.
func (w *Workspace) refuseOpened(f *os.File, name string) error {
	if w == nil || len(w.hidden) == 0 {
		return nil
	}
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil {
		return nil // no /proc: Resolve's check is all there is
	}
	if w.isHidden(real) {
		return &HiddenError{Path: filepath.ToSlash(name)}
	}
	return nil
}

// FS is the workspace as a read-only file system, confined as the file
// tools are: nothing outside it (os.Root), nothing of agent's own
// (hidden paths), opened without blocking. close releases it.
func (w *Workspace) FS() (fsys fs.FS, close func() error, err error) {
	root, err := w.OpenRoot()
	if err != nil {
		return nil, nil, err
	}
	return walkFS{root: root, ws: w}, root.Close, nil
}
