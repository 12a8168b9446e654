package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every document a code comment cites is in the repository, at a heading
// that exists: the code's contract is readable without anything outside.
func TestCodeCitesDocumentsThatExist(t *testing.T) {
	t.Parallel()
	root := ".."
	anchors := map[string]map[string]bool{}
	for _, doc := range []string{"README.md", "docs/PROTOCOL.md", "docs/SCHEMA.md", "docs/ARCHITECTURE.md"} {
		data, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		anchors[doc] = map[string]bool{}
		for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(data), -1) {
			anchors[doc][anchor(m[1])] = true
		}
	}
	cite := regexp.MustCompile(`(README\.md|docs/[A-Z]+\.md)#([\w-]+)`)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && d.Name() != ".." || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, ".js") && !strings.HasSuffix(path, ".sql") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// Migrations are history, kept as they shipped.
		historical := strings.Contains(filepath.ToSlash(path), "store/migrations/")
		if strings.Contains(string(data), "DESIGN.md") && !historical && !strings.HasSuffix(path, "docs_test.go") {
			t.Errorf("%s cites DESIGN.md, which is not in the repository; cite docs/ or README.md", path)
		}
		for _, m := range cite.FindAllStringSubmatch(string(data), -1) {
			if !anchors[m[1]][m[2]] {
				t.Errorf("%s cites %s#%s: no such heading", path, m[1], m[2])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// anchor is a heading's anchor as GitHub makes it.
func anchor(heading string) string {
	h := strings.ToLower(strings.TrimSpace(heading))
	h = regexp.MustCompile("[`*]").ReplaceAllString(h, "")
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}
