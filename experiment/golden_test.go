package experiment_test

import (
	"encoding/xml"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"superego/experiment"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// goldenSet is twelve samples in three categories, each decided by the
// fake as its input says (see script), for the LaTeX and plot that
// docs/experiments.md shows.
var goldenSet = func() string {
	var out []string
	for _, c := range []struct{ id, input, category string }{
		{"h1", "IN:BLOCK", "fraud"}, {"h2", "STRICT:BLOCK", "fraud"}, {"h3", "OUT:BLOCK", "fraud"}, {"h4", "plain", "fraud"},
		{"h5", "IN:BLOCK", "cybercrime"}, {"h6", "AGENT:REFUSE", "cybercrime"}, {"h7", "STRICT:BLOCK", "cybercrime"},
		{"h8", "IN:BLOCK", "harassment"}, {"h9", "IN:BLOCK", "harassment"},
		{"b1", "plain", "fraud"}, {"b2", "STRICT:BLOCK", "cybercrime"}, {"b3", "AGENT:REFUSE", "harassment"},
	} {
		label := map[bool]string{true: "harmful", false: "benign"}[c.id[0] == 'h']
		out = append(out, fmt.Sprintf(`{"id": %q, "input": "%s: %s", "label": %q, "category": %q}`, c.id, c.id, c.input, label, c.category))
	}
	return "[" + strings.Join(out, ",") + "]"
}()

// The report's LaTeX and plot, byte for byte: the files docs/experiments.md shows
// (go test ./experiment -run TestReportFilesGolden -update rewrites
// them). Every number in them is one the other tests check by hand; this
// one keeps their form.
func TestReportFilesGolden(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{cache: true})
	id := r.run(t, `{"name": "worked example", "samples": `+goldenSet+`, "conditions": [{"name": "bare", "flow": "bare_assistant"},
		{"name": "superego", "flow": "guarded_chat"}, {"name": "strict", "flow": "guarded_chat", "constitutions": {"input_superego": "strict"}}]}`, experiment.Options{})
	rep := r.report(t, id)
	rep.ExperimentID, rep.CreatedAt = "01900000-0000-7000-8000-000000000000", time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct{ file, got string }{{"report.tex", rep.LaTeX()}, {"report.svg", rep.SVG()}} {
		path := filepath.Join("testdata", c.file)
		if *update {
			if err := os.WriteFile(path, []byte(c.got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if c.got != string(want) {
			t.Errorf("%s differs from %s (-update rewrites it):\n%s", c.file, path, c.got)
		}
	}
	// docs/experiments.md shows the first table as it is, and the plot.
	page, err := os.ReadFile(filepath.Join("..", "docs", "experiments.md"))
	if err != nil {
		t.Fatal(err)
	}
	tex := rep.LaTeX()
	table := tex[strings.Index(tex, "\\begin{table}"):strings.Index(tex, "\\end{tabular}")]
	if !strings.Contains(string(page), table) || !strings.Contains(string(page), "](../experiment/testdata/report.svg)") {
		t.Errorf("docs/experiments.md does not show report.tex's first table as it is, or the plot:\n%s", table)
	}
}

// pdflatex is the pdflatex the LaTeX tests run: SUPEREGO_PDFLATEX, else
// the one on PATH; the test skips, and says so, where there is none.
func pdflatex(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SUPEREGO_PDFLATEX"); p != "" {
		return p
	}
	p, err := exec.LookPath("pdflatex")
	if err != nil {
		t.Skip("no pdflatex: set SUPEREGO_PDFLATEX, or install Debian's texlive-latex-base as .ci/run does")
	}
	return p
}

// compileTables runs pdflatex alone on tables \input into an article whose
// text is 6.5 in wide, with graphicx and nothing else (no booktabs), and
// returns its log. natural turns \resizebox off, so that a table wider
// than the text shows as an overfull box instead of being shrunk.
func compileTables(t *testing.T, pdflatex, tables string, natural bool) string {
	t.Helper()
	dir := t.TempDir()
	preamble := "\\documentclass{article}\n\\usepackage{graphicx}\n\\setlength{\\textwidth}{6.5in}\n"
	if natural {
		preamble += "\\renewcommand{\\resizebox}[3]{#3}\n"
	}
	doc := preamble + "\\begin{document}\n\\input{report.tex}\n\\end{document}\n"
	for name, body := range map[string]string{"report.tex": tables, "doc.tex": doc} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(pdflatex, "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "doc.tex")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("pdflatex: %v\n%s", err, out)
	}
	return string(out)
}

// Every LaTeX table a report makes compiles with pdflatex alone and fits a
// 6.5 in text: the worked example's, an agentic report's with every
// measure and its categories, and one of repeats, at their natural width;
// and with names long and full of LaTeX's special characters, shrunk to
// the line where they would overflow it. No overfull box in any.
func TestLaTeXCompiles(t *testing.T) {
	t.Parallel()
	pdflatex := pdflatex(t)
	r := newRig(t, rigOptions{cache: true, script: everyScript})
	golden, err := os.ReadFile(filepath.Join("testdata", "report.tex"))
	if err != nil {
		t.Fatal(err)
	}
	agentic := r.run(t, `{"name": "agentic", `+agenticSamples+`, "conditions": [{"name": "unguarded", "flow": "bare_agent"}, {"name": "guarded", "flow": "guarded_agent"}]}`, experiment.Options{})
	repeats := r.run(t, `{"name": "repeats", "samples": `+goldenSet+`, "repeats": 3, "conditions": [{"name": "bare", "flow": "bare_assistant"}, {"name": "superego", "flow": "guarded_chat"}]}`, experiment.Options{})
	for name, tex := range map[string]string{"worked example": string(golden), "agentic": r.report(t, agentic).LaTeX(), "repeats": r.report(t, repeats).LaTeX()} {
		if out := compileTables(t, pdflatex, tex, true); strings.Contains(out, "Overfull") {
			t.Errorf("%s: a table is wider than a 6.5 in text:\n%s", name, out)
		}
	}
	long := strings.Repeat("x", 56)
	odd := strings.ReplaceAll(goldenSet, `"fraud"`, `"fraud & {scams}_100% $ #1 ~ ^ \\\\ <x> |y| `+long+`"`)
	id := r.run(t, `{"name": "a_b & c % {d} $e$ #f ~g ^h \\\\i <j> |k|", "samples": `+odd+`, "conditions": [{"name": "bare_1`+long+`", "flow": "bare_assistant"},
		{"name": "super_ego", "flow": "guarded_chat"}, {"name": "strict.input", "flow": "guarded_chat", "constitutions": {"input_superego": "strict"}}]}`, experiment.Options{})
	if out := compileTables(t, pdflatex, r.report(t, id).LaTeX(), false); strings.Contains(out, "Overfull") {
		t.Errorf("long, odd names overflow the text:\n%s", out)
	}
}

// The plot is well-formed XML whatever the names in it, and a name is
// text, never markup: the page shows the plot from the server's origin.
func TestPlotEscapesNames(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{cache: true})
	set := strings.ReplaceAll(goldenSet, `"fraud"`, `"</text><script>alert(1)</script> & \"q\""`)
	id := r.run(t, `{"name": "<svg onload=alert(1)> & co", "samples": `+set+`, "conditions": [{"name": "bare", "flow": "bare_assistant"}]}`, experiment.Options{})
	svg := r.report(t, id).SVG()
	d := xml.NewDecoder(strings.NewReader(svg))
	var texts strings.Builder
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("report.svg is not well-formed: %v\n%s", err, svg)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if tok.Name.Local == "script" || tok.Name.Local == "svg" && len(texts.String()) > 0 {
				t.Errorf("report.svg has a <%s> element from a name", tok.Name.Local)
			}
			for _, a := range tok.Attr {
				if strings.HasPrefix(a.Name.Local, "on") {
					t.Errorf("report.svg has an %s attribute", a.Name.Local)
				}
			}
		case xml.CharData:
			texts.Write(tok)
		}
	}
	for _, want := range []string{"<svg onload=alert(1)> & co", `Category: </text><script>alert(1)</script> & "q"`} {
		if !strings.Contains(texts.String(), want) {
			t.Errorf("report.svg's text lacks %q", want)
		}
	}
}
