package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tmc/langchaingo/llms"

	"superego/engine"
	"superego/flow"
	"superego/gateway"
	"superego/tools"
)

// relay makes the model call of the agent that takes the request of a
// model API's client: the agent's model is sent the client's request, in
// its provider's protocol, as the client wrote it (its instructions after
// the node's own system prompt, its conversation, tools and parameters),
// with this turn's rounds of calls as the model made them and their results
// as judged; it answers in its own protocol, not in the judges' JSON: a
// reply with calls is NEEDS_TOOL, any other COMPLETE.
func (a *Agent) relay(ctx context.Context, t *engine.Task, m Model, emit func(flow.Event), timeout time.Duration) (engine.Reply, error) {
	req, err := gateway.Reread(t.Client.Wire, t.Client.Body)
	if err != nil {
		return engine.Reply{}, fmt.Errorf("%w: the client's request, as recorded: %w", flow.ErrModelUnavailable, err)
	}
	o := a.offer(t)
	turn := gateway.Turn{Model: m.ID, System: strings.TrimSpace(t.Node.SystemPrompt)}
	if t.Guidance != "" {
		// A judge's note for this agent (CAUTION's): the operator's, as
		// the flow's system prompt is, and never shown to the client.
		turn.System = strings.TrimSpace(turn.System + "\n\nGuidance from " + t.GuidanceFrom + " (hidden from the user): " + t.Guidance)
	}
	for _, tool := range o.tools {
		if !tool.Client {
			params, _ := json.Marshal(tool.Parameters)
			turn.Tools = append(turn.Tools, gateway.Tool{Name: tool.Name, Description: tool.Description, Parameters: params})
		}
	}
	if allRefused(t) {
		turn.Choice = &gateway.Choice{Mode: "auto"} // asked again, the choice is the model's
	}
	for _, s := range t.ToolRounds {
		if len(s.ToolUsage) == 0 {
			continue // a step of results read in their calls' places
		}
		rd := gateway.Round{Text: s.Response}
		if s.Thinking != "" {
			json.Unmarshal([]byte(s.Thinking), &rd.Thinking)
		}
		for _, u := range s.ToolUsage {
			rd.Calls = append(rd.Calls, gateway.Call{ID: u.ID, Name: u.ToolName, Args: string(u.Input)})
			rd.Results = append(rd.Results, gateway.Result{CallID: u.ID, Output: u.ResultText()})
		}
		turn.Rounds = append(turn.Rounds, rd)
	}
	gate := t.Calls
	if gate == nil {
		gate = engine.Ungated(emit)
	}
	toolCtx := tools.WithInstance(ctx, t.InstanceID)
	propose := func(i int, c gateway.Call) {
		use, info, run := a.prepare(t, o, llms.ToolCall{ID: c.ID, Type: "function", FunctionCall: &llms.FunctionCall{Name: c.Name, Arguments: c.Args}}, i, timeout)
		gate.Propose(i, use, info, func(_ context.Context, input json.RawMessage) engine.Result { return run(toolCtx, input) })
	}
	sink := gateway.Sink{
		Text: func(delta string) {
			emit(flow.Event{Name: flow.EventPartial, Data: flow.Partial{StepID: t.StepID, Node: t.Node.Name, AgentID: t.Node.AgentID, Delta: delta}})
		},
		Call: propose,
	}
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	callCtx, observed := a.Observe.modelStarted(callCtx, t, m, nil, start)
	up := *m.Upstream
	if up.Wire == t.Client.Wire && len(t.Client.Header) > 0 {
		up.Header = http.Header{}
		for k, v := range t.Client.Header {
			up.Header.Set(k, v)
		}
	}
	got, err := up.Call(callCtx, req.For(turn), sink)
	reply := engine.Reply{Model: m.Name, Latency: time.Since(start), Response: got.Text}
	if len(got.Thinking) > 0 {
		// The model's reasoning, which Anthropic wants back with its
		// calls: hidden, as every step's thinking is.
		b, _ := json.Marshal(got.Thinking)
		reply.Thinking = string(b)
	}
	if got.Usage != (gateway.Usage{}) {
		reply.Usage = &flow.Usage{PromptTokens: got.Usage.Input, CompletionTokens: got.Usage.Output}
	}
	a.Observe.modelEnded(callCtx, observed, cachedReply{Text: got.Text, Usage: reply.Usage}, false, err, reply.Latency)
	var upstream *gateway.UpstreamError
	switch {
	case ctx.Err() != nil:
		return reply, ctx.Err()
	case err != nil && errors.Is(callCtx.Err(), context.DeadlineExceeded):
		return reply, fmt.Errorf("%w: model %s gave no reply within %s", flow.ErrTimeout, m.Name, timeout)
	case errors.As(err, &upstream) && upstream.Status == 200:
		return reply, fmt.Errorf("%w: model %s: %w", flow.ErrModelOutput, m.Name, err)
	case err != nil:
		return reply, fmt.Errorf("%w: %s: %w", flow.ErrModelUnavailable, m.Name, err)
	}
	if len(got.Calls) == 0 {
		reply.Decision = flow.Complete
		if got.Text == "" {
			return reply, fmt.Errorf("%w: model %s sent an empty reply", flow.ErrModelOutput, m.Name)
		}
		return reply, nil
	}
	reply.Decision = flow.NeedsTool
	for i, c := range got.Calls {
		propose(i, c) // the same call the stream proposed changes nothing
	}
	reply.ToolUsage, err = gate.Finish(ctx, len(got.Calls))
	return reply, err
}

// relays reports whether the task's model call goes as its client's own
// request (relay): the agent takes a model API client's request, its
// model speaks a protocol, and no person's answer decides its calls.
func relays(t *engine.Task, m Model) bool {
	return t.Client != nil && len(t.Client.Body) > 0 && m.Upstream != nil && len(t.Approved) == 0 &&
		slices.Contains([]string{gateway.Chat, gateway.Responses, gateway.Messages}, t.Client.Wire)
}
