// Package checkpoint saves files before a run first changes them and puts
// them back on `agent rewind`. Saved content lives in a content-addressed
// blob store under $AGENT_HOME/blobs; which file was saved when is a
// checkpoint.created event, recorded before the tool changes the file.
//
// It imports only the standard library and agent/event, so the runner, the
// child process and the gateway can all use it.
package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"agent/event"
)

// Blobs is a content-addressed store: the content whose sha256 is abcd… is
// the file Dir/sha256/ab/abcd…. Equal contents are stored once.
type Blobs struct {
	Dir string
}

// BlobsIn returns the blob store of the data directory home.
func BlobsIn(home string) Blobs {
	return Blobs{Dir: filepath.Join(home, "blobs")}
}

// path returns where the blob sum is kept. sum must be valid.
func (b Blobs) path(sum string) string {
	return filepath.Join(b.Dir, "sha256", sum[:2], sum)
}

// Put saves the content of the regular file at path and returns its sha256.
// A missing file is not an error: existed is false and sha is empty.
func (b Blobs) Put(path string) (sha string, existed bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("save %s: %w", path, err)
	}
	defer f.Close()
	sha, err = b.put(f)
	if err != nil {
		return "", true, fmt.Errorf("save %s: %w", path, err)
	}
	return sha, true, nil
}

// PutBytes saves data and returns its sha256.
func (b Blobs) PutBytes(data []byte) (string, error) {
	return b.put(bytes.NewReader(data))
}

// put streams r into a temporary file while hashing it, then renames the
// file to its hash. A crash leaves at worst a stray temporary file, never a
// blob whose content does not match its name.
func (b Blobs) put(r io.Reader) (sum string, err error) {
	if b.Dir == "" {
		return "", errors.New("blob store has no directory")
	}
	tmpDir := filepath.Join(b.Dir, "tmp")
	if err := os.MkdirAll(tmpDir, 0o700); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(tmpDir, "blob*")
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	if _, err = io.Copy(io.MultiWriter(tmp, h), r); err != nil {
		return "", err
	}
	if err = tmp.Sync(); err != nil {
		return "", err
	}
	if err = tmp.Close(); err != nil {
		return "", err
	}
	sum = hexSum(h)
	final := b.path(sum)
	if _, statErr := os.Stat(final); statErr == nil {
		os.Remove(tmp.Name()) // already stored: content addressing dedups
		return sum, nil
	}
	if err = os.MkdirAll(filepath.Dir(final), 0o700); err != nil {
		return "", err
	}
	if err = os.Rename(tmp.Name(), final); err != nil {
		return "", err
	}
	syncDir(filepath.Dir(final))
	return sum, nil
}

// Get returns the content of blob sha, checking it still hashes to sha.
func (b Blobs) Get(sha string) ([]byte, error) {
	if !validSum(sha) {
		return nil, fmt.Errorf("blob %q: not a sha256", sha)
	}
	data, err := os.ReadFile(b.path(sha))
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", short(sha), err)
	}
	if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != sha {
		return nil, fmt.Errorf("blob %s is corrupt: its content no longer matches its hash", short(sha))
	}
	return data, nil
}

// Snapshot saves the file rel of the workspace at root and describes it
// for a checkpoint.created event. It reads through an os.Root, so a path
// swapped for a symlink meanwhile cannot make it save a file from outside,
// and never blocks on a FIFO. ok is false when there is nothing to save:
// the path is a directory or some other non-regular file, which the file
// tools refuse to change anyway. The runner calls it through its
// Checkpointer interface.
func (b Blobs) Snapshot(_ context.Context, root, rel string) (event.CheckpointData, bool, error) {
	d := event.CheckpointData{Path: rel}
	r, err := os.OpenRoot(root)
	if err != nil {
		return d, false, fmt.Errorf("checkpoint %s: %w", rel, err)
	}
	defer r.Close()
	f, err := r.OpenFile(filepath.FromSlash(rel), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return d, true, nil // the run creates it: rewind removes it
	case err != nil:
		return d, false, fmt.Errorf("checkpoint %s: %w", rel, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return d, false, fmt.Errorf("checkpoint %s: %w", rel, err)
	case !fi.Mode().IsRegular():
		return d, false, nil
	}
	sum, err := b.put(f)
	if err != nil {
		return d, false, fmt.Errorf("checkpoint %s: %w", rel, err)
	}
	d.Existed, d.Blob, d.Mode, d.Bytes = true, sum, uint32(fi.Mode().Perm()), fi.Size()
	return d, true, nil
}

func hexSum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }

func validSum(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// short abbreviates a hash for messages.
func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

// syncDir makes a rename durable; best effort, as not every filesystem
// supports syncing a directory.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
