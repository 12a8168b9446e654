package gateway

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"maps"
	"mime"
	"net"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"agent/gateway/api"
	"agent/store"
)

// The web view (docs/PROTOCOL.md#web-sign-in): the page at /, its sign-in, and the
// cookie session that then authenticates the page's requests as the
// token does a client's. The page itself is plain files in web/.

//go:embed web
var webFiles embed.FS

// Web sessions and sign-in.
const (
	webSessionTTL  = 12 * time.Hour
	maxWebSessions = 256 // signed-in pages kept; the oldest goes first
	loginFailures  = 10  // wrong tokens accepted within loginWindow, from anyone
	loginWindow    = time.Minute
	maxLoginBody   = 4 << 10
)

// contentSecurityPolicy lets the page run only its own script and style
// files, talk only to this gateway, and be framed by nothing: injected
// markup can neither run nor send anything anywhere.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// Messages of the web view's refusals.
const (
	msgWebSessionEnded = "your web session has ended (signed out, expired, or the gateway restarted); sign in again"
	msgWrongLoginToken = "wrong token: copy it from $AGENT_HOME/gateway.token (or AGENT_GATEWAY_TOKEN) and try again"
)

// secureHeaders sets the headers every answer carries, API included: a
// JSON answer is never run as a script or a page, and no URL of the
// gateway leaks to another site as a Referer.
func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}

// webRoutes are the routes of the web view that need no sign-in.
func (s *Server) webRoutes(root *http.ServeMux) {
	root.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		serveWebFile(w, r, "index.html")
	})
	root.HandleFunc("GET /web/{file}", func(w http.ResponseWriter, r *http.Request) {
		serveWebFile(w, r, r.PathValue("file"))
	})
	root.HandleFunc("GET /login", s.bounded(s.loginState))
	root.HandleFunc("POST /login", s.bounded(s.login))
	root.HandleFunc("POST /logout", s.bounded(s.logout))
}

// serveWebFile serves one file of web/. The browser revalidates it every
// time (its ETag), so a new binary's page is never mixed with an old
// one's script; gzipped to a client that takes it.
func serveWebFile(w http.ResponseWriter, r *http.Request, name string) {
	a := webAssets()[name]
	if a == nil {
		writeError(w, errorf(api.CodeNotFound, "no such file: %s", r.URL.Path))
		return
	}
	h := w.Header()
	if ct := mime.TypeByExtension(path.Ext(name)); ct != "" {
		h.Set("Content-Type", ct)
	}
	h.Set("Cache-Control", "no-cache")
	h.Add("Vary", "Accept-Encoding")
	body, etag := a.plain, a.etag
	if a.gzip != nil && acceptsGzip(r) {
		body, etag = a.gzip, strings.TrimSuffix(a.etag, `"`)+`-gzip"`
		h.Set("Content-Encoding", "gzip")
	}
	h.Set("ETag", etag)
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(body))
}

// webAsset is a file of web/ as it is sent: as is, gzipped (when that is
// smaller), and the tag of its content.
type webAsset struct {
	plain, gzip []byte
	etag        string
}

// webAssets reads and compresses the files of web/ once.
var webAssets = sync.OnceValue(func() map[string]*webAsset {
	out := map[string]*webAsset{}
	entries, _ := fs.ReadDir(webFiles, "web")
	for _, e := range entries {
		data, err := fs.ReadFile(webFiles, "web/"+e.Name())
		if err != nil {
			continue
		}
		sum := sha256.Sum256(data)
		a := &webAsset{plain: data, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		if _, err := zw.Write(data); err == nil && zw.Close() == nil && buf.Len() < len(data) {
			a.gzip = buf.Bytes()
		}
		out[e.Name()] = a
	}
	return out
})

// acceptsGzip reports whether r's Accept-Encoding takes gzip.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			continue
		}
		q, weighted := strings.CutPrefix(strings.TrimSpace(params), "q=")
		v, err := strconv.ParseFloat(q, 64)
		return !weighted || err == nil && v > 0
	}
	return false
}

// SignedIn answers GET /login: whether the page's cookie signs it in, so
// the page can show its sign-in form without a refused request.
type SignedIn struct {
	SignedIn  bool       `json:"signed_in"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	Message   string     `json:"message,omitempty"` // why a page signed in before is no more
}

// loginState is GET /login.
func (s *Server) loginState(w http.ResponseWriter, r *http.Request) {
	if e := pageRequest(r, false); e != nil {
		writeError(w, e)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	sess, named := s.signedIn(r)
	switch {
	case sess != nil:
		writeJSON(w, http.StatusOK, SignedIn{SignedIn: true, ExpiresAt: &sess.expires})
	case named:
		writeJSON(w, http.StatusOK, SignedIn{Message: msgWebSessionEnded})
	default:
		writeJSON(w, http.StatusOK, SignedIn{})
	}
}

// SignIn answers POST /login: the page is signed in until ExpiresAt.
type SignIn struct {
	ExpiresAt time.Time `json:"expires_at"`
}

// login is POST /login with {"token":…} (JSON or a form): the right
// token gets a session cookie. The token travels in this body once, never
// in a URL, and the page keeps nothing but the HttpOnly cookie, which its
// script cannot read.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if tokenInQuery(r.URL) {
		writeError(w, &api.Error{Code: api.CodeUnauthorized, Message: msgTokenInQuery})
		return
	}
	if e := pageRequest(r, true); e != nil {
		writeError(w, e)
		return
	}
	if wait := s.web.loginWait(); wait > 0 {
		secs := int(wait.Round(time.Second)/time.Second) + 1
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		writeJSON(w, http.StatusTooManyRequests, api.HTTPError{Error: errorf(api.CodeUnavailable,
			"too many wrong tokens in the last minute; try again in %d seconds", secs)})
		return
	}
	token, e := loginToken(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	if !s.tokenEqual(token) {
		s.web.loginFailed()
		writeError(w, &api.Error{Code: api.CodeUnauthorized, Message: msgWrongLoginToken})
		return
	}
	if old, err := r.Cookie(cookieName(r)); err == nil {
		_ = s.web.revoke(r.Context(), old.Value) // signing in again replaces the page's session
	}
	sess, err := s.web.create(r.Context())
	if err != nil {
		s.writeErr(w, err)
		return
	}
	http.SetCookie(w, sessionCookie(r, sess.id, int(webSessionTTL/time.Second)))
	writeJSON(w, http.StatusOK, SignIn{ExpiresAt: sess.expires})
}

// loginToken reads the token of a sign-in, as JSON or as a form.
func loginToken(w http.ResponseWriter, r *http.Request) (string, *api.Error) {
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var token string
	switch ct {
	case "application/json":
		var body struct {
			Token string `json:"token"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			return "", errorf(api.CodeBadRequest, "body: want {\"token\":\"…\"}: %v", err)
		}
		token = body.Token
	case "application/x-www-form-urlencoded":
		if err := r.ParseForm(); err != nil {
			return "", errorf(api.CodeBadRequest, "body: want token=…: %v", err)
		}
		token = r.PostForm.Get("token")
	default:
		return "", errorf(api.CodeBadRequest, "send the token as JSON {\"token\":\"…\"} or as a form field token")
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return "", errorf(api.CodeUnauthorized, "paste the token: it is in $AGENT_HOME/gateway.token (or AGENT_GATEWAY_TOKEN)")
	}
	return token, nil
}

// logout is POST /logout: the session ends on the gateway at once, with
// the streams it authenticated, and the cookie is cleared.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if e := pageRequest(r, true); e != nil {
		writeError(w, e)
		return
	}
	if c, err := r.Cookie(cookieName(r)); err == nil {
		if err := s.web.revoke(r.Context(), c.Value); err != nil {
			s.writeErr(w, err)
			return
		}
	}
	http.SetCookie(w, sessionCookie(r, "", -1))
	writeJSON(w, http.StatusOK, struct {
		SignedOut bool `json:"signed_out"`
	}{true})
}

// sessionCookie is the session cookie, or with maxAge -1 its deletion.
// HttpOnly keeps it from the page's script; SameSite=Strict keeps other
// sites' pages from sending it; Secure when the page came over TLS.
func sessionCookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: cookieName(r), Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	}
}

// cookieName is the session cookie of the gateway at r.Host. Browsers
// share a host's cookies between its ports, so two gateways on one
// machine each have their own rather than overwrite each other's.
func cookieName(r *http.Request) string {
	_, port, err := net.SplitHostPort(r.Host)
	if err != nil || port == "" || strings.Trim(port, "0123456789") != "" {
		return "agent_session"
	}
	return "agent_session_" + port
}

// pageRequest is the rule for requests a browser's cookie authenticates
// (and for sign-in and sign-out). A page of another origin is refused
// even though SameSite=Strict does not stop it on another port of this
// host, which browsers count as the same site: its Sec-Fetch-Site says
// so, and its Origin does not match (checked first, in originAllowed).
// A request that changes something must carry an Origin, as browsers do
// on every POST and WebSocket: a cookie alone is not enough.
func pageRequest(r *http.Request, changes bool) *api.Error {
	if !originAllowed(r) {
		return errorf(api.CodeForbidden, "Origin %q may not use this gateway (only pages from %s)", r.Header.Get("Origin"), r.Host)
	}
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none": // none: typed in the address bar
	default:
		return errorf(api.CodeForbidden, "a request from a %s page may not use this gateway's web session", site)
	}
	if changes && r.Header.Get("Origin") == "" {
		return errorf(api.CodeForbidden, "a request signed in by cookie that changes something must carry the Origin of this gateway's page")
	}
	return nil
}

// changesState reports whether a request may change something: a
// WebSocket (whose methods do) or anything but a read.
func changesState(r *http.Request, wsConnect bool) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return wsConnect
	}
	return true
}

// webSessions are the signed-in pages: a random id, which is the cookie,
// recorded in the store (its SHA-256) with an expiry. Preferred to a
// cookie signed with the token: sign-out must end a session at once, and
// a signed cookie can only be revoked with state every gateway shares,
// which the store is. So every gateway of a shared database (docs/SCHEMA.md#web_sessions)
// accepts a page signed in on another, a restart signs nobody out,
// and a sign-out anywhere ends the session everywhere: each request a
// cookie authenticates reads the store, and each gateway ends the streams
// of sessions ended elsewhere within sessionSweep.
type webSessions struct {
	db *store.DB

	mu       sync.Mutex
	live     map[string]*webSession // the sessions this gateway has seen, by cookie
	failures []time.Time            // wrong tokens at sign-in within loginWindow
}

// sessionSweep is how often a gateway looks for sessions ended on another.
const sessionSweep = 10 * time.Second

// webSession is one signed-in page.
type webSession struct {
	id      string
	expires time.Time
	// ctx ends at sign-out or expiry; the streams the session
	// authenticated (WebSocket, SSE) end with it.
	ctx    context.Context
	cancel context.CancelFunc
}

func newWebSessions(db *store.DB) *webSessions {
	return &webSessions{db: db, live: map[string]*webSession{}}
}

// now is the store's clock, which its expiries are compared with.
func (ws *webSessions) now() time.Time { return ws.db.Now() }

// create starts a session.
func (ws *webSessions) create(ctx context.Context) (*webSession, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	id := base64.RawURLEncoding.EncodeToString(b[:])
	expires := ws.now().Add(webSessionTTL)
	if err := ws.db.CreateWebSession(ctx, id, expires); err != nil {
		return nil, err
	}
	return ws.track(id, expires), nil
}

// track is the live state of a session the store has: its streams'
// context. Expired ones go first, then the oldest if there are too many.
func (ws *webSessions) track(id string, expires time.Time) *webSession {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if s := ws.live[id]; s != nil {
		return s
	}
	now := ws.now()
	var oldest *webSession
	for key, s := range ws.live {
		if !now.Before(s.expires) {
			s.cancel()
			delete(ws.live, key)
		} else if oldest == nil || s.expires.Before(oldest.expires) {
			oldest = s
		}
	}
	if len(ws.live) >= maxWebSessions && oldest != nil {
		oldest.cancel()
		delete(ws.live, oldest.id)
	}
	sess := &webSession{id: id, expires: expires}
	sess.ctx, sess.cancel = context.WithDeadline(context.Background(), expires)
	ws.live[id] = sess
	return sess
}

// get returns the session with that id if it is still on, or nil.
func (ws *webSessions) get(ctx context.Context, id string) *webSession {
	expires, err := ws.db.WebSessionExpiry(ctx, id)
	if err != nil { // ended (or the store is unreachable: sign in again)
		ws.forget(id)
		return nil
	}
	return ws.track(id, expires)
}

// tracked returns the live state of a session this gateway has seen, or
// nil, without asking the store.
func (ws *webSessions) tracked(id string) *webSession {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.live[id]
}

// revoke ends a session: it is refused from now on, by every gateway,
// and its streams end.
func (ws *webSessions) revoke(ctx context.Context, id string) error {
	ws.forget(id)
	return ws.db.RevokeWebSession(ctx, id)
}

// forget ends this gateway's streams of a session.
func (ws *webSessions) forget(id string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if s := ws.live[id]; s != nil {
		s.cancel()
		delete(ws.live, id)
	}
}

// sweep ends, every sessionSweep until quit, the streams of sessions
// signed out on another gateway.
func (ws *webSessions) sweep(quit <-chan struct{}) {
	t := time.NewTicker(sessionSweep)
	defer t.Stop()
	for {
		select {
		case <-quit:
			return
		case <-t.C:
		}
		ws.mu.Lock()
		ids := slices.Collect(maps.Keys(ws.live))
		ws.mu.Unlock()
		for _, id := range ids {
			if _, err := ws.db.WebSessionExpiry(context.Background(), id); errors.Is(err, store.ErrNotFound) {
				ws.forget(id)
			}
		}
	}
}

// loginWait is how long sign-in is refused: until the oldest of
// loginFailures recent wrong tokens is loginWindow old. With the
// constant-time compare, guessing the token is hopeless.
func (ws *webSessions) loginWait() time.Duration {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	now := ws.now()
	for len(ws.failures) > 0 && now.Sub(ws.failures[0]) >= loginWindow {
		ws.failures = ws.failures[1:]
	}
	if len(ws.failures) < loginFailures {
		return 0
	}
	return loginWindow - now.Sub(ws.failures[0])
}

func (ws *webSessions) loginFailed() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.failures = append(ws.failures, ws.now())
}

// signedIn returns the live web session r's cookie names, and whether
// r named one at all.
func (s *Server) signedIn(r *http.Request) (sess *webSession, named bool) {
	c, err := r.Cookie(cookieName(r))
	if err != nil || c.Value == "" {
		return nil, false
	}
	return s.web.get(r.Context(), c.Value), true
}

// endWithSession returns a context that also ends when r's web session
// does, if a cookie authenticated r, and its release. checkRequest has
// just read the session from the store; its live state is here.
func (s *Server) endWithSession(ctx context.Context, r *http.Request) (context.Context, func()) {
	c, err := r.Cookie(cookieName(r))
	if _, hasBearer := bearer(r); err != nil || hasBearer {
		return ctx, func() {}
	}
	sess := s.web.tracked(c.Value)
	if sess == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(sess.ctx, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}
