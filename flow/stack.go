package flow

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Constitution stacks (docs/stacks.md): a superego's own constitution is the
// floor, binding; a run may put the user's constitutions on top of it,
// each with an adherence level. Only names of the constitution library
// are ever put into a stack, never text from a request. A run records its
// stack's names and levels with its options; the engine reads their texts
// from its library when the run starts or resumes, as a flow's own
// constitutions are read from disk.

// StackEntry is one constitution of a stack: a library name and its
// adherence level. On a step, the floor comes first, named Floor, with no
// level: it binds.
type StackEntry struct {
	Name      string `json:"name"`
	Adherence int    `json:"adherence,omitempty"`
}

// Layer is one user constitution of the stack a task judges under, with
// the library's text.
type Layer struct {
	Name      string
	Adherence int
	Text      string
}

// Pick is a user constitution as a request or an experiment names it:
// Adherence nil is DefaultAdherence.
type Pick struct {
	Name      string `json:"name"`
	Adherence *int   `json:"adherence,omitempty"`
}

// Floor names the node's own constitution in a stack and in a basis;
// BasisOther is a basis that names nothing of the stack.
const (
	Floor      = "floor"
	BasisOther = "other"
)

// Adherence levels: 1, mention it and never block for it, to 5, block
// whatever may break it.
const (
	MinAdherence     = 1
	MaxAdherence     = 5
	DefaultAdherence = 3
)

// StackOff, as a superego node's "stack", keeps it on its own
// constitution whatever a run brings.
const StackOff = "off"

// constitutionNameRe is a name a stack may hold: no path, no dot, no text.
var constitutionNameRe = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)

// ValidConstitutionName reports whether name may name a library
// constitution in a stack.
func ValidConstitutionName(name string) bool { return constitutionNameRe.MatchString(name) }

// Library is the constitutions a stack may name: name → text, read from
// the constitutions directory.
type Library map[string]string

// Names are the library's names that a stack may hold, sorted.
func (l Library) Names() []string {
	var out []string
	for _, n := range slices.Sorted(maps.Keys(l)) {
		if ValidConstitutionName(n) {
			out = append(out, n)
		}
	}
	return out
}

// Resolve checks picks against the library and makes them a stack: each
// name well formed and in the library, each level within 1–5, no name
// twice. Problems' paths are "[i].name" and "[i].adherence".
func (l Library) Resolve(picks []Pick) ([]StackEntry, []Problem) {
	var out []StackEntry
	var problems []Problem
	seen := map[string]int{}
	for i, p := range picks {
		at := fmt.Sprintf("[%d]", i)
		level := DefaultAdherence
		if p.Adherence != nil {
			level = *p.Adherence
		}
		if level < MinAdherence || level > MaxAdherence {
			problems = append(problems, Problem{at + ".adherence", fmt.Sprintf("must be %d to %d, not %d", MinAdherence, MaxAdherence, level)})
		}
		_, known := l[p.Name]
		switch j, twice := seen[p.Name]; {
		case !ValidConstitutionName(p.Name):
			problems = append(problems, Problem{at + ".name", `must be the name of a library constitution: 1 to 64 of a-z, 0-9, "_" and "-"`})
		case !known:
			problems = append(problems, Problem{at + ".name", fmt.Sprintf("unknown constitution %q (GET /constitutions lists them: %s)", p.Name, strings.Join(l.Names(), ", "))})
		case twice:
			problems = append(problems, Problem{at + ".name", fmt.Sprintf("%q is listed at [%d] already", p.Name, j)})
		default:
			seen[p.Name] = i
			out = append(out, StackEntry{Name: p.Name, Adherence: level})
		}
	}
	return out, problems
}

// ParsePicks reads a stack written as NAME[:LEVEL] separated by commas
// (vegan:4,child_safe), as a query string or a command line gives one; ""
// is none. A level that is no number is a problem at "[i].adherence"; the
// names are Resolve's to check.
func ParsePicks(s string) ([]Pick, []Problem) {
	if strings.TrimSpace(s) == "" {
		return []Pick{}, nil
	}
	var picks []Pick
	var problems []Problem
	for i, part := range strings.Split(s, ",") {
		name, level, hasLevel := strings.Cut(strings.TrimSpace(part), ":")
		p := Pick{Name: name}
		if hasLevel {
			n, err := strconv.Atoi(level)
			if err != nil {
				problems = append(problems, Problem{fmt.Sprintf("[%d].adherence", i), "must be a whole number from 1 to 5, as in vegan:4"})
			}
			p.Adherence = &n
		}
		picks = append(picks, p)
	}
	return picks, problems
}

// Onto puts top on base: a name base holds keeps its place, at the higher
// of the two levels; the others follow base in top's order. lowered is the
// index in top of the first layer that asks for a lower level than base
// holds, -1 for none: a stack a key brings may be added to and raised,
// never lowered, and the caller says whether that is an error.
func Onto(base, top []StackEntry) (out []StackEntry, lowered int) {
	lowered = -1
	if len(top) == 0 {
		return base, lowered
	}
	out = slices.Clone(base)
	for i, t := range top {
		j := slices.IndexFunc(out, func(l StackEntry) bool { return l.Name == t.Name })
		switch {
		case j < 0:
			out = append(out, t)
		case t.Adherence > out[j].Adherence:
			out[j].Adherence = t.Adherence
		case t.Adherence < out[j].Adherence && lowered < 0:
			lowered = i
		}
	}
	return out, lowered
}

// TakesStack reports whether a run's stack reaches the node: a superego
// whose "stack" is not "off". An inner agent's messages never hold a
// constitution.
func (n *Node) TakesStack() bool { return n.Type == Superego && n.Stack != StackOff }

// Layers are a stack's constitutions with their texts from lib; a name
// lib lacks (a run resumed after its constitution left the library) is an
// error: the run cannot judge under the stack it began with.
func (l Library) Layers(stack []StackEntry) ([]Layer, error) {
	if len(stack) == 0 {
		return nil, nil
	}
	out := make([]Layer, len(stack))
	for i, e := range stack {
		text, ok := l[e.Name]
		if !ok {
			return nil, fmt.Errorf("the run's stack names constitution %q, which the constitution library does not have: %w", e.Name, ErrInvalid)
		}
		out[i] = Layer{Name: e.Name, Adherence: e.Adherence, Text: text}
	}
	return out, nil
}
