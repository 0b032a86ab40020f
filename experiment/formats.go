package experiment

import (
	"encoding/json"
	"fmt"

	"superego/flow"
)

// ReportFormat is a form of the report: the name --format and the HTTP
// route take, the file the command line writes beside results.jsonl, and
// the content type it is served as.
type ReportFormat struct {
	Name        string
	File        string
	ContentType string
}

// ReportFormats are the report's forms, in the order they are written.
var ReportFormats = []ReportFormat{
	{"md", "report.md", "text/markdown; charset=utf-8"},
	{"json", "report.json", "application/json"},
	{"csv", "report.csv", "text/csv; charset=utf-8"},
	{"tex", "report.tex", "application/x-tex; charset=utf-8"},
	{"svg", "report.svg", "image/svg+xml"},
}

// FormatOf finds a report format by its name; "latex" is "tex".
func FormatOf(name string) (ReportFormat, error) {
	if name == "latex" {
		name = "tex"
	}
	for _, f := range ReportFormats {
		if f.Name == name {
			return f, nil
		}
	}
	return ReportFormat{}, fmt.Errorf("no report format %q (md, json, csv, latex or tex, svg): %w", name, flow.ErrNotFound)
}

// Render is the report in format f.
func (r *Report) Render(f ReportFormat) []byte {
	switch f.Name {
	case "json":
		b, _ := json.MarshalIndent(r, "", "  ") // a report has nothing that does not encode
		return append(b, '\n')
	case "csv":
		return []byte(r.CSV())
	case "tex":
		return []byte(r.LaTeX())
	case "svg":
		return []byte(r.SVG())
	}
	return []byte(r.Markdown())
}
