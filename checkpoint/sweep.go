package checkpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Sweep removes the blobs keep refuses that were last written before
// before, and the temporary files a crash left in the store that old, or
// with dryRun only counts them. It returns how many files it removed and
// their size. The caller makes sure nothing is saving a blob meanwhile
// (store.Prune does it only while no run is in progress).
func (b Blobs) Sweep(keep func(sum string) bool, before time.Time, dryRun bool) (n int, bytes int64, err error) {
	if b.Dir == "" {
		return 0, 0, nil
	}
	remove := func(path string, fi fs.FileInfo) error {
		if !fi.Mode().IsRegular() || !fi.ModTime().Before(before) {
			return nil
		}
		if !dryRun {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		n++
		bytes += fi.Size()
		return nil
	}
	// Blobs are Dir/sha256/ab/abcd…; anything else there is not ours.
	shards, err := os.ReadDir(filepath.Join(b.Dir, "sha256"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return n, bytes, err
	}
	for _, shard := range shards {
		if !shard.IsDir() || len(shard.Name()) != 2 {
			continue
		}
		dir := filepath.Join(b.Dir, "sha256", shard.Name())
		entries, err := os.ReadDir(dir)
		if err != nil {
			return n, bytes, err
		}
		for _, e := range entries {
			sum := e.Name()
			if !validSum(sum) || sum[:2] != shard.Name() || keep(sum) {
				continue
			}
			fi, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return n, bytes, err
			}
			if err := remove(filepath.Join(dir, sum), fi); err != nil {
				return n, bytes, err
			}
		}
	}
	tmps, err := os.ReadDir(filepath.Join(b.Dir, "tmp"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return n, bytes, err
	}
	for _, e := range tmps {
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return n, bytes, err
		}
		if err := remove(filepath.Join(b.Dir, "tmp", e.Name()), fi); err != nil {
			return n, bytes, err
		}
	}
	return n, bytes, nil
}
