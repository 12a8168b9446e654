package config

import (
	"errors"
	"fmt"
	"os"
)

// Writable tries to create a file in the data directory dir, made if
// missing, as every run will.
func Writable(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".doctor-*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("%s cannot be written: %v; make it writable, or set AGENT_HOME to a directory you own", dir, pe.Err)
		}
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}
