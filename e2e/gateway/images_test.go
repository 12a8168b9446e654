package gateway

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway/api"
	"agent/gateway/gatewaytest"
	"agent/llm/llmtest"
)

// noisePNG is a PNG of noise, which does not compress: over 1 MiB for
// 600×600, so the runner child hands its tool.completed to the parent
// through the blob store.
func noisePNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	x := uint32(1)
	for i := range img.Pix {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		img.Pix[i] = uint8(x)
	}
	img.Set(0, 0, color.RGBA{1, 2, 3, 255})
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A gateway client gives images as base64 in options.images; with one a
// runner child reads (over 1 MiB, so through the blob store), they reach
// the model as image parts, and the session's events carry neither's
// bytes. An image that is none is refused naming options.images.
func TestGatewayRunWithImages(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{e2etest.ToolCall("read_file", `{"path":"noise.png"}`)}},
		llmtest.Turn{Text: "Noise and a sketch."},
	)
	sketch := noisePNG(t, 8, 8)
	noise := noisePNG(t, 600, 600)
	if len(noise) < 1<<20 {
		t.Fatalf("the noise is %d bytes: too small to go through the blob store", len(noise))
	}
	if err := os.WriteFile(filepath.Join(e.Workspace, "noise.png"), noise, 0o644); err != nil {
		t.Fatal(err)
	}
	srv, _ := e.InProcessGateway(nil)
	c := e2etest.GwDial(t, srv.Addr())
	sid := e2etest.GwCall[api.SessionInfo](t, c, api.MethodSessionCreate, nil).SessionID
	e2etest.GwCall[api.SessionResumeResult](t, c, api.MethodSessionResume, api.SessionResumeParams{SessionID: sid})

	ctx, cancel := gatewaytest.Timeout(e2etest.Patience)
	defer cancel()
	bad := api.RunStartParams{SessionID: sid, Input: "look", Options: api.RunOptions{Images: []event.Image{{Name: "sketch.png", Data: []byte("no picture")}}}}
	if err := c.Call(ctx, api.MethodRunStart, bad, nil); api.ErrorCode(err) != api.CodeInvalidOptions ||
		!strings.Contains(err.Error(), "options.images: sketch.png: not a PNG, JPEG, GIF or WebP image") {
		t.Errorf("a run.start with no image in options.images: %v", err)
	}

	run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "what are these?",
		Options: api.RunOptions{Model: "gpt-4o", Images: []event.Image{{Name: "sketch.png", Data: sketch}}}})
	evs := e2etest.GwWait(t, c, run.RunID)
	if end := e2etest.FinishedFrame(t, e2etest.LastFrame(evs)); end.Status != event.StatusCompleted {
		t.Fatalf("run ended %+v", end)
	}
	for _, ev := range evs {
		if len(ev.Data) > 64<<10 {
			t.Errorf("a %s frame of %d bytes: an image's bytes reached the session", ev.Event, len(ev.Data))
		}
	}
	urls := e.Srv.Requests()[1].Images()
	want := []string{"data:image/png;base64," + b64(sketch), "data:image/png;base64," + b64(noise)}
	if !slices.Equal(urls, want) {
		t.Errorf("the model was sent %d images, want the option's and read_file's", len(urls))
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
