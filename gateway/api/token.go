package api

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The gateway's token, as its clients find it.

// TokenError is a token file the user must fix: readable by others, or
// empty.
type TokenError struct{ Msg string }

func (e *TokenError) Error() string { return e.Msg }

// ErrNoToken means there is no token to present: no AGENT_GATEWAY_TOKEN
// and no token file yet.
var ErrNoToken = errors.New("no gateway token")

// TokenPath is where the token lives under AGENT_HOME.
func TokenPath(home string) string { return filepath.Join(home, "gateway.token") }

// ClientToken returns the token a client presents: AGENT_GATEWAY_TOKEN,
// else $AGENT_HOME/gateway.token, which a client reads but never creates.
func ClientToken(home string) (string, error) {
	if t := strings.TrimSpace(os.Getenv("AGENT_GATEWAY_TOKEN")); t != "" {
		return t, nil
	}
	path := TokenPath(home)
	t, err := ReadTokenFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: set AGENT_GATEWAY_TOKEN or start 'agent gateway' once to create %s", ErrNoToken, path)
	}
	return t, err
}

// ReadTokenFile refuses a file others can read: the token is the key to
// every run and workspace.
func ReadTokenFile(path string) (string, error) {
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
