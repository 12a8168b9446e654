package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Not parallel: it sets process environment variables.

func TestRetentionDays(t *testing.T) {
	for _, tc := range []struct {
		file string
		want int
		bad  string // in the error, if any
	}{
		{file: "", want: 0},
		{file: "RetentionDays = 30\n", want: 30},
		{file: "RetentionDays = -1\n", bad: "RetentionDays must be 0 (off) or a number of days, got -1"},
	} {
		home := t.TempDir()
		t.Setenv("AGENT_HOME", home)
		if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(tc.file), 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Load()
		var cfgErr *Error
		switch {
		case tc.bad != "" && (!errors.As(err, &cfgErr) || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%q: err = %v, want a config error saying %q", tc.file, err, tc.bad)
		case tc.bad == "" && (err != nil || s.RetentionDays != tc.want):
			t.Errorf("%q: RetentionDays = %d, %v; want %d", tc.file, s.RetentionDays, err, tc.want)
		}
	}
}
