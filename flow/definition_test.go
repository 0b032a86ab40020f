package flow_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"superego/flow"
)

var catalog = flow.Catalog{Tools: []string{"calculator", "search"}, Providers: []string{"openai", "offline"}, Texts: map[string]string{"default": "BE GOOD"}}

func TestParseReportsEveryProblemWithItsPath(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		def  string
		want []string
	}{
		{"malformed JSON", "{\"name\": \"x\",\n \"graph\": {\"start\": }}", []string{"line 2: malformed JSON: invalid character '}' looking for beginning of value"}},
		{"empty file", "", []string{"empty file: a flow is a JSON object"}},
		{"wrong type", `{"name": "x", "graph": {"start": 5}}`, []string{"graph.start: must be a JSON string, not number"}},
		{"unknown field", `{"name": "x", "graph": {"start": "a", "nodes": {"a": {"type": "superego", "agent_id": "a", "constitution": "c", "transtions": {}}}}}`,
			[]string{`unknown field "transtions"`}},
		{"trailing data", `{"name": "x", "graph": {}} {}`, []string{"unexpected data after the flow object"}},
		{"many problems", `{"graph": {"start": "nope", "max_steps": -1, "nodes": {
			"calc": {"type": "inner", "agent_id": "", "tools": ["calculator", "abacus"], "model": "Open AI", "max_iterations": -2,
			         "transitions": {"DONE": "calcc", "bad key": null, "AGAIN": "self"}},
			"judge": {"type": "superego", "agent_id": "j", "transitions": {"ACCEPT": "calc"}, "model": "bogus:x"},
			"self": {"type": "inner_agent", "agent_id": "s", "constitution": "x", "transitions": {"NEEDS_TOOL": "self"}}}}}`,
			[]string{
				"graph.max_steps: must not be negative",
				`graph.nodes.calc.agent_id: is required`,
				`graph.nodes.calc.max_iterations: must not be negative`,
				`graph.nodes.calc.model: must be "provider" or "provider:model", such as "openai:gpt-4o-mini"`,
				`graph.nodes.calc.tools.1: unknown tool "abacus" (tools: calculator, search)`,
				`graph.nodes.calc.transitions.DONE: unknown node "calcc"`,
				`graph.nodes.calc.transitions.bad key: must be "*" or an upper-case word such as ACCEPT`,
				`graph.nodes.calc.type: must be one of: superego, inner_agent`,
				`graph.nodes.judge.constitution: a superego node needs a constitution`,
				`graph.nodes.judge.model: unknown provider "bogus" (providers: openai, offline)`,
				`graph.nodes.self: must be letters, digits, "_", "-" or "." and not "self"`,
				`graph.nodes.self.constitution: only superego nodes have a constitution; an inner agent has a system_prompt`,
				`graph.nodes.self.transitions: no decision leads anywhere: add a decision such as COMPLETE, or "*"`,
				`graph.start: unknown node "nope" (nodes: calc, judge, self)`,
				"name: is required",
			}},
		{"no nodes", `{"name": "x", "graph": {"start": "a", "nodes": {}}}`, []string{"graph.nodes: must not be empty"}},
		{"null node", `{"name": "x", "graph": {"start": "a", "nodes": {"a": null}}}`, []string{"graph.nodes.a: is required", `graph.start: unknown node "a" (nodes: a)`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := flow.Parse([]byte(c.def), catalog)
			var inv *flow.InvalidError
			if !errors.As(err, &inv) || !errors.Is(err, flow.ErrInvalid) {
				t.Fatalf("err = %v, want *InvalidError", err)
			}
			var got []string
			for _, p := range inv.Problems {
				got = append(got, p.String())
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
}

func TestConstitutionsEmbedByName(t *testing.T) {
	t.Parallel()
	def, err := flow.Parse([]byte(`{"name": "x", "graph": {"start": "a", "nodes": {
		"a": {"type": "superego", "agent_id": "a", "constitution": "default", "transitions": {"ACCEPT": "b"}},
		"b": {"type": "superego", "agent_id": "b", "constitution": "Inline text.", "transitions": {"ACCEPT": null}}}}}`), catalog)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := def.Graph.Nodes["a"].Constitution, def.Graph.Nodes["b"].Constitution; a != "BE GOOD" || b != "Inline text." {
		t.Errorf("constitutions %q %q", a, b)
	}
}

func TestLoadDirRefusesBrokenFilesAndKeepsTheRest(t *testing.T) {
	t.Parallel()
	texts, err := flow.Constitutions("testdata/constitutions")
	if err != nil {
		t.Fatal(err)
	}
	flows, refused, err := flow.LoadDir("testdata/flows", flow.Catalog{Tools: []string{"calculator"}, Texts: texts})
	if err != nil {
		t.Fatal(err)
	}
	if len(flows) != 2 || flows["good"] == nil || flows["seed_basic_calculator"] == nil {
		t.Errorf("loaded %v", flows)
	}
	if got := flows["good"].Def.Graph.Nodes["s"].Constitution; got != "Be brief.\n" {
		t.Errorf("embedded constitution %q", got)
	}
	want := []flow.Refused{
		{ID: "broken", Errors: []string{"graph.nodes.s.constitution: a superego node needs a constitution", `graph.nodes.s.transitions.ACCEPT: unknown node "nowhere"`}},
		{ID: "truncated", Errors: []string{"malformed JSON: the file ends inside the flow object"}},
	}
	if len(refused) != len(want) {
		t.Fatalf("refused %+v", refused)
	}
	for i := range want {
		if refused[i].ID != want[i].ID || strings.Join(refused[i].Errors, "|") != strings.Join(want[i].Errors, "|") {
			t.Errorf("refused[%d] = %+v, want %+v", i, refused[i], want[i])
		}
	}
	if _, _, err := flow.LoadDir(filepath.Join(t.TempDir(), "missing"), flow.Catalog{}); err == nil {
		t.Error("a missing flows directory loads without error")
	}
}

// The flows shipped in flows/ load with the server's tools and providers.
func TestShippedFlowsLoad(t *testing.T) {
	t.Parallel()
	texts, err := flow.Constitutions("../constitutions")
	if err != nil {
		t.Fatal(err)
	}
	cat := flow.Catalog{Tools: []string{"calculator", "code_analyzer", "delete_file", "list_files", "read_file", "search", "write_file"}, Providers: []string{"anthropic", "offline", "ollama", "openai"}, Texts: texts}
	flows, refused, err := flow.LoadDir("../flows", cat)
	if err != nil || len(refused) > 0 {
		t.Fatalf("err %v, refused %+v", err, refused)
	}
	entries, _ := filepath.Glob("../flows/*.json")
	if len(flows) != len(entries) || flows["basic_calculator"] == nil || flows["multi_agent_flow"] == nil {
		t.Errorf("loaded %d of %d flows", len(flows), len(entries))
	}
	if c := flows["basic_calculator"].Def.Graph.Nodes["input_superego"].Constitution; !strings.HasPrefix(c, "# Default constitution") {
		t.Errorf("default constitution not embedded: %.40q", c)
	}
}
