package store

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"strings"
	"testing"

	"agent/event"
	"agent/vision"
)

func pngBytes(t *testing.T, w, h int) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// An image's bytes come with the event that gives it to the model and
// are kept once, by hash: the event is stored without them, what the
// image is comes from its bytes (not from what the event says), bytes
// that are no image are left out, and the conversation a resume rebuilds
// gives the model the same images, bytes and all.
func TestImagesKeptOnceAndRebuilt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "r1")
	j, err := db.Journal(ctx, "r1", "")
	if err != nil {
		t.Fatal(err)
	}
	data := pngBytes(t, 3, 2)
	lie := event.Image{Name: "a.png", MediaType: "image/gif", Width: 99, Data: data}
	evs := []event.Event{
		event.New(event.MessageCompleted, event.MessageData{Role: "user", Text: "look", Images: []event.Image{lie}}),
		event.New(event.MessageCompleted, event.MessageData{Role: "assistant", ToolCalls: []event.ToolCall{{ID: "c1", Name: "read_file"}}}),
		event.New(event.ToolStarted, event.ToolStartedData{CallID: "c1", Name: "read_file"}),
		event.New(event.ToolCompleted, event.ToolCompletedData{CallID: "c1", Name: "read_file", OK: true,
			Images: []event.Image{{Name: "b.png", Data: data}, {Name: "c.png", Data: []byte("not an image")}}}),
	}
	for _, e := range evs {
		stored, err := j.Append(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(stored.Data), `"data"`) {
			t.Errorf("%s stored with the image's bytes: %s", e.Type, stored.Data)
		}
	}
	if err := j.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.ro.QueryRowContext(ctx, `SELECT COUNT(*) FROM images`).Scan(&n); err != nil || n != 1 {
		t.Errorf("images kept: %d (%v), want the one image once", n, err)
	}

	conv, err := db.Conversation(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if len(conv) != 3 || len(conv[0].Images) != 1 || len(conv[2].Images) != 1 {
		t.Fatalf("conversation = %+v; want the user's image and the tool's readable one", conv)
	}
	user, tool := conv[0].Images[0], conv[2].Images[0]
	if user.MediaType != "image/png" || user.About != "a.png: PNG image, 3×2, "+vision.Size(int64(len(data))) || !bytes.Equal(user.Data, data) {
		t.Errorf("the user's image rebuilt as %+v", user)
	}
	if tool.SHA256 != user.SHA256 || tool.About != "b.png: PNG image, 3×2, "+vision.Size(int64(len(data))) || !bytes.Equal(tool.Data, data) {
		t.Errorf("the tool's image rebuilt as %+v", tool)
	}
	stored, err := db.Images(ctx, []event.Image{{SHA256: user.SHA256}})
	if err != nil || len(stored) != 1 || !bytes.Equal(stored[0].Data, data) {
		t.Errorf("Images = %v, %v", stored, err)
	}
	if _, err := db.Images(ctx, []event.Image{{Name: "gone.png", SHA256: strings.Repeat("0", 64)}}); err == nil || !strings.Contains(err.Error(), "gone.png") {
		t.Errorf("an image the store does not have: %v", err)
	}
}

// A fork of a session names the same images, and its conversation gives
// the model them again, bytes and all, though the fork's events never
// brought them.
func TestForkKeepsImages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createSession(t, db, "src")
	createSessionRun(t, db, "src", "run-1")
	data := pngBytes(t, 4, 4)
	sessionAppend(t, sessionJournal(t, db, "src"), "run-1",
		event.New(event.RunStarted, event.RunStartedData{Prompt: "look"}),
		event.New(event.MessageCompleted, event.MessageData{Role: "user", Text: "look", Images: []event.Image{{Name: "a.png", Data: data}}}),
		assistantMsg("a grey square", 0),
		event.New(event.RunCompleted, event.RunFinishedData{Status: "completed"}),
	)
	if _, err := db.ForkSession(ctx, "src", "fork", "", 0); err != nil {
		t.Fatal(err)
	}
	prior, err := db.SessionPrior(ctx, "fork", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(prior) != 2 || len(prior[0].Images) != 1 || !bytes.Equal(prior[0].Images[0].Data, data) ||
		!strings.HasPrefix(prior[0].Images[0].About, "a.png: PNG image, 4×4, ") {
		t.Errorf("the fork's conversation = %+v", prior)
	}
}

// noise is a PNG of w×h noise pixels, which does not compress.
func noise(b *testing.B, w, h int) []byte {
	b.Helper()
	img := image.NewGray(image.Rect(0, 0, w, h))
	x := uint32(1)
	for i := range img.Pix {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		img.Pix[i] = uint8(x)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

// BenchmarkAppendImage measures what an image costs the journal: a
// tool.completed bringing a 1 MB PNG (read, hashed, kept once, the event
// stored without it), the same image again (kept already), and the
// conversation rebuilt with its bytes, as a resume reads it.
func BenchmarkAppendImage(b *testing.B) {
	ctx := context.Background()
	data := noise(b, 1024, 1024)
	for _, tc := range []struct {
		name  string
		fresh bool
	}{{"new", true}, {"again", false}} {
		b.Run(tc.name, func(b *testing.B) {
			db, err := Open(b.TempDir() + "/agent.db")
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			if err := db.CreateRun(ctx, &Run{ID: "r1"}, "", 0); err != nil {
				b.Fatal(err)
			}
			j, err := db.Journal(ctx, "r1", "")
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(data)))
			i := 0
			for b.Loop() {
				img := data
				if tc.fresh { // another image each time
					img = append(bytes.Clone(data), byte(i), byte(i>>8), byte(i>>16))
				}
				i++
				e := event.New(event.ToolCompleted, event.ToolCompletedData{CallID: "c", OK: true, Images: []event.Image{{Name: "n.png", Data: img}}})
				e.RunID = "r1"
				if _, err := j.Append(ctx, e); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("rebuild", func(b *testing.B) {
		db, err := Open(b.TempDir() + "/agent.db")
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		if err := db.CreateRun(ctx, &Run{ID: "r1"}, "", 0); err != nil {
			b.Fatal(err)
		}
		e := event.New(event.MessageCompleted, event.MessageData{Role: "user", Text: "look", Images: []event.Image{{Name: "n.png", Data: data}}})
		e.RunID, e.Seq = "r1", 1
		if err := db.AppendEvents(ctx, []event.Event{e}); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			conv, err := db.Conversation(ctx, "r1")
			if err != nil || len(conv) != 1 || len(conv[0].Images) != 1 {
				b.Fatal(conv, err)
			}
		}
	})
}
