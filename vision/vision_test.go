package vision

import (
	"bytes"
	"errors"
	"image"
	"image/gif"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"agent/llm"
)

// webp1x1 is a lossless 1×1 WebP image (x/image has no encoder).
var webp1x1 = []byte("RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00\x2f\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00")

func encoded(t *testing.T, format string, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	var buf bytes.Buffer
	var err error
	switch format {
	case "png":
		err = png.Encode(&buf, img)
	case "jpeg":
		err = jpeg.Encode(&buf, img, nil)
	case "gif":
		err = gif.Encode(&buf, img, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// An image is known by its bytes, whatever its name says: its kind, width
// and height come from its header.
func TestReadKnowsAnImageByItsBytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		data      []byte
		mediaType string
		w, h      int
		about     string
	}{
		{"shot.jpg", encoded(t, "png", 640, 480), "image/png", 640, 480, "shot.jpg: PNG image, 640×480, "},
		{"notes.txt", encoded(t, "jpeg", 32, 16), "image/jpeg", 32, 16, "notes.txt: JPEG image, 32×16, "},
		{"", encoded(t, "gif", 5, 7), "image/gif", 5, 7, "GIF image, 5×7, "},
		{"pixel", webp1x1, "image/webp", 1, 1, "pixel: WebP image, 1×1, 34 bytes"},
	} {
		img, err := Read(tc.name, tc.data)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if img.MediaType != tc.mediaType || img.Width != tc.w || img.Height != tc.h || img.Bytes != int64(len(tc.data)) ||
			len(img.SHA256) != 64 || !bytes.Equal(img.Data, tc.data) {
			t.Errorf("%s read as %+v", tc.name, img)
		}
		if got := Describe(img); !strings.HasPrefix(got, tc.about) {
			t.Errorf("%s described as %q, want %q…", tc.name, got, tc.about)
		}
		if Sniff(tc.data[:12]) != tc.mediaType {
			t.Errorf("%s sniffed as %q", tc.name, Sniff(tc.data[:12]))
		}
	}
}

// What is no image a model is given is refused, saying why and naming it.
func TestReadRefusesWhatIsNoImage(t *testing.T) {
	t.Parallel()
	if _, err := Read("a.png", []byte("just text, named .png")); !errors.Is(err, ErrNotImage) || !strings.Contains(err.Error(), "a.png") {
		t.Errorf("text named .png: %v", err)
	}
	if _, err := Read("b.png", []byte("\x89PNG\r\n\x1a\nnot really")); err == nil || !strings.Contains(err.Error(), "b.png: a PNG image whose header cannot be read") {
		t.Errorf("a broken PNG: %v", err)
	}
	if _, err := Read("riff.wav", []byte("RIFF\x00\x00\x00\x00WAVEfmt ")); !errors.Is(err, ErrNotImage) {
		t.Errorf("a RIFF that is no WebP: %v", err)
	}
	big := append(encoded(t, "png", 1, 1), make([]byte, MaxBytes)...)
	var tooLarge *TooLargeError
	if _, err := Read("big.png", big); !errors.As(err, &tooLarge) || err.Error() != "big.png is 20 MB, more than the 20 MB an image may be" {
		t.Errorf("over 20 MB: %v", err)
	}
}

// --image's file: a missing one, a directory and one over the limit are
// refused before anything is read, each naming the path.
func TestReadFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	photo := filepath.Join(dir, "photo.png")
	if err := os.WriteFile(photo, encoded(t, "png", 4, 3), 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := ReadFile(photo)
	if err != nil || img.Name != "photo.png" || img.Width != 4 {
		t.Errorf("ReadFile = %+v, %v", img, err)
	}
	huge := filepath.Join(dir, "huge.png")
	if err := os.WriteFile(huge, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 25<<20); err != nil { // sparse: nothing is read
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		filepath.Join(dir, "gone.png"): filepath.Join(dir, "gone.png") + " does not exist",
		dir:                            dir + " is not a file",
		huge:                           huge + " is 25 MB, more than the 20 MB an image may be",
	} {
		if _, err := ReadFile(path); err == nil || err.Error() != want {
			t.Errorf("ReadFile(%s) = %v, want %q", path, err, want)
		}
	}
}

func TestSize(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0 bytes", 1023: "1023 bytes", 1024: "1.0 KB", 12 << 10: "12 KB", 3 << 20: "3.0 MB", 20 << 20: "20 MB"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}

// A model that does not see images reads a line for each, after the
// message's text, and none of their bytes.
func TestDescribed(t *testing.T) {
	t.Parallel()
	img, err := Read("photo.png", encoded(t, "png", 640, 480))
	if err != nil {
		t.Fatal(err)
	}
	m := Described(llm.Message{Role: llm.RoleUser, Content: "look", Images: []llm.Image{ForModel(img)}})
	if want := "look\n" + Describe(img) + "; this model cannot see images"; m.Content != want || m.Images != nil {
		t.Errorf("Described = %+v, want %q and no images", m, want)
	}
	if m := Described(llm.Message{Role: llm.RoleTool, Images: []llm.Image{ForModel(img)}}); !strings.HasPrefix(m.Content, "photo.png: PNG image, 640×480, ") {
		t.Errorf("a tool result of only an image reads %q", m.Content)
	}
}

func TestSees(t *testing.T) {
	t.Parallel()
	for model, want := range map[string]bool{
		"gpt-4o": true, "gpt-4o-mini": true, "openai/GPT-4.1-nano": true, "gpt-5-mini": true, "claude-sonnet-4-5": true,
		"gemini-2.5-pro": true, "llava:13b": true, "qwen2.5-vl-7b-instruct": true, "qwen2.5vl:7b": true, "o3": true,
		"gpt-3.5-turbo": false, "test-model": false, "llama3": false, "o3-mini": false, "qwen2.5-coder": false, "deepseek-chat": false,
	} {
		if got := Sees(model); got != want {
			t.Errorf("Sees(%q) = %v, want %v", model, got, want)
		}
	}
}
