package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// What ships for users to read stands on its own: it cites no document
// outside the repository (a clone has no ../shared, nor the issues it was
// built from), the code's comments included, and every link, image and anchor of its Markdown leads to a
// file and a heading that exist. The README stays a front door; the
// reference is in docs/.
func TestDocumentsPointInsideTheRepository(t *testing.T) {
	t.Parallel()
	root := "../.."
	docs := []string{"README.md", "api/web/openapi.json"}
	for _, pattern := range []string{"docs/*.md", "bench/*/README.md"} {
		docs = append(docs, glob(t, root, pattern)...)
	}
	config := append([]string{"Makefile", "compose.yaml"}, glob(t, root, "deploy/*/*")...)
	outside := regexp.MustCompile(`\.\./shared|SPEC\.md|SPEC §|SPEC \\u00a7`)
	// A document says things in its own words: no specification a reader
	// cannot open, no issue of the tracker it was built from.
	cited := regexp.MustCompile(`\bSPEC\b|\b[Ii]ssues? #?\d`)
	for _, c := range []struct {
		files []string
		res   []*regexp.Regexp
	}{{docs, []*regexp.Regexp{outside, cited}}, {goFiles(t, root), []*regexp.Regexp{outside, cited}}, {config, []*regexp.Regexp{outside}}} {
		for _, f := range c.files {
			text := read(t, filepath.Join(root, f))
			for _, re := range c.res {
				for _, m := range re.FindAllStringIndex(text, -1) {
					t.Errorf("%s:%d points outside the repository: %q", f, line(text, m[0]), text[m[0]:m[1]])
				}
			}
		}
	}
	for _, f := range docs {
		if !strings.HasSuffix(f, ".md") {
			continue
		}
		text := read(t, filepath.Join(root, f))
		for _, l := range links(text) {
			if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(l.target, "#")
			doc := filepath.Join(root, f)
			if path != "" {
				doc = filepath.Join(root, filepath.Dir(f), path)
				if _, err := os.Stat(doc); err != nil {
					t.Errorf("%s:%d links to %s, which the repository does not have", f, l.line, l.target)
					continue
				}
			}
			if anchor != "" && !anchors(read(t, doc))[anchor] {
				t.Errorf("%s:%d links to %s: %s has no such heading", f, l.line, l.target, doc)
			}
		}
	}
	if n := strings.Count(read(t, filepath.Join(root, "README.md")), "\n"); n > 250 {
		t.Errorf("README.md has %d lines: it is the front door, at most 250; the reference goes in docs/", n)
	}
}

// The checks above find what they are meant to find.
func TestDocumentChecks(t *testing.T) {
	t.Parallel()
	md := "# Title\n\n## Flow files (`flows/ID.json`)\n\n## Café ✓\n\n## Twice\n\n## Twice\n\n" +
		"```sh\n# not a heading](nowhere.md)\n```\n\n  ```json\n  [x](inside-an-indented-fence.md)\n  ```\n\n" +
		"See [a](a.md#b), ![plot](p.svg), `[code](not-a-link.md)`, <img alt=\"x\" src=\"i.png\">.\n[ref]: r.md\n"
	var got []string
	for _, l := range links(md) {
		got = append(got, fmt.Sprintf("%d:%s", l.line, l.target))
	}
	if want := "19:a.md#b 19:p.svg 19:i.png 20:r.md"; strings.Join(got, " ") != want {
		t.Errorf("links: %q, want %q", strings.Join(got, " "), want)
	}
	a := anchors(md)
	for _, want := range []string{"title", "flow-files-flowsidjson", "café-", "twice", "twice-1"} {
		if !a[want] {
			t.Errorf("no anchor %q in %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Error("a line of a fence counts as a heading")
	}
}

type link struct {
	target string
	line   int
}

var (
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	imgTag     = regexp.MustCompile(`<img\b[^>]*\bsrc="([^"]+)"`)
	definition = regexp.MustCompile(`^\s*\[[^\]]+\]:\s*(\S+)`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
)

// links are the targets of a Markdown text's links and images, inline,
// as reference definitions and as <img> tags, with their lines. A fence's
// or a code span's text is shown as it is: a link there links nothing.
func links(text string) []link {
	var out []link
	for i, l := range prose(text) {
		l = codeSpan.ReplaceAllString(l, "")
		for _, re := range []*regexp.Regexp{inlineLink, imgTag, definition} {
			for _, m := range re.FindAllStringSubmatch(l, -1) {
				out = append(out, link{m[1], i + 1})
			}
		}
	}
	return out
}

// anchors are the anchors GitHub gives a Markdown text's headings: the
// title in lower case, spaces made hyphens, every other character but
// letters, digits, hyphens and underscores dropped; a title seen before
// gets -1, -2….
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(text) {
		title, ok := strings.CutPrefix(strings.TrimLeft(l, "#"), " ")
		if !ok || !strings.HasPrefix(l, "#") || len(l)-len(strings.TrimLeft(l, "#")) > 6 {
			continue
		}
		var slug strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(title)) {
			switch {
			case r == ' ':
				slug.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				slug.WriteRune(r)
			}
		}
		s := slug.String()
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// prose is a Markdown text's lines with those of fenced code blanked.
func prose(text string) []string {
	lines := strings.Split(text, "\n")
	in := false
	for i, l := range lines {
		if fence.MatchString(l) {
			in = !in
			lines[i] = ""
		} else if in {
			lines[i] = ""
		}
	}
	return lines
}

func glob(t *testing.T, root, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(root, pattern))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range m {
		rel, _ := filepath.Rel(root, f)
		out = append(out, rel)
	}
	return out
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func line(text string, at int) int { return 1 + strings.Count(text[:at], "\n") }

// goFiles are the repository's Go files, but this one, whose patterns name
// what they look for: their comments are read as documents are.
func goFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata"):
			return filepath.SkipDir
		case strings.HasSuffix(path, ".go") && d.Name() != "docs_test.go":
			rel, _ := filepath.Rel(root, path)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
