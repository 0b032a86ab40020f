package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tmc/langchaingo/llms"

	"superego/engine"
	"superego/flow"
	"superego/gateway"
	"superego/supervision"
	"superego/tools"
)

// Agent runs superego and inner-agent nodes. Model resolves a node's
// "model" ("" for the default); Timeout bounds each model call and each
// tool call (0: two minutes).
type Agent struct {
	Model func(spec string) (Model, error)
	Tools tools.Set
	// MCP, where set, is the MCP tool servers whose tools nodes name as
	// mcp__SERVER__TOOL, or all of a server's as mcp__SERVER__*.
	MCP     *tools.MCP
	Timeout time.Duration
	// Workspaces, where set, are the instances' workspaces: a worker that
	// writes OutputFile there ends its cycle.
	Workspaces *tools.Workspaces
	// Cache, where set, keeps model replies for tasks with a cache scope.
	Cache ReplyCache
	// Observe, where set, is told of model and tool calls (observe.go).
	Observe *Observer

	prompts sync.Map // promptKey → its system prompt's parts, built once
	stacked stacked  // a node's system prompts under the stacks runs bring
	flights flights  // identical calls in flight, shared (cache.go)
}

// promptKey names a system prompt: a node's, or a judge's of one kind of
// action.
type promptKey struct {
	node *flow.Node
	kind string
}

var _ engine.Agent = (*Agent)(nil)

// Act makes one model call for the task's node and runs the tools it asks for.
func (a *Agent) Act(ctx context.Context, t *engine.Task, emit func(flow.Event)) (reply engine.Reply, err error) {
	reply, calls, err := a.ask(ctx, t, emit)
	if err != nil || calls == nil {
		return reply, err
	}
	// The calls run once ask has returned, so that a tool's frames are not
	// on top of the model call's on the stack, which the run keeps.
	if reply.ToolUsage, err = calls.run(ctx); err != nil {
		return reply, err
	}
	if a.Workspaces != nil && len(t.Approved) == 0 {
		a.endCycle(t, &reply)
	}
	return reply, nil
}

// toolCalls are the tool calls a reply asks for, or those a person
// answered, to propose to the gate and run.
type toolCalls struct {
	calls   []llms.ToolCall
	propose func(int, llms.ToolCall)
	gate    *engine.Calls
}

func (c *toolCalls) run(ctx context.Context) ([]flow.ToolUse, error) {
	for i, call := range c.calls {
		c.propose(i, call) // the same call the stream proposed changes nothing
	}
	return c.gate.Finish(ctx, len(c.calls))
}

// ask makes the task's model call, and returns its reply and the tool
// calls it asks for; the approved ones, with no model call, for a task
// with calls a person answered.
func (a *Agent) ask(ctx context.Context, t *engine.Task, emit func(flow.Event)) (reply engine.Reply, _ *toolCalls, err error) {
	m, err := a.Model(t.Node.Model)
	if err != nil {
		return engine.Reply{}, nil, fmt.Errorf("%w: %w", flow.ErrModelUnavailable, err)
	}
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	if relays(t, m) {
		reply, err := a.relay(ctx, t, m, emit, timeout)
		return reply, nil, err
	}
	c := a.setUp(ctx, t, m, emit, timeout)
	if c.approved != nil {
		return reply, c.approved, nil
	}
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	msgs := messages(t, a.system(t), c.context)
	callCtx, observed := a.Observe.modelStarted(callCtx, t, m, msgs, start)
	got, cached, shared, err := a.generate(callCtx, t, m, msgs, c.tools, c.opts)
	reply.Model, reply.ServedModel, reply.Parameters = m.Name, got.ServedModel, got.Parameters
	reply.Latency, reply.Cached, reply.Shared = time.Since(start), cached, shared
	a.Observe.modelEnded(callCtx, observed, got, cached, err, reply.Latency)
	switch {
	case ctx.Err() != nil:
		// Stopped, by a cancel or a judge, before the provider said what
		// it cost: its tokens are estimated.
		reply.Usage = estimate(msgs, c.streamed)
		return reply, nil, ctx.Err()
	case err != nil && errors.Is(callCtx.Err(), context.DeadlineExceeded):
		return reply, nil, fmt.Errorf("%w: model %s gave no reply within %s", flow.ErrTimeout, m.Name, timeout)
	case err != nil:
		return reply, nil, fmt.Errorf("%w: %s: %w", flow.ErrModelUnavailable, m.Name, err)
	}
	calls := got.read(&reply)
	if len(calls) == 0 {
		if strings.TrimSpace(got.Text) == "" {
			return reply, nil, fmt.Errorf("%w: model %s sent an empty reply", flow.ErrModelOutput, m.Name)
		}
		return reply, nil, nil
	}
	return reply, &toolCalls{calls, c.propose, c.gate}, nil
}

// modelCall is what a task's model call is made with: the tools offered,
// and the call's options, which stream its reply to the node's events and
// propose its tool calls to the gate as they come; or, for a task with
// calls a person answered, those calls, and no model call.
type modelCall struct {
	context  string      // the rules and references an inner agent is given
	tools    []llms.Tool // as the model is told of them
	opts     []llms.CallOption
	gate     *engine.Calls
	propose  func(int, llms.ToolCall)
	streamed int // bytes of the reply streamed so far
	approved *toolCalls
}

// setUp makes the task's modelCall. It is apart from ask, and returns
// before the call, so that what it needs takes no room on the stack while
// the run waits on its model: the reply streams to the node's events and
// their subscribers on top of ask's frame, and a run whose stack outgrows
// 8 KB there holds 16 KB while it waits (docs/benchmarks.md).
//
//go:noinline
func (a *Agent) setUp(ctx context.Context, t *engine.Task, m Model, emit func(flow.Event), timeout time.Duration) *modelCall {
	o := a.offer(t)
	c := &modelCall{context: o.context, tools: o.definitions(t.Node), gate: t.Calls}
	if c.gate == nil {
		c.gate = engine.Ungated(emit)
	}
	toolCtx := tools.WithInstance(ctx, t.InstanceID)
	c.propose = func(i int, call llms.ToolCall) {
		use, info, run := a.prepare(t, o, call, i, timeout)
		c.gate.Propose(i, use, info, func(_ context.Context, input json.RawMessage) engine.Result { return run(toolCtx, input) })
	}
	if len(t.Approved) > 0 {
		// A person answered the calls that waited: they run, or are
		// refused, as answered, with no model call.
		calls := make([]llms.ToolCall, len(t.Approved))
		for i, u := range t.Approved {
			calls[i] = llms.ToolCall{ID: u.ID, Type: "function", FunctionCall: &llms.FunctionCall{Name: u.ToolName, Arguments: string(u.Input)}}
		}
		c.approved = &toolCalls{calls, c.propose, c.gate}
		return c
	}
	stream := &responseStream{emit: func(delta string) {
		emit(flow.Event{Name: flow.EventPartial, Data: flow.Partial{StepID: t.StepID, Node: t.Node.Name, AgentID: t.Node.AgentID, Delta: delta}})
	}}
	calling := &callStream{propose: c.propose}
	c.opts = append([]llms.CallOption{llms.WithStreamingFunc(func(_ context.Context, chunk []byte) error {
		c.streamed += len(chunk)
		if isToolCallChunk(chunk) {
			calling.Write(chunk)
		} else {
			stream.Write(chunk)
		}
		return nil
	})}, m.Options...)
	if len(c.tools) > 0 {
		c.opts = append(c.opts, llms.WithTools(c.tools))
	}
	if choice := toolChoice(t); choice != nil {
		c.opts = append(c.opts, llms.WithToolChoice(choice))
	}
	return c
}

// system is the system prompt of the task's model call: its node's, built
// once, under the task's stack if it has one.
func (a *Agent) system(t *engine.Task) string {
	key := promptKey{node: t.Node}
	if t.Action != nil {
		key.kind = t.Action.Kind // a judge of actions has a prompt for calls and one for results
	}
	p, ok := a.prompts.Load(key)
	if !ok {
		p, _ = a.prompts.LoadOrStore(key, promptOf(t))
	}
	if len(t.Stack) > 0 && t.Node.Type == flow.Superego {
		return a.stacked.prompt(key, p.(prompt), t.Stack)
	}
	return p.(prompt).plain
}

// OutputFile is the output protocol's file: a worker ends its cycle by
// writing it to its workspace.
const OutputFile = "__output.json"

// Output is what a worker's OutputFile holds.
type Output struct {
	Summary           string   `json:"summary"`
	TextContent       string   `json:"text_content"`
	Files             []string `json:"files"`
	InstructionToUser string   `json:"instruction_to_user"`
}

// endCycle applies the output protocol: when a reply's tool calls wrote
// OutputFile, the worker's cycle is over. The file is archived as
// __output_cycle_NNNN.json, and the step is the worker's COMPLETE with the
// summary as its response, without another model call.
func (a *Agent) endCycle(t *engine.Task, reply *engine.Reply) {
	wrote := -1
	for i, u := range reply.ToolUsage {
		var args struct{ Path string }
		if u.ToolName == "write_file" && u.Error == "" && json.Unmarshal(u.Input, &args) == nil && filepath.Clean(args.Path) == OutputFile {
			wrote = i
		}
	}
	if wrote < 0 || !contains(t.Decisions, flow.Complete) {
		return
	}
	p, err := a.Workspaces.Resolve(t.InstanceID, OutputFile)
	if err != nil {
		return
	}
	b, err := os.ReadFile(p)
	var out Output
	if err == nil {
		err = json.Unmarshal(b, &out)
	}
	if err != nil || strings.TrimSpace(out.Summary) == "" {
		// Not the protocol's object: the worker goes on, and the next
		// call shows it what went wrong.
		reply.ToolUsage[wrote].Error = OutputFile + ` must be a JSON object with a non-empty "summary"`
		return
	}
	archives, _ := filepath.Glob(filepath.Join(filepath.Dir(p), "__output_cycle_*.json"))
	archive := filepath.Join(filepath.Dir(p), fmt.Sprintf("__output_cycle_%04d.json", len(archives)+1))
	if err := os.WriteFile(archive, b, 0o644); err != nil {
		return
	}
	reply.Final, reply.Decision, reply.Response = true, flow.Complete, out.Summary
}

// offered is what a node is offered for one model call: its tools, and
// for a supervisor the session its supervised_* tools work on; and the
// rules and references an inner agent is given.
type offered struct {
	tools   []tools.Tool // in the order the node names them
	session *supervision.Session
	context string
}

// offer is what the task's node is offered: the tools it names, as the
// instance's context has them for an inner agent, and for a supervisor
// the session on the instance it supervises.
func (a *Agent) offer(t *engine.Task) *offered {
	o := &offered{}
	list := a.resolve(t.Node.Tools)
	if sup := t.Supervised; sup != nil {
		if t.Node.Type == flow.InnerAgent {
			c := supervision.Replay(sup.Base, sup.Steps, false)
			list = slices.DeleteFunc(list, func(tool tools.Tool) bool { return !c.Offers(supervision.KeyOf(tool.Name)) })
			o.context = c.Render()
		}
		if len(t.Node.AllowedActions) > 0 {
			o.session = supervision.NewSession(sup, a.catalog(sup.Tools))
		}
	}
	if c := t.Client; c != nil {
		for _, ct := range c.Tools {
			var params map[string]any
			json.Unmarshal(ct.Parameters, &params) // the API checked it is an object, or left it out
			if params == nil {
				params = map[string]any{"type": "object", "properties": map[string]any{}}
			}
			list = append(list, tools.Tool{Name: ct.Name, Description: ct.Description, Parameters: params, Client: true, ReadOnly: ct.ReadOnly, ClosedWorld: ct.ClosedWorld})
		}
	}
	o.tools = list
	return o
}

// definitions are the tools offered, as the model is told of them.
func (o *offered) definitions(node *flow.Node) []llms.Tool {
	var defs []llms.Tool
	for _, tool := range o.tools {
		defs = append(defs, llms.Tool{Type: "function", Function: &llms.FunctionDefinition{
			Name: tool.Name, Description: tool.Description, Parameters: tool.Parameters}})
	}
	for _, d := range supervision.Offered(node) {
		defs = append(defs, llms.Tool{Type: "function", Function: &llms.FunctionDefinition{
			Name: d.Name, Description: d.Description, Parameters: d.Parameters}})
	}
	return defs
}

// toolChoice is the client's tool_choice for the task's model call, if it
// has one: not once every call of the model's last reply was refused, when
// the model is asked again with the choice left to it (docs/gateway.md).
func toolChoice(t *engine.Task) any {
	if t.Client == nil || len(t.Client.Choice) == 0 || string(t.Client.Choice) == "null" {
		return nil
	}
	if allRefused(t) {
		return "auto"
	}
	var choice any
	json.Unmarshal(t.Client.Choice, &choice)
	return choice
}

// allRefused reports whether every call of the model's last reply was
// refused: the model is asked again at once, with the tool choice its own.
func allRefused(t *engine.Task) bool {
	n := len(t.ToolRounds)
	if n == 0 {
		return false
	}
	last := t.ToolRounds[n-1].ToolUsage
	return len(last) > 0 && !slices.ContainsFunc(last, func(u flow.ToolUse) bool { return !u.Refused })
}

// resolve finds the tools names name: a built-in tool by its name, an MCP
// tool as mcp__SERVER__TOOL, and all of a server's as mcp__SERVER__*.
func (a *Agent) resolve(names []string) []tools.Tool {
	var out []tools.Tool
	add := func(t tools.Tool) {
		if !slices.ContainsFunc(out, func(o tools.Tool) bool { return o.Name == t.Name }) {
			out = append(out, t)
		}
	}
	for _, name := range names {
		server, tool, mcp := tools.SplitMCPName(name)
		switch {
		case mcp && tool == "*":
			for _, t := range a.MCP.Tools(server) {
				add(t)
			}
		case mcp:
			if t, ok := a.MCP.Tool(name); ok {
				add(t)
			}
		default:
			if t, ok := a.Tools[name]; ok {
				add(t)
			}
		}
	}
	return out
}

// catalog is, for a supervisor, the tools a flow's inner agents name and
// the states of their servers.
func (a *Agent) catalog(names []string) supervision.Catalog {
	cat := supervision.Catalog{Tools: a.resolve(names), Servers: map[string]string{}}
	states := map[string]string{}
	for _, s := range a.MCP.States() {
		states[s.Name] = s.State
	}
	for _, name := range names {
		server := supervision.KeyOf(name).Server
		if server == tools.BuiltinServer {
			cat.Servers[server] = tools.MCPRunning
		} else if state, ok := states[server]; ok {
			cat.Servers[server] = state
		}
	}
	return cat
}

// infoOf is what the executor must know of a tool to decide a call to it.
func infoOf(tool tools.Tool) engine.ToolInfo {
	return engine.ToolInfo{Description: tool.Description, ReadOnly: tool.ReadOnly, ClosedWorld: tool.ClosedWorld, Client: tool.Client, Parameters: tool.Parameters}
}

// ToolInfo is what the task's node is offered as the tool name, as its
// calls' judges are told of it (engine.ToolDescriber): a replay asks a judge
// again about a recorded call as the call's judge was asked.
func (a *Agent) ToolInfo(t *engine.Task, name string) (engine.ToolInfo, bool) {
	for _, tool := range a.offer(t).tools {
		if tool.Name == name {
			return infoOf(tool), true
		}
	}
	return engine.ToolInfo{}, false
}

// prepare makes the model's i-th tool call ready to decide (engine.Calls):
// the call as the model made it, what the executor must know of its tool
// (the schema of its parameters included: engine.Calls decodes the
// arguments), and how to run it with the arguments decoded. A call to a
// tool the node was not offered runs nothing and answers the model why. A
// tool's error goes back to the model as its result.
func (a *Agent) prepare(t *engine.Task, o *offered, c llms.ToolCall, i int, timeout time.Duration) (flow.ToolUse, engine.ToolInfo, engine.Run) {
	node := t.Node
	use := flow.ToolUse{ID: c.ID}
	if use.ID == "" { // some OpenAI-compatible servers omit it; tool results need one
		use.ID = fmt.Sprintf("call_%s_%d", t.StepID, i+1)
	}
	if c.FunctionCall != nil {
		use.ToolName, use.Input = c.FunctionCall.Name, json.RawMessage(c.FunctionCall.Arguments)
	}
	inert := engine.ToolInfo{ReadOnly: true, ClosedWorld: true}
	answer := func(msg string) engine.Run {
		return func(context.Context, json.RawMessage) engine.Result { return engine.Result{Error: msg} }
	}
	if supervision.Handles(use.ToolName) {
		if o.session == nil {
			return use, inert, answer(fmt.Sprintf("no tool %q here", use.ToolName))
		}
		label := "unknown" // a name the model made up is no metric's label
		defs := supervision.Offered(node)
		if i := slices.IndexFunc(defs, func(d supervision.Def) bool { return d.Name == use.ToolName }); i >= 0 {
			label, inert.Parameters = use.ToolName, defs[i].Parameters
		}
		return use, inert, func(ctx context.Context, input json.RawMessage) engine.Result {
			_, observed := a.toolStarted(ctx, t, label)
			var r engine.Result
			out, proposed, err := o.session.Call(node, use.ToolName, input)
			if err != nil {
				r.Error = err.Error()
			}
			r.Output, r.Proposed = out, proposed
			a.Observe.toolEnded(ctx, observed, true, r.Error != "")
			return r
		}
	}
	i = slices.IndexFunc(o.tools, func(x tools.Tool) bool { return x.Name == use.ToolName })
	if i < 0 {
		names := make([]string, len(o.tools))
		for i, x := range o.tools {
			names[i] = x.Name
		}
		return use, inert, answer(fmt.Sprintf("no tool %q here; the tools are: %s", use.ToolName, strings.Join(names, ", ")))
	}
	tool := o.tools[i]
	info := infoOf(tool)
	if tool.Client {
		prefix := gateway.IDPrefix(t.Client.Wire)
		if !strings.HasPrefix(use.ID, prefix) || len(use.ID) != len(prefix)+32 {
			use.ID = prefix + flow.NewCallID() // the id the client answers with: it names this call only
		}
		return use, info, nil // the client runs it
	}
	return use, info, func(ctx context.Context, input json.RawMessage) (r engine.Result) {
		toolCtx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		toolCtx, observed := a.toolStarted(toolCtx, t, use.ToolName)
		returned := false
		defer func() { a.Observe.toolEnded(toolCtx, observed, returned, r.Error != "") }() // a panic is the tool's, observed as such
		out, err := tool.Call(toolCtx, input)
		returned = true
		if err != nil {
			r.Error = err.Error()
		}
		r.Output = out
		return r
	}
}

// callStream reads the tool calls of a reply as langchaingo's OpenAI
// client streams them (a JSON array of deltas per chunk: a delta with a
// type starts a call, one without adds to the last call's arguments), and
// proposes each call as soon as it is whole: when the next one starts, or
// when its arguments are a whole JSON object.
type callStream struct {
	propose  func(i int, c llms.ToolCall)
	calls    []llms.ToolCall
	proposed int
}

func (s *callStream) Write(chunk []byte) {
	var deltas []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	if json.Unmarshal(chunk, &deltas) != nil {
		return // not a chunk of calls after all: the reply's end has them
	}
	closing := false
	for _, d := range deltas {
		if d.Type == "" && d.Function.Arguments != "" {
			if n := len(s.calls); n > 0 {
				s.calls[n-1].FunctionCall.Arguments += d.Function.Arguments
				closing = closing || strings.Contains(d.Function.Arguments, "}")
			}
			continue
		}
		s.calls = append(s.calls, llms.ToolCall{ID: d.ID, Type: d.Type, FunctionCall: &llms.FunctionCall{Name: d.Function.Name, Arguments: d.Function.Arguments}})
	}
	for i := s.proposed; i < len(s.calls); i++ {
		args := strings.TrimSpace(s.calls[i].FunctionCall.Arguments)
		if i == len(s.calls)-1 && !(closing && strings.HasSuffix(args, "}") && json.Valid([]byte(args))) {
			break
		}
		s.propose(i, s.calls[i])
		s.proposed = i + 1
	}
}

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

// isToolCallChunk tells langchaingo's OpenAI streaming of tool-call deltas,
// which it passes to the streaming function as a JSON array, from text.
func isToolCallChunk(chunk []byte) bool {
	return len(chunk) > 1 && chunk[0] == '[' && chunk[1] == '{' && json.Valid(chunk)
}

// estimate is a call's usage at about four characters a token, for a call
// stopped before its provider reported it.
func estimate(msgs []llms.MessageContent, streamed int) *flow.Usage {
	chars := 0
	for _, m := range msgs {
		for _, p := range m.Parts {
			if t, ok := p.(llms.TextContent); ok {
				chars += len(t.Text)
			}
		}
	}
	return &flow.Usage{PromptTokens: (chars + 3) / 4, CompletionTokens: (streamed + 3) / 4}
}

// usage reads token counts from the fields langchaingo's providers fill.
func usage(info map[string]any) *flow.Usage {
	num := func(keys ...string) int {
		for _, k := range keys {
			if v, ok := info[k].(int); ok {
				return v
			}
		}
		return 0
	}
	u := flow.Usage{PromptTokens: num("PromptTokens", "InputTokens"), CompletionTokens: num("CompletionTokens", "OutputTokens")}
	if u == (flow.Usage{}) {
		return nil
	}
	return &u
}
