package e2etest

import (
	"io"
	"log"
	"net"
	"sync"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"
)

// Mailbox is an in-process SMTP server that keeps what it receives.
type Mailbox struct {
	addr string
	Mu   sync.Mutex
	Msgs []string
	// AfterData runs when a message has been received, before the server
	// replies 250: the moment between "sent" and "reported".
	AfterData func()
}

// NewMailbox starts a Mailbox for as long as the test runs.
func NewMailbox(t *testing.T) *Mailbox {
	t.Helper()
	m := &Mailbox{}
	m.addr = ServeSMTP(t, m)
	return m
}

// ServeSMTP serves a real SMTP server on the loopback with backend for as
// long as the test runs; it returns its address.
func ServeSMTP(t *testing.T, backend gosmtp.Backend) string {
	t.Helper()
	s := gosmtp.NewServer(backend)
	s.Domain = "localhost"
	s.ReadTimeout, s.WriteTimeout = 10*time.Second, 10*time.Second
	s.ErrorLog = log.New(io.Discard, "", 0)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l) //nolint:errcheck // ends with Close
	t.Cleanup(func() { s.Close() })
	return l.Addr().String()
}

// Count is the number of messages received.
func (m *Mailbox) Count() int {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	return len(m.Msgs)
}

// NewSession is the Mailbox's gosmtp.Backend.
func (m *Mailbox) NewSession(*gosmtp.Conn) (gosmtp.Session, error) { return &mailSession{m: m}, nil }

type mailSession struct{ m *Mailbox }

func (s *mailSession) Mail(string, *gosmtp.MailOptions) error { return nil }
func (s *mailSession) Rcpt(string, *gosmtp.RcptOptions) error { return nil }
func (s *mailSession) Reset()                                 {}
func (s *mailSession) Logout() error                          { return nil }
func (s *mailSession) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.m.Mu.Lock()
	s.m.Msgs = append(s.m.Msgs, string(data))
	hook := s.m.AfterData
	s.m.Mu.Unlock()
	if hook != nil {
		hook()
	}
	return nil
}

// WithMail points the agent's environment at the Mailbox.
func (e *Env) WithMail(cmdEnv []string, m *Mailbox) []string {
	return append(cmdEnv, "AGENT_SMTP_ADDR="+m.addr, "AGENT_SMTP_FROM=agent@example.com")
}

// Addr is the Mailbox's SMTP address.
func (m *Mailbox) Addr() string { return m.addr }
