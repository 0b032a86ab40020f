package supervision_test

import (
	"encoding/json"
	"strings"
	"testing"

	"superego/engine"
	"superego/flow"
	"superego/supervision"
	"superego/tools"
)

var (
	modify   = &flow.Node{Name: "sup", AllowedActions: []string{flow.ReadOnly, flow.ModifyContext}}
	readOnly = &flow.Node{Name: "sup", AllowedActions: []string{flow.ReadOnly}}
	reviewed = &flow.Node{Name: "sup", AllowedActions: []string{flow.ReadOnly, flow.ModifyContext}, ReviewChanges: true}
)

var catalog = supervision.Catalog{
	Tools: []tools.Tool{
		{Name: "calculator", Description: "Calculates."},
		{Name: "mcp__fs__read_file", Description: "Reads a file.", ReadOnly: true},
		{Name: "mcp__fs__write_file", Description: "Writes a file."},
	},
	Servers: map[string]string{tools.BuiltinServer: tools.MCPRunning, "fs": tools.MCPRestarting},
}

func session(base ...flow.ContextItem) *supervision.Session {
	return supervision.NewSession(&engine.Supervised{Base: base}, catalog)
}

func call(t *testing.T, s *supervision.Session, node *flow.Node, tool, args string) (string, error) {
	t.Helper()
	out, _, err := s.Call(node, tool, json.RawMessage(args))
	return out, err
}

func TestRulesAndReferences(t *testing.T) {
	t.Parallel()
	base := []flow.ContextItem{{Kind: "rule", Name: "a", Text: "A.", Include: "manual"}}
	s := session(base...)
	if _, err := call(t, s, modify, "supervised_include_rule", `{"name": "a"}`); err != nil || !s.Context.Items[0].Active() || base[0].Active() {
		t.Fatalf("include: %v %+v; the base must not change", err, s.Context.Items)
	}
	call(t, s, modify, "supervised_update_rule", `{"name": "a", "enabled": false}`)
	if s.Context.Items[0].Active() {
		t.Error("a disabled rule is active")
	}
	call(t, s, modify, "supervised_create_reference", `{"name": "db", "text": "PostgreSQL 17.", "priority": 9}`)
	call(t, s, modify, "supervised_update_rule", `{"name": "a", "enabled": true}`)
	if got := s.Context.Render(); got != "[reference: db]\nPostgreSQL 17.\n\n[rule: a]\nA." {
		t.Errorf("rendered, highest priority first:\n%s", got)
	}
	for tool, args := range map[string]string{
		"supervised_create_rule":      `{"name": "a", "text": "again"}`,
		"supervised_delete_rule":      `{"name": "zzz"}`,
		"supervised_create_reference": `{"name": "r"}`,
		"supervised_update_rule":      `{"name": "a", "include": "sometimes"}`,
		"supervised_get_rules":        `{"name": "a"}`,
		"supervised_include_rule":     `{"name": 5}`,
	} {
		if _, err := call(t, s, modify, tool, args); err == nil {
			t.Errorf("%s %s: no error", tool, args)
		}
	}
	// Replay applies only what succeeded, in order.
	steps := []flow.Step{{ToolUsage: []flow.ToolUse{
		{ToolName: "supervised_include_rule", Input: json.RawMessage(`{"name": "a"}`)},
		{ToolName: "supervised_create_rule", Input: json.RawMessage(`{"name": "x", "text": "X."}`), Error: "refused"},
		{ToolName: "supervised_exclude_rule", Input: json.RawMessage(`{"name": "a"}`)},
		{ToolName: "calculator", Input: json.RawMessage(`{"name": "a"}`)},
	}}}
	if got := supervision.Replay(base, steps, false); len(got.Items) != 1 || got.Items[0].Active() {
		t.Errorf("replayed: %+v", got.Items)
	}
}

func TestToolContext(t *testing.T) {
	t.Parallel()
	s := session()
	in := func(name string) bool { return s.Context.Offers(supervision.KeyOf(name)) }
	if !in("calculator") || !in("mcp__fs__write_file") {
		t.Fatal("a tool is in context by default")
	}
	for _, c := range []struct {
		tool, args, out   string
		calc, read, write bool
	}{
		{"supervised_exclude_tool_server", `{"server": "fs"}`, `excluded tool server "fs": its tools are out of context`, true, false, false},
		{"supervised_include_tool", `{"server": "fs", "tool": "read_file"}`, "included tool mcp__fs__read_file", true, true, false},
		{"supervised_exclude_tool", `{"server": "builtin", "tool": "calculator"}`, "excluded tool calculator", false, true, false},
		// A tool's whole name does without the server.
		{"supervised_include_tool", `{"tool": "mcp__fs__write_file"}`, "included tool mcp__fs__write_file", false, true, true},
		// The latest word wins: the server's include is now the last on its tools.
		{"supervised_exclude_tool_server", `{"server": "fs"}`, `excluded tool server "fs": its tools are out of context`, false, false, false},
		{"supervised_include_tool_server", `{"server": "fs"}`, `included tool server "fs": its tools are in context`, false, true, true},
		{"supervised_set_tool_include_mode", `{"server": "builtin", "tool": "calculator", "mode": "always"}`, "set the include mode of tool calculator to always; it is out of context", false, true, true},
		{"supervised_include_tool", `{"server": "builtin", "tool": "calculator"}`, "included tool calculator", true, true, true},
	} {
		out, err := call(t, s, modify, c.tool, c.args)
		if err != nil || out != c.out || in("calculator") != c.calc || in("mcp__fs__read_file") != c.read || in("mcp__fs__write_file") != c.write {
			t.Errorf("%s %s: %q %v; calculator %v, read %v, write %v", c.tool, c.args, out, err, in("calculator"), in("mcp__fs__read_file"), in("mcp__fs__write_file"))
		}
	}
	// Modes decide where no include or exclude has.
	s = session()
	call(t, s, modify, "supervised_set_server_include_mode", `{"server": "fs", "mode": "manual"}`)
	call(t, s, modify, "supervised_set_tool_include_mode", `{"server": "fs", "tool": "read_file", "mode": "always"}`)
	if in("mcp__fs__write_file") || !in("mcp__fs__read_file") || !in("calculator") {
		t.Error("modes: a manual server's tools are out, unless a tool's own mode says always")
	}
	for tool, want := range map[string]string{
		`supervised_include_tool {"server": "fs", "tool": "nope"}`:                     `server "fs" has no tool "nope" that this conversation's agents may be offered`,
		`supervised_include_tool {"server": "web", "tool": "get"}`:                     `no tool server "web" among this conversation's (builtin, fs)`,
		`supervised_include_tool {"tool": "read_file"}`:                                `"server" is required`,
		`supervised_exclude_tool {"server": "fs"}`:                                     `"tool" is required`,
		`supervised_set_tool_include_mode {"server": "fs", "tool": "read_file"}`:       `"mode" is required`,
		`supervised_set_server_include_mode {"server": "fs", "mode": "sometimes"}`:     `mode "sometimes": want always, manual or agent`,
		`supervised_include_tool_server {}`:                                            `"server" is required`,
		`supervised_get_tool_server {"server": "nope"}`:                                `no tool server "nope"`,
		`supervised_get_tool {"server": "fs", "tool": "mcp__web__get"}`:                `tool mcp__web__get is server "web"'s, not "fs"'s`,
		`supervised_set_tool_include_mode {"tool": "mcp__fs__read_file", "mode": "x"}`: `mode "x"`,
	} {
		name, args, _ := strings.Cut(tool, " ")
		if _, err := call(t, s, modify, name, args); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", tool, err, want)
		}
	}
}

func TestReads(t *testing.T) {
	t.Parallel()
	s := session(flow.ContextItem{Kind: "rule", Name: "a", Text: "A."})
	call(t, s, modify, "supervised_exclude_tool", `{"server": "fs", "tool": "write_file"}`)
	for tool, want := range map[string]string{
		`supervised_list_tools {}`:                                  `{"server":"fs","tool":"write_file","name":"mcp__fs__write_file","description":"Writes a file.","read_only":false,"mode":"always","included":false,"in_context":false}`,
		`supervised_list_context_tools {}`:                          `[{"server":"builtin","tool":"calculator","name":"calculator","description":"Calculates.","read_only":false,"mode":"always","in_context":true},{"server":"fs","tool":"read_file","name":"mcp__fs__read_file","description":"Reads a file.","read_only":true,"mode":"always","in_context":true}]`,
		`supervised_list_tool_servers {}`:                           `[{"server":"builtin","state":"running","mode":"always","tools":1,"in_context":1},{"server":"fs","state":"restarting","mode":"always","tools":2,"in_context":1}]`,
		`supervised_get_tool_server {"server": "fs"}`:               `"tool_list":[{"server":"fs","tool":"read_file"`,
		`supervised_get_tool {"server": "fs", "tool": "read_file"}`: `"read_only":true`,
		`supervised_get_available_tools {}`:                         `"mcp__fs__read_file":"Reads a file."`,
		`supervised_get_current_rules {}`:                           `[{"kind":"rule","name":"a","text":"A.","active":true}]`,
	} {
		name, args, _ := strings.Cut(tool, " ")
		out, err := call(t, s, readOnly, name, args)
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("%s: %s %v\nwant %s", tool, out, err, want)
		}
	}
}

func TestPermissions(t *testing.T) {
	t.Parallel()
	var names []string
	for _, d := range supervision.Offered(readOnly) {
		names = append(names, d.Name)
	}
	if len(names) != 10 || strings.Contains(strings.Join(names, " "), "include") || strings.Contains(strings.Join(names, " "), "create") {
		t.Errorf("READ_ONLY is offered %v", names)
	}
	if n := len(supervision.Offered(modify)); n != 10+10+6 {
		t.Errorf("READ_ONLY and MODIFY_CONTEXT: %d tools", n)
	}
	if n := len(supervision.Offered(&flow.Node{})); n != 0 {
		t.Errorf("a node with no actions: %d tools", n)
	}
	s := session()
	for _, tool := range []string{"supervised_exclude_tool_server", "supervised_create_rule", "supervised_set_server_include_mode"} {
		_, err := call(t, s, readOnly, tool, `{"server": "fs", "name": "x", "text": "y", "mode": "manual"}`)
		if err == nil || err.Error() != "refused: "+tool+" needs MODIFY_CONTEXT, and this supervisor is allowed only READ_ONLY" {
			t.Errorf("%s: %v", tool, err)
		}
	}
	if !s.Context.Offers(supervision.KeyOf("mcp__fs__read_file")) || len(s.Context.Items) != 0 {
		t.Error("a refused call changed the context")
	}
	if _, err := call(t, s, modify, "supervised_drop_database", `{}`); err == nil || err.Error() != `no tool "supervised_drop_database" here` {
		t.Errorf("unknown tool: %v", err)
	}
}

// A supervisor with review_changes proposes: its session sees its
// proposals, the instance only once a person approved them.
func TestProposals(t *testing.T) {
	t.Parallel()
	s := session()
	out, proposed, err := s.Call(reviewed, "supervised_exclude_tool_server", json.RawMessage(`{"server": "fs"}`))
	if err != nil || !proposed || !strings.HasPrefix(out, `proposed: excluded tool server "fs"`) || s.Context.Offers(supervision.KeyOf("mcp__fs__read_file")) {
		t.Fatalf("%q %v %v", out, proposed, err)
	}
	if _, proposed, _ := s.Call(reviewed, "supervised_list_tools", nil); proposed {
		t.Error("a read is no proposal")
	}
	if _, proposed, err := s.Call(reviewed, "supervised_exclude_tool", json.RawMessage(`{"server": "fs", "tool": "nope"}`)); proposed || err == nil {
		t.Error("a change that fails is no proposal")
	}
	change := flow.ToolUse{ToolName: "supervised_exclude_tool_server", Input: json.RawMessage(`{"server": "fs"}`), Proposed: true}
	user := flow.Step{AgentID: "user", Role: flow.RoleUser}
	sup := flow.Step{AgentID: "sup", Role: flow.RoleAssistant, ToolUsage: []flow.ToolUse{change}}
	review := func(verdict string) flow.Step {
		return flow.Step{AgentID: flow.Reviewer, Role: flow.RoleSystem, Decision: verdict}
	}
	for _, c := range []struct {
		name    string
		steps   []flow.Step
		pending bool
		offered bool
	}{
		{"waiting", []flow.Step{user, sup}, false, true},
		{"waiting, as its supervisor sees it", []flow.Step{user, sup}, true, false},
		{"approved", []flow.Step{user, sup, review(flow.Approved)}, false, false},
		{"approved, then a next turn", []flow.Step{user, sup, review(flow.Approved), user}, false, false},
		{"rejected", []flow.Step{user, sup, review(flow.Rejected)}, true, true},
		{"never reviewed: the next turn drops it", []flow.Step{user, sup, user}, true, true},
	} {
		got := supervision.Replay(nil, c.steps, c.pending).Offers(supervision.KeyOf("mcp__fs__read_file"))
		if got != c.offered {
			t.Errorf("%s: offered %v", c.name, got)
		}
	}
}
