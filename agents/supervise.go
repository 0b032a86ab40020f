package agents

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/tmc/langchaingo/llms"

	"superego/flow"
)

// supervisionTool is one supervised_* tool and the action it needs.
type supervisionTool struct {
	action string
	def    llms.FunctionDefinition
}

// supervisionTools are the tools a supervisor may be offered: reading the
// supervised conversation and its context (READ_ONLY), and changing the
// instance's rules and references (MODIFY_CONTEXT). Changes apply to the
// instance only; each is recorded in the step's tool_usage.
var supervisionTools = func() []supervisionTool {
	none := map[string]any{"type": "object", "properties": map[string]any{}}
	item := func(required ...string) map[string]any {
		return map[string]any{"type": "object", "required": required, "properties": map[string]any{
			"name":        map[string]any{"type": "string"},
			"text":        map[string]any{"type": "string"},
			"description": map[string]any{"type": "string"},
			"priority":    map[string]any{"type": "integer", "description": "higher comes first"},
			"enabled":     map[string]any{"type": "boolean"},
			"include":     map[string]any{"type": "string", "enum": []string{"always", "manual", "agent"}},
		}}
	}
	tools := []supervisionTool{
		{flow.ReadOnly, llms.FunctionDefinition{Name: "supervised_get_conversation_history", Description: "The supervised conversation's steps so far: who, decision, response.", Parameters: none}},
		{flow.ReadOnly, llms.FunctionDefinition{Name: "supervised_get_current_rules", Description: "The instance's rules, with whether each is active.", Parameters: none}},
		{flow.ReadOnly, llms.FunctionDefinition{Name: "supervised_get_current_references", Description: "The instance's references, with whether each is active.", Parameters: none}},
		{flow.ReadOnly, llms.FunctionDefinition{Name: "supervised_get_available_tools", Description: "The tools the server offers its agents (to know them; you cannot call them).", Parameters: none}},
		{flow.ReadOnly, llms.FunctionDefinition{Name: "supervised_get_session_stats", Description: "Counts of turns, steps, tool calls and decisions so far.", Parameters: none}},
	}
	for _, kind := range []string{"rule", "reference"} {
		for _, c := range []struct{ verb, desc string }{
			{"create", "Add a %s to this conversation's context (include: always = in every prompt; manual, agent = only once included)."},
			{"update", "Change a %s of this conversation's context; give only what changes."},
			{"delete", "Remove a %s from this conversation's context."},
			{"include", "Put a %s into the agents' prompts."},
			{"exclude", "Take a %s out of the agents' prompts, keeping it."},
		} {
			params := item("name")
			if c.verb == "create" {
				params = item("name", "text")
			}
			tools = append(tools, supervisionTool{flow.ModifyContext, llms.FunctionDefinition{
				Name: "supervised_" + c.verb + "_" + kind, Description: fmt.Sprintf(c.desc, kind), Parameters: params}})
		}
	}
	return tools
}()

// offeredSupervision is the supervision tools a node's allowed_actions
// permit.
func offeredSupervision(n *flow.Node) []llms.Tool {
	var out []llms.Tool
	for i := range supervisionTools {
		if slices.Contains(n.AllowedActions, supervisionTools[i].action) {
			out = append(out, llms.Tool{Type: "function", Function: &supervisionTools[i].def})
		}
	}
	return out
}

// supervise runs a supervised_* call on the task's instance. A call the
// node's allowed_actions do not permit is refused, and recorded so.
func (a *Agent) supervise(t *flow.Task, use *flow.ToolUse) {
	i := slices.IndexFunc(supervisionTools, func(st supervisionTool) bool { return st.def.Name == use.ToolName })
	switch {
	case i < 0 || t.Supervision == nil:
		use.Error = fmt.Sprintf("no tool %q here", use.ToolName)
		return
	case !slices.Contains(t.Node.AllowedActions, supervisionTools[i].action):
		use.Error = fmt.Sprintf("refused: %s needs %s, and this supervisor is allowed only %s",
			use.ToolName, supervisionTools[i].action, strings.Join(t.Node.AllowedActions, ", "))
		return
	case supervisionTools[i].action == flow.ModifyContext:
		items, out, err := flow.ContextChange(t.Supervision.Context, use.ToolName, use.Input)
		if err != nil {
			use.Error = err.Error()
			return
		}
		t.Supervision.Context, use.Output = items, out // later calls of the same reply see it
		return
	}
	var v any
	switch use.ToolName {
	case "supervised_get_conversation_history":
		type entry struct {
			StepID   string `json:"step_id"`
			AgentID  string `json:"agent_id"`
			Decision string `json:"decision,omitempty"`
			Response string `json:"response,omitempty"`
		}
		var out []entry
		for _, s := range t.Supervision.Steps {
			out = append(out, entry{s.StepID, s.AgentID, s.Decision, s.Response})
		}
		v = out
	case "supervised_get_current_rules", "supervised_get_current_references":
		kind := strings.TrimSuffix(strings.TrimPrefix(use.ToolName, "supervised_get_current_"), "s")
		type entry struct {
			flow.ContextItem
			Active bool `json:"active"`
		}
		out := []entry{}
		for _, c := range t.Supervision.Context {
			if c.Kind == kind {
				out = append(out, entry{c, c.Active()})
			}
		}
		v = out
	case "supervised_get_available_tools":
		out := map[string]string{}
		for name, tool := range a.Tools {
			out[name] = tool.Description
		}
		v = out
	case "supervised_get_session_stats":
		stats := struct {
			Turns     int            `json:"turns"`
			Steps     int            `json:"steps"`
			ToolCalls int            `json:"tool_calls"`
			Decisions map[string]int `json:"decisions"`
		}{Decisions: map[string]int{}}
		for _, s := range t.Supervision.Steps {
			stats.Steps++
			stats.ToolCalls += len(s.ToolUsage)
			if s.Role == flow.RoleUser {
				stats.Turns++
			} else if s.Decision != "" {
				stats.Decisions[s.Decision]++
			}
		}
		v = stats
	}
	b, _ := json.Marshal(v)
	use.Output = string(b)
}
