package engine

import (
	"strings"

	"superego/flow"
)

// stackFor is the stack node judges under in a run with stack.
func stackFor(node *flow.Node, stack []flow.Layer) []flow.Layer {
	if len(stack) == 0 || !node.TakesStack() {
		return nil
	}
	return stack
}

// stackEntries is what a step records of the stack it was judged under:
// the floor, then each layer's name and level.
func stackEntries(stack []flow.Layer) []flow.StackEntry {
	if len(stack) == 0 {
		return nil
	}
	out := make([]flow.StackEntry, 0, len(stack)+1)
	out = append(out, flow.StackEntry{Name: flow.Floor})
	for _, l := range stack {
		out = append(out, flow.StackEntry{Name: l.Name, Adherence: l.Adherence})
	}
	return out
}

// basisOf is a judge's basis as a step records it: Floor or a name of the
// stack, anything else BasisOther; "" where the judge gave none, or judged
// under no stack. A model may say anything here, and a metric's label
// takes only these.
func basisOf(said string, stack []flow.Layer) string {
	said = strings.ToLower(strings.TrimSpace(said))
	if said == "" || len(stack) == 0 {
		return ""
	}
	if said == flow.Floor {
		return flow.Floor
	}
	for _, l := range stack {
		if l.Name == said {
			return l.Name
		}
	}
	return flow.BasisOther
}
