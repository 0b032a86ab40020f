package agents

import (
	"strconv"
	"strings"
	"testing"

	"superego/engine"
	"superego/flow"
)

// The stacked prompts kept stay within maxStacked, however many stacks
// users bring, and each call gets its own stack's prompt.
func TestStackedPromptsAreBounded(t *testing.T) {
	t.Parallel()
	node := &flow.Node{Name: "in", Type: flow.Superego, Constitution: "FLOOR"}
	p := promptOf(&engine.Task{Node: node, Decisions: []string{flow.Accept, flow.Block}})
	var s stacked
	for i := range 3 * maxStacked {
		name := "c" + strconv.Itoa(i)
		got := s.prompt(promptKey{node: node}, p, []flow.Layer{{Name: name, Adherence: 3, Text: "TEXT-" + name}})
		if !strings.Contains(got, `<user_constitution name="`+name+`" adherence="3">`+"\nTEXT-"+name+"\n") {
			t.Fatalf("call %d got another stack's prompt:\n%s", i, got)
		}
		if n := s.n.Load(); n > maxStacked {
			t.Fatalf("%d prompts kept, past the bound of %d", n, maxStacked)
		}
	}
	kept := 0
	s.m.Range(func(any, any) bool { kept++; return true })
	if kept > maxStacked {
		t.Errorf("%d prompts kept, past the bound of %d", kept, maxStacked)
	}
}
