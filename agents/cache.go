package agents

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tmc/langchaingo/llms"
	"golang.org/x/sync/singleflight"

	"superego/engine"
	"superego/flow"
)

// ReplyCache keeps model replies by the call that made them, so that an
// experiment run again, or resumed, costs no call it made before (docs/experiments.md).
// A store keeps it; Keep of a key already kept changes nothing.
type ReplyCache interface {
	Reply(ctx context.Context, key string) (reply []byte, ok bool, err error)
	Keep(ctx context.Context, key string, reply []byte) error
}

// cachedReply is a model's reply as the cache keeps it, with what the
// call that made it sent and was told (sent.go).
type cachedReply struct {
	Text        string           `json:"text"`
	Calls       []cachedCall     `json:"calls,omitempty"`
	Usage       *flow.Usage      `json:"usage,omitempty"`
	ServedModel string           `json:"served_model,omitempty"`
	Parameters  *flow.Parameters `json:"parameters,omitempty"`
}

// read puts what the model answered into reply, and returns the tool
// calls it asks for.
func (c cachedReply) read(reply *engine.Reply) []llms.ToolCall {
	reply.Usage = c.Usage
	calls := make([]llms.ToolCall, len(c.Calls))
	for i, call := range c.Calls {
		calls[i] = call.call()
	}
	f := readReply(c.Text)
	reply.Thinking, reply.Decision, reply.AgentGuidance, reply.Response, reply.Basis = f.Thinking, f.Decision, f.AgentGuidance, f.Response, f.Basis
	return calls
}

// cachedCall is a tool call of a reply. langchaingo's own JSON for a tool
// call does not read back what it writes.
type cachedCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

func (c cachedCall) call() llms.ToolCall {
	return llms.ToolCall{ID: c.ID, Type: "function", FunctionCall: &llms.FunctionCall{Name: c.Name, Arguments: c.Arguments}}
}

// cacheKey names a call: the task's cache scope (an experiment's repeat),
// the model, the messages, the tools offered, and the parameters the
// provider is given.
func cacheKey(scope, model string, msgs []llms.MessageContent, tools []llms.Tool, opts []llms.CallOption) string {
	var o llms.CallOptions
	for _, opt := range opts {
		opt(&o)
	}
	b, _ := json.Marshal(struct {
		Scope       string                `json:"scope"`
		Model       string                `json:"model"`
		Messages    []llms.MessageContent `json:"messages"`
		Tools       []llms.Tool           `json:"tools"`
		JSONMode    bool                  `json:"json_mode"`
		MaxTokens   int                   `json:"max_tokens"`
		Temperature float64               `json:"temperature"`
	}{scope, model, msgs, tools, o.JSONMode, o.MaxTokens, o.Temperature})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// generate makes the model call, or takes its reply from the cache where
// the task has a cache scope and the cache has the call, or shares the
// reply of the same call in flight for another task. A reply it did not
// make streams as the call would have, in one piece; cached says so, and
// shared that it was the call in flight's.
func (a *Agent) generate(ctx context.Context, t *engine.Task, m Model, msgs []llms.MessageContent, tools []llms.Tool, opts []llms.CallOption) (reply cachedReply, cached, shared bool, err error) {
	if a.Cache == nil || t.Cache == "" {
		reply, err = call(ctx, m, msgs, opts, len(t.Tags) > 0)
		return reply, false, false, err
	}
	return a.fromCache(ctx, t, m, msgs, tools, opts)
}

// fromCache is generate for a task with a cache scope. It is apart from
// generate so that what it needs takes no room on the stack of a run
// whose call goes to the model (see setUp).
//
//go:noinline
func (a *Agent) fromCache(ctx context.Context, t *engine.Task, m Model, msgs []llms.MessageContent, tools []llms.Tool, opts []llms.CallOption) (reply cachedReply, cached, shared bool, err error) {
	key := cacheKey(t.Cache, m.Name, msgs, tools, opts)
	var o llms.CallOptions
	for _, opt := range opts {
		opt(&o)
	}
	if c, ok := a.cached(ctx, key); ok {
		return c, true, false, replayStream(ctx, o.StreamingFunc, c)
	}
	// The cache is asked again inside the flight: a call that ended
	// between the first look and the flight has kept its reply.
	reply, streamed, made, shared, err := a.flights.share(ctx, key, o.StreamingFunc, func(ctx context.Context, stream streamFunc) (cachedReply, bool, error) {
		if c, ok := a.cached(ctx, key); ok {
			return c, false, nil
		}
		c, err := call(ctx, m, msgs, append(slices.Clip(opts), llms.WithStreamingFunc(stream)), len(t.Tags) > 0)
		if err != nil {
			return cachedReply{}, false, err
		}
		if b, err := json.Marshal(c); err == nil {
			a.Cache.Keep(ctx, key, b) // a cache that fails costs a call next time, no more
		}
		a.flights.land(key, c)
		return c, true, nil
	})
	if err != nil {
		return cachedReply{}, false, false, err
	}
	if !streamed {
		err = replayStream(ctx, o.StreamingFunc, reply)
	}
	return reply, !made, shared, err
}

// cached is the cache's reply to the call key, if it has one that reads.
func (a *Agent) cached(ctx context.Context, key string) (cachedReply, bool) {
	if c, ok := a.flights.landed(key); ok {
		return c, true
	}
	b, ok, err := a.Cache.Reply(ctx, key)
	if err != nil || !ok {
		return cachedReply{}, false
	}
	var c cachedReply
	return c, json.Unmarshal(b, &c) == nil
}

// replayStream streams a reply that was not made for this call, in one
// piece.
func replayStream(ctx context.Context, stream streamFunc, c cachedReply) error {
	if stream == nil || c.Text == "" {
		return nil
	}
	return stream(ctx, []byte(c.Text))
}

// call makes the model call, and, where it is an experiment's (watch:
// the run is tagged with one), notes what its request sent and what the
// provider's reply named (sent.go), which the experiment's provenance
// reports: reading them reads the whole request again, which a served
// run does not pay for.
func call(ctx context.Context, m Model, msgs []llms.MessageContent, opts []llms.CallOption, watch bool) (cachedReply, error) {
	var rec *exchange
	if watch {
		rec = &exchange{}
		ctx = context.WithValue(ctx, exchangeKey{}, rec)
	}
	resp, err := m.LLM.GenerateContent(ctx, msgs, opts...)
	if err != nil {
		return cachedReply{}, err
	}
	var c cachedReply
	if watch {
		c.ServedModel, c.Parameters = rec.result()
	}
	for i, choice := range resp.Choices {
		c.Text += choice.Content
		for _, tc := range choice.ToolCalls {
			call := cachedCall{ID: tc.ID}
			if tc.FunctionCall != nil {
				call.Name, call.Arguments = tc.FunctionCall.Name, tc.FunctionCall.Arguments
			}
			c.Calls = append(c.Calls, call)
		}
		if i == 0 {
			c.Usage = usage(choice.GenerationInfo)
		}
	}
	return c, nil
}

type streamFunc = func(ctx context.Context, chunk []byte) error

// flights shares model calls in flight among the tasks that make the very
// same call at once, as the cache shares them among tasks one after the
// other: two conditions of an experiment that ask the assistant the same
// thing at the same time get one reply, whatever the concurrency, so that
// a comparison of them is of what their superegos decided and not of two
// samples of the assistant. singleflight does the sharing; a flight runs
// detached from the task that started it, so that this task's cancel (a
// superego that blocked its speculative turn) does not fail the others,
// and stops once every task waiting on it has gone.
type flights struct {
	group   singleflight.Group
	mu      sync.Mutex
	waiting map[string]*flight // by key, while any task waits on it
	// recent are the replies of the last calls made, for the moment
	// between a flight's end and its reply's being in the cache: a store
	// may keep it a commit later (SQLite queues it), and a task that asks
	// then would make the call again. Oldest first, at most maxRecent.
	recent     map[string]cachedReply
	recentKeys []string
}

// maxRecent bounds flights.recent: a reply stays there while as many other
// calls end, far longer than a commit takes at any concurrency an
// experiment allows (256).
const maxRecent = 512

// land keeps the reply of a call just made among the recent ones.
func (fs *flights) land(key string, c cachedReply) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if _, ok := fs.recent[key]; ok {
		return
	}
	if fs.recent == nil {
		fs.recent = map[string]cachedReply{}
	}
	if len(fs.recentKeys) == maxRecent {
		delete(fs.recent, fs.recentKeys[0])
		fs.recentKeys = append(fs.recentKeys[:0], fs.recentKeys[1:]...)
	}
	fs.recent[key] = c
	fs.recentKeys = append(fs.recentKeys, key)
}

// landed is the reply of a call made recently.
func (fs *flights) landed(key string) (cachedReply, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	c, ok := fs.recent[key]
	return c, ok
}

// flight is what the tasks waiting on one call share.
type flight struct {
	ctx     context.Context
	cancel  context.CancelFunc
	waiters int
}

// flown is a flight's result.
type flown struct {
	reply cachedReply
	made  bool // by the call, not taken from the cache
	// orphan is true when the task that made the call had gone when it
	// ended: the first task to take the reply counts the call as its own,
	// so that every call made is counted once.
	orphan *atomic.Bool
}

// share waits for the call key in flight, or starts it with do. streamed
// says that this task's do made the call, and its reply was streamed to
// stream as it came; any other task is given the reply whole. made says
// that the task counts the call as made, not cached: the task whose do
// made it, or the first to take its reply when that task has gone; shared,
// that another task's call made the reply, which this one did not count.
func (fs *flights) share(ctx context.Context, key string, stream streamFunc, do func(context.Context, streamFunc) (cachedReply, bool, error)) (reply cachedReply, streamed, made, shared bool, err error) {
	var f *flight // the flight this task waits on, from its first try
	defer func() { fs.leave(key, f) }()
	for tries := 0; ; tries++ {
		got, ran, err := fs.fly(ctx, key, &f, stream, do)
		switch {
		case err != nil && !ran && tries == 0 && ctx.Err() == nil:
			// Another task's call failed: this one makes the call once
			// more, as it would have on its own. A failure is not shared.
			continue
		case err != nil:
			return cachedReply{}, false, false, false, err
		case ran && got.made:
			return got.reply, true, true, false, nil
		}
		made = got.orphan.CompareAndSwap(true, false)
		return got.reply, false, made, got.made && !made, nil
	}
}

// fly waits for the call key in flight, or starts it with do. On a task's
// first try it boards the flight, *fp, or starts one; it is counted as
// waiting in the same moment it joins the call, so that a task counted is
// one the call's reply goes to, whenever the task that started it leaves.
// ran says that do ran: this task started the call.
func (fs *flights) fly(ctx context.Context, key string, fp **flight, stream streamFunc, do func(context.Context, streamFunc) (cachedReply, bool, error)) (got flown, ran bool, err error) {
	var streamMu sync.Mutex
	attached := true
	started := false // written by do before its result is sent, read after it is received
	fs.mu.Lock()
	f := *fp
	if f == nil {
		if f = fs.waiting[key]; f == nil {
			f = &flight{}
			// Values (trace spans) are kept; each task keeps its own
			// deadline, and the flight ends when the last of them leaves.
			f.ctx, f.cancel = context.WithCancel(context.WithoutCancel(ctx))
			if fs.waiting == nil {
				fs.waiting = map[string]*flight{}
			}
			fs.waiting[key] = f
		}
		f.waiters++
		*fp = f
	}
	ch := fs.group.DoChan(key, func() (any, error) {
		started = true
		c, made, err := do(f.ctx, func(ctx context.Context, chunk []byte) error {
			streamMu.Lock()
			defer streamMu.Unlock()
			if !attached || stream == nil {
				return nil
			}
			return stream(ctx, chunk)
		})
		streamMu.Lock()
		orphan := &atomic.Bool{}
		orphan.Store(made && !attached)
		streamMu.Unlock()
		return flown{c, made, orphan}, err
	})
	fs.mu.Unlock()
	select {
	case res := <-ch:
		if res.Err != nil {
			return flown{}, started, res.Err
		}
		return res.Val.(flown), started, nil
	case <-ctx.Done():
		streamMu.Lock()
		attached = false // nothing more is streamed to a task that has gone
		streamMu.Unlock()
		return flown{}, false, ctx.Err()
	}
}

// leave ends a task's wait on a flight; the last to leave stops the call,
// and the next task to make it starts a flight of its own.
func (fs *flights) leave(key string, f *flight) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f.waiters--; f.waiters > 0 {
		return
	}
	f.cancel()
	if fs.waiting[key] == f {
		delete(fs.waiting, key)
		fs.group.Forget(key)
	}
}
