package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"regexp"
	"strings"
)

const maxCodeLen = 256 << 10

// CodeAnalyzer reports static facts about a code snippet: a guess at its
// language, its size, the functions it defines and, for Go, its syntax
// errors. It never runs the code.
func CodeAnalyzer() Tool {
	return Tool{
		Name:        "code_analyzer",
		ReadOnly:    true,
		ClosedWorld: true,
		Description: "Static facts about a code snippet: language guess, lines, functions defined, and syntax errors for Go. Does not run the code.",
		Parameters:  schema("code", "the source code to analyze"),
		Call: func(_ context.Context, args json.RawMessage) (string, error) {
			code, err := stringArg(args, "code")
			if err != nil {
				return "", err
			}
			if len(code) > maxCodeLen {
				return "", fmt.Errorf("code is %d bytes; the limit is %d", len(code), maxCodeLen)
			}
			b, err := json.Marshal(Analyze(code))
			return string(b), err
		},
	}
}

// Analysis is what CodeAnalyzer reports.
type Analysis struct {
	Language     string   `json:"language"`
	Lines        int      `json:"lines"`
	Bytes        int      `json:"bytes"`
	Functions    []string `json:"functions"`
	SyntaxErrors []string `json:"syntax_errors,omitempty"`
	Checked      bool     `json:"syntax_checked"` // whether syntax was checked (Go only)
}

var languageHints = []struct {
	lang string
	re   *regexp.Regexp
}{
	{"go", regexp.MustCompile(`(?m)^\s*(package\s+\w+|func\s+(\(\w+ \*?\w+\)\s*)?\w+\(|import\s+\()`)},
	{"python", regexp.MustCompile(`(?m)^\s*(def\s+\w+\(.*\)\s*(->.*)?:|class\s+\w+.*:|import\s+\w+$|from\s+\S+\s+import\s)`)},
	{"rust", regexp.MustCompile(`(?m)^\s*(pub\s+)?fn\s+\w+|let\s+mut\s`)},
	{"javascript", regexp.MustCompile(`(?m)(function\s+\w+\s*\(|=>\s*[{(]|\b(const|let)\s+\w+\s*=|console\.log)`)},
	{"java", regexp.MustCompile(`(?m)^\s*(public|private|protected)\s+(static\s+)?(class|void|\w+)\s`)},
	{"c", regexp.MustCompile(`(?m)^\s*#include\s*<|^\s*int\s+main\s*\(`)},
	{"shell", regexp.MustCompile(`(?m)^#!/bin/(ba)?sh|^\s*(echo|export)\s`)},
}

var funcPatterns = map[string]*regexp.Regexp{
	"python":     regexp.MustCompile(`(?m)^\s*(?:async\s+)?def\s+(\w+)`),
	"rust":       regexp.MustCompile(`(?m)\bfn\s+(\w+)`),
	"javascript": regexp.MustCompile(`(?m)function\s+(\w+)|\b(?:const|let|var)\s+(\w+)\s*=\s*(?:async\s*)?(?:\([^)]*\)|\w+)\s*=>`),
	"java":       regexp.MustCompile(`(?m)^\s*(?:public|private|protected)?\s*(?:static\s+)?[\w<>\[\]]+\s+(\w+)\s*\([^)]*\)\s*\{`),
	"c":          regexp.MustCompile(`(?m)^\w[\w\s\*]*?\b(\w+)\s*\([^;]*\)\s*\{`),
	"shell":      regexp.MustCompile(`(?m)^\s*(?:function\s+)?(\w+)\s*\(\)\s*\{`),
}

// Analyze reports on code.
func Analyze(code string) Analysis {
	a := Analysis{Language: "unknown", Bytes: len(code), Lines: strings.Count(code, "\n"), Functions: []string{}}
	if code != "" && !strings.HasSuffix(code, "\n") {
		a.Lines++
	}
	best := 0
	for _, h := range languageHints {
		if n := len(h.re.FindAllStringIndex(code, -1)); n > best {
			a.Language, best = h.lang, n
		}
	}
	if a.Language == "go" {
		a.Checked = true
		a.Functions, a.SyntaxErrors = analyzeGo(code)
		return a
	}
	if re := funcPatterns[a.Language]; re != nil {
		for _, m := range re.FindAllStringSubmatch(code, -1) {
			for _, g := range m[1:] {
				if g != "" {
					a.Functions = append(a.Functions, g)
				}
			}
		}
	}
	return a
}

var goPackageRe = regexp.MustCompile(`(?m)^\s*package\s+\w+`)

// analyzeGo parses code as a Go file, or, without a package clause, as the
// body of one, and lists its functions and syntax errors.
func analyzeGo(code string) (funcs, errs []string) {
	src, offset := code, 0
	if !goPackageRe.MatchString(code) {
		src, offset = "package snippet\n"+code, 1
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "snippet.go", src, 0) // without AllErrors: one error a line, ten at most
	if list, ok := err.(scanner.ErrorList); ok {
		for _, e := range list {
			errs = append(errs, fmt.Sprintf("line %d:%d: %s", e.Pos.Line-offset, e.Pos.Column, e.Msg))
		}
	}
	funcs = []string{}
	if f != nil {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				name := fd.Name.Name
				if fd.Recv != nil && len(fd.Recv.List) > 0 {
					name = recvName(fd.Recv.List[0].Type) + "." + name
				}
				funcs = append(funcs, name)
			}
		}
	}
	return funcs, errs
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	case *ast.IndexExpr:
		return recvName(t.X)
	}
	return "?"
}
