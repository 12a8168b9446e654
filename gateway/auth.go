package gateway

import (
	"crypto/subtle"
	"net/http"
	"net/url"
	"strings"

	"agent/gateway/api"
)

// Messages of refused requests, so a user knows what to change.
const (
	msgNoToken      = "a token is required: send 'Authorization: Bearer TOKEN', or sign in on the web view at / (the token is in $AGENT_HOME/gateway.token unless AGENT_GATEWAY_TOKEN is set)"
	msgBadToken     = "wrong token"
	msgTokenInQuery = "tokens are never accepted in URLs, where logs, history and other pages can read them (CVE-2026-25253); send 'Authorization: Bearer TOKEN' or, on /ws, the connect frame's token"
)

// tokenEqual compares in constant time, so timing tells nothing about
// how much of a guess was right.
func (s *Server) tokenEqual(got string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.Token)) == 1
}

// bearer returns the token of an Authorization: Bearer header, if any.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false
	}
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", true // present but unusable: refused as a wrong token
	}
	return strings.TrimSpace(token), true
}

// tokenInQuery reports whether the URL carries a token, which is refused
// outright even when it is right.
func tokenInQuery(u *url.URL) bool {
	q := u.Query()
	return q.Has("token") || q.Has("access_token")
}

// originAllowed lets through clients that send no Origin (not a
// browser) and pages served by this gateway itself; any other page is
// refused, so a site the user visits cannot drive the gateway.
func originAllowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}

// checkRequest applies the checks every HTTP request and WebSocket
// upgrade must pass before anything else. It returns whether a valid
// Authorization header, or the session cookie of a signed-in web page
// (web.go), came with it; wsConnect is true for /ws, where the token may
// instead arrive in the connect frame.
func (s *Server) checkRequest(r *http.Request, wsConnect bool) (authed bool, e *api.Error) {
	if tokenInQuery(r.URL) {
		return false, &api.Error{Code: api.CodeUnauthorized, Message: msgTokenInQuery}
	}
	if !originAllowed(r) {
		return false, errorf(api.CodeForbidden, "Origin %q may not use this gateway (only pages from %s)", r.Header.Get("Origin"), r.Host)
	}
	token, present := bearer(r)
	switch {
	case present && s.tokenEqual(token):
		return true, nil
	case present:
		return false, &api.Error{Code: api.CodeUnauthorized, Message: msgBadToken}
	}
	if sess, named := s.signedIn(r); named {
		if sess == nil {
			return false, &api.Error{Code: api.CodeUnauthorized, Message: msgWebSessionEnded}
		}
		if e := pageRequest(r, changesState(r, wsConnect)); e != nil {
			return false, e
		}
		return true, nil
	}
	if wsConnect {
		return false, nil
	}
	return false, errNoToken
}

// errNoToken refuses a request that came with no token and no cookie.
var errNoToken = &api.Error{Code: api.CodeUnauthorized, Message: msgNoToken}
