package supervision

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"superego/engine"
	"superego/flow"
	"superego/tools"
)

// Def is a supervised_* tool as a model is offered it.
type Def struct {
	Name        string
	Description string
	Parameters  map[string]any // JSON Schema of the arguments object
}

// Offered is the supervised_* tools a node's allowed_actions permit, in
// order: the read ones with READ_ONLY, the changing ones with
// MODIFY_CONTEXT.
func Offered(n *flow.Node) []Def {
	var out []Def
	for _, d := range all {
		if slices.Contains(n.AllowedActions, d.action) {
			out = append(out, Def{d.name, d.description, d.params})
		}
	}
	return out
}

// Handles reports whether a tool name is a supervision tool's, for Session.Call.
func Handles(name string) bool { return strings.HasPrefix(name, "supervised_") }

// Catalog is the tools an instance's agents may be offered, as the server
// knows them now: every tool its flow's inner agents name, wildcards
// expanded, and the state of each of their servers.
type Catalog struct {
	Tools   []tools.Tool
	Servers map[string]string // server → its state (tools.MCPRunning, …)
}

// Session is what a supervisor's tools work on during one of its model
// calls: the instance's visible steps, its context with the changes of
// this turn that wait for review, and the tools its agents may be offered.
type Session struct {
	Steps   []flow.Step
	Context *Context
	Catalog Catalog
}

// NewSession is a supervisor's session on the instance a task is about.
func NewSession(s *engine.Supervised, cat Catalog) *Session {
	return &Session{Steps: s.Steps, Context: Replay(s.Base, s.Steps, true), Catalog: cat}
}

// Call runs one supervised_* call of node's. A change applies to the
// session's context at once, so that the node's next call sees it; for a
// node with review_changes it is proposed (the step records it so) and
// applies to the instance once a person approves it. A call the node's
// allowed_actions do not permit is refused: the error says so, and the
// step records it as every call.
func (s *Session) Call(node *flow.Node, name string, input json.RawMessage) (out string, proposed bool, err error) {
	d := find(name)
	switch {
	case d == nil:
		return "", false, fmt.Errorf("no tool %q here", name)
	case !slices.Contains(node.AllowedActions, d.action):
		return "", false, fmt.Errorf("refused: %s needs %s, and this supervisor is allowed only %s",
			name, d.action, strings.Join(node.AllowedActions, ", "))
	}
	a, err := decode(input)
	if err != nil {
		return "", false, err
	}
	if d.change != nil {
		out, err := d.change(s.Context, a, &s.Catalog)
		if err != nil || !node.ReviewChanges {
			return out, false, err
		}
		return "proposed: " + out + "; it applies once a person approves it (POST /flow/instances/{id}/review)", true, nil
	}
	v, err := d.read(s, a)
	if err != nil {
		return "", false, err
	}
	b, _ := json.Marshal(v)
	return string(b), false, nil
}

// args are every supervised_* tool's arguments: a rule's or reference's
// fields, or a tool's server, name and mode.
type args struct {
	flow.ContextItem
	Server string `json:"server"`
	Tool   string `json:"tool"`
	Mode   string `json:"mode"`
}

func decode(input json.RawMessage) (args, error) {
	var a args
	if len(input) == 0 {
		return a, nil
	}
	if err := json.Unmarshal(input, &a); err != nil {
		return a, fmt.Errorf("arguments: %w", err)
	}
	return a, nil
}

// def is one supervised_* tool: a read (READ_ONLY) or a change
// (MODIFY_CONTEXT). A change is also its own replay: given no catalog, it
// applies a recorded call without checking what it names against the
// tools of the moment.
type def struct {
	name, description string
	params            map[string]any
	action            string
	read              func(s *Session, a args) (any, error)
	change            func(c *Context, a args, cat *Catalog) (string, error)
}

func find(name string) *def {
	for i := range all {
		if all[i].name == name {
			return &all[i]
		}
	}
	return nil
}

func object(required []string, props map[string]any) map[string]any {
	return map[string]any{"type": "object", "required": append([]string{}, required...), "properties": props}
}

var (
	str        = map[string]any{"type": "string"}
	modeSchema = map[string]any{"type": "string", "enum": []string{Always, Manual, Agent}}
	toolArgs   = map[string]any{
		"server": map[string]any{"type": "string", "description": "the tool server's name; " + tools.BuiltinServer + " for the built-in tools"},
		"tool":   map[string]any{"type": "string", "description": "the tool's name on its server"},
	}
	none = object(nil, map[string]any{})
)

func with(m map[string]any, k string, v any) map[string]any {
	m = maps.Clone(m)
	m[k] = v
	return m
}

// all is every supervised_* tool, in the order a model is offered them.
var all = func() []def {
	ds := []def{
		{name: "supervised_get_conversation_history", description: "The supervised conversation's steps so far: who, decision, response.", params: none, action: flow.ReadOnly, read: history},
		{name: "supervised_get_current_rules", description: "The instance's rules, with whether each is active.", params: none, action: flow.ReadOnly, read: items("rule")},
		{name: "supervised_get_current_references", description: "The instance's references, with whether each is active.", params: none, action: flow.ReadOnly, read: items("reference")},
		{name: "supervised_get_available_tools", description: "The tools this conversation's agents may be offered, by name (to know them; you cannot call them).", params: none, action: flow.ReadOnly, read: available},
		{name: "supervised_get_session_stats", description: "Counts of turns, steps, tool calls and decisions so far.", params: none, action: flow.ReadOnly, read: stats},
		{name: "supervised_list_tools", description: "Every tool this conversation's agents may be offered, by server, with its include mode and whether it is in context now.", params: none, action: flow.ReadOnly, read: listTools(false)},
		{name: "supervised_get_tool", description: "One tool: its description, arguments, include mode, and whether it is in context.", params: object([]string{"server", "tool"}, toolArgs), action: flow.ReadOnly, read: getTool},
		{name: "supervised_list_context_tools", description: "The tools in context now: those the agents are offered.", params: none, action: flow.ReadOnly, read: listTools(true)},
		{name: "supervised_list_tool_servers", description: "The tool servers of this conversation's tools, with their state, include mode and tools in context.", params: none, action: flow.ReadOnly, read: listServers},
		{name: "supervised_get_tool_server", description: "One tool server and its tools.", params: object([]string{"server"}, map[string]any{"server": toolArgs["server"]}), action: flow.ReadOnly, read: getServer},
	}
	for _, kind := range []string{"rule", "reference"} {
		item := func(required ...string) map[string]any {
			return object(required, map[string]any{
				"name": str, "text": str, "description": str,
				"priority": map[string]any{"type": "integer", "description": "higher comes first"},
				"enabled":  map[string]any{"type": "boolean"},
				"include":  modeSchema,
			})
		}
		for _, c := range []struct {
			verb, desc string
			params     map[string]any
			change     func(c *Context, kind string, a args) (string, error)
		}{
			{"create", "Add a %s to this conversation's context (include: always = in every prompt; manual, agent = only once included).", item("name", "text"), createItem},
			{"update", "Change a %s of this conversation's context; give only what changes.", item("name"), updateItem},
			{"delete", "Remove a %s from this conversation's context.", item("name"), deleteItem},
			{"include", "Put a %s into the agents' prompts.", item("name"), includeItem(true)},
			{"exclude", "Take a %s out of the agents' prompts, keeping it.", item("name"), includeItem(false)},
		} {
			ds = append(ds, def{name: "supervised_" + c.verb + "_" + kind, description: fmt.Sprintf(c.desc, kind), params: c.params, action: flow.ModifyContext,
				change: func(ctx *Context, a args, _ *Catalog) (string, error) { return c.change(ctx, kind, a) }})
		}
	}
	toolMode := object([]string{"server", "tool", "mode"}, with(toolArgs, "mode", modeSchema))
	serverOnly := object([]string{"server"}, map[string]any{"server": toolArgs["server"]})
	serverMode := object([]string{"server", "mode"}, map[string]any{"server": toolArgs["server"], "mode": modeSchema})
	return append(ds,
		def{name: "supervised_include_tool", description: "Offer a tool to this conversation's agents.", params: object([]string{"server", "tool"}, toolArgs), action: flow.ModifyContext, change: includeTool(true)},
		def{name: "supervised_exclude_tool", description: "Stop offering a tool to this conversation's agents.", params: object([]string{"server", "tool"}, toolArgs), action: flow.ModifyContext, change: includeTool(false)},
		def{name: "supervised_set_tool_include_mode", description: "Set a tool's include mode (always: in context; manual, agent: only once included). An include or exclude of the tool or its server still wins.", params: toolMode, action: flow.ModifyContext, change: setToolMode},
		def{name: "supervised_include_tool_server", description: "Offer every tool of a server to this conversation's agents.", params: serverOnly, action: flow.ModifyContext, change: includeServer(true)},
		def{name: "supervised_exclude_tool_server", description: "Stop offering any tool of a server to this conversation's agents.", params: serverOnly, action: flow.ModifyContext, change: includeServer(false)},
		def{name: "supervised_set_server_include_mode", description: "Set the include mode of a server's tools (always, manual, agent); a tool's own mode, and any include or exclude, still wins.", params: serverMode, action: flow.ModifyContext, change: setServerMode},
	)
}()

// Reads.

func history(s *Session, _ args) (any, error) {
	type entry struct {
		StepID   string `json:"step_id"`
		AgentID  string `json:"agent_id"`
		Decision string `json:"decision,omitempty"`
		Response string `json:"response,omitempty"`
	}
	out := []entry{}
	for _, st := range s.Steps {
		out = append(out, entry{st.StepID, st.AgentID, st.Decision, st.Response})
	}
	return out, nil
}

func items(kind string) func(*Session, args) (any, error) {
	return func(s *Session, _ args) (any, error) {
		type entry struct {
			flow.ContextItem
			Active bool `json:"active"`
		}
		out := []entry{}
		for _, i := range s.Context.Items {
			if i.Kind == kind {
				out = append(out, entry{i, i.Active()})
			}
		}
		return out, nil
	}
}

func available(s *Session, _ args) (any, error) {
	out := map[string]string{}
	for _, t := range s.Catalog.Tools {
		out[t.Name] = t.Description
	}
	return out, nil
}

func stats(s *Session, _ args) (any, error) {
	out := struct {
		Turns     int            `json:"turns"`
		Steps     int            `json:"steps"`
		ToolCalls int            `json:"tool_calls"`
		Decisions map[string]int `json:"decisions"`
	}{Decisions: map[string]int{}}
	for _, st := range s.Steps {
		out.Steps++
		out.ToolCalls += len(st.ToolUsage)
		if st.Role == flow.RoleUser {
			out.Turns++
		} else if st.Decision != "" {
			out.Decisions[st.Decision]++
		}
	}
	return out, nil
}

// toolInfo is a tool as supervisors see it.
type toolInfo struct {
	Server     string         `json:"server"`
	Tool       string         `json:"tool"`
	Name       string         `json:"name"` // as the agents are offered it
	Desc       string         `json:"description,omitempty"`
	ReadOnly   bool           `json:"read_only"`
	Mode       string         `json:"mode"` // its own, else its server's
	Included   *bool          `json:"included,omitempty"`
	InContext  bool           `json:"in_context"`
	Parameters map[string]any `json:"parameters,omitempty"` // get_tool only
}

func (s *Session) info(t tools.Tool) toolInfo {
	k := KeyOf(t.Name)
	own := s.Context.Tools[k]
	return toolInfo{Server: k.Server, Tool: k.Tool, Name: t.Name, Desc: t.Description, ReadOnly: t.ReadOnly,
		Mode: cmp.Or(own.Mode, s.Context.Servers[k.Server].Mode, Always), Included: own.Included, InContext: s.Context.Offers(k)}
}

func listTools(inContext bool) func(*Session, args) (any, error) {
	return func(s *Session, _ args) (any, error) {
		out := []toolInfo{}
		for _, t := range s.Catalog.Tools {
			if i := s.info(t); !inContext || i.InContext {
				out = append(out, i)
			}
		}
		return out, nil
	}
}

func getTool(s *Session, a args) (any, error) {
	t, err := s.Catalog.tool(a)
	if err != nil {
		return nil, err
	}
	i := s.info(t)
	i.Parameters = t.Parameters
	return i, nil
}

// serverInfo is a tool server as supervisors see it.
type serverInfo struct {
	Server    string     `json:"server"`
	State     string     `json:"state"`
	Mode      string     `json:"mode"`
	Included  *bool      `json:"included,omitempty"`
	Tools     int        `json:"tools"`
	InContext int        `json:"in_context"`
	ToolList  []toolInfo `json:"tool_list,omitempty"` // get_tool_server only
}

func (s *Session) server(name string) serverInfo {
	own := s.Context.Servers[name]
	out := serverInfo{Server: name, State: s.Catalog.Servers[name], Mode: cmp.Or(own.Mode, Always), Included: own.Included}
	for _, t := range s.Catalog.Tools {
		if i := s.info(t); i.Server == name {
			out.Tools++
			if i.InContext {
				out.InContext++
			}
			out.ToolList = append(out.ToolList, i)
		}
	}
	return out
}

func listServers(s *Session, _ args) (any, error) {
	out := []serverInfo{}
	for _, name := range slices.Sorted(maps.Keys(s.Catalog.Servers)) {
		i := s.server(name)
		i.ToolList = nil
		out = append(out, i)
	}
	return out, nil
}

func getServer(s *Session, a args) (any, error) {
	if err := s.Catalog.hasServer(a.Server); err != nil {
		return nil, err
	}
	return s.server(a.Server), nil
}

// Changes: each validates what it is given, against the catalog when
// there is one, before it changes anything.

func createItem(c *Context, kind string, a args) (string, error) {
	if a.Name == "" {
		return "", errors.New(`"name" is required`)
	}
	if slices.ContainsFunc(c.Items, func(i flow.ContextItem) bool { return i.Kind == kind && i.Name == a.Name }) {
		return "", fmt.Errorf("a %s named %q exists; update it instead", kind, a.Name)
	}
	if a.Text == "" {
		return "", errors.New(`"text" is required`)
	}
	if err := checkMode(a.Include); err != nil {
		return "", fmt.Errorf("include: %w", err)
	}
	item := a.ContextItem
	item.Kind, item.Included = kind, nil
	c.Items = append(c.Items, item)
	return fmt.Sprintf("created %s %q", kind, a.Name), nil
}

// item finds the rule or reference a change names.
func (c *Context) item(kind string, a args) (int, error) {
	if a.Name == "" {
		return -1, errors.New(`"name" is required`)
	}
	i := slices.IndexFunc(c.Items, func(i flow.ContextItem) bool { return i.Kind == kind && i.Name == a.Name })
	if i < 0 {
		return -1, fmt.Errorf("no %s named %q", kind, a.Name)
	}
	return i, nil
}

func updateItem(c *Context, kind string, a args) (string, error) {
	i, err := c.item(kind, a)
	if err != nil {
		return "", err
	}
	if err := checkMode(a.Include); err != nil {
		return "", fmt.Errorf("include: %w", err)
	}
	it := &c.Items[i]
	if a.Text != "" {
		it.Text = a.Text
	}
	if a.Description != "" {
		it.Description = a.Description
	}
	if a.Priority != 0 {
		it.Priority = a.Priority
	}
	if a.Enabled != nil {
		it.Enabled = a.Enabled
	}
	if a.Include != "" {
		it.Include = a.Include
	}
	return fmt.Sprintf("updated %s %q", kind, a.Name), nil
}

func deleteItem(c *Context, kind string, a args) (string, error) {
	i, err := c.item(kind, a)
	if err != nil {
		return "", err
	}
	c.Items = slices.Delete(c.Items, i, i+1)
	return fmt.Sprintf("deleted %s %q", kind, a.Name), nil
}

func includeItem(in bool) func(*Context, string, args) (string, error) {
	return func(c *Context, kind string, a args) (string, error) {
		i, err := c.item(kind, a)
		if err != nil {
			return "", err
		}
		c.Items[i].Included = &in
		return fmt.Sprintf("%s %s %q", verb(in), kind, a.Name), nil
	}
}

func verb(in bool) string {
	if in {
		return "included"
	}
	return "excluded"
}

func checkMode(m string) error {
	if m != "" && m != Always && m != Manual && m != Agent {
		return fmt.Errorf("mode %q: want always, manual or agent", m)
	}
	return nil
}

// key reads the tool a change names: its server and its name there, or
// its whole name (mcp__SERVER__TOOL) with or without the server.
func key(a args) (Key, error) {
	if a.Tool == "" {
		return Key{}, errors.New(`"tool" is required: the tool's name on its server`)
	}
	if k := KeyOf(a.Tool); k.Server != tools.BuiltinServer {
		if a.Server != "" && a.Server != k.Server {
			return Key{}, fmt.Errorf("tool %s is server %q's, not %q's", a.Tool, k.Server, a.Server)
		}
		return k, nil
	}
	if a.Server == "" {
		return Key{}, fmt.Errorf(`"server" is required: the tool's server (%s for a built-in tool)`, tools.BuiltinServer)
	}
	return Key{a.Server, a.Tool}, nil
}

func (cat *Catalog) hasServer(name string) error {
	if name == "" {
		return errors.New(`"server" is required`)
	}
	if _, ok := cat.Servers[name]; !ok {
		return fmt.Errorf("no tool server %q among this conversation's (%s)", name, strings.Join(slices.Sorted(maps.Keys(cat.Servers)), ", "))
	}
	return nil
}

func (cat *Catalog) tool(a args) (tools.Tool, error) {
	k, err := key(a)
	if err != nil {
		return tools.Tool{}, err
	}
	if err := cat.hasServer(k.Server); err != nil {
		return tools.Tool{}, err
	}
	for _, t := range cat.Tools {
		if KeyOf(t.Name) == k {
			return t, nil
		}
	}
	return tools.Tool{}, fmt.Errorf("server %q has no tool %q that this conversation's agents may be offered", k.Server, k.Tool)
}

func includeTool(in bool) func(*Context, args, *Catalog) (string, error) {
	return func(c *Context, a args, cat *Catalog) (string, error) {
		k, err := key(a)
		if err != nil {
			return "", err
		}
		if cat != nil {
			if _, err := cat.tool(a); err != nil {
				return "", err
			}
		}
		t := c.Tools[k]
		t.Included = &in
		c.Tools[k] = t
		return fmt.Sprintf("%s tool %s", verb(in), k.Name()), nil
	}
}

func setToolMode(c *Context, a args, cat *Catalog) (string, error) {
	k, err := key(a)
	if err != nil {
		return "", err
	}
	if err := checkMode(a.Mode); err != nil || a.Mode == "" {
		return "", cmp.Or(err, errors.New(`"mode" is required: always, manual or agent`))
	}
	if cat != nil {
		if _, err := cat.tool(a); err != nil {
			return "", err
		}
	}
	t := c.Tools[k]
	t.Mode = a.Mode
	c.Tools[k] = t
	return fmt.Sprintf("set the include mode of tool %s to %s; it is %s", k.Name(), a.Mode, where(c.Offers(k))), nil
}

func includeServer(in bool) func(*Context, args, *Catalog) (string, error) {
	return func(c *Context, a args, cat *Catalog) (string, error) {
		if a.Server == "" {
			return "", errors.New(`"server" is required`)
		}
		if cat != nil {
			if err := cat.hasServer(a.Server); err != nil {
				return "", err
			}
		}
		s := c.Servers[a.Server]
		s.Included = &in
		c.Servers[a.Server] = s
		// The server's word is now the latest on each of its tools.
		for k, t := range c.Tools {
			if k.Server == a.Server {
				t.Included = nil
				c.Tools[k] = t
			}
		}
		return fmt.Sprintf("%s tool server %q: its tools are %s", verb(in), a.Server, where(in)), nil
	}
}

func setServerMode(c *Context, a args, cat *Catalog) (string, error) {
	if a.Server == "" {
		return "", errors.New(`"server" is required`)
	}
	if err := checkMode(a.Mode); err != nil || a.Mode == "" {
		return "", cmp.Or(err, errors.New(`"mode" is required: always, manual or agent`))
	}
	if cat != nil {
		if err := cat.hasServer(a.Server); err != nil {
			return "", err
		}
	}
	s := c.Servers[a.Server]
	s.Mode = a.Mode
	c.Servers[a.Server] = s
	return fmt.Sprintf("set the include mode of tool server %q to %s", a.Server, a.Mode), nil
}

func where(in bool) string {
	if in {
		return "in context"
	}
	return "out of context"
}
