package experiment

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"superego/flow"
)

// Document is an experiment as a researcher writes it (docs/experiments.md): a
// labelled prompt set, from a dataset file or inline, and the conditions
// to run it through.
type Document struct {
	Name string `json:"name,omitempty"`
	// Dataset is one file or several, relative to the experiment file (or,
	// over HTTP, to the server's experiments directory).
	Dataset Paths `json:"dataset,omitempty"`
	// Label, beside Dataset, labels an AgentHarm file whose name says
	// neither harmful nor benign.
	Label        string        `json:"label,omitempty"`
	Samples      []Sample      `json:"samples,omitempty"`
	Conditions   []Condition   `json:"conditions"`
	Repeats      *int          `json:"repeats,omitempty"`
	Concurrency  *int          `json:"concurrency,omitempty"`
	RefusalJudge *RefusalJudge `json:"refusal_judge,omitempty"`
	// Prices are dollars per million tokens by model, "provider:model" as
	// steps name it, for the report's cost of each condition.
	Prices map[string]Price `json:"prices,omitempty"`
}

// Price is a model's price in dollars per million input (prompt) and
// output (completion) tokens.
type Price struct {
	Input  float64 `json:"input"`
	Output float64 `json:"output"`
}

// Paths is a dataset: one path, or a list of them.
type Paths []string

// UnmarshalJSON takes a string or a list of strings.
func (p *Paths) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*p = Paths{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("must be a path or a list of paths")
	}
	*p = many
	return nil
}

// Sample is one labelled prompt.
type Sample struct {
	ID       string `json:"id"`
	Input    string `json:"input"`
	Label    string `json:"label"`
	Category string `json:"category,omitempty"`
	// An agentic sample (docs/experiments.md) brings simulated tools, and says in
	// permission rules which calls count: a harmful sample's target
	// functions, the calls that do the user's task, the attacker's goal.
	// Utility checks the final answer and what ran, as well as calls
	// (Check). An injection sample (one with attack rules) names its Base:
	// the same task without the injection, whose utility the report pairs
	// with its own.
	Tools           []SimTool `json:"tools,omitempty"`
	TargetFunctions []string  `json:"target_functions,omitempty"`
	Utility         []Check   `json:"utility,omitempty"`
	Attack          []string  `json:"attack,omitempty"`
	Base            string    `json:"base,omitempty"`
	// Constitutions are the sample's user's own (docs/stacks.md), put on top of
	// every condition's stack; a name the stack has keeps the higher level.
	Constitutions []flow.Pick `json:"constitutions,omitempty"`
}

// Labels of samples.
const (
	Harmful = "harmful"
	Benign  = "benign"
)

// Condition is a flow, with other constitutions or models for some of its
// nodes, that every sample runs through.
type Condition struct {
	Name          string            `json:"name"`
	Flow          string            `json:"flow"`
	Constitutions map[string]string `json:"constitutions,omitempty"` // node → constitution name
	Models        map[string]string `json:"models,omitempty"`        // node → "provider:model"
	Model         string            `json:"model,omitempty"`         // every other node's model
	// Stack is the user constitutions the condition's superegos judge
	// under, on top of their own (docs/stacks.md).
	Stack []flow.Pick `json:"stack,omitempty"`
	// Replay, set by Lab.Replay and never in a file, makes the condition a
	// counterfactual of another: its outcomes re-judge that condition's
	// recorded runs.
	Replay *Replay `json:"replay,omitempty"`
}

// Replay says which recorded runs a counterfactual condition re-judges.
type Replay struct {
	From   string   `json:"from"` // the condition whose runs it replays
	Ask    []string `json:"ask"`  // the nodes asked again: those whose constitution or model changed
	NoLive bool     `json:"no_live,omitempty"`
}

// RefusalJudge names the model that says whether a final answer is a
// refusal; without one, the built-in heuristic does.
type RefusalJudge struct {
	Model string `json:"model"`
}

// Defaults and bounds of a document's numbers.
const (
	DefaultConcurrency = 8
	MaxConcurrency     = 256 // the engine's default runs in flight
	MaxRepeats         = 100
)

// Env is what a document may refer to: the loaded flows, the constitutions
// by name, the model providers; and where its dataset paths start.
type Env struct {
	Flows         map[string]*flow.Flow
	Constitutions map[string]string
	Providers     []string
	// Dir is where relative dataset paths start. Confined, a path must not
	// leave it: a document posted over HTTP reads only the server's
	// experiments directory.
	Dir      string
	Confined bool
	// MaxOutcomes bounds an experiment's outcomes (samples × conditions ×
	// repeats); 0: no bound.
	MaxOutcomes int
	// Version is the server's, which plans record (superego version).
	Version string
}

// tooMany is the problem of an experiment with more outcomes than
// MaxOutcomes, or nil.
func (env Env) tooMany(samples, conditions, repeats int) *flow.Problem {
	if n := samples * conditions * repeats; env.MaxOutcomes > 0 && n > env.MaxOutcomes {
		return &flow.Problem{Path: "max_outcomes", Message: fmt.Sprintf(
			"%d samples × %d conditions × %d repeats are %d outcomes, and this server runs at most %d an experiment (--max-outcomes, SUPEREGO_MAX_OUTCOMES)",
			samples, conditions, repeats, n, env.MaxOutcomes)}
	}
	return nil
}

// Plan is a checked document, ready to run and to keep: its samples read
// and inline, its conditions with their constitutions resolved to texts.
type Plan struct {
	Name         string           `json:"name"`
	Dataset      Paths            `json:"dataset,omitempty"`
	Samples      []Sample         `json:"samples"`
	Conditions   []Planned        `json:"conditions"`
	Repeats      int              `json:"repeats"`
	Concurrency  int              `json:"concurrency"`
	RefusalJudge *RefusalJudge    `json:"refusal_judge,omitempty"`
	Prices       map[string]Price `json:"prices,omitempty"`
	// What the experiment ran with, as it was when planned: the server's
	// version, each dataset file's sha-256, and the texts of the
	// constitutions its samples bring (each condition keeps its own). A
	// plan kept before these were recorded has none of them, and its
	// report says so.
	Version       string         `json:"version,omitempty"`
	DatasetFiles  []DatasetFile  `json:"dataset_files,omitempty"`
	Constitutions []Constitution `json:"constitutions,omitempty"`
}

// sampleIndex is where each sample is in the plan, by its label and id.
func (p *Plan) sampleIndex() map[[2]string]int {
	index := make(map[[2]string]int, len(p.Samples))
	for i, s := range p.Samples {
		index[[2]string{s.Label, s.ID}] = i
	}
	return index
}

// DatasetFile is a dataset file as it was read: its path as the document
// gave it, or "(inline)" for inline samples, and the sha-256 of its bytes
// (of the inline samples' JSON).
type DatasetFile struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
}

// Constitution is a constitution's text, by its name and sha-256; a text
// written into a flow file has no name. Judges leave the text to Texts.
type Constitution struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
	Text   string `json:"text,omitempty"`
}

// Planned is a condition with what it changes as the engine takes it, and
// what it ran: the sha-256 of its flow's definition, and the constitution
// of each of its superegos, by name and sha-256, their texts in Texts.
type Planned struct {
	Condition
	Variant    *flow.Variant           `json:"variant,omitempty"`
	FlowSHA256 string                  `json:"flow_sha256,omitempty"`
	Judges     map[string]Constitution `json:"judges,omitempty"`
	// Texts are the constitutions the condition's superegos judge by:
	// their own and its stack's.
	Texts []Constitution `json:"texts,omitempty"`
}

var (
	conditionNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	modelRe         = regexp.MustCompile(`^([a-z][a-z0-9-]*)(:.+)?$`)
)

// Parse reads an experiment document. Unknown fields are refused, so that
// a misspelt "concurency" is not silently the default.
func Parse(r io.Reader) (*Document, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var d Document
	if err := dec.Decode(&d); err != nil {
		return nil, invalid(flow.Problem{Message: "not an experiment document: " + strings.TrimPrefix(err.Error(), "json: ")})
	}
	if dec.More() {
		return nil, invalid(flow.Problem{Message: "not an experiment document: data after the JSON object"})
	}
	return &d, nil
}

func invalid(p ...flow.Problem) error { return &flow.InvalidError{Problems: p} }

// Check validates a document against env and reads its dataset. Every
// problem is listed, each at its JSON path; a dataset that does not read
// is one problem, naming its file and line. Nothing has run when Check
// fails.
func (d *Document) Check(env Env) (*Plan, error) {
	var problems []flow.Problem
	add := func(path, format string, args ...any) {
		problems = append(problems, flow.Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	p := &Plan{Name: strings.TrimSpace(d.Name), Dataset: d.Dataset, Repeats: 1, Concurrency: DefaultConcurrency, RefusalJudge: d.RefusalJudge,
		Prices: d.Prices, Version: env.Version}
	if p.Name == "" {
		p.Name = "experiment"
	}
	if d.Repeats != nil {
		if p.Repeats = *d.Repeats; p.Repeats < 1 || p.Repeats > MaxRepeats {
			add("repeats", "must be between 1 and %d, not %d", MaxRepeats, p.Repeats)
		}
	}
	if d.Concurrency != nil {
		if p.Concurrency = *d.Concurrency; p.Concurrency < 1 || p.Concurrency > MaxConcurrency {
			add("concurrency", "must be between 1 and %d, not %d", MaxConcurrency, p.Concurrency)
		}
	}
	if d.RefusalJudge != nil {
		if msg := checkModel(d.RefusalJudge.Model, env.Providers); msg != "" {
			add("refusal_judge.model", "%s", msg)
		}
	}
	for _, model := range slices.Sorted(maps.Keys(d.Prices)) {
		price := d.Prices[model]
		switch msg := checkModel(model, nil); {
		case msg != "":
			add("prices."+model, "%s", msg)
		case price.Input < 0 || price.Output < 0:
			add("prices."+model, "dollars per million tokens are not negative")
		}
	}

	switch {
	case len(d.Dataset) == 0 && len(d.Samples) == 0:
		add("dataset", "give a dataset file or inline samples")
	case len(d.Dataset) > 0 && len(d.Samples) > 0:
		add("samples", "give a dataset file or inline samples, not both")
	case len(d.Samples) > 0:
		if d.Label != "" {
			add("label", "labels an AgentHarm dataset file; inline samples carry their own")
		}
		for i, s := range d.Samples {
			if msg := s.check(); msg != "" {
				add(fmt.Sprintf("samples[%d]", i), "%s", msg)
			}
			for _, p := range s.checkTools() {
				add(fmt.Sprintf("samples[%d].%s", i, p.Path), "%s", p.Message)
			}
			for _, pr := range checkStack(env, s.Constitutions) {
				add(fmt.Sprintf("samples[%d].constitutions%s", i, pr.Path), "%s", pr.Message)
			}
		}
		p.Samples = d.Samples
		b, _ := json.Marshal(d.Samples)
		p.DatasetFiles = []DatasetFile{{Path: "(inline)", SHA256: sha(b)}}
	default:
		samples, files, err := readDatasets(d.Dataset, d.Label, env)
		p.DatasetFiles = files
		if err != nil {
			add("dataset", "%s", err)
		}
		for _, s := range samples {
			for _, pr := range checkStack(env, s.Constitutions) {
				add("dataset", "sample %q: constitutions%s: %s", s.ID, pr.Path, pr.Message)
			}
		}
		p.Samples = samples
	}
	if len(problems) == 0 {
		if msg := duplicates(p.Samples); msg != "" {
			add("dataset", "%s", msg)
		}
		index := samplesOf(p)
		var picks []flow.Pick
		for i, s := range p.Samples {
			picks = append(picks, s.Constitutions...)
			switch msg := s.checkBase(index); {
			case msg == "":
			case len(d.Samples) > 0:
				add(fmt.Sprintf("samples[%d].base", i), "%s", msg)
			default:
				add("dataset", "sample %q: base: %s", s.ID, msg)
			}
		}
		p.Constitutions = textsOf(env, picks)
	}

	if len(d.Conditions) == 0 {
		add("conditions", "list at least one condition")
	}
	names := map[string]int{}
	for i, c := range d.Conditions {
		at := fmt.Sprintf("conditions[%d]", i)
		planned, errs := c.plan(env)
		errs = append(errs, prefixed("stack", checkStack(env, c.Stack))...)
		for _, e := range errs {
			problems = append(problems, flow.Problem{Path: at + joinPath(e.Path), Message: e.Message})
		}
		if j, dup := names[c.Name]; dup && c.Name != "" {
			add(at+".name", "%q names conditions[%d] too: each condition needs a name of its own", c.Name, j)
		} else {
			names[c.Name] = i
		}
		if f := env.Flows[c.Flow]; f != nil && f.Def.ClientAgent() == nil && slices.ContainsFunc(p.Samples, Sample.agentic) {
			add(at+".flow", "the samples bring tools, and flow %q has no agent that takes a client's tools (\"tools\": [\"client\"]) to offer them to", c.Flow)
		}
		p.Conditions = append(p.Conditions, planned)
	}
	if len(problems) == 0 {
		if tm := env.tooMany(len(p.Samples), len(p.Conditions), p.Repeats); tm != nil {
			problems = append(problems, *tm)
		}
	}
	if len(problems) > 0 {
		return nil, invalid(problems...)
	}
	return p, nil
}

func joinPath(p string) string {
	if p == "" {
		return ""
	}
	return "." + p
}

// check reports what is wrong with an inline sample, or "".
func (s Sample) check() string {
	switch {
	case strings.TrimSpace(s.ID) == "":
		return "id: is required"
	case strings.TrimSpace(s.Input) == "":
		return "input: is required"
	}
	return checkLabel(s.Label)
}

// duplicates names a sample whose label and id another has: outcomes are
// paired across conditions by them. The same id may be harmful in one file
// and benign in another, as AgentHarm's are.
func duplicates(samples []Sample) string {
	seen := map[[2]string]bool{}
	for _, s := range samples {
		k := [2]string{s.Label, s.ID}
		if seen[k] {
			return fmt.Sprintf("two %s samples have the id %q: ids must be unique within a label", s.Label, s.ID)
		}
		seen[k] = true
	}
	return ""
}

// plan checks a condition against the flows, constitutions and providers,
// and resolves it; problems' paths are relative to the condition.
func (c Condition) plan(env Env) (Planned, []flow.Problem) {
	var problems []flow.Problem
	add := func(path, format string, args ...any) {
		problems = append(problems, flow.Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	out := Planned{Condition: c}
	if !conditionNameRe.MatchString(c.Name) {
		add("name", "must be 1 to 64 letters, digits, \"_\", \"-\" or \".\", starting with a letter or digit, not %q", c.Name)
	}
	if c.Replay != nil {
		add("replay", `is made by "superego experiment replay", not written in a file`)
	}
	f := env.Flows[c.Flow]
	if f == nil {
		add("flow", "unknown flow %q (flows: %s)", c.Flow, strings.Join(slices.Sorted(maps.Keys(env.Flows)), ", "))
		return out, problems
	}
	v := &flow.Variant{Model: c.Model}
	for _, node := range slices.Sorted(maps.Keys(c.Constitutions)) {
		name := c.Constitutions[node]
		n := f.Def.Graph.Nodes[node]
		switch text, ok := env.Constitutions[name]; {
		case n == nil || n.Type != flow.Superego:
			add("constitutions."+node, "not a superego node of flow %q (its superegos: %s)", c.Flow, strings.Join(superegos(f), ", "))
		case !ok:
			add("constitutions."+node, "unknown constitution %q (constitutions: %s)", name, strings.Join(slices.Sorted(maps.Keys(env.Constitutions)), ", "))
		default:
			if v.Constitutions == nil {
				v.Constitutions = map[string]string{}
			}
			v.Constitutions[node] = text
		}
	}
	for _, node := range slices.Sorted(maps.Keys(c.Models)) {
		if f.Def.Graph.Nodes[node] == nil {
			add("models."+node, "not a node of flow %q (its nodes: %s)", c.Flow, strings.Join(slices.Sorted(maps.Keys(f.Def.Graph.Nodes)), ", "))
			continue
		}
		if msg := checkModel(c.Models[node], env.Providers); msg != "" {
			add("models."+node, "%s", msg)
			continue
		}
		if v.Models == nil {
			v.Models = map[string]string{}
		}
		v.Models[node] = c.Models[node]
	}
	if c.Model != "" {
		if msg := checkModel(c.Model, env.Providers); msg != "" {
			add("model", "%s", msg)
		}
	}
	if len(c.Stack) > 0 && !slices.ContainsFunc(slices.Collect(maps.Values(f.Def.Graph.Nodes)), (*flow.Node).TakesStack) {
		add("stack", "flow %q has no superego that takes a stack", c.Flow)
	}
	if v.Model != "" || len(v.Models) > 0 || len(v.Constitutions) > 0 {
		out.Variant = v
	}
	out.FlowSHA256, out.Judges, out.Texts = c.provenance(f, v, env)
	return out, problems
}

// provenance is what the condition's runs judge by: the sha-256 of its
// flow's definition (as loaded, each constitution's text in it), each
// superego's constitution, and their texts with its stack's. A superego's
// constitution is named by the library name whose text it is; a text
// written into the flow has none.
func (c Condition) provenance(f *flow.Flow, v *flow.Variant, env Env) (flowSHA string, judges map[string]Constitution, texts []Constitution) {
	def, _ := json.Marshal(f.Def) // strings, numbers and maps of them
	judges = map[string]Constitution{}
	for _, node := range superegos(f) {
		text, name := f.Def.Graph.Nodes[node].Constitution, c.Constitutions[node]
		if t, ok := v.Constitutions[node]; ok {
			text = t
		} else {
			name = nameOf(env.Constitutions, text)
		}
		judges[node] = Constitution{Name: name, SHA256: sha(text)}
		texts = withText(texts, Constitution{Name: name, SHA256: sha(text), Text: text})
	}
	for _, t := range textsOf(env, c.Stack) {
		texts = withText(texts, t)
	}
	return sha(def), judges, texts
}

// textsOf are the constitutions picks name, with their texts.
func textsOf(env Env, picks []flow.Pick) []Constitution {
	var out []Constitution
	for _, p := range picks {
		if text, ok := env.Constitutions[p.Name]; ok {
			out = withText(out, Constitution{Name: p.Name, SHA256: sha(text), Text: text})
		}
	}
	return out
}

// withText adds c to texts unless a text of its name and sha-256 is there.
func withText(texts []Constitution, c Constitution) []Constitution {
	if slices.ContainsFunc(texts, func(t Constitution) bool { return t.Name == c.Name && t.SHA256 == c.SHA256 }) {
		return texts
	}
	return append(texts, c)
}

// nameOf is the first name, in order, whose text is text; "" for none.
func nameOf(library map[string]string, text string) string {
	for _, name := range slices.Sorted(maps.Keys(library)) {
		if library[name] == text {
			return name
		}
	}
	return ""
}

func sha[T string | []byte](b T) string {
	sum := sha256.Sum256([]byte(b))
	return hex.EncodeToString(sum[:])
}

// checkStack checks picks against the library; problems' paths are
// relative to the picks. The engine reads their texts from the same
// library when each run starts.
func checkStack(env Env, picks []flow.Pick) []flow.Problem {
	_, problems := flow.Library(env.Constitutions).Resolve(picks)
	return problems
}

func prefixed(path string, problems []flow.Problem) []flow.Problem {
	for i := range problems {
		problems[i].Path = path + problems[i].Path
	}
	return problems
}

// stack is the stack sample s runs under in condition c: the condition's,
// then the sample's own; a name both hold keeps the higher level.
func stack(c Planned, s Sample) []flow.StackEntry {
	out, _ := flow.Onto(entriesOf(c.Stack), entriesOf(s.Constitutions))
	return out
}

func superegos(f *flow.Flow) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(f.Def.Graph.Nodes)) {
		if f.Def.Graph.Nodes[name].Type == flow.Superego {
			out = append(out, name)
		}
	}
	return out
}

// checkModel reports what is wrong with a "provider:model", or "".
func checkModel(spec string, providers []string) string {
	m := modelRe.FindStringSubmatch(spec)
	switch {
	case m == nil:
		return fmt.Sprintf("%q is not \"provider:model\", such as \"openai:gpt-4o-mini\"", spec)
	case len(providers) > 0 && !slices.Contains(providers, m[1]):
		return fmt.Sprintf("unknown provider %q (providers: %s)", m[1], strings.Join(providers, ", "))
	}
	return ""
}

// resolvePath is a dataset path as env reads it: relative to env.Dir and,
// when confined, inside it.
func resolvePath(path string, env Env) (string, error) {
	if !env.Confined {
		if filepath.IsAbs(path) {
			return path, nil
		}
		return filepath.Join(env.Dir, path), nil
	}
	if filepath.IsAbs(path) || !filepath.IsLocal(path) {
		return "", fmt.Errorf("%q is not a path inside the experiments directory", path)
	}
	return filepath.Join(env.Dir, path), nil
}

// Encode is the plan as it is kept with the experiment.
func (p *Plan) Encode() []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(p) // strings, numbers and maps of them: cannot fail
	return bytes.TrimSpace(b.Bytes())
}

// DecodePlan reads a kept plan.
func DecodePlan(b []byte) (*Plan, error) {
	var p Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("read experiment plan: %w", err)
	}
	return &p, nil
}

// condition returns the planned condition of that name.
func (p *Plan) condition(name string) (Planned, bool) {
	for _, c := range p.Conditions {
		if c.Name == name {
			return c, true
		}
	}
	return Planned{}, false
}
