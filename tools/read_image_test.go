package tools

import (
	"bytes"
	"image"
	"image/jpeg"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// read_file gives an image file, known by its bytes, as an image and no
// text; one over 20 MB, or with a header that does not read, is refused
// naming it, and other binary files stay refused.
func TestReadFileImage(t *testing.T) {
	t.Parallel()
	var jpg bytes.Buffer
	if err := jpeg.Encode(&jpg, image.NewGray(image.Rect(0, 0, 12, 9)), nil); err != nil {
		t.Fatal(err)
	}
	s, root := newTestSet(t, Options{}, map[string]string{
		"shot.txt":   jpg.String(),
		"broken.png": "\x89PNG\r\n\x1a\n\x00\x00\x00",
		"bin.dat":    "abc\x00def",
	})
	huge := filepath.Join(root, "huge.png")
	if err := os.WriteFile(huge, jpg.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 21<<20); err != nil {
		t.Fatal(err)
	}

	res := call(t, s, "read_file", `{"path":"shot.txt"}`)
	if res.IsError || res.Output != "" || len(res.Images) != 1 {
		t.Fatalf("read_file of a JPEG = %+v", res)
	}
	if img := res.Images[0]; img.Name != "shot.txt" || img.MediaType != "image/jpeg" || img.Width != 12 || img.Height != 9 || !bytes.Equal(img.Data, jpg.Bytes()) {
		t.Errorf("the image = %+v", img)
	}
	for path, want := range map[string]string{
		"huge.png":   "huge.png is 21 MB, more than the 20 MB an image may be; inspect it with bash instead",
		"broken.png": "broken.png: a PNG image whose header cannot be read",
		"bin.dat":    `"bin.dat" is a binary file`,
	} {
		res := call(t, s, "read_file", `{"path":"`+path+`"}`)
		if !res.IsError || !strings.Contains(res.Output, want) || len(res.Images) != 0 {
			t.Errorf("read_file %s = %+v, want an error with %q", path, res, want)
		}
	}
}
