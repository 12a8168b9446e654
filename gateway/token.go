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

	"agent/gateway/api"
)

// ServerToken returns the token a gateway requires and where it came
// from: AGENT_GATEWAY_TOKEN, or $AGENT_HOME/gateway.token, created with
// mode 0600 on first start. A token shorter than MinTokenLength is refused: it could be guessed.
func ServerToken(home string) (token, from string, err error) {
	if t := strings.TrimSpace(os.Getenv("AGENT_GATEWAY_TOKEN")); t != "" {
		if n := utf8.RuneCountInString(t); n < MinTokenLength {
			return "", "", &api.TokenError{Msg: fmt.Sprintf("AGENT_GATEWAY_TOKEN has %d characters; a gateway requires at least %d: set a longer one (e.g. openssl rand -hex 32), or unset it to use %s", n, MinTokenLength, api.TokenPath(home))}
		}
		return t, "$AGENT_GATEWAY_TOKEN", nil
	}
	path := api.TokenPath(home)
	for range 2 {
		t, err := api.ReadTokenFile(path)
		if err == nil {
			if n := utf8.RuneCountInString(t); n < MinTokenLength {
				return "", "", &api.TokenError{Msg: fmt.Sprintf("token file %s holds a token of %d characters; a gateway requires at least %d: delete the file to get a new token", path, n, MinTokenLength)}
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
