package flow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/go-playground/validator/v10"
)

// Node types.
const (
	Superego   = "superego"
	InnerAgent = "inner_agent"
)

// Decisions the engine gives meaning to. A node may declare any others
// through its transitions.
const (
	Block              = "BLOCK"
	Accept             = "ACCEPT"
	Caution            = "CAUTION"
	NeedsClarification = "NEEDS_CLARIFICATION"
	Complete           = "COMPLETE"
	NeedsTool          = "NEEDS_TOOL"
	MaxIterations      = "MAX_ITERATIONS" // a transition key, never a model's decision
	AnyDecision        = "*"
)

// DefaultMaxIterations and DefaultMaxSteps are the caps a flow gets when it
// sets none.
const (
	DefaultMaxIterations = 3
	DefaultMaxSteps      = 50
)

// Definition is a flow file as written: flows/ID.json.
type Definition struct {
	Name        string        `json:"name" validate:"required"`
	Description string        `json:"description,omitempty"`
	Graph       Graph         `json:"graph"`
	Context     []ContextItem `json:"context,omitempty" validate:"dive"` // rules and references each instance starts with
	// Gating "off" streams every draft unjudged, as before output gating
	// (docs/gating.md); "" or "on" holds what a superego will judge.
	Gating string `json:"gating,omitempty" validate:"omitempty,oneof=on off"`
}

// Graph is the node graph of a flow definition.
type Graph struct {
	Start    string           `json:"start" validate:"required"`
	MaxSteps int              `json:"max_steps,omitempty" validate:"gte=0"`
	Nodes    map[string]*Node `json:"nodes" validate:"required,min=1,dive,keys,nodename,endkeys,required"`
}

// Node is one node of a graph. A nil transition target ends the run.
type Node struct {
	Name          string             `json:"-"` // its key in graph.nodes
	decisions     []string           // Decisions, worked out once by Parse
	Type          string             `json:"type" validate:"required,oneof=superego inner_agent"`
	AgentID       string             `json:"agent_id" validate:"required"`
	Constitution  string             `json:"constitution,omitempty"`
	SystemPrompt  string             `json:"system_prompt,omitempty"`
	Tools         []string           `json:"tools,omitempty" validate:"dive,required"`
	Model         string             `json:"model,omitempty" validate:"omitempty,model"`
	MaxIterations int                `json:"max_iterations,omitempty" validate:"gte=0"`
	Transitions   map[string]*string `json:"transitions" validate:"dive,keys,decision,endkeys"` // required but on a judge (crossCheck)
	// A supervisor's permissions: which supervised_* tools it is offered.
	AllowedActions []string `json:"allowed_actions,omitempty" validate:"dive,oneof=READ_ONLY MODIFY_CONTEXT"`
	// ReviewChanges makes a supervisor's context changes proposals: the
	// run waits (awaiting_review) until a person approves them, and they
	// apply, or rejects them, and they are dropped.
	ReviewChanges bool `json:"review_changes,omitempty"`
	// What a superego whose model fails decides: "block" (the default)
	// takes its BLOCK transition, "allow" its ACCEPT one.
	OnError string `json:"on_error,omitempty" validate:"omitempty,oneof=allow block"`
	// Output gating (docs/gating.md): a superego's decisions that withhold the
	// draft it judges, besides BLOCK and NEEDS_CLARIFICATION, which always
	// do; and judging a streaming draft chunk by chunk.
	Withhold    []string     `json:"withhold,omitempty" validate:"dive,decision"`
	JudgeStream *JudgeStream `json:"judge_stream,omitempty"`
	// Speculate starts the node of this superego's ACCEPT transition at the
	// same time as the superego, its turn held until the verdict (docs/gating.md).
	Speculate bool `json:"speculate,omitempty"`
	// Stack "off" keeps a superego on its own constitution whatever stack
	// of user constitutions a run brings (docs/stacks.md).
	Stack string `json:"stack,omitempty" validate:"omitempty,oneof=off"`
	// Judged actions (docs/actions.md), on an inner agent: the superegos that
	// judge its tool calls before they run and their results before its
	// model reads them, the rules that decide calls without a model, and
	// the tools whose results are judged though they are closed-world.
	ToolJudge    string       `json:"tool_judge,omitempty"`
	ResultJudge  string       `json:"result_judge,omitempty"`
	Permissions  *Permissions `json:"permissions,omitempty"`
	JudgeResults []string     `json:"judge_results,omitempty" validate:"dive,required"`

	judged        bool   // an inner agent whose turns a superego judges (docs/gating.md); set by Parse
	judge         string // for an inner agent, the superego with judge_stream its drafts go to directly
	judgeDecision string // and the decision that leads there
}

// minChunk is the smallest chunk_chars: smaller chunks would cost a judge's
// call every few words.
const minChunk = 20

// JudgeStream sets how a superego judges a streaming draft: about
// ChunkChars of new text at a time, with up to ContextChars before it.
type JudgeStream struct {
	ChunkChars   int `json:"chunk_chars"`
	ContextChars int `json:"context_chars" validate:"gte=0"`
}

// Problem is one thing wrong with a flow definition, at a JSON path.
type Problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// InvalidError lists every problem found in a flow definition.
type InvalidError struct {
	Problems []Problem
}

func (e *InvalidError) Error() string {
	s := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		s[i] = p.String()
	}
	return strings.Join(s, "; ")
}

func (e *InvalidError) Unwrap() error { return ErrInvalid }

// Catalog is what a definition may refer to besides its own nodes.
type Catalog struct {
	Tools []string // tool names nodes may list
	// MCPServers are the MCP tool servers whose tools nodes may list, as
	// mcp__SERVER__TOOL or mcp__SERVER__* (docs/actions.md); checked with Tools.
	MCPServers []string
	Providers  []string          // model providers a node's "model" may name
	Texts      map[string]string // constitution name → text (constitutions/NAME.md)
}

var (
	decisionRe = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
	nodeNameRe = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	modelRe    = regexp.MustCompile(`^[a-z][a-z0-9-]*(:.+)?$`)
	mcpToolRe  = regexp.MustCompile(`^mcp__[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*__([A-Za-z0-9_-]+|\*)$`)
	toolNameRe = regexp.MustCompile(`^[A-Za-z0-9_.-]*$`) // a permission rule's tool, its "*" cut off
	argNameRe  = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	validate   = newValidator()
)

func newValidator() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		return strings.Split(f.Tag.Get("json"), ",")[0]
	})
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	must(v.RegisterValidation("decision", func(fl validator.FieldLevel) bool {
		s := fl.Field().String()
		return s == AnyDecision || decisionRe.MatchString(s)
	}))
	must(v.RegisterValidation("nodename", func(fl validator.FieldLevel) bool {
		s := fl.Field().String()
		return nodeNameRe.MatchString(s) && s != "self"
	}))
	must(v.RegisterValidation("model", func(fl validator.FieldLevel) bool {
		return modelRe.MatchString(fl.Field().String())
	}))
	return v
}

var tagMessages = map[string]string{
	"required": "is required",
	"min":      "must not be empty",
	"oneof":    "must be one of: %s",
	"gte":      "must not be negative",
	"decision": `must be "*" or an upper-case word such as ACCEPT`,
	"nodename": `must be letters, digits, "_", "-" or "." and not "self"`,
	"model":    `must be "provider" or "provider:model", such as "openai:gpt-4o-mini"`,
}

// Parse decodes and validates a flow definition. Constitution names are
// resolved against cat.Texts; the returned definition has them embedded.
// Errors are *InvalidError listing every problem found.
func Parse(data []byte, cat Catalog) (*Definition, error) {
	var def Definition
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&def); err != nil {
		return nil, &InvalidError{[]Problem{{Message: jsonProblem(data, err)}}}
	}
	if dec.More() {
		return nil, &InvalidError{[]Problem{{Message: "unexpected data after the flow object"}}}
	}
	var problems []Problem
	if err := validate.Struct(&def); err != nil {
		var verrs validator.ValidationErrors
		if !errors.As(err, &verrs) {
			return nil, fmt.Errorf("validate flow: %w", err)
		}
		for _, fe := range verrs {
			msg := tagMessages[fe.Tag()]
			if strings.Contains(msg, "%s") {
				msg = fmt.Sprintf(msg, strings.ReplaceAll(fe.Param(), " ", ", "))
			}
			if msg == "" {
				msg = "is invalid (" + fe.Tag() + ")"
			}
			problems = append(problems, Problem{jsonPath(fe.Namespace()), msg})
		}
	}
	problems = append(problems, crossCheck(&def, cat)...)
	if len(problems) > 0 {
		sort.SliceStable(problems, func(i, j int) bool { return problems[i].Path < problems[j].Path })
		return nil, &InvalidError{problems}
	}
	for name, n := range def.Graph.Nodes {
		n.Name = name
		if text, ok := cat.Texts[n.Constitution]; ok {
			n.Constitution = text
		}
		n.decisions = n.Decisions()
	}
	if def.Gating != "off" {
		def.Graph.markJudged()
	}
	return &def, nil
}

// markJudged finds the inner agents a superego judges: those from which a
// superego can be reached through transitions, through any chain of inner
// agents between (docs/gating.md). An inner agent that leads straight to a
// superego with judge_stream has its drafts judged chunk by chunk there.
func (g *Graph) markJudged() {
	for changed := true; changed; {
		changed = false
		for _, n := range g.Nodes {
			if n.Type != InnerAgent || n.judged {
				continue
			}
			for _, t := range n.Transitions {
				if next := n.resolve(t); g.Holds(&next) {
					n.judged, changed = true, true
					break
				}
			}
		}
	}
	for _, n := range g.Nodes {
		if n.Type != InnerAgent {
			continue
		}
		for _, d := range n.Decisions() {
			if t, _ := n.Target(d); g.Nodes[t] != nil && g.Nodes[t].Type == Superego && g.Nodes[t].JudgeStream != nil {
				n.judge, n.judgeDecision = t, d
				break
			}
		}
	}
}

// Judged reports whether a superego judges the node's turns, so that they
// are held until it decides (docs/gating.md).
func (n *Node) Judged() bool { return n.judged }

// Withholds reports whether the superego's decision withholds the draft it
// judges (docs/gating.md).
func (n *Node) Withholds(decision string) bool {
	return decision == Block || decision == NeedsClarification || slices.Contains(n.Withhold, decision)
}

// StreamJudge is, for an inner agent, the superego with judge_stream its
// drafts go to directly, and the decision that leads there; "" for none.
func (n *Node) StreamJudge() (judge, decision string) {
	return n.judge, n.judgeDecision
}

// Holds reports whether a turn that goes on to target (nil: it ends) is
// still held: a superego will judge it there, or further on.
func (g *Graph) Holds(target *string) bool {
	if target == nil {
		return false
	}
	next := g.Nodes[*target]
	return next != nil && (next.Type == Superego || next.judged)
}

// Iterations is how many times the node may run within one run.
func (n *Node) Iterations() int {
	if n.MaxIterations > 0 {
		return n.MaxIterations
	}
	return DefaultMaxIterations
}

// Decisions are the decisions the node's model may take: its transition
// keys without "*" and MAX_ITERATIONS, or, where that leaves none, the
// defaults of its type.
func (n *Node) Decisions() []string {
	if n.decisions != nil {
		return n.decisions
	}
	var ds []string
	for k := range n.Transitions {
		if k != AnyDecision && k != MaxIterations && k != NeedsTool {
			ds = append(ds, k)
		}
	}
	if len(ds) == 0 {
		if n.Type == Superego {
			return []string{Accept, Block, Caution, NeedsClarification}
		}
		return []string{Complete}
	}
	sort.Strings(ds)
	return ds
}

// Target is where the decision leads: a node name ("self" resolved), or ""
// for the end of the run. ok is false when no transition matches; "*" does
// not catch NEEDS_TOOL or MAX_ITERATIONS.
func (n *Node) Target(decision string) (target string, ok bool) {
	t, ok := n.Transitions[decision]
	if !ok && decision != NeedsTool && decision != MaxIterations {
		t, ok = n.Transitions[AnyDecision]
	}
	if !ok {
		return "", false
	}
	return n.resolve(t), true
}

// Decide reads the decision a node's reply said: one of allowed, or any
// decision its "*" transition takes. A reply with none of them gets the
// node's fallback, CAUTION for a superego and COMPLETE for an inner agent,
// and fallback says why. target is the next node, "" for the end.
func (n *Node) Decide(said string, allowed []string) (decision, fallback, target string, err error) {
	d := strings.ToUpper(strings.TrimSpace(said))
	if slices.Contains(allowed, d) {
		target, _ := n.Target(d)
		return d, "", target, nil
	}
	star, ok := n.Transitions[AnyDecision]
	if ok && decisionRe.MatchString(d) {
		return d, "", n.resolve(star), nil
	}
	decision = Complete
	if n.Type == Superego {
		decision = Caution
	}
	why := NoDecision(d, allowed)
	if ok {
		return decision, why + `; followed "*"`, n.resolve(star), nil
	}
	target, ok = n.Target(decision)
	if !ok {
		return decision, why + "; used " + decision, "", fmt.Errorf("%w: %s, and the node has no %s or \"*\" transition to fall back on", ErrModelOutput, why, decision)
	}
	return decision, why + "; used " + decision, target, nil
}

// NoDecision says why a reply's decision, said, is none of allowed.
func NoDecision(said string, allowed []string) string {
	if said == "" {
		return "the reply had no decision"
	}
	if len(said) > 40 {
		said = said[:40] + "…"
	}
	return fmt.Sprintf("%q is not one of %s", said, strings.Join(allowed, ", "))
}

// resolve reads a transition target: "self" is the node, nil the end ("").
func (n *Node) resolve(t *string) string {
	switch {
	case t == nil:
		return ""
	case *t == "self":
		return n.Name
	}
	return *t
}

// Limit is how many node steps one run may append.
func (g *Graph) Limit() int {
	if g.MaxSteps > 0 {
		return g.MaxSteps
	}
	return DefaultMaxSteps
}

// jsonPath turns validator's "Definition.graph.nodes[calc].type" into
// "graph.nodes.calc.type".
func jsonPath(ns string) string {
	_, ns, _ = strings.Cut(ns, ".")
	ns = strings.ReplaceAll(ns, "[", ".")
	return strings.ReplaceAll(ns, "]", "")
}

// jsonProblem describes a decoding error with the line it happened on.
func jsonProblem(data []byte, err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("line %d: malformed JSON: %v", 1+bytes.Count(data[:syn.Offset], []byte("\n")), syn)
	case errors.As(err, &typ):
		return fmt.Sprintf("%s: must be a JSON %s, not %s", typ.Field, typ.Type.Kind(), typ.Value)
	case errors.Is(err, io.EOF):
		return "empty file: a flow is a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: the file ends inside the flow object"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// crossCheck finds what struct tags cannot express: references between nodes,
// to tools, to providers.
func crossCheck(def *Definition, cat Catalog) []Problem {
	var out []Problem
	add := func(path, format string, args ...any) {
		out = append(out, Problem{path, fmt.Sprintf(format, args...)})
	}
	g := def.Graph
	if g.Start != "" && g.Nodes[g.Start] == nil && len(g.Nodes) > 0 {
		add("graph.start", "unknown node %q (nodes: %s)", g.Start, strings.Join(slices.Sorted(maps.Keys(g.Nodes)), ", "))
	}
	tools := setOf(cat.Tools)
	providers := setOf(cat.Providers)
	judges, problems := checkJudges(g)
	out = append(out, problems...)
	for name, n := range g.Nodes {
		if n == nil {
			continue
		}
		base := "graph.nodes." + name
		for key, target := range n.Transitions {
			if target != nil && *target != "self" && g.Nodes[*target] == nil {
				add(base+".transitions."+key, "unknown node %q", *target)
			}
		}
		for i, t := range n.Tools {
			path := fmt.Sprintf("%s.tools.%d", base, i)
			switch rest, mcp := strings.CutPrefix(t, "mcp__"); {
			case t == Client && n.Type == Superego:
				add(path, "only an inner agent takes a client's tools")
			case t == "" || cat.Tools == nil || tools[t] || t == Client:
			case !mcp:
				add(path, "unknown tool %q (tools: %s)", t, strings.Join(cat.Tools, ", "))
			case !mcpToolRe.MatchString(t):
				add(path, "%q: an MCP tool is named mcp__SERVER__TOOL, or mcp__SERVER__* for all of a server's tools", t)
			case !slices.Contains(cat.MCPServers, strings.Split(rest, "__")[0]):
				known := "mcp.json has none"
				if len(cat.MCPServers) > 0 {
					known = "servers in mcp.json: " + strings.Join(cat.MCPServers, ", ")
				}
				add(path, "unknown MCP server %q (%s)", strings.Split(rest, "__")[0], known)
			}
		}
		if p, _, _ := strings.Cut(n.Model, ":"); modelRe.MatchString(n.Model) && cat.Providers != nil && !providers[p] {
			add(base+".model", "unknown provider %q (providers: %s)", p, strings.Join(cat.Providers, ", "))
		}
		if len(n.Transitions) > 0 && len(n.Decisions()) > 0 {
			if _, ok := n.Target(n.Decisions()[0]); !ok {
				add(base+".transitions", "no decision leads anywhere: add a decision such as %s, or \"*\"", n.Decisions()[0])
			}
		}
		switch {
		case n.Type == Superego && strings.TrimSpace(n.Constitution) == "":
			add(base+".constitution", "a superego node needs a constitution")
		case n.Type == InnerAgent && n.Constitution != "":
			add(base+".constitution", "only superego nodes have a constitution; an inner agent has a system_prompt")
		case n.Type == InnerAgent && len(n.AllowedActions) > 0:
			add(base+".allowed_actions", "only superego nodes supervise")
		case n.ReviewChanges && !slices.Contains(n.AllowedActions, ModifyContext):
			add(base+".review_changes", "only a supervisor allowed MODIFY_CONTEXT makes changes to review")
		case n.ReviewChanges && n.Speculate:
			add(base+".review_changes", "a supervisor whose changes wait for a person's review cannot speculate")
		case n.Type == InnerAgent && n.OnError != "":
			add(base+".on_error", "only superego nodes have on_error")
		}
		if n.Type == InnerAgent && n.Stack != "" {
			add(base+".stack", "only superego nodes take a stack of constitutions")
		}
		if n.OnError != "" && !judges[name] {
			fallback := map[string]string{"allow": Accept, "block": Block}[n.OnError]
			if _, ok := n.Target(fallback); !ok {
				add(base+".on_error", "on_error %q needs a %s transition", n.OnError, fallback)
			}
		}
		if n.Type == InnerAgent {
			for key, set := range map[string]bool{"withhold": len(n.Withhold) > 0, "judge_stream": n.JudgeStream != nil, "speculate": n.Speculate} {
				if set {
					add(base+"."+key, "only superego nodes judge drafts")
				}
			}
			continue
		}
		if js := n.JudgeStream; js != nil && js.ChunkChars < minChunk {
			add(base+".judge_stream.chunk_chars", "must be at least %d characters", minChunk)
		}
		for i, d := range n.Withhold {
			if !slices.Contains(n.Decisions(), d) {
				add(fmt.Sprintf("%s.withhold.%d", base, i), "%q is not one of the node's decisions (%s)", d, strings.Join(n.Decisions(), ", "))
			}
		}
		if n.Speculate {
			target, _ := n.Target(Accept)
			if next := g.Nodes[target]; next == nil || next.Type != InnerAgent || target == name {
				add(base+".speculate", "speculation starts the node of the ACCEPT transition early: it needs an ACCEPT transition to an inner agent")
			}
		}
	}
	return out
}

func setOf(xs []string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}

// checkJudges checks what an inner agent's judged actions name (docs/actions.md):
// its judges are superego nodes that only judge, its permissions parse and
// name its tools. It returns the nodes that judge actions; every other node
// needs transitions.
func checkJudges(g Graph) (judges map[string]bool, out []Problem) {
	add := func(path, format string, args ...any) {
		out = append(out, Problem{path, fmt.Sprintf(format, args...)})
	}
	judges = map[string]bool{}
	clients := 0
	for _, name := range slices.Sorted(maps.Keys(g.Nodes)) {
		n := g.Nodes[name]
		if n == nil {
			continue
		}
		base := "graph.nodes." + name
		if slices.Contains(n.Tools, Client) && n.Type == InnerAgent {
			if clients++; clients == 2 {
				add(base+".tools", "at most one inner agent of a flow takes a client's tools")
			}
		}
		if n.Type != InnerAgent {
			for key, set := range map[string]bool{"tool_judge": n.ToolJudge != "", "result_judge": n.ResultJudge != "", "permissions": n.Permissions != nil, "judge_results": len(n.JudgeResults) > 0} {
				if set {
					add(base+"."+key, "only an inner agent's actions are judged")
				}
			}
			continue
		}
		if n.Permissions != nil {
			out = append(out, n.Permissions.parse(base+".permissions", n.Tools)...)
		}
		if len(n.JudgeResults) > 0 && n.ResultJudge == "" {
			add(base+".judge_results", "judge_results names tools whose results a result_judge judges: set result_judge")
		}
		for key, judge := range map[string]string{"tool_judge": n.ToolJudge, "result_judge": n.ResultJudge} {
			if judge == "" {
				continue
			}
			j := g.Nodes[judge]
			switch {
			case j == nil:
				add(base+"."+key, "unknown node %q", judge)
			case j.Type != Superego:
				add(base+"."+key, "%q is an %s: a judge of actions is a superego node", judge, j.Type)
			default:
				judges[judge] = true
			}
		}
	}
	for _, judge := range slices.Sorted(maps.Keys(judges)) {
		j := g.Nodes[judge]
		base := "graph.nodes." + judge
		if g.Start == judge {
			add("graph.start", "%q judges actions: a judge of actions is never the start", judge)
		}
		for _, d := range slices.Sorted(maps.Keys(j.Transitions)) {
			if t := j.Transitions[d]; d != Block || t != nil {
				add(base+".transitions."+d, `%q judges actions: its only transition may be "BLOCK": null, which ends the run when it refuses`, judge)
			}
		}
		if len(j.Withhold) > 0 || j.JudgeStream != nil || j.Speculate {
			add(base, "%q judges actions: it judges no drafts (withhold, judge_stream, speculate)", judge)
		}
		for _, from := range slices.Sorted(maps.Keys(g.Nodes)) {
			n := g.Nodes[from]
			for _, d := range slices.Sorted(maps.Keys(n.Transitions)) {
				if t := n.Transitions[d]; t != nil && n.resolve(t) == judge {
					add("graph.nodes."+from+".transitions."+d, "%q judges actions: no transition may lead to it", judge)
				}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(g.Nodes)) {
		if n := g.Nodes[name]; n != nil && !judges[name] {
			switch {
			case n.Transitions == nil:
				add("graph.nodes."+name+".transitions", "is required")
			case len(n.Transitions) == 0:
				add("graph.nodes."+name+".transitions", "must not be empty")
			}
		}
	}
	return judges, out
}

// Client is the tool an inner agent lists to be offered a request's own
// function tools (docs/gateway.md).
const Client = "client"

// ClientAgent is the flow's inner agent that takes a client's tools, if it
// has one.
func (d *Definition) ClientAgent() *Node {
	for _, n := range d.Graph.Nodes {
		if n.Type == InnerAgent && slices.Contains(n.Tools, Client) {
			return n
		}
	}
	return nil
}
