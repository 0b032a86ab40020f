package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// What ships for users to read stands on its own: it points at no file
// outside the repository (a clone has no ../shared), and its links lead to
// files and headings that exist.
func TestDocumentsPointInsideTheRepository(t *testing.T) {
	root := "../.."
	files := []string{"README.md", "Makefile", "compose.yaml", "api/web/openapi.json"}
	for _, pattern := range []string{"docs/*.md", "deploy/*/*", "bench/*/README.md"} {
		m, _ := filepath.Glob(filepath.Join(root, pattern))
		for _, f := range m {
			rel, _ := filepath.Rel(root, f)
			files = append(files, rel)
		}
	}
	outside := regexp.MustCompile(`\.\./shared|SPEC\.md|SPEC §|SPEC \\u00a7`)
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	fence := regexp.MustCompile("(?ms)^```.*?^```")
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, m := range outside.FindAllStringIndex(text, -1) {
			t.Errorf("%s:%d points outside the repository: %q", f, 1+strings.Count(text[:m[0]], "\n"), text[m[0]:m[1]])
		}
		if !strings.HasSuffix(f, ".md") {
			continue
		}
		// A fence's text is shown as it is: a link there links nothing.
		for _, m := range link.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			doc := filepath.Join(root, f)
			if path != "" {
				doc = filepath.Join(root, filepath.Dir(f), path)
				if _, err := os.Stat(doc); err != nil {
					t.Errorf("%s links to %s, which the repository does not have", f, target)
					continue
				}
			}
			if anchor != "" && !hasHeading(t, doc, anchor) {
				t.Errorf("%s links to %s: no such heading", f, target)
			}
		}
	}
}

// hasHeading reports whether a Markdown file has a heading whose anchor,
// as GitHub makes them, is anchor.
func hasHeading(t *testing.T, path, anchor string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		var slug strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				slug.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				slug.WriteRune(r)
			}
		}
		if slug.String() == anchor {
			return true
		}
	}
	return false
}
