package flow

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Refused is a flow file that failed to load, with every problem found.
type Refused struct {
	ID     string   `json:"id"`
	Errors []string `json:"errors"`
}

// Constitutions reads dir/*.md into a name → text map. A missing directory
// is no constitutions.
func Constitutions(dir string) (map[string]string, error) {
	texts := map[string]string{}
	paths, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		return nil, err
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read constitution: %w", err)
		}
		texts[strings.TrimSuffix(filepath.Base(p), ".md")] = string(b)
	}
	return texts, nil
}

// LoadDir loads every dir/*.json flow. A file that fails is refused, with
// its problems, and the others load: one broken file never stops a server.
func LoadDir(dir string, cat Catalog) (map[string]*Flow, []Refused, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, nil, err
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("flows directory %q: %w", dir, err)
	}
	flows := map[string]*Flow{}
	var refused []Refused
	for _, p := range paths {
		id := strings.TrimSuffix(filepath.Base(p), ".json")
		f, err := LoadFile(p, cat)
		if err != nil {
			refused = append(refused, Refusal(id, err))
			continue
		}
		flows[id] = f
	}
	sort.Slice(refused, func(i, j int) bool { return refused[i].ID < refused[j].ID })
	return flows, refused, nil
}

// LoadFile loads one flow file; its id is the file name without ".json".
func LoadFile(path string, cat Catalog) (*Flow, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	def, err := Parse(b, cat)
	if err != nil {
		return nil, err
	}
	return &Flow{ID: strings.TrimSuffix(filepath.Base(path), ".json"), Def: def}, nil
}

// Refusal lists what err says is wrong with flow id.
func Refusal(id string, err error) Refused {
	var inv *InvalidError
	if !errors.As(err, &inv) {
		return Refused{ID: id, Errors: []string{err.Error()}}
	}
	r := Refused{ID: id, Errors: make([]string, len(inv.Problems))}
	for i, p := range inv.Problems {
		r.Errors[i] = p.String()
	}
	return r
}

// Flow is a loaded, valid flow definition.
type Flow struct {
	ID  string
	Def *Definition
}
