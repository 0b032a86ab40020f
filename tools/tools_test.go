package tools_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"superego/tools"
)

func TestCalculator(t *testing.T) {
	t.Parallel()
	cases := []struct {
		expr, want, err string
	}{
		{"5*10", "50", ""},
		{"2 + 3 * 4", "14", ""},
		{"(2+3)^2", "25", ""},
		{"2**3**2", "512", ""},
		{"-2^2", "-4", ""},
		{"10 / 4", "2.5", ""},
		{"7 % 3", "1", ""},
		{"sqrt(16) + abs(-2)", "6", ""},
		{"max(1, 7, 3) - min(4, 2)", "5", ""},
		{"round(pi * 100)", "314", ""},
		{"1.5e3 + 1", "1501", ""},
		{"0.1 + 0.2", "0.3", ""},
		{"2400*0.17", "408", ""},
		{"1/3", "0.333333333333333", ""},
		{"1e20/3", "3.33333333333333e+19", ""},
		{"1/0", "", "division by zero"},
		{"9**9**9**9", "", "too large"},
		{"sqrt(-1)", "", "not a finite number"},
		{"2 +", "", "ends too soon"},
		{"2 $ 3", "", `unexpected '$'`},
		{"foo(1)", "", `unknown name "foo"`},
		{"(1+2", "", "missing )"},
		{"pow(2)", "", "pow takes 2 arguments"},
		{strings.Repeat("(", 10000) + "1" + strings.Repeat(")", 10000), "", "the limit is 1000"},
		{strings.Repeat("(", 300) + "1" + strings.Repeat(")", 300), "", "nested more than 64 levels"},
		{strings.Repeat("-", 900) + "1", "", "nested more than 64 levels"},
		{strings.Repeat("1+", 1<<19) + "1", "", "the limit is 1000"},
		{"", "", "ends too soon"},
	}
	calc := tools.Calculator()
	for _, c := range cases {
		name := c.expr
		if len(name) > 30 {
			name = name[:30]
		}
		t.Run(name, func(t *testing.T) {
			args, _ := json.Marshal(map[string]string{"expression": c.expr})
			got, err := calc.Call(context.Background(), args)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Errorf("got %q, %v; want error containing %q", got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Errorf("got %q, %v; want %q", got, err, c.want)
			}
		})
	}
	for _, bad := range []string{`{}`, `{"expression": 5}`, `[1]`, `nope`} {
		if _, err := calc.Call(context.Background(), json.RawMessage(bad)); err == nil {
			t.Errorf("arguments %s accepted", bad)
		}
	}
}

func FuzzEval(f *testing.F) {
	for _, s := range []string{"5*10", "2**3**2", "(((1)))", "sqrt(2)", "-+-1", "1e308*10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = tools.Eval(s) // must return, never panic
	})
}

func TestSearchAgainstSearXNG(t *testing.T) {
	t.Parallel()
	var gotQuery, gotFormat string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotQuery, gotFormat = r.URL.Query().Get("q"), r.URL.Query().Get("format")
		if r.URL.Path != "/search" {
			http.NotFound(w, r)
			return
		}
		if gotQuery == "fail" {
			http.Error(w, "rate limited", http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"query": "go", "results": [
			{"title": "The Go Programming Language", "url": "https://go.dev/", "content": " Go is an open source language. "},
			{"title": "Go (game)", "url": "https://example.org/go", "content": "A board game."},
			{"title": "Third", "url": "https://example.org/3", "content": "x"}]}`))
	}))
	defer srv.Close()
	s := &tools.Search{URL: srv.URL + "/", MaxResults: 2}
	out, err := s.Tool().Call(context.Background(), json.RawMessage(`{"query": "golang tutorial"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := "1. The Go Programming Language\n   https://go.dev/\n   Go is an open source language.\n2. Go (game)\n   https://example.org/go\n   A board game."
	if out != want || gotQuery != "golang tutorial" || gotFormat != "json" {
		t.Errorf("got %q (q=%q format=%q)", out, gotQuery, gotFormat)
	}
	if _, err := s.Query(context.Background(), "fail"); err == nil || !strings.Contains(err.Error(), "429") {
		t.Errorf("backend error: %v", err)
	}
	if _, err := (&tools.Search{}).Query(context.Background(), "x"); err == nil || !strings.Contains(err.Error(), "SUPEREGO_SEARCH_URL") {
		t.Errorf("unconfigured search: %v", err)
	}
	var nilSearch *tools.Search
	if _, err := nilSearch.Tool().Call(context.Background(), json.RawMessage(`{"query":"x"}`)); err == nil {
		t.Error("nil search backend answered")
	}
}

func TestCodeAnalyzer(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, code string
		want       tools.Analysis
	}{
		{"go file", "package main\n\nfunc main() {}\n\nfunc (s *Server) Run() error { return nil }\n",
			tools.Analysis{Language: "go", Lines: 5, Functions: []string{"main", "Server.Run"}, Checked: true}},
		{"go snippet with a syntax error", "func add(a, b int) int {\n\treturn a +\n}\n",
			tools.Analysis{Language: "go", Lines: 3, Functions: []string{"add"}, Checked: true,
				SyntaxErrors: []string{"line 3:1: expected operand, found '}'"}}},
		{"python", "import os\n\ndef main():\n    pass\n\nasync def fetch(url):\n    return url",
			tools.Analysis{Language: "python", Lines: 7, Functions: []string{"main", "fetch"}}},
		{"javascript", "const add = (a, b) => { return a + b };\nfunction sub(a, b) { return a - b }\nconsole.log(add(1, 2));\n",
			tools.Analysis{Language: "javascript", Lines: 3, Functions: []string{"add", "sub"}}},
		{"prose", "hello there", tools.Analysis{Language: "unknown", Lines: 1, Functions: []string{}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.want.Bytes = len(c.code)
			got := tools.Analyze(c.code)
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(c.want)
			if string(gb) != string(wb) {
				t.Errorf("got  %s\nwant %s", gb, wb)
			}
		})
	}
	if _, err := tools.CodeAnalyzer().Call(context.Background(), json.RawMessage(`{"code": "`+strings.Repeat("x", 300<<10)+`"}`)); err == nil {
		t.Error("oversized code accepted")
	}
}
