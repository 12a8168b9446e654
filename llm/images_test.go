package llm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"agent/llm"
	"agent/llm/llmtest"
)

var (
	photo = llm.Image{SHA256: strings.Repeat("a", 64), MediaType: "image/png", About: "photo.png: PNG image, 2×2, 70 bytes", Data: []byte("png bytes")}
	chart = llm.Image{SHA256: strings.Repeat("b", 64), MediaType: "image/jpeg", About: "chart.jpg: JPEG image, 4×4, 1.0 KB", Data: []byte("jpeg bytes")}
)

func imageRequest() llm.Request {
	return llm.Request{Model: "gpt-4o", Messages: []llm.Message{
		{Role: llm.RoleSystem, Content: "be brief"},
		{Role: llm.RoleUser, Content: "what is this?", Images: []llm.Image{photo}},
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1", Name: "read_file"}, {ID: "c2", Name: "read_file"}}},
		{Role: llm.RoleTool, ToolCallID: "c1", Images: []llm.Image{chart}},
		{Role: llm.RoleTool, ToolCallID: "c2", Content: "a note"},
	}}
}

// Images go as content parts: a user message's after its text, each
// after its line; a tool result's in a user message after the turn's
// results, which the result names, as the API takes image parts in user
// messages only.
func TestImagesOnTheWire(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{{Text: "a chart"}}})
	c, _ := newClient(t, srv.URL(), nil)
	if _, err := c.Stream(context.Background(), imageRequest(), nil); err != nil {
		t.Fatal(err)
	}
	var body struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := srv.Requests()[0].Decode(&body); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range body.Messages {
		got = append(got, m.Role+" "+string(m.Content))
	}
	want := []string{
		`system "be brief"`,
		`user [{"type":"text","text":"what is this?"},{"type":"text","text":"photo.png: PNG image, 2×2, 70 bytes"},{"type":"image_url","image_url":{"url":"data:image/png;base64,cG5nIGJ5dGVz"}}]`,
		`assistant ""`,
		`tool "chart.jpg: JPEG image, 4×4, 1.0 KB (shown in the next message)"`,
		`tool "a note"`,
		`user [{"type":"text","text":"chart.jpg: JPEG image, 4×4, 1.0 KB"},{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,anBlZyBieXRlcw=="}}]`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("messages on the wire:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A cassette keeps each image by its hash, without its bytes, and a
// replay compares images so: the same image replays, another one is a
// difference named by its path.
func TestCassetteKeepsImagesWithoutTheirBytes(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{{Text: "a chart"}}})
	c, _ := newClient(t, srv.URL(), nil)
	var cassette bytes.Buffer
	if _, err := llm.NewRecorder(c, &cassette, "").Stream(context.Background(), imageRequest(), nil); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(cassette.String(), `"data"`) || !strings.Contains(cassette.String(), photo.SHA256) {
		t.Errorf("cassette = %s", cassette.String())
	}
	replay := func(req llm.Request) error {
		r, err := llm.NewReplayer(bytes.NewReader(cassette.Bytes()), "")
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.Stream(context.Background(), req, nil)
		return err
	}
	if err := replay(imageRequest()); err != nil {
		t.Errorf("the same images do not replay: %v", err)
	}
	other := imageRequest()
	other.Messages[1].Images = []llm.Image{chart}
	if err := replay(other); err == nil || !strings.Contains(err.Error(), "messages[1].images[0]") {
		t.Errorf("another image replayed: %v", err)
	}
}

// BenchmarkStreamWithImage measures what a 5 MB image adds to a request:
// its base64 in the JSON body, sent to the local fake, which reads it
// whole (compare BenchmarkStream).
func BenchmarkStreamWithImage(b *testing.B) {
	srv, err := llmtest.Start(llmtest.Script{Loop: true, Turns: []llmtest.Turn{{Text: "a picture"}}})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	c, err := llm.New(llm.Config{BaseURL: srv.URL()})
	if err != nil {
		b.Fatal(err)
	}
	img := photo
	img.Data = bytes.Repeat([]byte("0123456789abcdef"), 5<<20/16)
	req := llm.Request{Model: "bench", Messages: []llm.Message{{Role: llm.RoleUser, Content: "look", Images: []llm.Image{img}}}}
	b.SetBytes(int64(len(img.Data)))
	for b.Loop() {
		if _, err := c.Stream(context.Background(), req, nil); err != nil {
			b.Fatal(err)
		}
	}
}
