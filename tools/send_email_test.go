package tools

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"io"
	"log"
	"math/big"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	gosmtp "github.com/emersion/go-smtp"
)

// smtpBackend is an in-process SMTP server's mailbox.
type smtpBackend struct {
	user, pass string // when set, AUTH PLAIN is offered and required
	rcptErr    error
	dataErr    error

	mu   sync.Mutex
	msgs []smtpMsg
}

type smtpMsg struct {
	From     string
	To       []string
	Data     []byte
	TLS      bool
	AuthUser string
}

func (b *smtpBackend) NewSession(c *gosmtp.Conn) (gosmtp.Session, error) {
	s := &smtpSession{b: b, c: c}
	if b.user != "" {
		return &smtpAuthSession{s}, nil
	}
	return s, nil
}

func (b *smtpBackend) messages() []smtpMsg {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]smtpMsg(nil), b.msgs...)
}

type smtpSession struct {
	b   *smtpBackend
	c   *gosmtp.Conn
	msg smtpMsg
}

func (s *smtpSession) Mail(from string, _ *gosmtp.MailOptions) error {
	if s.b.user != "" && s.msg.AuthUser == "" {
		return gosmtp.ErrAuthRequired
	}
	s.msg.From = from
	return nil
}

func (s *smtpSession) Rcpt(to string, _ *gosmtp.RcptOptions) error {
	if s.b.rcptErr != nil {
		return s.b.rcptErr
	}
	s.msg.To = append(s.msg.To, to)
	return nil
}

func (s *smtpSession) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if s.b.dataErr != nil {
		return s.b.dataErr
	}
	m := s.msg
	m.Data = data
	_, m.TLS = s.c.TLSConnectionState()
	s.b.mu.Lock()
	s.b.msgs = append(s.b.msgs, m)
	s.b.mu.Unlock()
	return nil
}

func (s *smtpSession) Reset()        { s.msg = smtpMsg{AuthUser: s.msg.AuthUser} }
func (s *smtpSession) Logout() error { return nil }

type smtpAuthSession struct{ *smtpSession }

func (s *smtpAuthSession) AuthMechanisms() []string { return []string{sasl.Plain} }

func (s *smtpAuthSession) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != s.b.user || pass != s.b.pass {
			return errors.New("invalid username or password")
		}
		s.msg.AuthUser = user
		return nil
	}), nil
}

// startSMTP serves be on 127.0.0.1 and returns the address. A non-nil
// cert makes the server offer STARTTLS.
func startSMTP(t *testing.T, be *smtpBackend, cert *tls.Certificate, insecureAuth bool) string {
	t.Helper()
	s := gosmtp.NewServer(be)
	s.Domain = "localhost"
	s.ReadTimeout = 10 * time.Second
	s.WriteTimeout = 10 * time.Second
	s.AllowInsecureAuth = insecureAuth
	s.ErrorLog = log.New(io.Discard, "", 0)
	if cert != nil {
		s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*cert}}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(func() { s.Close() })
	return l.Addr().String()
}

// selfSigned returns a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (*tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test smtp"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

func smtpEnv(addr string) map[string]string {
	return map[string]string{"AGENT_SMTP_ADDR": addr, "AGENT_SMTP_FROM": "Agent <agent@example.com>"}
}

func emailArgs(to, subject, body string) map[string]string {
	return map[string]string{"to": to, "subject": subject, "body": body}
}

func parseEmail(t *testing.T, data []byte) *mail.Message {
	t.Helper()
	m, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("parse message: %v\n%s", err, data)
	}
	return m
}

func TestSendEmailPlain(t *testing.T) {
	t.Parallel()
	be := &smtpBackend{}
	addr := startSMTP(t, be, nil, false)
	ob := &fakeOutbox{}
	tool := effectToolNamed(t, "send_email", ob, smtpEnv(addr))

	res := runEffect(t, t.Context(), tool, emailArgs("Bob <bob@example.com>", "Weekly report", "Hello Bob,\n\nall green.\n. a line with a dot\n"))
	if got := outcome(t, res); got != "sent" {
		t.Fatalf("outcome %q: %s", got, res.Output)
	}
	key := EffectKey(testScope, Effects[0], map[string]any{"to": "bob@example.com", "subject": "Weekly report"})
	wantID := "<" + key + "@example.com>"
	if want := "email sent to bob@example.com (Message-ID " + wantID + ")"; res.Output != want {
		t.Errorf("output %q, want %q", res.Output, want)
	}
	r := receiptOf(t, res)
	if r.Type != "email_sent" || r.Key != key ||
		!sameJSON(t, r.Details, `{"message_id":"`+wantID+`","to":"bob@example.com","subject":"Weekly report"}`) {
		t.Errorf("receipt %+v details %s", r, r.Details)
	}

	msgs := be.messages()
	if len(msgs) != 1 {
		t.Fatalf("%d messages delivered, want 1", len(msgs))
	}
	m := msgs[0]
	if m.From != "agent@example.com" || len(m.To) != 1 || m.To[0] != "bob@example.com" || m.TLS {
		t.Errorf("envelope %+v", m)
	}
	if i := bytes.IndexByte(bytes.ReplaceAll(m.Data, []byte("\r\n"), nil), '\n'); i >= 0 {
		t.Errorf("bare LF at byte %d in\n%q", i, m.Data)
	}
	msg := parseEmail(t, m.Data)
	for k, want := range map[string]string{
		"From":                      `"Agent" <agent@example.com>`,
		"To":                        `"Bob" <bob@example.com>`,
		"Subject":                   "Weekly report",
		"Message-Id":                wantID,
		"Mime-Version":              "1.0",
		"Content-Type":              "text/plain; charset=utf-8",
		"Content-Transfer-Encoding": "quoted-printable",
	} {
		if got := msg.Header.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	if _, err := msg.Header.Date(); err != nil {
		t.Errorf("Date header: %v", err)
	}
	body, err := io.ReadAll(quotedprintable.NewReader(msg.Body))
	if err != nil {
		t.Fatal(err)
	}
	if want := "Hello Bob,\r\n\r\nall green.\r\n. a line with a dot\r\n"; string(body) != want {
		t.Errorf("body %q, want %q", body, want)
	}
}

func TestSendEmailHeaders(t *testing.T) {
	t.Parallel()
	be := &smtpBackend{}
	addr := startSMTP(t, be, nil, false)
	tool := effectToolNamed(t, "send_email", &fakeOutbox{}, smtpEnv(addr))

	subjects := []string{"Grüße aus Köln", "Grüße aus Köln", "Grüße aus Bonn"}
	for _, s := range subjects {
		if res := runEffect(t, t.Context(), tool, emailArgs("bob@example.com", s, "Hallo")); outcome(t, res) != "sent" {
			t.Fatalf("send %q: %s", s, res.Output)
		}
	}
	msgs := be.messages()
	if len(msgs) != 3 {
		t.Fatalf("%d messages, want 3", len(msgs))
	}
	var ids []string
	for i, m := range msgs {
		msg := parseEmail(t, m.Data)
		raw := msg.Header.Get("Subject")
		if !strings.HasPrefix(raw, "=?utf-8?q?") {
			t.Errorf("Subject %q is not RFC 2047 encoded", raw)
		}
		got, err := new(mime.WordDecoder).DecodeHeader(raw)
		if err != nil || got != subjects[i] {
			t.Errorf("decoded Subject %q (%v), want %q", got, err, subjects[i])
		}
		ids = append(ids, msg.Header.Get("Message-Id"))
	}
	if ids[0] != ids[1] {
		t.Errorf("same key, different Message-IDs: %s %s", ids[0], ids[1])
	}
	if ids[0] == ids[2] {
		t.Errorf("different subjects, same Message-ID %s", ids[0])
	}
	key := EffectKey(testScope, Effects[0], map[string]any{"to": "bob@example.com", "subject": subjects[0]})
	if ids[0] != "<"+key+"@example.com>" {
		t.Errorf("Message-ID %s not derived from key %s", ids[0], key)
	}
}

func TestSendEmailSubjectCannotInjectHeaders(t *testing.T) {
	t.Parallel()
	be := &smtpBackend{}
	addr := startSMTP(t, be, nil, false)
	tool := effectToolNamed(t, "send_email", &fakeOutbox{}, smtpEnv(addr))
	res := runEffect(t, t.Context(), tool, emailArgs("bob@example.com", "Hi\r\nBcc: eve@example.com", "x"))
	if outcome(t, res) != "sent" {
		t.Fatal(res.Output)
	}
	msg := parseEmail(t, be.messages()[0].Data)
	if msg.Header.Get("Bcc") != "" || msg.Header.Get("Subject") != "Hi Bcc: eve@example.com" {
		t.Errorf("headers %v", msg.Header)
	}
}

func TestSendEmailSTARTTLS(t *testing.T) {
	t.Parallel()
	cert, pool := selfSigned(t)

	t.Run("used when offered", func(t *testing.T) {
		t.Parallel()
		be := &smtpBackend{}
		addr := startSMTP(t, be, cert, false)
		tool := effectToolNamed(t, "send_email", &fakeOutbox{}, smtpEnv(addr), EffectOptions{TLS: &tls.Config{RootCAs: pool}})
		if res := runEffect(t, t.Context(), tool, emailArgs("bob@example.com", "Hi", "x")); outcome(t, res) != "sent" {
			t.Fatal(res.Output)
		}
		if msgs := be.messages(); len(msgs) != 1 || !msgs[0].TLS {
			t.Errorf("messages %+v, want one over TLS", msgs)
		}
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		t.Parallel()
		be := &smtpBackend{}
		addr := startSMTP(t, be, cert, false)
		tool := effectToolNamed(t, "send_email", &fakeOutbox{}, smtpEnv(addr))
		res := runEffect(t, t.Context(), tool, emailArgs("bob@example.com", "Hi", "x"))
		if outcome(t, res) != "not_sent" || !strings.Contains(res.Output, "STARTTLS") {
			t.Errorf("result %+v", res)
		}
		if n := len(be.messages()); n != 0 {
			t.Errorf("%d messages delivered", n)
		}
	})
	t.Run("AUTH PLAIN over STARTTLS", func(t *testing.T) {
		t.Parallel()
		be := &smtpBackend{user: "alice", pass: "s3cret"}
		addr := startSMTP(t, be, cert, false) // no AUTH before TLS
		env := smtpEnv(addr)
		env["AGENT_SMTP_USER"], env["AGENT_SMTP_PASS"] = "alice", "s3cret"
		tool := effectToolNamed(t, "send_email", &fakeOutbox{}, env, EffectOptions{TLS: &tls.Config{RootCAs: pool}})
		if res := runEffect(t, t.Context(), tool, emailArgs("bob@example.com", "Hi", "x")); outcome(t, res) != "sent" {
			t.Fatal(res.Output)
		}
		if msgs := be.messages(); len(msgs) != 1 || msgs[0].AuthUser != "alice" || !msgs[0].TLS {
			t.Errorf("messages %+v, want one from alice over TLS", msgs)
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		t.Parallel()
		be := &smtpBackend{user: "alice", pass: "s3cret"}
		addr := startSMTP(t, be, cert, false)
		env := smtpEnv(addr)
		env["AGENT_SMTP_USER"], env["AGENT_SMTP_PASS"] = "alice", "wrong"
		tool := effectToolNamed(t, "send_email", &fakeOutbox{}, env, EffectOptions{TLS: &tls.Config{RootCAs: pool}})
		res := runEffect(t, t.Context(), tool, emailArgs("bob@example.com", "Hi", "x"))
		if outcome(t, res) != "not_sent" || !strings.Contains(res.Output, "SMTP login as alice") {
			t.Errorf("result %+v", res)
		}
	})
}

func TestSendEmailAuthOnLoopbackWithoutTLS(t *testing.T) {
	t.Parallel()
	be := &smtpBackend{user: "alice", pass: "s3cret"}
	addr := startSMTP(t, be, nil, true)
	env := smtpEnv(addr)
	env["AGENT_SMTP_USER"], env["AGENT_SMTP_PASS"] = "alice", "s3cret"
	tool := effectToolNamed(t, "send_email", &fakeOutbox{}, env)
	if res := runEffect(t, t.Context(), tool, emailArgs("bob@example.com", "Hi", "x")); outcome(t, res) != "sent" {
		t.Fatal(res.Output)
	}
	if msgs := be.messages(); len(msgs) != 1 || msgs[0].AuthUser != "alice" {
		t.Errorf("messages %+v", msgs)
	}
}

func TestCredentialsAllowed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		host string
		tls  bool
		want bool
	}{
		{"smtp.example.com", true, true},
		{"smtp.example.com", false, false},
		{"203.0.113.5", false, false},
		{"localhost", false, true},
		{"127.0.0.1", false, true},
		{"::1", false, true},
	}
	for _, tt := range tests {
		if got := credentialsAllowed(tt.host, tt.tls); got != tt.want {
			t.Errorf("credentialsAllowed(%q, %v) = %v, want %v", tt.host, tt.tls, got, tt.want)
		}
	}
}

func TestSendEmailRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		be   *smtpBackend
		want string
	}{
		{"recipient", &smtpBackend{rcptErr: &gosmtp.SMTPError{Code: 550, EnhancedCode: gosmtp.EnhancedCode{5, 1, 1}, Message: "no such user"}},
			`server refused recipient bob@example.com: 550 "5.1.1 no such user"`},
		{"message after DATA", &smtpBackend{dataErr: &gosmtp.SMTPError{Code: 554, EnhancedCode: gosmtp.EnhancedCode{5, 7, 1}, Message: "looks like spam"}},
			`server refused the message: 554 "5.7.1 looks like spam"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addr := startSMTP(t, tt.be, nil, false)
			tool := effectToolNamed(t, "send_email", &fakeOutbox{}, smtpEnv(addr))
			res := runEffect(t, t.Context(), tool, emailArgs("bob@example.com", "Hi", "x"))
			if got := outcome(t, res); got != "not_sent" {
				t.Fatalf("outcome %q: %s", got, res.Output)
			}
			if !strings.Contains(res.Output, tt.want) {
				t.Errorf("output %q does not contain %q", res.Output, tt.want)
			}
			if n := len(tt.be.messages()); n != 0 {
				t.Errorf("%d messages delivered", n)
			}
		})
	}
}

func TestSendEmailConnectionRefused(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	tool := effectToolNamed(t, "send_email", &fakeOutbox{}, smtpEnv(addr))
	res := runEffect(t, t.Context(), tool, emailArgs("bob@example.com", "Hi", "x"))
	if outcome(t, res) != "not_sent" || !strings.Contains(res.Output, "connect to SMTP server") {
		t.Errorf("result %+v", res)
	}
}

// rawSMTP is just enough of an SMTP server to misbehave once it has the
// whole message: it reads up to the final "." and then calls after.
func rawSMTP(t *testing.T, after func(net.Conn)) (addr string, gotData <-chan struct{}) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	got := make(chan struct{}, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		r := bufio.NewReader(conn)
		io.WriteString(conn, "220 fake ESMTP\r\n")
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			switch cmd := strings.ToUpper(strings.TrimSpace(line)); {
			case strings.HasPrefix(cmd, "EHLO"), strings.HasPrefix(cmd, "HELO"),
				strings.HasPrefix(cmd, "MAIL"), strings.HasPrefix(cmd, "RCPT"):
				io.WriteString(conn, "250 ok\r\n")
			case cmd == "DATA":
				io.WriteString(conn, "354 go ahead\r\n")
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if l == ".\r\n" {
						break
					}
				}
				got <- struct{}{}
				after(conn)
				return
			default:
				io.WriteString(conn, "502 not implemented\r\n")
			}
		}
	}()
	return l.Addr().String(), got
}

func TestSendEmailUnknownOutcome(t *testing.T) {
	t.Parallel()

	t.Run("connection dropped after the final dot", func(t *testing.T) {
		t.Parallel()
		addr, _ := rawSMTP(t, func(c net.Conn) { c.Close() })
		tool := effectToolNamed(t, "send_email", &fakeOutbox{}, smtpEnv(addr))
		res := runEffect(t, t.Context(), tool, emailArgs("bob@example.com", "Hi", "x"))
		if got := outcome(t, res); got != "unknown" {
			t.Fatalf("outcome %q: %s", got, res.Output)
		}
		if !strings.Contains(res.Output, "no reply from "+addr+" after the message was sent") ||
			!strings.Contains(res.Output, "agent resume run-1 --resend-unknown") {
			t.Errorf("output %q", res.Output)
		}
	})

	t.Run("cancelled while waiting for the reply", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		defer close(release)
		addr, gotData := rawSMTP(t, func(net.Conn) { <-release })
		tool := effectToolNamed(t, "send_email", &fakeOutbox{}, smtpEnv(addr))
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			<-gotData
			cancel()
		}()
		done := make(chan Result, 1)
		go func() {
			done <- tool.Run(ctx, nil, json.RawMessage(`{"to":"bob@example.com","subject":"Hi","body":"x"}`))
		}()
		select {
		case res := <-done:
			if got := outcome(t, res); got != "unknown" {
				t.Fatalf("outcome %q: %s", got, res.Output)
			}
			if !strings.Contains(res.Output, "interrupted: context canceled") {
				t.Errorf("output %q", res.Output)
			}
		case <-time.After(patience):
			t.Fatal("send did not stop when its context was cancelled")
		}
	})

	t.Run("cancelled before sending", func(t *testing.T) {
		t.Parallel()
		addr, _ := rawSMTP(t, func(net.Conn) {})
		tool := effectToolNamed(t, "send_email", &fakeOutbox{}, smtpEnv(addr))
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		res := runEffect(t, ctx, tool, emailArgs("bob@example.com", "Hi", "x"))
		if got := outcome(t, res); got != "not_sent" {
			t.Fatalf("outcome %q: %s", got, res.Output)
		}
	})
}
