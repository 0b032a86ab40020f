// Command eino runs the guarded-calculator workload of bench/guarded_calculator
// on CloudWeGo Eino (the version go.mod pins): a compose graph of three
// lambda nodes, a fake ToolCallingChatModel, the calculator built with
// utils.InferTool, WithMaxRunSteps(25), and a callback handler that hands
// each node's new step to the client. It prints one JSON line with the
// field names of bench/guarded_calculator, which runs the same workload on
// superego, so that bench/peers/run_all.sh can set the two side by side.
//
// It is a module of its own so that Eino never enters superego's go.mod.
//
//	go run . [-constitution FILE] [-seq N] [-conc N] [-conc-big N] [-delay D] [-rounds N] [-sample D]
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cloudwego/eino/callbacks"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/components/tool/utils"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"
)

// The workload's fixed texts.
const (
	userInput        = "What is 5*10?"
	calculatorPrompt = "CALCULATOR AGENT. You answer arithmetic questions. Always use the calculator tool; never compute in your head."
	inputReply       = `{"decision":"CAUTION","thinking":"Benign arithmetic request; allow it, but the agent must use the tool and verify the number.","agent_guidance":"verify","response":"ok"}`
	outputReply      = `{"decision":"ACCEPT","thinking":"The draft answer agrees with the calculator tool output and violates no principle.","agent_guidance":"none","response":"ok"}`
	wantTrace        = "input_superego:CAUTION calculator:NEEDS_TOOL calculator:COMPLETE output_superego:ACCEPT"
)

func superegoPrompt(head, constitution string) string {
	return head + " against the constitution below. Reply with one JSON object {decision, thinking, agent_guidance, response}.\n\n<constitution>\n" + constitution + "\n</constitution>"
}

// Step is one record of a flow's state. The client never sees Thinking
// and AgentGuidance: they have no encoding.
type Step struct {
	StepID        string      `json:"step_id"`
	AgentID       string      `json:"agent_id"`
	Timestamp     time.Time   `json:"timestamp"`
	Role          string      `json:"role"`
	Input         string      `json:"input"`
	Decision      string      `json:"decision"`
	Thinking      string      `json:"-"`
	AgentGuidance string      `json:"-"`
	Response      string      `json:"response"`
	NextAgent     string      `json:"next_agent"`
	ToolUsage     []ToolUsage `json:"tool_usage"`
}

// ToolUsage is one tool call of a step and its result.
type ToolUsage struct {
	Tool   string         `json:"tool"`
	ID     string         `json:"id"`
	Args   map[string]any `json:"args"`
	Result string         `json:"result"`
}

// fakeModel is the workload's chat model: stateless, safe for concurrent
// use, its reply a function of the messages, after delay if any.
type fakeModel struct {
	delay time.Duration
	tools []*schema.ToolInfo
}

var _ model.ToolCallingChatModel = fakeModel{}

func (m fakeModel) Generate(ctx context.Context, in []*schema.Message, _ ...model.Option) (*schema.Message, error) {
	if m.delay > 0 {
		t := time.NewTimer(m.delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	last := in[len(in)-1]
	switch {
	case strings.HasPrefix(in[0].Content, "INPUT SUPEREGO"):
		return schema.AssistantMessage(inputReply, nil), nil
	case strings.HasPrefix(in[0].Content, "OUTPUT SUPEREGO"):
		return schema.AssistantMessage(outputReply, nil), nil
	case last.Role == schema.Tool:
		return schema.AssistantMessage("5*10 = "+last.Content, nil), nil
	}
	return schema.AssistantMessage("", []schema.ToolCall{{ID: "call_calc_1", Type: "function",
		Function: schema.FunctionCall{Name: "calculator", Arguments: `{"expression":"5*10"}`}}}), nil
}

func (m fakeModel) Stream(ctx context.Context, in []*schema.Message, opts ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	msg, err := m.Generate(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	return schema.StreamReaderFromArray([]*schema.Message{msg}), nil
}

func (m fakeModel) WithTools(tools []*schema.ToolInfo) (model.ToolCallingChatModel, error) {
	m.tools = tools
	return m, nil
}

type calcArgs struct {
	Expression string `json:"expression" jsonschema:"description=<number><op><number>, op one of + - * /"`
}

// calculate evaluates <number><op><number>.
func calculate(_ context.Context, in calcArgs) (string, error) {
	e := strings.ReplaceAll(in.Expression, " ", "")
	i := strings.IndexAny(e[min(1, len(e)):], "+-*/") + 1
	if i == 0 {
		return "", fmt.Errorf("calculator: %q is not <number><op><number>", in.Expression)
	}
	a, errA := strconv.ParseFloat(e[:i], 64)
	b, errB := strconv.ParseFloat(e[i+1:], 64)
	if err := errors.Join(errA, errB); err != nil {
		return "", fmt.Errorf("calculator: %w", err)
	}
	var v float64
	switch e[i] {
	case '+':
		v = a + b
	case '-':
		v = a - b
	case '*':
		v = a * b
	case '/':
		v = a / b
	}
	return strconv.FormatFloat(v, 'f', -1, 64), nil
}

// nodes are the workload's three node functions: each reads the steps so
// far and returns one new step.
type nodes struct {
	model      model.ToolCallingChatModel // no tools
	toolModel  model.ToolCallingChatModel // the calculator bound
	calculator tool.InvokableTool
	inPrompt   string
	outPrompt  string
}

func newStep(steps []*Step, agent string) *Step {
	flowID := strings.TrimSuffix(steps[0].StepID, "-0")
	return &Step{StepID: flowID + "-" + strconv.Itoa(len(steps)), AgentID: agent, Timestamp: time.Now().UTC(),
		Role: "assistant", Input: steps[0].Input}
}

// judge asks the model for a superego's verdict and fills s with it.
func (n *nodes) judge(ctx context.Context, s *Step, msgs []*schema.Message) error {
	reply, err := n.model.Generate(ctx, msgs)
	if err != nil {
		return err
	}
	var v struct {
		Decision      string `json:"decision"`
		Thinking      string `json:"thinking"`
		AgentGuidance string `json:"agent_guidance"`
		Response      string `json:"response"`
	}
	if err := json.Unmarshal([]byte(reply.Content), &v); err != nil {
		return fmt.Errorf("%s: reply is not JSON: %w", s.AgentID, err)
	}
	s.Decision, s.Thinking, s.AgentGuidance, s.Response = v.Decision, v.Thinking, v.AgentGuidance, v.Response
	return nil
}

func (n *nodes) inputSuperego(ctx context.Context, steps []*Step) (*Step, error) {
	s := newStep(steps, "input_superego")
	if err := n.judge(ctx, s, []*schema.Message{schema.SystemMessage(n.inPrompt), schema.UserMessage(s.Input)}); err != nil {
		return nil, err
	}
	iteration := 1
	for _, p := range steps {
		if p.AgentID == "input_superego" {
			iteration++
		}
	}
	switch {
	case s.Decision == "ACCEPT" || s.Decision == "CAUTION":
		s.NextAgent = "calculator"
	case s.Decision == "NEEDS_CLARIFICATION" && iteration < 3:
		s.NextAgent = "input_superego"
	default:
		s.NextAgent = "end"
	}
	return s, nil
}

func (n *nodes) calc(ctx context.Context, steps []*Step) (*Step, error) {
	s := newStep(steps, "calculator")
	guidance := ""
	for _, p := range steps {
		if p.AgentID == "input_superego" {
			guidance = p.AgentGuidance
		}
	}
	msgs := []*schema.Message{schema.SystemMessage(calculatorPrompt + "\nSuperego guidance: " + guidance), schema.UserMessage(s.Input)}
	loops := 1
	for _, p := range steps {
		if p.AgentID != "calculator" || len(p.ToolUsage) == 0 {
			continue
		}
		loops++
		calls := make([]schema.ToolCall, len(p.ToolUsage))
		for i, u := range p.ToolUsage {
			args, err := json.Marshal(u.Args)
			if err != nil {
				return nil, err
			}
			calls[i] = schema.ToolCall{ID: u.ID, Type: "function", Function: schema.FunctionCall{Name: u.Tool, Arguments: string(args)}}
		}
		msgs = append(msgs, schema.AssistantMessage("", calls))
		for _, u := range p.ToolUsage {
			msgs = append(msgs, schema.ToolMessage(u.Result, u.ID))
		}
	}
	reply, err := n.toolModel.Generate(ctx, msgs)
	if err != nil {
		return nil, err
	}
	if len(reply.ToolCalls) == 0 {
		s.Decision, s.Response, s.NextAgent = "COMPLETE", reply.Content, "output_superego"
		return s, nil
	}
	for _, c := range reply.ToolCalls {
		result, err := n.calculator.InvokableRun(ctx, c.Function.Arguments)
		if err != nil {
			return nil, err
		}
		var args map[string]any
		if err := json.Unmarshal([]byte(c.Function.Arguments), &args); err != nil {
			return nil, err
		}
		s.ToolUsage = append(s.ToolUsage, ToolUsage{Tool: c.Function.Name, ID: c.ID, Args: args, Result: result})
	}
	s.Decision, s.NextAgent = "NEEDS_TOOL", "calculator"
	if loops >= 5 {
		s.NextAgent = "output_superego"
	}
	return s, nil
}

func (n *nodes) outputSuperego(ctx context.Context, steps []*Step) (*Step, error) {
	s := newStep(steps, "output_superego")
	user := "User request:\n" + s.Input + "\n\nDraft answer:\n" + steps[len(steps)-1].Response
	if err := n.judge(ctx, s, []*schema.Message{schema.SystemMessage(n.outPrompt), schema.UserMessage(user)}); err != nil {
		return nil, err
	}
	s.NextAgent = "end"
	return s, nil
}

// flowState is a run's state in the graph: the steps so far. Every edge
// carries the whole list; a node returns an update of one step, and its
// post-handler appends it (the reducer).
type flowState struct{ steps []*Step }

// compile builds the workload's graph on n.
func compile(ctx context.Context, n *nodes) (compose.Runnable[[]*Step, []*Step], error) {
	g := compose.NewGraph[[]*Step, []*Step](compose.WithGenLocalState(func(context.Context) *flowState { return &flowState{} }))
	pre := compose.WithStatePreHandler(func(_ context.Context, in []*Step, st *flowState) ([]*Step, error) {
		st.steps = in
		return in, nil
	})
	post := compose.WithStatePostHandler(func(_ context.Context, out []*Step, st *flowState) ([]*Step, error) {
		st.steps = append(st.steps, out...)
		return st.steps, nil
	})
	update := func(f func(context.Context, []*Step) (*Step, error)) *compose.Lambda {
		return compose.InvokableLambda(func(ctx context.Context, steps []*Step) ([]*Step, error) {
			s, err := f(ctx, steps)
			if err != nil {
				return nil, err
			}
			return []*Step{s}, nil
		})
	}
	route := func(_ context.Context, steps []*Step) (string, error) {
		if next := steps[len(steps)-1].NextAgent; next != "end" {
			return next, nil
		}
		return compose.END, nil
	}
	err := errors.Join(
		g.AddLambdaNode("input_superego", update(n.inputSuperego), pre, post, compose.WithNodeName("input_superego")),
		g.AddLambdaNode("calculator", update(n.calc), pre, post, compose.WithNodeName("calculator")),
		g.AddLambdaNode("output_superego", update(n.outputSuperego), pre, post, compose.WithNodeName("output_superego")),
		g.AddEdge(compose.START, "input_superego"),
		g.AddBranch("input_superego", compose.NewGraphBranch(route, map[string]bool{"input_superego": true, "calculator": true, compose.END: true})),
		g.AddBranch("calculator", compose.NewGraphBranch(route, map[string]bool{"calculator": true, "output_superego": true, compose.END: true})),
		g.AddBranch("output_superego", compose.NewGraphBranch(route, map[string]bool{compose.END: true})),
	)
	if err != nil {
		return nil, err
	}
	return g.Compile(ctx, compose.WithMaxRunSteps(25), compose.WithGraphName("guarded_calculator"))
}

// client reads a flow's updates: it encodes each step (the hidden fields
// have no encoding), counts the bytes and records the trace.
type client struct {
	bytes int
	trace []string
	err   error
}

func (c *client) read(steps []*Step) {
	for _, s := range steps {
		b, err := json.Marshal(s)
		c.bytes += len(b)
		c.trace = append(c.trace, s.AgentID+":"+s.Decision)
		c.err = errors.Join(c.err, err)
	}
}

func (c *client) check() error {
	if c.err != nil {
		return c.err
	}
	if got := strings.Join(c.trace, " "); got != wantTrace {
		return fmt.Errorf("trace %q, want %q", got, wantTrace)
	}
	return nil
}

// handler hands the client each lambda node's update as the node ends.
func (c *client) handler() callbacks.Handler {
	return callbacks.NewHandlerBuilder().OnEndFn(func(ctx context.Context, info *callbacks.RunInfo, out callbacks.CallbackOutput) context.Context {
		if info.Component == compose.ComponentOfLambda {
			if steps, ok := out.([]*Step); ok {
				c.read(steps)
			}
		}
		return ctx
	}).Build()
}

var flows atomic.Int64

func userStep() []*Step {
	return []*Step{{StepID: "f" + strconv.FormatInt(flows.Add(1), 10) + "-0", AgentID: "user", Timestamp: time.Now().UTC(),
		Role: "user", Input: userInput, NextAgent: "input_superego"}}
}

// runFlow runs one flow in streaming form and checks what the client read.
func runFlow(g compose.Runnable[[]*Step, []*Step], c *client) error {
	if _, err := g.Invoke(context.Background(), userStep(), compose.WithCallbacks(c.handler())); err != nil {
		return err
	}
	return c.check()
}

// direct runs the same node functions in a plain loop: the same routing,
// the same client, no graph and no callbacks.
func (n *nodes) direct(c *client) error {
	steps := userStep()
	for next := "input_superego"; next != "end"; next = steps[len(steps)-1].NextAgent {
		if len(steps) > 25 {
			return errors.New("direct: more than 25 steps")
		}
		var s *Step
		var err error
		switch next {
		case "input_superego":
			s, err = n.inputSuperego(context.Background(), steps)
		case "calculator":
			s, err = n.calc(context.Background(), steps)
		case "output_superego":
			s, err = n.outputSuperego(context.Background(), steps)
		}
		if err != nil {
			return err
		}
		steps = append(steps, s)
		c.read(steps[len(steps)-1:])
	}
	return c.check()
}

// sequential runs flows one after another until at least n flows and
// minDur have passed, and returns each flow's duration.
func sequential(warmup, n int, minDur time.Duration, one func() error) ([]time.Duration, time.Duration, error) {
	for range warmup {
		if err := one(); err != nil {
			return nil, 0, err
		}
	}
	var ds []time.Duration
	start := time.Now()
	for len(ds) < n || time.Since(start) < minDur {
		t := time.Now()
		if err := one(); err != nil {
			return nil, 0, err
		}
		ds = append(ds, time.Since(t))
	}
	return ds, time.Since(start), nil
}

// concurrent starts n flows at once behind a barrier and returns the wall
// time until the last one ends.
func concurrent(g compose.Runnable[[]*Step, []*Step], n int) (time.Duration, error) {
	var ready, done sync.WaitGroup
	barrier := make(chan struct{})
	errs := make(chan error, n) // every flow reports once; nobody blocks
	ready.Add(n)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			ready.Done()
			<-barrier
			errs <- runFlow(g, &client{})
		}()
	}
	ready.Wait()
	start := time.Now()
	close(barrier)
	done.Wait()
	wall := time.Since(start)
	close(errs)
	for err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return wall, nil
}

// usage is what the process had used at a point: CPU time, and heap
// allocations, which vary much less than wall time on a shared machine.
type usage struct {
	cpu     time.Duration
	mallocs uint64
	bytes   uint64
}

func measure() usage {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return usage{time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ms.Mallocs, ms.TotalAlloc}
}

// report puts what n flows used since u into out, per flow, under the
// keys superego's benchmark writes.
func (u usage) report(out map[string]any, phase string, n int) {
	now := measure()
	out[phase+"_cpu_us"] = float64((now.cpu - u.cpu).Microseconds()) / float64(n)
	out[phase+"_allocs_per_flow"] = float64(now.mallocs-u.mallocs) / float64(n)
	out[phase+"_alloc_bytes_per_flow"] = float64(now.bytes-u.bytes) / float64(n)
}

// atOnce is the concurrent phase at n flows: one round unmeasured, the
// peak reset, then rounds; it records the rounds' walls and the peak RSS
// under keys with prefix.
func atOnce(out map[string]any, prefix string, g compose.Runnable[[]*Step, []*Step], n, rounds int, delay, every time.Duration) error {
	if _, err := concurrent(g, n); err != nil {
		return err
	}
	debug.FreeOSMemory() // what earlier phases freed goes back to the OS before the peak is reset
	// The RSS the rounds start from, with what earlier phases left that no
	// run in flight needs: the binary's pages the runs touched.
	out[prefix+"base_rss_kb"], out[prefix+"base_rss_file_kb"] = procStatus("VmRSS"), procStatus("RssFile")
	out[prefix+"peak_reset_ok"] = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	s := sample(every)
	used := measure() // what the rounds cost a flow: at 10,000 at once, their wall follows it
	var walls []float64
	for range rounds {
		w, err := concurrent(g, n)
		if err != nil {
			return err
		}
		walls = append(walls, float64(w.Microseconds())/1e3)
	}
	used.report(out, strings.TrimSuffix(prefix, "_"), rounds*n)
	s.finish(out, prefix)
	out[prefix+"flows"] = n
	out[prefix+"peak_rss_kb"] = procStatus("VmHWM")
	out[prefix+"rounds_ms"] = walls
	sorted := slices.Clone(walls)
	slices.Sort(sorted)
	out[prefix+"wall_ms"] = sorted[len(sorted)/2]
	out[prefix+"ideal_ms"] = 4 * float64(delay.Milliseconds())
	out[prefix+"overhead_ms"] = sorted[len(sorted)/2] - 4*float64(delay.Milliseconds())
	return nil
}

// procStatus reads a field of /proc/self/status in kB.
func procStatus(field string) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return kb
		}
	}
	return -1
}

func percentile(ds []time.Duration, p float64) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[int(p*float64(len(s)-1))].Nanoseconds()) / 1e3
}

func einoVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/cloudwego/eino" {
				return d.Version
			}
		}
	}
	return "unknown"
}

func main() {
	seq := flag.Int("seq", 2000, "at least this many sequential flows")
	minSeconds := flag.Float64("min-seconds", 2, "and at least this long")
	warmup := flag.Int("warmup", 500, "warm-up flows before measuring")
	conc := flag.Int("conc", 1000, "flows at once in the concurrent phase")
	concBig := flag.Int("conc-big", 0, "flows at once in a second, larger concurrent phase (0: none)")
	delay := flag.Duration("delay", 20*time.Millisecond, "model latency in the concurrent phases")
	rounds := flag.Int("rounds", 3, "measured rounds of each concurrent phase")
	constitution := flag.String("constitution", "bench/guarded_calculator/constitution.txt", "the workload's constitution (from the repository root)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the sequential phase")
	every := flag.Duration("sample", 0, "sample the runtime's heap, stacks and goroutines this often in the concurrent phases' measured rounds, and report their maxima (0: not)")
	flag.Parse()
	if err := run(*seq, *minSeconds, *warmup, *conc, *concBig, *delay, *rounds, *constitution, *cpuprofile, *every); err != nil {
		fmt.Fprintln(os.Stderr, "eino:", err)
		os.Exit(1)
	}
}

func run(seq int, minSeconds float64, warmup, conc, concBig int, delay time.Duration, rounds int, constitutionPath, cpuprofile string, every time.Duration) error {
	text, err := os.ReadFile(constitutionPath)
	if err != nil {
		return fmt.Errorf("%w (run from the repository root, or pass -constitution)", err)
	}
	sum := sha256.Sum256(text)
	ctx := context.Background()
	calculator, err := utils.InferTool("calculator", "Evaluates an arithmetic expression <number><op><number>, op one of + - * /.", calculate)
	if err != nil {
		return err
	}
	info, err := calculator.Info(ctx)
	if err != nil {
		return err
	}
	build := func(d time.Duration) (*nodes, compose.Runnable[[]*Step, []*Step], error) {
		m := fakeModel{delay: d}
		tm, err := m.WithTools([]*schema.ToolInfo{info})
		if err != nil {
			return nil, nil, err
		}
		n := &nodes{model: m, toolModel: tm, calculator: calculator,
			inPrompt:  superegoPrompt("INPUT SUPEREGO. Evaluate the user's request", string(text)),
			outPrompt: superegoPrompt("OUTPUT SUPEREGO. Review the agent's draft answer", string(text))}
		g, err := compile(ctx, n)
		return n, g, err
	}
	n0, g0, err := build(0)
	if err != nil {
		return err
	}
	_, gD, err := build(delay)
	if err != nil {
		return err
	}

	// (c) At rest: both graphs compiled, nothing run.
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	out := map[string]any{
		"engine":                 "eino",
		"eino_version":           einoVersion(),
		"constitution_sha256_16": hex.EncodeToString(sum[:])[:16],
		"rest_rss_kb":            procStatus("VmRSS"),
		"rest_rss_anon_kb":       procStatus("RssAnon"), // the rest is the binary's pages, clean and shared
		"rest_peak_rss_kb":       procStatus("VmHWM"),
		"rest_heap_kb":           ms.HeapInuse / 1024,
		"rest_sys_kb":            ms.Sys / 1024,
		"go":                     runtime.Version(),
		"gomaxprocs":             runtime.GOMAXPROCS(0),
	}

	// Sanity: one flow, five steps, the tool said 50.
	steps, err := g0.Invoke(ctx, userStep())
	if err != nil {
		return err
	}
	if len(steps) != 5 || len(steps[2].ToolUsage) != 1 || steps[2].ToolUsage[0].Result != "50" {
		return fmt.Errorf("sanity check: %d steps", len(steps))
	}

	// (a) Sequential, through the graph.
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	c := &client{}
	used := measure()
	ds, wall, err := sequential(warmup, seq, time.Duration(minSeconds*float64(time.Second)), func() error {
		c.trace = c.trace[:0]
		return runFlow(g0, c)
	})
	used.report(out, "seq", len(ds)+warmup)
	if cpuprofile != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return err
	}
	out["seq_flows"] = len(ds)
	out["seq_flows_per_sec"] = float64(len(ds)) / wall.Seconds()
	out["seq_mean_us"] = float64(wall.Microseconds()) / float64(len(ds))
	out["seq_p50_us"] = percentile(ds, 0.50)
	out["seq_p99_us"] = percentile(ds, 0.99)
	out["streamed_bytes_per_flow"] = c.bytes / (len(ds) + warmup)

	// (a') The floor: the same nodes in a plain loop.
	dc := &client{}
	used = measure()
	dds, dwall, err := sequential(warmup, seq, time.Duration(minSeconds*float64(time.Second)), func() error {
		dc.trace = dc.trace[:0]
		return n0.direct(dc)
	})
	used.report(out, "direct", len(dds)+warmup)
	if err != nil {
		return err
	}
	out["direct_mean_us"] = float64(dwall.Microseconds()) / float64(len(dds))
	out["direct_streamed_bytes_per_flow"] = dc.bytes / (len(dds) + warmup)

	// (b) Concurrent, at conc and then at concBig.
	if err := atOnce(out, "conc_", gD, conc, rounds, delay, every); err != nil {
		return err
	}
	if concBig > 0 {
		if err := atOnce(out, "big_", gD, concBig, rounds, delay, every); err != nil {
			return err
		}
	}
	line, err := json.Marshal(out)
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	return nil
}
