package gateway_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"agent/gateway/api"
)

// TestHealthzAnswersAnyone: /healthz says the gateway is up to anyone,
// and nothing else; the version only with the token or a signed-in
// page's cookie; a wrong token or an ended page session is refused.
func TestHealthzAnswersAnyone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.login()
	for _, tt := range []struct {
		name   string
		header map[string]string
		status int
		body   string
	}{
		{"no token", nil, 200, `{"ok":true}`},
		{"the token", e.bearer(), 200, `{"ok":true,"version":"test"}`},
		{"a signed-in page", withCookie(c, nil), 200, `{"ok":true,"version":"test"}`},
		{"a wrong token", map[string]string{"Authorization": "Bearer wrong"}, 401, "wrong token"},
		{"an ended page session", map[string]string{"Cookie": c.Name + "=not-a-session"}, 401, "sign in again"},
	} {
		resp, body := e.request("GET", "/healthz", "", tt.header)
		if resp.StatusCode != tt.status || !strings.Contains(body, tt.body) {
			t.Errorf("%s: %d %s, want %d %s", tt.name, resp.StatusCode, body, tt.status, tt.body)
		}
	}
	if resp, body := e.request("GET", "/healthz?token="+e.token, "", nil); resp.StatusCode != 401 {
		t.Errorf("a token in the URL: %d %s, want refused", resp.StatusCode, body)
	}
}

// TestLoginState: GET /login tells the page whether its cookie signs it
// in, with a 200 either way (no refused request to log).
func TestLoginState(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.login()
	for _, tt := range []struct {
		name   string
		header map[string]string
		want   string
	}{
		{"no cookie", nil, `{"signed_in":false}`},
		{"signed in", withCookie(c, nil), `"signed_in":true,"expires_at":`},
		{"an ended session", map[string]string{"Cookie": c.Name + "=gone"}, `"signed_in":false,"message":"your web session has ended`},
	} {
		resp, body := e.request("GET", "/login", "", tt.header)
		if resp.StatusCode != 200 || !strings.Contains(body, tt.want) || resp.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: %d %s %v, want %s", tt.name, resp.StatusCode, body, resp.Header, tt.want)
		}
	}
	resp, _ := e.request("GET", "/login", "", withCookie(c, map[string]string{"Origin": "http://evil.example"}))
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("another origin's page: %d, want 403", resp.StatusCode)
	}
}

// TestWebFilesGzipped: the page's files go gzipped to a client that takes
// it, as they are to one that does not, and revalidate by ETag.
func TestWebFilesGzipped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	get := func(path string, header map[string]string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+e.addr+path, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		// Not DefaultClient's transport: it would ask for gzip and undo it.
		resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp, data
	}
	for _, path := range []string{"/", "/web/app.js", "/web/style.css"} {
		plainResp, plain := get(path, nil)
		if plainResp.StatusCode != 200 || plainResp.Header.Get("Content-Encoding") != "" {
			t.Fatalf("%s without gzip: %d %v", path, plainResp.StatusCode, plainResp.Header)
		}
		resp, body := get(path, map[string]string{"Accept-Encoding": "br, gzip;q=0.8"})
		if resp.Header.Get("Content-Encoding") != "gzip" || !strings.Contains(resp.Header.Get("Vary"), "Accept-Encoding") {
			t.Fatalf("%s with gzip: %v", path, resp.Header)
		}
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		unzipped, err := io.ReadAll(zr)
		if err != nil || !bytes.Equal(unzipped, plain) {
			t.Errorf("%s gzipped is not the file (%v)", path, err)
		}
		if len(body) >= len(plain)/2 {
			t.Errorf("%s: %d bytes gzipped of %d", path, len(body), len(plain))
		}
		if resp.Header.Get("Content-Security-Policy") == "" {
			t.Errorf("%s gzipped lost its headers", path)
		}
		if again, _ := get(path, map[string]string{"Accept-Encoding": "gzip", "If-None-Match": resp.Header.Get("ETag")}); again.StatusCode != http.StatusNotModified {
			t.Errorf("%s revalidated: %d, want 304", path, again.StatusCode)
		}
		if again, _ := get(path, map[string]string{"If-None-Match": resp.Header.Get("ETag")}); again.StatusCode != http.StatusOK {
			t.Errorf("%s: the gzipped ETag matched the plain file (%d)", path, again.StatusCode)
		}
	}
	if resp, _ := get("/web/app.js", map[string]string{"Accept-Encoding": "gzip;q=0"}); resp.Header.Get("Content-Encoding") != "" {
		t.Error("gzip;q=0 got gzip")
	}
	resp, body := get("/web/nope.js", map[string]string{"Accept-Encoding": "gzip"})
	var he api.HTTPError
	if resp.StatusCode != 404 || json.Unmarshal(body, &he) != nil {
		t.Errorf("a missing file: %d %s", resp.StatusCode, body)
	}
}
