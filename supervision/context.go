// Package supervision is what supervisors do to the instances they
// supervise, in one place: the supervised_* tools, the allowed_actions that
// offer them, and the instance's context their changes make (its rules, its
// references and the tools its agents are offered), replayed from the steps
// that recorded them.
//
// Every instance starts from its flow's context and changes only its own:
// a supervisor's change is a tool call recorded in its step's tool_usage,
// and the instance's context is the flow's with the recorded changes that
// succeeded applied in order. A supervisor with review_changes proposes
// instead: its changes apply once a person approves them (a human_review
// step APPROVED after them, in their turn), and are dropped when the person
// rejects them or the turn ends without a review.
//
// The flow engine knows none of this: it hands an agent the steps
// (engine.Task.Supervised), and the agent asks this package what they make.
package supervision

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"superego/flow"
	"superego/tools"
)

// Include modes, of rules, references, tools and tool servers.
const (
	Always = "always" // in context unless excluded (the default)
	Manual = "manual" // out of context until included
	// Agent leaves it to the agent in the seed design; agents here cannot
	// ask for context yet, so it is out of context until included, as
	// Manual is.
	Agent = "agent"
)

// Context is an instance's context: what its supervisors' changes made of
// the rules, references and tools it started with.
type Context struct {
	Items   []flow.ContextItem // rules and references
	Servers map[string]Include // tool servers, by name
	Tools   map[Key]Include    // tools, by server and name
}

// Key names a tool by its server and its name there, as supervisors do;
// built-in tools are the server tools.BuiltinServer's.
type Key struct {
	Server, Tool string
}

// KeyOf is the key of a tool named as flows and models name it:
// mcp__SERVER__TOOL, or a built-in tool's name.
func KeyOf(name string) Key {
	if server, tool, ok := tools.SplitMCPName(name); ok {
		return Key{server, tool}
	}
	return Key{tools.BuiltinServer, name}
}

// Name is the tool's name as flows and models know it.
func (k Key) Name() string {
	if k.Server == tools.BuiltinServer {
		return k.Tool
	}
	return tools.MCPName(k.Server, k.Tool)
}

// Include is how a tool or a tool server is in context: by its mode, unless
// a supervisor included or excluded it.
type Include struct {
	Mode     string `json:"mode,omitempty"`
	Included *bool  `json:"included,omitempty"`
}

// Offers reports whether the context offers the tool to its agents. The
// latest word wins: a tool's own include or exclude, else its server's,
// else the tool's mode, else its server's, else always.
func (c *Context) Offers(k Key) bool {
	t, s := c.Tools[k], c.Servers[k.Server]
	switch {
	case t.Included != nil:
		return *t.Included
	case s.Included != nil:
		return *s.Included
	}
	return cmp.Or(t.Mode, s.Mode, Always) == Always
}

// Render is the active rules and references as an inner agent is given
// them, highest priority first.
func (c *Context) Render() string {
	active := slices.DeleteFunc(slices.Clone(c.Items), func(i flow.ContextItem) bool { return !i.Active() })
	slices.SortStableFunc(active, func(a, b flow.ContextItem) int { return b.Priority - a.Priority })
	var b strings.Builder
	for _, i := range active {
		fmt.Fprintf(&b, "[%s: %s]\n%s\n\n", i.Kind, i.Name, strings.TrimSpace(i.Text))
	}
	return strings.TrimSpace(b.String())
}

// Replay is an instance's context after steps: base, the rules and
// references it starts with, with every recorded change that succeeded
// applied in order. A proposed change applies once a person approved it;
// with pending, a change still waiting for its review counts as made too:
// what the supervisor that proposed it goes on working on.
func Replay(base []flow.ContextItem, steps []flow.Step, pending bool) *Context {
	c := &Context{Items: slices.Clone(base), Servers: map[string]Include{}, Tools: map[Key]Include{}}
	var proposed []flow.ToolUse
	for _, s := range steps {
		switch {
		case s.Role == flow.RoleUser:
			proposed = nil // its turn ended without a review
		case s.AgentID == flow.Reviewer:
			if s.Decision == flow.Approved {
				for _, u := range proposed {
					c.replay(u)
				}
			}
			proposed = nil
		}
		for _, u := range s.ToolUsage {
			switch {
			case u.Error != "":
			case u.Proposed:
				proposed = append(proposed, u)
			default:
				c.replay(u)
			}
		}
	}
	if pending {
		for _, u := range proposed {
			c.replay(u)
		}
	}
	return c
}

// replay applies a recorded change again; a record that is no change, or
// that no longer applies, changes nothing.
func (c *Context) replay(u flow.ToolUse) {
	d := find(u.ToolName)
	if d == nil || d.change == nil {
		return
	}
	a, err := decode(u.Input)
	if err == nil {
		d.change(c, a, nil)
	}
}
