package flow_test

import (
	"errors"
	"strings"
	"testing"

	"superego/flow"
)

const judgedFlow = `{"name": "x", "graph": {"start": "a", "nodes": {
  "a": {"type": "inner_agent", "agent_id": "a", "tools": ["read_file", "write_file", "delete_file", "mcp__mail__*"%s],
    "tool_judge": "j", "result_judge": "j", "transitions": {"COMPLETE": null, "NEEDS_TOOL": "self"}%s},
  "j": {"type": "superego", "agent_id": "j", "constitution": "c"%s}}}}`

var actionCatalog = flow.Catalog{Tools: []string{"read_file", "write_file", "delete_file", "calculator"}, MCPServers: []string{"mail"}}

// parseJudged parses judgedFlow with extra text after the agent's tools,
// after its transitions, and after the judge's constitution.
func parseJudged(tools, agent, judge string) (*flow.Definition, error) {
	return flow.Parse([]byte(sprintf(judgedFlow, tools, agent, judge)), actionCatalog)
}

func sprintf(format string, args ...string) string {
	for _, a := range args {
		format = strings.Replace(format, "%s", a, 1)
	}
	return format
}

// The judges and rules of judged actions are checked at load, each
// problem at its JSON path (docs/actions.md).
func TestJudgedActionsValidation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name                string
		tools, agent, judge string
		want                []string
	}{
		{"a judge and rules that are fine", "", `, "permissions": {"allow": ["write_file(path=notes/**)", "mcp__mail__read*"], "ask": ["mcp__mail__send"], "deny": ["delete_file", "write_file(path={a,b}/*.env, mode=x)"], "default": "deny"}`, `, "transitions": {"BLOCK": null}`, nil},
		{"a judge that is not a superego", "", `, "tool_judge": "b"`, `}, "b": {"type": "inner_agent", "agent_id": "b", "transitions": {"COMPLETE": null}`,
			[]string{`graph.nodes.a.tool_judge: "b" is an inner_agent: a judge of actions is a superego node`}},
		{"an unknown judge", "", `, "result_judge": "nobody"`, "", []string{`graph.nodes.a.result_judge: unknown node "nobody"`}},
		{"a judge reachable by a transition", "", `, "transitions": {"COMPLETE": "j", "NEEDS_TOOL": "self"}`, "",
			[]string{`graph.nodes.a.transitions.COMPLETE: "j" judges actions: no transition may lead to it`}},
		{"a judge with a transition that goes on", "", "", `, "transitions": {"ACCEPT": "a", "BLOCK": null}`,
			[]string{`graph.nodes.j.transitions.ACCEPT: "j" judges actions: its only transition may be "BLOCK": null, which ends the run when it refuses`}},
		{"rules that do not parse", "", `, "permissions": {"allow": ["write_file(path)", "write_file(path=notes/**"], "deny": ["(x=1)", "write_file(path=[a)"], "default": "maybe"}`, "",
			[]string{
				`graph.nodes.a.permissions.allow.0: "write_file(path)": each condition is ARG=GLOB, such as path=notes/**`,
				`graph.nodes.a.permissions.allow.1: "write_file(path=notes/**": the conditions end with ")"`,
				`graph.nodes.a.permissions.default: must be one of: allow, ask, deny`,
				`graph.nodes.a.permissions.deny.0: "(x=1)": a rule is TOOL or TOOL(ARG=GLOB, …), and TOOL is a tool's name, which may end in *`,
				`graph.nodes.a.permissions.deny.1: "write_file(path=[a)": "[a" is not a valid glob`,
			}},
		{"rules that name no tool of the agent", "", `, "permissions": {"ask": ["calculator", "mcp__web__get", "search*"]}`, "",
			[]string{
				`graph.nodes.a.permissions.ask.0: "calculator" names no tool of this agent (tools: read_file, write_file, delete_file, mcp__mail__*)`,
				`graph.nodes.a.permissions.ask.1: "mcp__web__get" names no tool of this agent (tools: read_file, write_file, delete_file, mcp__mail__*)`,
				`graph.nodes.a.permissions.ask.2: "search*" names no tool of this agent (tools: read_file, write_file, delete_file, mcp__mail__*)`,
			}},
		{"a client agent's rules may name its client's tools", `, "client"`, `, "permissions": {"deny": ["transfer_money"]}`, "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseJudged(c.tools, c.agent, c.judge)
			var got []string
			var inv *flow.InvalidError
			if errors.As(err, &inv) {
				for _, p := range inv.Problems {
					got = append(got, p.String())
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
}

// Rules decide as Claude Code's do: deny before ask before allow; a path
// that climbs out is never allowed or asked by a rule, though a deny may
// stop it, and reads every string the argument holds; arguments that give
// a key twice, in any case, are refused.
func TestPermissionRules(t *testing.T) {
	t.Parallel()
	def, err := parseJudged("", `, "permissions": {
		"allow": ["write_file(path=notes/**)", "read_file", "mcp__mail__list*"],
		"ask": ["write_file(path=notes/important/*)", "mcp__mail__send(to=*@example.com)"],
		"deny": ["write_file(path=**/*.env)", "delete_file(path=../**)"]}`, "")
	if err != nil {
		t.Fatal(err)
	}
	perms := def.Graph.Nodes["a"].Permissions
	cases := []struct{ tool, args, want string }{
		{"write_file", `{"path": "notes/a/b.txt"}`, "allow: write_file(path=notes/**)"},
		{"write_file", `{"path": "notes/../notes/x"}`, "allow: write_file(path=notes/**)"},
		{"write_file", `{"path": "notes/important/x"}`, "ask: write_file(path=notes/important/*)"},
		{"write_file", `{"path": "notes/secrets.env"}`, "deny: write_file(path=**/*.env)"},
		{"write_file", `{"path": "notes/../../etc/passwd"}`, ""},
		{"write_file", `{"path": "/notes/x"}`, ""},
		{"write_file", `{"path": "notes\\x"}`, ""},
		{"write_file", `{"path": "notes/x\u0000"}`, ""},
		{"write_file", `{"path": 5}`, ""},
		{"write_file", `{}`, ""},
		{"write_file", `{"path": "notes/x", "path": "elsewhere"}`, `invalid arguments: "path" is given twice`},
		{"write_file", `{"a": {"b": 1, "b": 2}}`, `invalid arguments: "a.b" is given twice`},
		{"write_file", `{"path": "notes/x", "PATH": "x.env"}`, `invalid arguments: "path" and "PATH" are the same key when case is ignored; give it once`},
		{"write_file", `{"a": [{"k": 1, "\u212a": 2}]}`, `invalid arguments: "a[0].k" and "a[0].K" are the same key when case is ignored; give it once`},
		// A deny reads every string inside a value, and the argument in
		// any case; allow and ask read a string under its exact name.
		{"write_file", `{"path": ["notes/secrets.env"]}`, "deny: write_file(path=**/*.env)"},
		{"write_file", `{"path": {"a": [1, {"b": "x/y.env"}]}}`, "deny: write_file(path=**/*.env)"},
		{"write_file", `{"PATH": "notes/secrets.env"}`, "deny: write_file(path=**/*.env)"},
		{"write_file", `{"path": ["notes/x"]}`, ""},
		{"write_file", `{"Path": "notes/x"}`, ""},
		{"delete_file", `{"path": "../x"}`, "deny: delete_file(path=../**)"},
		{"delete_file", `{"path": "x"}`, ""},
		{"read_file", `{"path": "anything"}`, "allow: read_file"},
		{"mcp__mail__list_inbox", `{}`, "allow: mcp__mail__list*"},
		{"mcp__mail__send", `{"to": "bob@example.com"}`, "ask: mcp__mail__send(to=*@example.com)"},
		{"mcp__mail__send", `{"to": "eve@evil.example"}`, ""},
	}
	for _, c := range cases {
		r := flow.Decide(perms, c.tool, []byte(c.args))
		got := ""
		if r.Effect != "" {
			got = r.Rule
		}
		if got != c.want {
			t.Errorf("%s %s: %q, want %q", c.tool, c.args, got, c.want)
		}
	}
}
