package tools

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/smtp"
	"net/textproto"
	"strings"
	"time"
)

const (
	smtpDialTimeout = 30 * time.Second
	// smtpTimeout bounds a whole SMTP conversation, so a server that stops
	// answering cannot hold a phase forever.
	smtpTimeout = 5 * time.Minute
)

var sendEmailDef = Definition{
	Name: "send_email",
	Description: `Send a plain-text email over SMTP. This really sends the email: use it only when the task asks for one.

Each call sends at most once per recipient and subject in this phase: calling again with the same to and subject does not send a second email, it returns the receipt of the earlier one. To send another message to the same person, use a different subject.

If the result says the outcome is unknown, or that an identical earlier send has an unknown outcome, the email may or may not have arrived: do not send it again by other means (bash, another tool, a reworded subject); say so in your answer instead.`,
	Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "to": {"type": "string", "description": "One recipient address, e.g. bob@example.com or \"Bob <bob@example.com>\"."},
    "subject": {"type": "string", "description": "The subject line."},
    "body": {"type": "string", "description": "The plain-text body."}
  },
  "required": ["to", "subject", "body"],
  "additionalProperties": false
}`),
}

// sendEmail is send_email's performer. Its configuration is read once;
// a problem with it is reported when the tool is called.
type sendEmail struct {
	addr       string // host:port
	host       string
	from       *mail.Address
	user, pass string
	tls        *tls.Config // base STARTTLS configuration; nil means the system roots
	cfgErr     error
}

// emailReceipt is the details of an email_sent receipt.
type emailReceipt struct {
	MessageID string `json:"message_id"`
	To        string `json:"to"`
	Subject   string `json:"subject"`
}

func newSendEmail(getenv func(string) string, o EffectOptions) *sendEmail {
	t := &sendEmail{
		addr: strings.TrimSpace(getenv("AGENT_SMTP_ADDR")),
		user: getenv("AGENT_SMTP_USER"),
		pass: getenv("AGENT_SMTP_PASS"),
		tls:  o.TLS,
	}
	from := strings.TrimSpace(getenv("AGENT_SMTP_FROM"))
	var missing []string
	if t.addr == "" {
		missing = append(missing, "AGENT_SMTP_ADDR")
	}
	if from == "" {
		missing = append(missing, "AGENT_SMTP_FROM")
	}
	if len(missing) > 0 {
		t.cfgErr = fmt.Errorf("send_email is not configured: set %s (SMTP server host:port and sender address; "+
			"AGENT_SMTP_USER and AGENT_SMTP_PASS if the server needs a login)", strings.Join(missing, " and "))
		return t
	}
	host, _, err := net.SplitHostPort(t.addr)
	if err != nil || host == "" {
		t.cfgErr = fmt.Errorf("send_email is misconfigured: AGENT_SMTP_ADDR=%q must be host:port, e.g. smtp.example.com:587", t.addr)
		return t
	}
	t.host = host
	if t.from, err = mail.ParseAddress(from); err != nil {
		t.cfgErr = fmt.Errorf("send_email is misconfigured: AGENT_SMTP_FROM=%q is not an email address: %v", from, err)
		return t
	}
	if (t.user == "") != (t.pass == "") {
		t.cfgErr = errors.New("send_email is misconfigured: set both AGENT_SMTP_USER and AGENT_SMTP_PASS, or neither")
	}
	return t
}

func (t *sendEmail) prepare(args json.RawMessage) (Perform, error) {
	var a struct {
		To      string `json:"to"`
		Subject string `json:"subject"`
		Body    string `json:"body"`
	}
	if err := decodeArgs(sendEmailDef, args, &a); err != nil {
		return nil, err
	}
	to, err := mail.ParseAddress(strings.TrimSpace(a.To))
	if err != nil {
		return nil, fmt.Errorf("invalid to %q: %v; give one address, e.g. bob@example.com", a.To, err)
	}
	if t.cfgErr != nil {
		return nil, t.cfgErr
	}
	// The subject is one header line: folding all whitespace also rules
	// out header injection through CR or LF.
	subject := strings.Join(strings.Fields(a.Subject), " ")
	return func(ctx context.Context, key string) (Sent, error) {
		// A Message-ID derived from the key lets receivers drop a
		// duplicate should one ever be sent.
		msgID := "<" + key + "@" + addressDomain(t.from.Address) + ">"
		msg := buildEmail(t.from, to, subject, a.Body, msgID, time.Now())
		if err := t.send(ctx, to.Address, msg); err != nil {
			return Sent{}, err
		}
		return Sent{
			Summary: fmt.Sprintf("email sent to %s (Message-ID %s)", to.Address, msgID),
			Details: emailReceipt{MessageID: msgID, To: to.Address, Subject: subject},
		}, nil
	}, nil
}

// send delivers msg to one recipient. Every failure before the DATA
// terminator is sent is certainly-not-sent: a server takes responsibility
// for a message only when it acknowledges the final ".".
func (t *sendEmail) send(ctx context.Context, to string, msg []byte) error {
	d := net.Dialer{Timeout: smtpDialTimeout}
	conn, err := d.DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return NotSent(fmt.Errorf("connect to SMTP server %s: %w", t.addr, err))
	}
	defer conn.Close()
	// Closing the connection when ctx ends interrupts the step in flight,
	// so a cancelled phase stops mid-send.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	conn.SetDeadline(time.Now().Add(smtpTimeout))

	c, err := smtp.NewClient(conn, t.host)
	if err != nil {
		return NotSent(fmt.Errorf("SMTP server %s: %w", t.addr, err))
	}
	defer c.Close()
	if ok, _ := c.Extension("STARTTLS"); ok {
		if err := c.StartTLS(t.tlsConfig()); err != nil {
			return NotSent(fmt.Errorf("STARTTLS with %s: %w", t.addr, err))
		}
	}
	if t.user != "" {
		_, secure := c.TLSConnectionState()
		if !credentialsAllowed(t.host, secure) {
			return NotSent(fmt.Errorf("refusing to send SMTP credentials without TLS to %s", t.host))
		}
		if ok, mechs := c.Extension("AUTH"); !ok || !containsFold(strings.Fields(mechs), "PLAIN") {
			return NotSent(fmt.Errorf("SMTP server %s does not offer AUTH PLAIN (offers %q)", t.addr, mechs))
		}
		if err := c.Auth(smtp.PlainAuth("", t.user, t.pass, t.host)); err != nil {
			return NotSent(fmt.Errorf("SMTP login as %s: %w", t.user, err))
		}
	}
	if err := c.Mail(t.from.Address); err != nil {
		return NotSent(fmt.Errorf("server refused sender %s: %w", t.from.Address, err))
	}
	if err := c.Rcpt(to); err != nil {
		return NotSent(fmt.Errorf("server refused recipient %s: %w", to, err))
	}
	w, err := c.Data()
	if err != nil {
		return NotSent(fmt.Errorf("server refused DATA: %w", err))
	}
	if _, err := w.Write(msg); err != nil {
		return NotSent(fmt.Errorf("send message data: %w", err))
	}
	// Close sends the final "." and reads the server's verdict. Only an
	// explicit 4xx/5xx reply proves the message was not taken; a lost
	// connection or a timeout here leaves the outcome unknown.
	if err := w.Close(); err != nil {
		var reply *textproto.Error
		switch {
		case errors.As(err, &reply) && reply.Code >= 400:
			return NotSent(fmt.Errorf("server refused the message: %w", err))
		case errors.As(err, &reply) && reply.Code/100 == 2:
			// accepted with an unusual 2xx code
		default:
			return fmt.Errorf("no reply from %s after the message was sent: %w", t.addr, err)
		}
	}
	c.Quit() // the message is accepted; a failed QUIT changes nothing
	return nil
}

func (t *sendEmail) tlsConfig() *tls.Config {
	cfg := &tls.Config{}
	if t.tls != nil {
		cfg = t.tls.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = t.host
	}
	return cfg
}

// credentialsAllowed reports whether SMTP credentials may be sent to host:
// only over TLS, or to this machine, where nobody can listen in.
func credentialsAllowed(host string, tlsOn bool) bool {
	if tlsOn || strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// buildEmail returns the message: headers, a blank line and the body in
// quoted-printable, which keeps lines short, 7-bit clean and CRLF-terminated.
func buildEmail(from, to *mail.Address, subject, body, msgID string, date time.Time) []byte {
	var b bytes.Buffer
	header := func(k, v string) { b.WriteString(k + ": " + v + "\r\n") }
	header("From", from.String())
	header("To", to.String())
	header("Subject", mime.QEncoding.Encode("utf-8", subject))
	header("Date", date.Format(time.RFC1123Z))
	header("Message-ID", msgID)
	header("MIME-Version", "1.0")
	header("Content-Type", "text/plain; charset=utf-8")
	header("Content-Transfer-Encoding", "quoted-printable")
	b.WriteString("\r\n")
	qp := quotedprintable.NewWriter(&b)
	qp.Write([]byte(body)) // writes to a bytes.Buffer do not fail
	qp.Close()
	return b.Bytes()
}

func addressDomain(addr string) string {
	return addr[strings.LastIndex(addr, "@")+1:]
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}
