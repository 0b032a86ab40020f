package flow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// Permissions are an inner agent's rules for its tool calls (SPEC §3c),
// decided without a model, as Claude Code decides its own: deny first,
// then ask, then allow. A call no rule decides goes to the agent's
// tool_judge, or follows Default.
type Permissions struct {
	Allow   []string `json:"allow,omitempty"`
	Ask     []string `json:"ask,omitempty"`
	Deny    []string `json:"deny,omitempty"`
	Default string   `json:"default,omitempty" validate:"omitempty,oneof=allow ask deny"`

	rules []rule // parsed by Parse, deny rules first, then ask, then allow
}

// Effects of a permission rule, and of Permissions.Default.
const (
	EffectAllow = "allow"
	EffectAsk   = "ask"
	EffectDeny  = "deny"
)

// rule is one parsed permission rule: TOOL, or TOOL(ARG=GLOB, …).
type rule struct {
	effect string
	text   string // as written, for the record of what decided a call
	tool   string // without a trailing "*"
	prefix bool   // the tool ended in "*"
	conds  []cond
}

// cond is one ARG=GLOB condition of a rule.
type cond struct {
	arg, glob string
}

// parseRule reads a rule as a flow writes it.
func parseRule(effect, text string) (rule, error) {
	r := rule{effect: effect, text: text}
	name, args, hasArgs := strings.Cut(strings.TrimSpace(text), "(")
	r.tool, r.prefix = strings.CutSuffix(strings.TrimSpace(name), "*")
	if r.tool == "" && !r.prefix || !toolNameRe.MatchString(r.tool) {
		return rule{}, fmt.Errorf("%q: a rule is TOOL or TOOL(ARG=GLOB, …), and TOOL is a tool's name, which may end in *", text)
	}
	if !hasArgs {
		return r, nil
	}
	body, ok := strings.CutSuffix(strings.TrimSpace(args), ")")
	if !ok {
		return rule{}, fmt.Errorf("%q: the conditions end with \")\"", text)
	}
	for _, c := range splitTop(body) {
		arg, glob, ok := strings.Cut(c, "=")
		arg, glob = strings.TrimSpace(arg), strings.TrimSpace(glob)
		if !ok || !argNameRe.MatchString(arg) || glob == "" {
			return rule{}, fmt.Errorf("%q: each condition is ARG=GLOB, such as path=notes/**", text)
		}
		if !doublestar.ValidatePattern(glob) {
			return rule{}, fmt.Errorf("%q: %q is not a valid glob", text, glob)
		}
		r.conds = append(r.conds, cond{arg, glob})
	}
	return r, nil
}

// splitTop splits a rule's conditions at the commas outside braces and
// brackets, which a glob may hold: path={a,b}/*.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// names reports whether the rule's tool is one of tools (or, ending in *,
// starts one of them); an MCP tool's rule needs only its server there.
func (r rule) names(tools []string) bool {
	if server, _, mcp := strings.Cut(strings.TrimPrefix(r.tool, "mcp__"), "__"); strings.HasPrefix(r.tool, "mcp__") && mcp {
		return slices.ContainsFunc(tools, func(t string) bool { return strings.HasPrefix(t, "mcp__"+server+"__") })
	}
	if slices.Contains(tools, Client) && !strings.HasPrefix(r.tool, "mcp__") {
		return true // a client's tools are known only when a request names them (§4a)
	}
	return slices.ContainsFunc(tools, r.on)
}

// on reports whether the rule is about calls to tool.
func (r rule) on(tool string) bool {
	return tool == r.tool || r.prefix && strings.HasPrefix(tool, r.tool)
}

// match reports whether the rule decides a call to tool with args, the
// call's decoded arguments.
func (r rule) match(tool string, args map[string]any) bool {
	if !r.on(tool) {
		return false
	}
	for _, c := range r.conds {
		v, ok := args[c.arg].(string)
		if !ok {
			return false
		}
		p := path.Clean(v)
		// A path that climbs out, or that another system reads otherwise,
		// is never let through by a rule; a deny may still stop it.
		if (r.effect == EffectAllow || r.effect == EffectAsk) && (p == ".." || strings.HasPrefix(p, "../") || strings.ContainsAny(v, "\\\x00") || strings.HasPrefix(p, "/")) {
			return false
		}
		if ok, _ := doublestar.Match(c.glob, p); !ok {
			return false
		}
	}
	return true
}

// Rule is a permission rule read on its own, to match calls with: an
// experiment's target functions, utility and attack (SPEC §7a). A path
// that climbs out matches it as it would a deny rule.
type Rule struct{ r rule }

// ParseRule reads a rule: TOOL or TOOL(ARG=GLOB, …).
func ParseRule(text string) (Rule, error) {
	r, err := parseRule("", text)
	return Rule{r}, err
}

// Matches reports whether the rule matches a call to tool with input, its
// arguments as JSON.
func (r Rule) Matches(tool string, input json.RawMessage) bool {
	var args map[string]any
	json.Unmarshal(input, &args)
	return r.r.match(tool, args)
}

// Ruling is what the permissions say of one call: the effect of the first
// rule that matched ("" for none), and that rule as written.
type Ruling struct {
	Effect string
	Rule   string
}

// decide finds the rule that decides a call: deny before ask before
// allow. Arguments that name a key twice are refused: one reader may see
// the first and another the last.
func (p *Permissions) decide(tool string, input json.RawMessage) Ruling {
	if p == nil || len(p.rules) == 0 {
		return Ruling{}
	}
	if key, dup := duplicateKey(input); dup {
		return Ruling{EffectDeny, fmt.Sprintf("deny: arguments: %q is given twice", key)}
	}
	var args map[string]any
	json.Unmarshal(input, &args) // arguments that are not an object match no condition
	for _, r := range p.rules {
		if r.match(tool, args) {
			return Ruling{r.effect, r.effect + ": " + r.text}
		}
	}
	return Ruling{}
}

// duplicateKey finds a key the arguments object gives twice, at any depth.
func duplicateKey(input json.RawMessage) (string, bool) {
	if !bytes.Contains(input, []byte(`"`)) {
		return "", false
	}
	dec := json.NewDecoder(bytes.NewReader(input))
	type frame struct {
		keys map[string]bool // nil in an array
		key  bool            // the next token in this object is a key
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false // the end, or not JSON: other checks refuse that
		}
		var top *frame
		if n := len(stack); n > 0 {
			top = &stack[n-1]
		}
		if top != nil && top.keys != nil && top.key {
			if k, ok := tok.(string); ok {
				if top.keys[k] {
					return k, true
				}
				top.keys[k] = true
				top.key = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{keys: map[string]bool{}, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if n := len(stack); n > 0 && stack[n-1].keys != nil {
			stack[n-1].key = true // a value ended: a key comes next
		}
	}
}

// parse reads the rules, deny first, and reports each that does not parse
// or names no tool of tools at its JSON path under base.
func (p *Permissions) parse(base string, tools []string) []Problem {
	var problems []Problem
	p.rules = nil
	for _, set := range []struct {
		effect string
		texts  []string
	}{{EffectDeny, p.Deny}, {EffectAsk, p.Ask}, {EffectAllow, p.Allow}} {
		for i, text := range set.texts {
			at := fmt.Sprintf("%s.%s.%d", base, set.effect, i)
			r, err := parseRule(set.effect, text)
			switch {
			case err != nil:
				problems = append(problems, Problem{at, err.Error()})
			case !r.names(tools):
				problems = append(problems, Problem{at, fmt.Sprintf("%q names no tool of this agent (tools: %s)", text, strings.Join(tools, ", "))})
			default:
				p.rules = append(p.rules, r)
			}
		}
	}
	return problems
}
