package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// TokenError is a token file the user must fix: readable by others, or
// empty.
type TokenError struct{ Msg string }

func (e *TokenError) Error() string { return e.Msg }

// ErrNoToken means there is no token to present: no AGENT_GATEWAY_TOKEN
// and no token file yet.
var ErrNoToken = errors.New("no gateway token")

// tokenPath is where the token lives under AGENT_HOME.
func tokenPath(home string) string { return filepath.Join(home, "gateway.token") }

// ServerToken returns the token a gateway requires and where it came
// from: AGENT_GATEWAY_TOKEN, or $AGENT_HOME/gateway.token, created with
// mode 0600 on first start. A token shorter than MinTokenLength is refused: it could be guessed.
func ServerToken(home string) (token, from string, err error) {
	if t := strings.TrimSpace(os.Getenv("AGENT_GATEWAY_TOKEN")); t != "" {
		if n := utf8.RuneCountInString(t); n < MinTokenLength {
			return "", "", &TokenError{Msg: fmt.Sprintf("AGENT_GATEWAY_TOKEN has %d characters; a gateway requires at least %d: set a longer one (e.g. openssl rand -hex 32), or unset it to use %s", n, MinTokenLength, tokenPath(home))}
		}
		return t, "$AGENT_GATEWAY_TOKEN", nil
	}
	path := tokenPath(home)
	for range 2 {
		t, err := readTokenFile(path)
		if err == nil {
			if n := utf8.RuneCountInString(t); n < MinTokenLength {
				return "", "", &TokenError{Msg: fmt.Sprintf("token file %s holds a token of %d characters; a gateway requires at least %d: delete the file to get a new token", path, n, MinTokenLength)}
			}
			return t, path, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", "", err
		}
		if err := writeTokenFile(path); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", "", err
		}
	}
	return "", "", fmt.Errorf("token file %s vanished while it was created", path)
}

// ClientToken returns the token a client presents: AGENT_GATEWAY_TOKEN,
// else $AGENT_HOME/gateway.token, which a client reads but never creates.
func ClientToken(home string) (string, error) {
	if t := strings.TrimSpace(os.Getenv("AGENT_GATEWAY_TOKEN")); t != "" {
		return t, nil
	}
	path := tokenPath(home)
	t, err := readTokenFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("set AGENT_GATEWAY_TOKEN or start 'agent gateway' once to create %s: %w", path, ErrNoToken)
	}
	return t, err
}

// readTokenFile refuses a file others can read: the token is the key to
// every run and workspace.
func readTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", &TokenError{Msg: fmt.Sprintf("token file %s can be read by group or others (mode %04o); run: chmod 600 %s", path, st.Mode().Perm(), path)}
	}
	buf := make([]byte, 4096)
	n, _ := f.Read(buf)
	t := strings.TrimSpace(string(buf[:n]))
	if t == "" {
		return "", &TokenError{Msg: fmt.Sprintf("token file %s is empty; delete it to get a new token", path)}
	}
	return t, nil
}

// writeTokenFile creates a new random token, readable by this user only.
func writeTokenFile(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("generate a token: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(hex.EncodeToString(b[:]) + "\n"); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}
