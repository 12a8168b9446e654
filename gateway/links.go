package gateway

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"strings"
	"sync"
	"time"

	"agent/event"
	"agent/store"
	"agent/supervisor"
)

// One-decision links (docs/PROTOCOL.md#one-decision-links): a notification
// about a wait carries PUBLIC_URL/w/TOKEN. Its page needs no sign-in: it
// shows the run and what the wait asks, and its buttons POST the
// decision, which goes through supervisor.Answer like every other
// channel's. The token decides that one wait, once, until the wait is
// resolved or its deadline passes; a GET (a link preview) never decides,
// a POST from another origin is refused, and no other route takes it.

//go:embed link.html
var linkHTML string

// linkTemplate is parsed when a link is first shown, not at every start
// of the binary.
var linkTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("link").Parse(linkHTML))
})

// maxLinkBody bounds a decision's form: an answer or a reason.
const maxLinkBody = 64 << 10

func (s *Server) linkRoutes(root *http.ServeMux) {
	root.HandleFunc("GET /w/{token}", s.bounded(s.linkPage))
	root.HandleFunc("POST /w/{token}", s.bounded(s.linkDecide))
}

// linkView is what the page shows.
type linkView struct {
	Title string
	Note  string
	Bad   bool // the note says why nothing is decided
	Open  bool // the wait may be decided here: show its buttons
	Wait  *linkWait
}

// linkWait is the wait a link decides, as the page shows it.
type linkWait struct {
	RunID, Prompt, Kind string
	Tool, Args, Rule    string // approval
	Question            string // question
	Options             []string
	Until               string
}

// linkPage is GET /w/TOKEN: the wait and its buttons. It decides nothing.
func (s *Server) linkPage(w http.ResponseWriter, r *http.Request) {
	_, wait, err := s.db.LinkedWait(r.Context(), r.PathValue("token"))
	if err != nil {
		s.linkRefused(w, err)
		return
	}
	v, status := s.linkOf(r, wait)
	writeLink(w, status, v)
}

// linkOf is the page of a link's wait: open, or answered meanwhile
// through another channel.
func (s *Server) linkOf(r *http.Request, wait store.Wait) (linkView, int) {
	lw := &linkWait{RunID: wait.RunID, Kind: wait.Waiting.Kind, Tool: wait.Waiting.Tool, Rule: wait.Waiting.Rule,
		Question: wait.Waiting.Question, Options: wait.Waiting.Options, Until: wait.Until.UTC().Format(time.RFC1123)}
	if run, err := s.db.GetRun(r.Context(), wait.RunID); err == nil {
		lw.Prompt = truncate(run.Prompt, 2000)
	}
	var args bytes.Buffer
	if len(wait.Waiting.Args) > 0 && json.Indent(&args, wait.Waiting.Args, "", "  ") == nil {
		lw.Args = args.String()
	}
	title := "Approve " + wait.Waiting.Tool + "?"
	if wait.Waiting.Kind == event.WaitQuestion {
		title = "The agent asks"
	}
	if res := wait.Resolution; res != nil {
		return linkView{Title: title, Wait: lw, Bad: true,
			Note: "Already answered: " + res.Outcome + " via " + res.Via + " at " + res.At + ". This link decides nothing more."}, http.StatusConflict
	}
	return linkView{Title: title, Wait: lw, Open: true}, http.StatusOK
}

// linkDecide is POST /w/TOKEN from the link's page: the decision, once.
func (s *Server) linkDecide(w http.ResponseWriter, r *http.Request) {
	if e := pageRequest(r, true); e != nil {
		writeLink(w, http.StatusForbidden, linkView{Title: "Refused", Bad: true,
			Note: "A decision is taken only from the link's own page: " + e.Message})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLinkBody)
	if err := r.ParseForm(); err != nil {
		writeLink(w, http.StatusBadRequest, linkView{Title: "Refused", Bad: true, Note: "The form could not be read: " + err.Error()})
		return
	}
	token := r.PathValue("token")
	_, wait, err := s.db.LinkedWait(r.Context(), token)
	if err != nil {
		s.linkRefused(w, err)
		return
	}
	if wait.Resolution != nil {
		v, status := s.linkOf(r, wait)
		writeLink(w, status, v)
		return
	}
	d := supervisor.Decision{WaitID: wait.Waiting.WaitID, Decide: r.PostForm.Get("decision"), Via: event.ViaLink, Who: "link"}
	switch kind := wait.Waiting.Kind; {
	case d.Decide == supervisor.DecideAllow && kind == event.WaitApproval:
	case d.Decide == supervisor.DecideDeny && (kind == event.WaitApproval || kind == event.WaitQuestion):
		d.Text = strings.TrimSpace(r.PostForm.Get("reason"))
	case d.Decide == supervisor.DecideAnswer && kind == event.WaitQuestion:
		if d.Text = strings.TrimSpace(r.PostForm.Get("answer")); d.Text == "" {
			v, _ := s.linkOf(r, wait)
			v.Note, v.Bad = "Write an answer first.", true
			writeLink(w, http.StatusBadRequest, v)
			return
		}
	default:
		writeLink(w, http.StatusBadRequest, linkView{Title: "Refused", Bad: true, Note: "Choose one of the page's buttons."})
		return
	}
	// Spent before the answer: a link decides once, even if the answer
	// then loses to another channel's.
	if _, _, err := s.db.UseWaitLink(r.Context(), token); err != nil {
		s.linkRefused(w, err)
		return
	}
	got, err := s.decide(r.Context(), wait.RunID, d)
	var answered *store.AnsweredError
	var wrong *supervisor.AnswerError
	switch {
	case errors.As(err, &answered):
		writeLink(w, http.StatusConflict, linkView{Title: "Already answered", Bad: true,
			Note: "Another answer came first: " + answered.First.Outcome + " via " + answered.First.Via + " at " + answered.First.At + "."})
		return
	case errors.As(err, &wrong):
		writeLink(w, http.StatusBadRequest, linkView{Title: "Refused", Bad: true, Note: wrong.Msg})
		return
	case err != nil:
		s.log.Error("decide by link", "run_id", wait.RunID, "err", err)
		writeLink(w, http.StatusInternalServerError, linkView{Title: "Not decided", Bad: true,
			Note: "The decision could not be recorded; answer another way: " + supervisor.HowToAnswer(wait.RunID, wait.Waiting)})
		return
	}
	title := map[string]string{event.WaitAllowed: "Allowed", event.WaitDenied: "Denied", event.WaitAnswered: "Answer sent"}[got.Resolution.Outcome]
	writeLink(w, http.StatusOK, linkView{Title: title, Note: "Recorded. The run goes on; this link decides nothing more."})
}

// linkRefused says why a link decides nothing: forged (or its run is
// gone), used, or past its deadline.
func (s *Server) linkRefused(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeLink(w, http.StatusNotFound, linkView{Title: "Unknown link", Bad: true, Note: "This link is not valid."})
	case errors.Is(err, store.ErrLinkUsed), errors.Is(err, store.ErrLinkExpired):
		writeLink(w, http.StatusGone, linkView{Title: "Link no longer valid", Bad: true, Note: upperFirst(err.Error()) + "."})
	default:
		s.log.Error("one-decision link", "err", err)
		writeLink(w, http.StatusInternalServerError, linkView{Title: "Unavailable", Bad: true, Note: "Try again later."})
	}
}

// writeLink renders the page. It is never cached nor indexed. Its
// Referrer-Policy is same-origin rather than every other answer's
// no-referrer (secureHeaders), under which a browser sends a form's POST
// with Origin "null": the link still goes to no other site.
func writeLink(w http.ResponseWriter, status int, v linkView) {
	var b bytes.Buffer
	if err := linkTemplate().Execute(&b, v); err != nil {
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Robots-Tag", "noindex, nofollow")
	h.Set("Referrer-Policy", "same-origin")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
