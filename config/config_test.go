package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Not parallel: these tests set process environment variables.

func TestLoadPrecedence(t *testing.T) {
	home := t.TempDir()
	t.Setenv("AGENT_HOME", home)
	t.Setenv("OPENAI_API_KEY", "sk-test")
	t.Setenv("AGENT_MODEL", "")
	t.Setenv("OPENAI_BASE_URL", "")

	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if s.Home != home || s.Model != DefaultModel || s.BaseURL != DefaultBaseURL || s.BaseURLFrom != "" || s.APIKey != "sk-test" {
		t.Errorf("defaults: %+v", s)
	}

	file := "model = \"from-file\"\nbase_url = \"http://file/v1\"\nmax_turns = 7\nmodel_attempts = 2\n"
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = Load()
	if err != nil {
		t.Fatal(err)
	}
	if s.Model != "from-file" || s.BaseURL != "http://file/v1" || s.BaseURLFrom != "base_url in "+filepath.Join(home, "config.toml") || s.MaxTurns != 7 || s.ModelAttempts != 2 {
		t.Errorf("file: %+v", s)
	}

	t.Setenv("AGENT_MODEL", "from-env")
	t.Setenv("OPENAI_BASE_URL", "http://env/v1")
	s, err = Load()
	if err != nil {
		t.Fatal(err)
	}
	if s.Model != "from-env" || s.BaseURL != "http://env/v1" || s.BaseURLFrom != "OPENAI_BASE_URL" || s.MaxTurns != 7 {
		t.Errorf("env over file: %+v", s)
	}
}

func TestLoadBadFile(t *testing.T) {
	for name, content := range map[string]string{
		"unknown key": "colour = \"blue\"\n",
		"bad syntax":  "model = \n",
		"wrong type":  "max_turns = \"many\"\n",
	} {
		t.Run(name, func(t *testing.T) {
			home := t.TempDir()
			t.Setenv("AGENT_HOME", home)
			if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load()
			var cfgErr *Error
			if !errors.As(err, &cfgErr) {
				t.Fatalf("Load() = %v, want *config.Error", err)
			}
		})
	}
}

func TestHome(t *testing.T) {
	t.Setenv("AGENT_HOME", "")
	t.Setenv("XDG_DATA_HOME", "/xdg")
	if h, _ := Home(); h != "/xdg/agent" {
		t.Errorf("Home with XDG_DATA_HOME = %s", h)
	}
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("HOME", "/home/u")
	if h, _ := Home(); h != "/home/u/.local/share/agent" {
		t.Errorf("Home default = %s", h)
	}
}
