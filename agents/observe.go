package agents

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/tmc/langchaingo/llms"

	"superego/engine"
	"superego/flow"
)

// Observer is told of an agent's model and tool calls, for an operator's
// metrics and traces. Any function may be nil; a nil *Observer observes
// nothing. The context a Started function returns is the call's, so that a
// span in it is the parent of what the call does; the Ended function gets
// it back.
type Observer struct {
	ModelStarted func(ctx context.Context, c ModelCall) context.Context
	ModelEnded   func(ctx context.Context, c ModelCall, r ModelResult)
	ToolStarted  func(ctx context.Context, c ToolCall) context.Context
	// ToolEnded's outcome is ok, error (the tool's own, which goes back to
	// the model), timeout, or panic.
	ToolEnded func(ctx context.Context, c ToolCall, outcome string)
	// Content asks for the texts of model calls (SUPEREGO_TRACE_CONTENT):
	// the prompt with every text a client has not been shown taken out,
	// and the response where a client sees it as the model writes it. A
	// reply's thinking and agent_guidance are never given.
	Content bool
}

// ModelCall is a model call.
type ModelCall struct {
	Task     *engine.Task
	Provider string    // "openai", "anthropic", "ollama", "offline", …
	Model    string    // as the provider names it
	Prompt   []Message // with Observer.Content only
	Start    time.Time
}

// Message is one message of a prompt, as text.
type Message struct {
	Role string // system, user, assistant, tool
	Text string
}

// ModelResult is how a model call went.
type ModelResult struct {
	// Outcome is ok, error, timeout, cancelled, or cached: the reply came
	// from the reply cache, with no call.
	Outcome  string
	Duration time.Duration // from Start to the call's end
	Usage    *flow.Usage   // as the provider reported it; nil when it did not
	// Response is the reply's response, with Observer.Content, where the
	// task's turn is not held (engine.Task.Held).
	Response string
}

// ToolCall is a tool call.
type ToolCall struct {
	Task  *engine.Task
	Tool  string // a tool the agent has; "unknown" for a name a model made up
	Start time.Time
}

// hiddenText stands for a text an observer may not have.
const hiddenText = "[hidden]"

// modelStarted tells the observer of a model call about to start.
func (o *Observer) modelStarted(ctx context.Context, t *engine.Task, m Model, msgs []llms.MessageContent, start time.Time) (context.Context, ModelCall) {
	if o == nil || o.ModelStarted == nil && o.ModelEnded == nil {
		return ctx, ModelCall{}
	}
	c := ModelCall{Task: t, Start: start}
	c.Provider, c.Model = providerModel(m.Name)
	if o.Content {
		c.Prompt = promptText(msgs, t.Hidden())
	}
	if o.ModelStarted != nil {
		ctx = o.ModelStarted(ctx, c)
	}
	return ctx, c
}

// modelEnded tells the observer how the call went: callCtx is the call's,
// whose end says whether it timed out or was cancelled; took, how long it
// took.
func (o *Observer) modelEnded(callCtx context.Context, c ModelCall, got cachedReply, cached bool, err error, took time.Duration) {
	if o == nil || o.ModelEnded == nil {
		return
	}
	res := ModelResult{Outcome: "ok", Duration: took}
	switch {
	case errors.Is(callCtx.Err(), context.DeadlineExceeded) && err != nil:
		res.Outcome = "timeout"
	case callCtx.Err() != nil:
		res.Outcome = "cancelled"
	case err != nil:
		res.Outcome = "error"
	case cached:
		res.Outcome = "cached"
	default:
		res.Usage = got.Usage
	}
	if o.Content && err == nil && !c.Task.Held() {
		res.Response = readReply(got.Text).Response
	}
	o.ModelEnded(callCtx, c, res)
}

// toolStarted tells the observer of a call of a tool the node was offered,
// its name the call's label.
func (a *Agent) toolStarted(ctx context.Context, t *engine.Task, name string) (context.Context, ToolCall) {
	o := a.Observe
	if o == nil || o.ToolStarted == nil && o.ToolEnded == nil {
		return ctx, ToolCall{}
	}
	c := ToolCall{Task: t, Tool: name, Start: time.Now()}
	if o.ToolStarted != nil {
		ctx = o.ToolStarted(ctx, c)
	}
	return ctx, c
}

// toolEnded tells the observer whether the tool returned (it panicked if
// not) and whether it failed.
func (o *Observer) toolEnded(ctx context.Context, c ToolCall, returned, failed bool) {
	if o == nil || o.ToolEnded == nil {
		return
	}
	switch {
	case !returned:
		o.ToolEnded(ctx, c, "panic")
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		o.ToolEnded(ctx, c, "timeout")
	case failed:
		o.ToolEnded(ctx, c, "error")
	default:
		o.ToolEnded(ctx, c, "ok")
	}
}

// providerModel splits a model's name, "provider:model", for labels.
func providerModel(name string) (provider, model string) {
	if name == OfflineName {
		return "offline", "offline"
	}
	provider, model, ok := strings.Cut(name, ":")
	if !ok {
		return name, name
	}
	return provider, model
}

// promptText is a call's messages as text, each hidden text replaced, as
// it is and as JSON quotes it (a tool's result may be JSON). The results
// of supervised_* tools are replaced whole: they quote the conversation,
// a draft under judgement included.
func promptText(msgs []llms.MessageContent, hidden []string) []Message {
	hide := engine.Hider(hidden)
	roles := map[llms.ChatMessageType]string{llms.ChatMessageTypeSystem: "system", llms.ChatMessageTypeHuman: "user",
		llms.ChatMessageTypeAI: "assistant", llms.ChatMessageTypeTool: "tool"}
	out := make([]Message, 0, len(msgs))
	for _, m := range msgs {
		var b strings.Builder
		for _, p := range m.Parts {
			switch p := p.(type) {
			case llms.TextContent:
				b.WriteString(p.Text)
			case llms.ToolCall:
				if p.FunctionCall != nil {
					b.WriteString(p.FunctionCall.Name + "(" + p.FunctionCall.Arguments + ")")
				}
			case llms.ToolCallResponse:
				if strings.HasPrefix(p.Name, "supervised_") {
					b.WriteString(hiddenText)
				} else {
					b.WriteString(p.Content)
				}
			}
		}
		out = append(out, Message{Role: roles[m.Role], Text: hide.Replace(b.String())})
	}
	return out
}
