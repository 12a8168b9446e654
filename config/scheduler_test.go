package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Not parallel: these tests set process environment variables.

func TestSchedulerSettings(t *testing.T) {
	home := t.TempDir()
	t.Setenv("AGENT_HOME", home)
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if s.SchedulerEnabled || s.SchedulerPollIntervalSeconds != 5 || s.SchedulerMaxConcurrentRuns != 2 || s.SchedulerRecoveryPolicy != "skip" {
		t.Errorf("defaults: %+v", s)
	}

	write("SchedulerEnabled = true\nSchedulerPollIntervalSeconds = 1\nSchedulerMaxConcurrentRuns = 8\nSchedulerRecoveryPolicy = \"run_once_on_recovery\"\n")
	if s, err = Load(); err != nil {
		t.Fatal(err)
	}
	if !s.SchedulerEnabled || s.SchedulerPollIntervalSeconds != 1 || s.SchedulerMaxConcurrentRuns != 8 || s.SchedulerRecoveryPolicy != "run_once_on_recovery" {
		t.Errorf("from the file: %+v", s)
	}

	for content, key := range map[string]string{
		"SchedulerRecoveryPolicy = \"later\"\n": "SchedulerRecoveryPolicy",
		"SchedulerPollIntervalSeconds = -1\n":   "SchedulerPollIntervalSeconds",
		"SchedulerMaxConcurrentRuns = -2\n":     "SchedulerMaxConcurrentRuns",
		"scheduler_enabled = true\n":            "unknown key scheduler_enabled",
		"SchedulerEnabled = \"yes\"\n":          "SchedulerEnabled",
	} {
		write(content)
		_, err := Load()
		var ce *Error
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), key) {
			t.Errorf("%q: %v, want a config error naming %s", content, err, key)
		}
	}
}
