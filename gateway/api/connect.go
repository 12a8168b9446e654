package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"
)

// DialTimeout bounds connecting to a gateway, its handshake included.
const DialTimeout = 10 * time.Second

// DefaultURL is the gateway a client talks to when nothing names another.
const DefaultURL = "http://" + DefaultListen

// Address is the gateway a client talks to: given, else AGENT_GATEWAY's,
// else DefaultURL. named is false when neither names one.
func Address(given string) (addr string, named bool) {
	if given != "" {
		return given, true
	}
	if env := os.Getenv("AGENT_GATEWAY"); env != "" {
		return env, true
	}
	return DefaultURL, false
}

// IsAddress reports whether s is a gateway's address, a URL or host:port,
// rather than a prompt.
func IsAddress(s string) bool {
	for _, p := range []string{"http://", "https://", "ws://", "wss://"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	host, port, ok := strings.Cut(s, ":")
	return ok && host != "" && port != "" && !strings.ContainsAny(s, " \t\n") && strings.Trim(port, "0123456789") == ""
}

// UnreachableError is an address where no gateway answers. It says so in
// one line, with how to start a gateway there.
type UnreachableError struct {
	Msg string
	Err error
}

func (e *UnreachableError) Error() string { return e.Msg }
func (e *UnreachableError) Unwrap() error { return e.Err }

// Connect dials the gateway at addr with token, within DialTimeout; the
// frames that answer no request are queued on the stream. Nothing
// answering is an *UnreachableError.
func Connect(ctx context.Context, addr, token string) (*Stream, error) {
	ctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	s, err := DialStream(ctx, addr, ClientOptions{Token: token})
	if gone := unreachable(addr, err); gone != nil {
		return nil, gone
	}
	return s, err
}

// Probe says whether anything answers at addr: nil, or an
// *UnreachableError. A client without a token asks it first, since with
// no gateway there, that is what to fix.
func Probe(ctx context.Context, addr string) error {
	u, err := url.Parse(WebSocketURL(addr))
	if err != nil || u.Host == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return unreachable(addr, err)
	}
	conn.Close()
	return nil
}

// unreachable is err as an *UnreachableError when it says that nothing
// answers at addr; nil when a gateway, or something else, answered.
func unreachable(addr string, err error) error {
	var answered *DialError
	if err == nil || errors.As(err, &answered) {
		return nil
	}
	start := "agent gateway"
	if u, perr := url.Parse(WebSocketURL(addr)); perr == nil && u.Host != "" && u.Host != DefaultListen {
		start += " --listen " + u.Host
	}
	var dns *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return &UnreachableError{Err: err, Msg: fmt.Sprintf("no gateway answers at %s (connection refused); start one with: %s", addr, start)}
	case errors.As(err, &dns):
		return &UnreachableError{Err: err, Msg: fmt.Sprintf("no gateway at %s: host %s not found", addr, dns.Name)}
	case errors.Is(err, context.DeadlineExceeded):
		return &UnreachableError{Err: err, Msg: fmt.Sprintf("no gateway answered at %s within %s; is one running there (%s)?", addr, DialTimeout, start)}
	}
	return nil
}
