package experiment

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A stack's problems are found before anything runs, each at its path:
// in a condition, in an inline sample, and in a dataset's sample.
func TestStackProblems(t *testing.T) {
	t.Parallel()
	env := testEnv(t)
	env.Constitutions["vegan"] = "VEGAN-TEXT"
	_, err := check(t, env, `{"samples": [{"id": "s1", "input": "x", "label": "benign", "constitutions": [{"name": "vegan", "adherence": 0}, {"name": "../default"}]}],
	  "conditions": [{"name": "a", "flow": "bare_assistant", "stack": [{"name": "vegan"}]}, {"name": "b", "flow": "guarded_chat", "stack": [{"name": "vegetarian"}, {"name": "vegan", "adherence": 6}]}]}`)
	for _, want := range []string{
		`conditions[0].stack: flow "bare_assistant" has no superego that takes a stack`,
		`conditions[1].stack[0].name: unknown constitution "vegetarian"`,
		`conditions[1].stack[1].adherence: must be 1 to 5, not 6`,
		`samples[0].constitutions[0].adherence: must be 1 to 5, not 0`,
		`samples[0].constitutions[1].name: must be the name of a library constitution`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v\nlacks %q", err, want)
		}
	}

	env.Dir = t.TempDir()
	os.WriteFile(filepath.Join(env.Dir, "set.jsonl"), []byte(`{"id": "s1", "input": "x", "label": "benign", "constitutions": [{"name": "vegan", "adherence": 5}]}
{"id": "s2", "input": "y", "label": "benign", "constitutions": [{"name": "carnivore"}]}
`), 0o644)
	_, err = check(t, env, `{"dataset": "set.jsonl", `+oneCondition+`}`)
	if err == nil || !strings.Contains(err.Error(), `dataset: sample "s2": constitutions[0].name: unknown constitution "carnivore"`) {
		t.Errorf("a dataset's sample with an unknown constitution: %v", err)
	}
	os.WriteFile(filepath.Join(env.Dir, "set.jsonl"), []byte(`{"id": "s1", "input": "x", "label": "benign", "constitutions": [{"name": "vegan", "adherence": 5}]}`), 0o644)
	p, err := check(t, env, `{"dataset": "set.jsonl", `+oneCondition+`}`)
	if err != nil || len(p.Samples) != 1 || len(p.Samples[0].Constitutions) != 1 || *p.Samples[0].Constitutions[0].Adherence != 5 {
		t.Errorf("a dataset's sample with its own constitutions: %v %+v", err, p)
	}
}
