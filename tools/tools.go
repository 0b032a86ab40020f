// Package tools holds the tools flow nodes may call: a safe calculator, web
// search through a configurable backend, and a static code analyzer. A tool
// is a struct of fields, so a test or a flow can make one from a function.
package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// Tool is one callable tool. Call's error is given to the model as the
// tool's result, so it should say what was wrong in words a model can act on.
type Tool struct {
	Name        string
	Description string
	Parameters  map[string]any // JSON Schema of the arguments object
	Call        func(ctx context.Context, args json.RawMessage) (string, error)
	// ReadOnly says the tool changes nothing, so a speculative turn may run
	// it before its judge has decided (docs/gating.md). The zero value is the
	// safe one: a tool changes things unless it says otherwise.
	ReadOnly bool
	// ClosedWorld says the tool reaches nothing outside the machine: its
	// arguments go nowhere and its results come from nowhere an attacker
	// can write (docs/actions.md). The zero value is the careful one: open-world.
	ClosedWorld bool
	// Client marks a request's own function tool (docs/gateway.md): the client
	// runs it, and Call is nil.
	Client bool
}

// Set is the tools a server offers, by name.
type Set map[string]Tool

// Names lists the set's tool names, sorted.
func (s Set) Names() []string { return slices.Sorted(maps.Keys(s)) }

// Builtin returns the built-in tools; search uses the given backend, the
// workspace tools the given workspaces.
func Builtin(search *Search, ws *Workspaces) Set {
	set := Set{
		"calculator":    Calculator(),
		"search":        search.Tool(),
		"code_analyzer": CodeAnalyzer(),
	}
	maps.Copy(set, ws.Tools())
	return set
}

// stringArg decodes {"<name>": "..."}, the argument shape of every built-in tool.
func stringArg(args json.RawMessage, name string) (string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(args, &m); err != nil {
		return "", fmt.Errorf("arguments must be a JSON object with a string %q", name)
	}
	var s string
	if err := json.Unmarshal(m[name], &s); err != nil || m[name] == nil {
		return "", fmt.Errorf("argument %q must be a string", name)
	}
	return s, nil
}

// schema is the parameters of a built-in tool that takes one string.
func schema(name, description string) map[string]any {
	return object(map[string]any{name: map[string]any{"type": "string", "description": description}}, name)
}

// object is a built-in tool's parameters: these properties, those
// required, and no other key (a call that gives one is refused).
func object(props map[string]any, required ...string) map[string]any {
	return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
}
