// Package vision is what a model is given of an image (docs/PROTOCOL.md#images):
// an image read from a file (--image, read_file) or an MCP tool's content,
// known by its bytes (PNG, JPEG, GIF or WebP, whatever its name says) and
// bounded in size; which models see images (models.go); and the line a
// model that does not see them reads instead. Its bytes never reach a
// model as text.
package vision

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"image"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/image/webp"

	"agent/event"
	"agent/llm"
)

// MaxBytes is the largest image a model is given: the largest the
// providers take (OpenAI's 20 MB). Larger ones are refused, not resized.
const MaxBytes = 20 << 20

// formats are the images a model is given, by their first bytes.
var formats = []struct {
	magic     []string // any of these, at offset 0 (WebP: "RIFF" and "WEBP" at 8)
	mediaType string
	name      string
	config    func(io.Reader) (image.Config, error)
}{
	{[]string{"\x89PNG\r\n\x1a\n"}, "image/png", "PNG", png.DecodeConfig},
	{[]string{"\xff\xd8\xff"}, "image/jpeg", "JPEG", jpeg.DecodeConfig},
	{[]string{"GIF87a", "GIF89a"}, "image/gif", "GIF", gif.DecodeConfig},
	{[]string{"RIFF"}, "image/webp", "WebP", webp.DecodeConfig},
}

// Sniff returns the media type of an image that starts with head, or ""
// when head starts no image a model is given.
func Sniff(head []byte) string {
	if i := sniff(head); i >= 0 {
		return formats[i].mediaType
	}
	return ""
}

func sniff(head []byte) int {
	for i, f := range formats {
		for _, m := range f.magic {
			if !bytes.HasPrefix(head, []byte(m)) {
				continue
			}
			if f.mediaType == "image/webp" && (len(head) < 12 || string(head[8:12]) != "WEBP") {
				continue
			}
			return i
		}
	}
	return -1
}

// ErrNotImage is data that is no PNG, JPEG, GIF or WebP image.
var ErrNotImage = errors.New("not a PNG, JPEG, GIF or WebP image")

// TooLargeError is an image of more than MaxBytes.
type TooLargeError struct {
	Name  string
	Bytes int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s is %s, more than the %s an image may be", cmpName(e.Name), Size(e.Bytes), Size(MaxBytes))
}

// Read reads data as an image named name (a file's base name, or "").
// Its kind comes from its bytes, and its width and height from its header,
// which must be whole: an error says why it is no image a model is given
// (ErrNotImage, a *TooLargeError, or a broken header).
func Read(name string, data []byte) (event.Image, error) {
	if len(data) > MaxBytes {
		return event.Image{}, &TooLargeError{Name: name, Bytes: int64(len(data))}
	}
	i := sniff(data)
	if i < 0 {
		return event.Image{}, fmt.Errorf("%s: %w", cmpName(name), ErrNotImage)
	}
	f := formats[i]
	cfg, err := f.config(bytes.NewReader(data))
	if err != nil || cfg.Width <= 0 || cfg.Height <= 0 {
		return event.Image{}, fmt.Errorf("%s: a %s image whose header cannot be read (%v)", cmpName(name), f.name, err)
	}
	sum := sha256.Sum256(data)
	return event.Image{
		SHA256: hex.EncodeToString(sum[:]), MediaType: f.mediaType, Name: name,
		Bytes: int64(len(data)), Width: cfg.Width, Height: cfg.Height, Data: data,
	}, nil
}

// ReadFile reads the image at path (--image, /image), refusing one larger
// than MaxBytes before reading it.
func ReadFile(path string) (event.Image, error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return event.Image{}, fmt.Errorf("%s does not exist", path)
	case err != nil:
		return event.Image{}, err
	case !fi.Mode().IsRegular():
		return event.Image{}, fmt.Errorf("%s is not a file", path)
	case fi.Size() > MaxBytes:
		return event.Image{}, &TooLargeError{Name: path, Bytes: fi.Size()}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return event.Image{}, err
	}
	img, err := Read(path, data) // its errors name the path as given
	img.Name = filepath.Base(path)
	return img, err
}

// Describe says what an image is, in one line: "photo.png: PNG image,
// 640×480, 12 KB".
func Describe(img event.Image) string {
	kind := img.MediaType
	for _, f := range formats {
		if f.mediaType == img.MediaType {
			kind = f.name
		}
	}
	about := fmt.Sprintf("%s image, %d×%d, %s", kind, img.Width, img.Height, Size(img.Bytes))
	if img.Name != "" {
		about = img.Name + ": " + about
	}
	return about
}

// Size says a number of bytes for people: 512 bytes, 12 KB, 3.4 MB.
func Size(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d bytes", n)
	case n < 10<<10:
		return fmt.Sprintf("%.1f KB", float64(n)/(1<<10))
	case n < 1<<20:
		return fmt.Sprintf("%d KB", (n+1<<9)>>10)
	case n < 10<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d MB", (n+1<<19)>>20)
}

func cmpName(name string) string {
	if name == "" {
		return "the image"
	}
	return name
}

// ForModel is img as a message gives it to a model, with its bytes.
func ForModel(img event.Image) llm.Image {
	return llm.Image{SHA256: img.SHA256, MediaType: img.MediaType, About: Describe(img), Data: img.Data}
}

// Unseen is what a model that does not see images reads of one.
const Unseen = "; this model cannot see images"

// Described is m as a model that does not see images reads it: each image
// a line of text, "photo.png: PNG image, 640×480, 12 KB; this model cannot
// see images", and no bytes.
func Described(m llm.Message) llm.Message {
	if len(m.Images) == 0 {
		return m
	}
	text := m.Content
	for _, img := range m.Images {
		if text != "" {
			text += "\n"
		}
		text += img.About + Unseen
	}
	m.Content, m.Images = text, nil
	return m
}
