package flow

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// Permissions are an inner agent's rules for its tool calls (docs/actions.md),
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
		return true // a client's tools are known only when a request names them (docs/gateway.md)
	}
	return slices.ContainsFunc(tools, r.on)
}

// on reports whether the rule is about calls to tool.
func (r rule) on(tool string) bool {
	return tool == r.tool || r.prefix && strings.HasPrefix(tool, r.tool)
}

// match reports whether the rule decides a call to tool with args, the
// call's decoded arguments. An allow or ask condition reads the argument's
// string only; a deny condition also reads it under its name in another
// case, and every string inside a value that is not one: a deny stops what
// any reader of the arguments might take the argument to be.
func (r rule) match(tool string, args map[string]any) bool {
	if !r.on(tool) {
		return false
	}
	for _, c := range r.conds {
		if r.effect == EffectDeny {
			if !slices.ContainsFunc(stringsIn(argFolded(args, c.arg)), c.matches) {
				return false
			}
			continue
		}
		v, ok := args[c.arg].(string)
		// A path that climbs out, or that another system reads otherwise,
		// is never let through by a rule; a deny may still stop it.
		if !ok || (r.effect == EffectAllow || r.effect == EffectAsk) && climbs(v) || !c.matches(v) {
			return false
		}
	}
	return true
}

// matches reports whether v, cleaned as a slash-separated path, matches
// the condition's glob.
func (c cond) matches(v string) bool {
	ok, _ := doublestar.Match(c.glob, path.Clean(v))
	return ok
}

// climbs reports whether a path leaves where it is read from, or would be
// read otherwise elsewhere: "..", a leading "/", a backslash, a NUL.
func climbs(v string) bool {
	p := path.Clean(v)
	return p == ".." || strings.HasPrefix(p, "../") || strings.ContainsAny(v, "\\\x00") || strings.HasPrefix(p, "/")
}

// argFolded is the argument named name, or named so in another case: the
// arguments hold at most one such key (DecodeArguments).
func argFolded(args map[string]any, name string) any {
	if v, ok := args[name]; ok {
		return v
	}
	for k, v := range args {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return nil
}

// stringsIn are the strings v holds: v itself, or the items of an array
// and the values of an object, at any depth.
func stringsIn(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, x := range v {
			out = append(out, stringsIn(x)...)
		}
		return out
	case map[string]any:
		var out []string
		for _, x := range v {
			out = append(out, stringsIn(x)...)
		}
		return out
	}
	return nil
}

// Rule is a permission rule read on its own, to match calls with: an
// experiment's target functions, utility and attack (docs/experiments.md). A path
// that climbs out matches it as it would a deny rule.
type Rule struct{ r rule }

// ParseRule reads a rule: TOOL or TOOL(ARG=GLOB, …).
func ParseRule(text string) (Rule, error) {
	r, err := parseRule("", text)
	return Rule{r}, err
}

// Matches reports whether the rule matches a call to tool with input, its
// arguments as JSON; arguments that do not decode match only a rule
// without conditions.
func (r Rule) Matches(tool string, input json.RawMessage) bool {
	_, args, _ := DecodeArguments(input, nil)
	return r.r.match(tool, args)
}

// Ruling is what the permissions say of one call: the effect of the first
// rule that matched ("" for none), and that rule as written.
type Ruling struct {
	Effect string
	Rule   string
}

// Decide finds the rule that decides a call, given its decoded arguments:
// deny before ask before allow.
func (p *Permissions) Decide(tool string, args map[string]any) Ruling {
	if p == nil {
		return Ruling{}
	}
	for _, r := range p.rules {
		if r.match(tool, args) {
			return Ruling{r.effect, r.effect + ": " + r.text}
		}
	}
	return Ruling{}
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

// Denies reports whether a deny rule refuses every call to tool, whatever
// its arguments.
func (n *Node) Denies(tool string) bool {
	if n.Permissions == nil {
		return false
	}
	return slices.ContainsFunc(n.Permissions.rules, func(r rule) bool {
		return r.effect == EffectDeny && len(r.conds) == 0 && r.on(tool)
	})
}
