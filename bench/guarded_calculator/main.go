// Command guarded_calculator runs the guarded-calculator workload (four
// model calls, one tool call, five steps a flow) through superego's own engine, agents and
// calculator tool, on a fake language model, and prints one JSON line with
// the same field names as the LangGraph.js and Eino peers, so the three
// compare as ratios in one run.
//
//	go run ./bench/guarded_calculator [-constitution FILE] [-store memory|sqlite] [-http] [-observe none|metrics|all] [-stack NAME[:LEVEL],…]
//		[-conc N] [-conc-big N] [-profile DIR] [-sample D]
//
// With -stack, every run's superegos judge under that stack of user
// constitutions from -library (docs/stacks.md), in the engine's runs and in the
// plain loop alike: what a stack costs the engine is the difference.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tmc/langchaingo/llms"

	"superego/agents"
	"superego/engine"
	"superego/flow"
	"superego/memstore"
	"superego/sqlite"
	"superego/tools"
)

const (
	userInput  = "What is 5*10?"
	wantTrace  = "input_superego:CAUTION calculator:NEEDS_TOOL calculator:COMPLETE output_superego:ACCEPT"
	inputReply = `{"decision":"CAUTION","thinking":"Benign arithmetic request; allow it, but the agent must use the tool and verify the number.","agent_guidance":"verify","response":"ok"}`
	outReply   = `{"decision":"ACCEPT","thinking":"The draft answer agrees with the calculator tool output and violates no principle.","agent_guidance":"none","response":"ok"}`
)

// flowJSON is the workload's graph as a superego flow. The prompts are the
// agents' own (docs/flows.md); the constitution is the shared fixture.
const flowJSON = `{"name": "guarded calculator", "graph": {"start": "input_superego", "max_steps": 25, "nodes": {
  "input_superego": {"type": "superego", "agent_id": "input_superego", "constitution": "bench", "max_iterations": 3,
    "transitions": {"ACCEPT": "calculator", "CAUTION": "calculator", "NEEDS_CLARIFICATION": "self", "*": null}},
  "calculator": {"type": "inner_agent", "agent_id": "calculator", "tools": ["calculator"], "max_iterations": 5,
    "system_prompt": "CALCULATOR AGENT. You answer arithmetic questions. Always use the calculator tool; never compute in your head.",
    "transitions": {"COMPLETE": "output_superego", "NEEDS_TOOL": "self", "MAX_ITERATIONS": "output_superego"}},
  "output_superego": {"type": "superego", "agent_id": "output_superego", "constitution": "bench",
    "transitions": {"*": null}}}}}`

// fakeModel is the workload's chat model: stateless, safe for concurrent
// use, its reply a function of the messages; after delay, if any. A
// peak, when armed, holds the calls of output superegos.
type fakeModel struct {
	delay time.Duration
	peak  *peak
}

func (m fakeModel) Call(ctx context.Context, prompt string, options ...llms.CallOption) (string, error) {
	return llms.GenerateFromSinglePrompt(ctx, m, prompt, options...)
}

func (m fakeModel) GenerateContent(ctx context.Context, messages []llms.MessageContent, options ...llms.CallOption) (*llms.ContentResponse, error) {
	system := messages[0].Parts[0].(llms.TextContent).Text
	if m.delay > 0 {
		if m.peak != nil && m.peak.armed.Load() && strings.Contains(system, "Your node: output_superego.") {
			m.peak.hold(ctx)
		}
		t := time.NewTimer(m.delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	var text string
	var calls []llms.ToolCall
	switch last := messages[len(messages)-1]; {
	case strings.Contains(system, "Your node: input_superego."):
		text = inputReply
	case strings.Contains(system, "Your node: output_superego."):
		text = outReply
	case last.Role == llms.ChatMessageTypeTool:
		text = "5*10 = " + last.Parts[0].(llms.ToolCallResponse).Content
	default:
		calls = []llms.ToolCall{{ID: "call_calc_1", Type: "function", FunctionCall: &llms.FunctionCall{Name: "calculator", Arguments: `{"expression":"5*10"}`}}}
	}
	var opts llms.CallOptions
	for _, o := range options {
		o(&opts)
	}
	if opts.StreamingFunc != nil && text != "" {
		if err := opts.StreamingFunc(ctx, []byte(text)); err != nil {
			return nil, err
		}
	}
	return &llms.ContentResponse{Choices: []*llms.ContentChoice{{Content: text, ToolCalls: calls}}}, nil
}

// client is what reads a flow's stream: it encodes every step it is sent,
// hidden fields removed (flow.Step has no encoding for them), counts the
// bytes, and records the trace.
type client struct {
	bytes int
	trace []string
}

func (c *client) read(ev flow.Event) error {
	if ev.Name != flow.EventCompleteStep {
		return nil
	}
	return c.step(ev.Data)
}

// step reads a step. It is apart from read, so that a client that reads
// a partial output, or any other event, does not make room for a step on
// the stack of the run that delivers it.
func (c *client) step(data any) error {
	s := data.(*flow.Step)
	if s.Role == flow.RoleUser {
		return nil
	}
	b, err := json.Marshal(s)
	c.bytes += len(b)
	c.trace = append(c.trace, s.AgentID+":"+s.Decision)
	return err
}

func (c *client) check() error {
	if got := strings.Join(c.trace, " "); got != wantTrace {
		return fmt.Errorf("trace %q, want %q", got, wantTrace)
	}
	return nil
}

type bench struct {
	def    *flow.Definition
	agent0 *agents.Agent // instant model
	agentD *agents.Agent // delayed model
	store  string
	dir    string
	watch  *watched // metrics and traces, if asked for
	// The user constitutions every run's superegos judge under (-stack),
	// and the library they come from.
	stack   []flow.StackEntry
	library flow.Library
	layers  []flow.Layer // the stack with its texts, for the plain loop's tasks
}

// engine is a server's engine for one agent: flows started through it are
// numbered, stored and streamed as POST /flow/execute would stream them.
func (b *bench) engine(agent *agents.Agent, maxRuns int) (*engine.Engine, func(), error) {
	var store flow.Store = &memstore.Store{}
	closeStore := func() {}
	if b.store == "sqlite" {
		s, err := sqlite.Open(filepath.Join(b.dir, fmt.Sprintf("bench-%d.db", time.Now().UnixNano())))
		if err != nil {
			return nil, nil, err
		}
		store, closeStore = s, func() { s.Close() }
	}
	var observe *engine.Observer
	if b.watch != nil {
		observe = b.watch.tel.Flow()
	}
	return &engine.Engine{
		Flows:   map[string]*flow.Flow{"g": {ID: "g", Def: b.def}},
		Exec:    &engine.Executor{Agent: agent, Observe: observe, Library: b.library},
		Store:   store,
		MaxRuns: maxRuns,
		Log:     slog.New(slog.DiscardHandler),
	}, closeStore, nil
}

// runFlow runs one flow on e, under stack, and reads its whole stream.
func runFlow(e *engine.Engine, c *client, stack []flow.StackEntry) error {
	var err error
	if err0 := e.Run(context.Background(), engine.Request{FlowID: "g", Input: userInput, Options: flow.RunOptions{Stack: stack}}, func(ev flow.Event) {
		if err == nil {
			err = c.read(ev)
		}
	}); err0 != nil {
		return err0
	}
	if err != nil {
		return err
	}
	return c.check()
}

// direct runs the same agents in a plain loop: the workload's routing by
// hand, the same client, no engine, no store, no events but the steps. The
// steps are the records the engine streams (docs/reference.md), field for field, so
// that the client encodes the same bytes in both.
func (b *bench) direct(c *client) error {
	g := b.def.Graph
	node, input, from, guidance, guidanceFrom := g.Nodes["input_superego"], userInput, "", "", ""
	var rounds []*flow.Step
	for n := 1; node != nil; n++ {
		t := &engine.Task{Node: node, StepID: fmt.Sprint(n + 1), UserMessage: userInput, Input: input, InputFrom: from,
			Guidance: guidance, GuidanceFrom: guidanceFrom, ToolRounds: rounds, Decisions: node.Decisions()}
		var stack []flow.StackEntry
		if node.TakesStack() && len(b.stack) > 0 {
			t.Stack = b.layers
			stack = append(append(stack, flow.StackEntry{Name: flow.Floor}), b.stack...)
		}
		r, err := b.agent0.Act(context.Background(), t, func(flow.Event) {})
		if err != nil {
			return err
		}
		s := flow.Step{StepID: t.StepID, AgentID: node.AgentID, Node: node.Name, Timestamp: time.Now().UTC(), Role: flow.RoleAssistant,
			Input: input, Constitution: node.Constitution, SystemPrompt: node.SystemPrompt, Decision: r.Decision,
			ToolUsage: r.ToolUsage, Response: r.Response, Thinking: r.Thinking, AgentGuidance: r.AgentGuidance,
			Model: r.Model, Usage: r.Usage, LatencyMS: flow.Millis(r.Latency), Stack: stack}
		var next *flow.Node
		switch {
		case len(r.ToolUsage) > 0:
			s.Decision, next = flow.NeedsTool, node
			round := s
			rounds = append(rounds, &round)
		case node.Name == "input_superego":
			next, guidance, guidanceFrom = g.Nodes["calculator"], r.AgentGuidance, node.AgentID
		case node.Name == "calculator":
			s.Decision, s.Fallback = flow.Complete, "the reply had no decision; used COMPLETE"
			next, input, from, guidance, guidanceFrom, rounds = g.Nodes["output_superego"], r.Response, node.AgentID, r.AgentGuidance, node.AgentID, nil
		}
		if next != nil {
			s.NextAgent = &next.Name
		}
		if err := c.read(flow.Event{Name: flow.EventCompleteStep, Data: &s}); err != nil {
			return err
		}
		node = next
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

// concurrent starts n flows at once behind a barrier, under stack, and
// returns the wall time until the last one ends.
func concurrent(e *engine.Engine, n int, stack []flow.StackEntry) (time.Duration, error) {
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
			errs <- runFlow(e, &client{}, stack)
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

// atOnce is the concurrent phase at n flows: one round unmeasured, the
// peak reset, then rounds; it records the rounds' walls and the peak RSS
// under keys with prefix. Each round gets its own engine.
func (b *bench) atOnce(out map[string]any, prefix string, n, rounds int, delay time.Duration, o options) error {
	round := func() (time.Duration, error) {
		e, closeStore, err := b.engine(b.agentD, n)
		if err != nil {
			return 0, err
		}
		defer closeStore()
		return concurrent(e, n, b.stack)
	}
	if _, err := round(); err != nil {
		return err
	}
	debug.FreeOSMemory() // what earlier phases freed goes back to the OS before the peak is reset
	// The RSS the rounds start from, with what earlier phases left that no
	// run in flight needs: the binary's pages the runs touched (and, here, the runtime's bookkeeping for the
	// largest heap it has had: the sequential phase's store keeps every
	// instance it ran).
	out[prefix+"base_rss_kb"], out[prefix+"base_rss_file_kb"] = procStatus("VmRSS"), procStatus("RssFile")
	out[prefix+"peak_reset_ok"] = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	stopCPU, err := o.profiles.cpu(prefix + "cpu.pprof")
	if err != nil {
		return err
	}
	s := sample(o.sample)
	used := measure() // what the rounds cost a flow: at 10,000 at once, their wall follows it
	var walls []float64
	for range rounds {
		w, err := round()
		if err != nil {
			stopCPU()
			return err
		}
		walls = append(walls, float64(w.Microseconds())/1e3)
	}
	used.report(out, strings.TrimSuffix(prefix, "_"), rounds*n)
	s.finish(out, prefix)
	stopCPU()
	out[prefix+"flows"] = n
	out[prefix+"peak_rss_kb"] = procStatus("VmHWM")
	out[prefix+"rounds_ms"] = walls
	sorted := slices.Clone(walls)
	slices.Sort(sorted)
	ideal := 4 * float64(delay.Milliseconds())
	out[prefix+"wall_ms"] = sorted[len(sorted)/2]
	out[prefix+"ideal_ms"] = ideal
	out[prefix+"overhead_ms"] = sorted[len(sorted)/2] - ideal
	return o.profiles.heapAtPeak(out, prefix, n, round)
}

// options are the flags that change what is measured, not the workload.
type options struct {
	profiles *profiles     // nil: none
	sample   time.Duration // 0: no sampling
}

// procStatus reads a field of /proc/self/status in kB.
func procStatus(field string) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			var kb int
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb
		}
	}
	return -1
}

// usage is what the process had used at a point: CPU time, and heap
// allocations. On a machine other work shares, the CPU a flow costs, and
// what it allocates, vary much less than its wall time.
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

// report puts what n flows used since u into out, per flow: CPU µs (every
// thread's, the garbage collector's too), allocations and bytes.
func (u usage) report(out map[string]any, phase string, n int) {
	now := measure()
	out[phase+"_cpu_us"] = float64((now.cpu - u.cpu).Microseconds()) / float64(n)
	out[phase+"_allocs_per_flow"] = float64(now.mallocs-u.mallocs) / float64(n)
	out[phase+"_alloc_bytes_per_flow"] = float64(now.bytes-u.bytes) / float64(n)
}

// stackOf reads -stack against the library in dir.
func stackOf(stack, dir string) ([]flow.StackEntry, flow.Library, error) {
	lib, err := flow.Constitutions(dir)
	if err != nil {
		return nil, nil, err
	}
	picks, problems := flow.ParsePicks(stack)
	layers, more := flow.Library(lib).Resolve(picks)
	if problems = append(problems, more...); len(problems) > 0 {
		return nil, nil, fmt.Errorf("-stack: %s (run from the repository root, or pass -library)", problems[0])
	}
	return layers, lib, nil
}

func percentile(ds []time.Duration, p float64) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[int(p*float64(len(s)-1))].Nanoseconds()) / 1e3
}

func main() {
	seq := flag.Int("seq", 2000, "at least this many sequential flows")
	minSeconds := flag.Float64("min-seconds", 2, "and at least this long")
	warmup := flag.Int("warmup", 500, "warm-up flows before measuring")
	conc := flag.Int("conc", 1000, "flows at once in the concurrent phase")
	concBig := flag.Int("conc-big", 0, "flows at once in a second, larger concurrent phase (0: none)")
	delay := flag.Duration("delay", 20*time.Millisecond, "model latency in the concurrent phases")
	rounds := flag.Int("rounds", 3, "measured rounds of each concurrent phase")
	constitution := flag.String("constitution", "bench/guarded_calculator/constitution.txt", "the workload's constitution")
	store := flag.String("store", "memory", "where instances are kept: memory or sqlite")
	withHTTP := flag.Bool("http", false, "also run the flow through POST /flow/execute and a bare SSE handler")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the sequential phase")
	profileDir := flag.String("profile", "", "write into this directory CPU profiles of the sequential phase and of each concurrent phase's measured rounds, and a heap profile at each concurrent phase's peak (one round more)")
	every := flag.Duration("sample", 0, "sample the runtime's heap, stacks and goroutines this often in the concurrent phases' measured rounds, and report their maxima (0: not)")
	observe := flag.String("observe", "none", "what operators see: none, metrics (Prometheus), or all (metrics, and traces over OTLP/HTTP to a sink on loopback)")
	stack := flag.String("stack", "", "judge every run under this stack of user constitutions (docs/stacks.md): NAME[:LEVEL] separated by commas, from -library")
	library := flag.String("library", "constitutions", "the constitution library -stack names")
	flag.Parse()
	o := options{sample: *every}
	if *profileDir != "" {
		// Every 4 kB sampled, not every 512: a run in flight holds a few
		// kB, and the profile is to say of what.
		runtime.MemProfileRate = 4096
		o.profiles = &profiles{dir: *profileDir}
		if *cpuprofile == "" {
			*cpuprofile = filepath.Join(*profileDir, "seq_cpu.pprof")
		}
	}
	if err := run(*seq, *minSeconds, *warmup, *conc, *concBig, *delay, *rounds, *constitution, *store, *withHTTP, *cpuprofile, *observe, *stack, *library, o); err != nil {
		fmt.Fprintln(os.Stderr, "guarded_calculator:", err)
		os.Exit(1)
	}
}

func run(seq int, minSeconds float64, warmup, conc, concBig int, delay time.Duration, rounds int, constitutionPath, store string, withHTTP bool, cpuprofile, observe, stack, library string, o options) error {
	text, err := os.ReadFile(constitutionPath)
	if err != nil {
		return fmt.Errorf("%w (run from the repository root, or pass -constitution)", err)
	}
	sum := sha256.Sum256(text)
	def, err := flow.Parse([]byte(flowJSON), flow.Catalog{Tools: []string{"calculator"}, Texts: map[string]string{"bench": string(text)}})
	if err != nil {
		return err
	}
	set := tools.Set{"calculator": tools.Calculator()}
	var peak *peak
	if o.profiles != nil {
		peak = &o.profiles.peak
	}
	model := func(d time.Duration) func(string) (agents.Model, error) {
		m := agents.Model{LLM: fakeModel{delay: d, peak: peak}, Name: "fake"}
		return func(string) (agents.Model, error) { return m, nil }
	}
	dir, err := os.MkdirTemp("", "superego-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if store != "memory" && store != "sqlite" {
		return errors.New(`-store is "memory" or "sqlite"`)
	}
	if observe != "none" && observe != "metrics" && observe != "all" {
		return errors.New(`-observe is "none", "metrics" or "all"`)
	}
	w, err := watch(observe)
	if err != nil {
		return err
	}
	b := &bench{def: def, store: store, dir: dir, watch: w,
		agent0: &agents.Agent{Model: model(0), Tools: set},
		agentD: &agents.Agent{Model: model(delay), Tools: set}}
	if stack != "" {
		if b.stack, b.library, err = stackOf(stack, library); err != nil {
			return err
		}
		for _, e := range b.stack {
			b.layers = append(b.layers, flow.Layer{Name: e.Name, Adherence: e.Adherence, Text: b.library[e.Name]})
		}
	}
	if w != nil {
		b.agent0.Observe, b.agentD.Observe = w.tel.Agents(), w.tel.Agents()
	}
	e0, close0, err := b.engine(b.agent0, 0)
	if err != nil {
		return err
	}

	// (c) At rest: everything built, nothing run.
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	out := map[string]any{
		"rest_heap_kb":           ms.HeapInuse / 1024,
		"rest_heap_alloc_kb":     ms.HeapAlloc / 1024,
		"rest_stacks_kb":         ms.StackInuse / 1024,
		"rest_sys_kb":            ms.Sys / 1024,
		"engine":                 "superego",
		"store":                  store,
		"constitution_sha256_16": hex.EncodeToString(sum[:])[:16],
		"rest_rss_kb":            procStatus("VmRSS"),
		"rest_rss_anon_kb":       procStatus("RssAnon"), // the rest is the binary's pages, clean and shared
		"rest_peak_rss_kb":       procStatus("VmHWM"),
		"go":                     runtime.Version(),
		"gomaxprocs":             runtime.GOMAXPROCS(0),
		"observe":                observe,
	}
	if len(b.stack) > 0 {
		chars := 0
		for _, e := range b.stack {
			chars += len(b.library[e.Name])
		}
		out["stack"], out["stack_layers"], out["stack_bytes"] = stack, len(b.stack), chars
	}

	// Sanity: one flow, five steps, the tool said 50.
	var steps []flow.Step
	sub, err := e0.Start(context.Background(), engine.Request{FlowID: "g", Input: userInput, Options: flow.RunOptions{Stack: b.stack}})
	if err != nil {
		return err
	}
	for ev := range sub.Events(context.Background()) {
		if s, ok := ev.Data.(*flow.Step); ok {
			steps = append(steps, *s)
		}
	}
	if len(steps) != 5 || len(steps[2].ToolUsage) != 1 || steps[2].ToolUsage[0].Output != "50" {
		return fmt.Errorf("sanity check: %d steps", len(steps))
	}

	// (a) Sequential, through the engine. An in-memory store keeps every
	// instance it has run, and each collection marks them all: a new
	// engine every perEngine flows keeps what a flow costs from growing
	// with how long the phase has run.
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return err
		}
		pprof.StartCPUProfile(f)
	}
	c := &client{}
	const perEngine = 1000
	ran := 0
	used := measure()
	ds, wall, err := sequential(warmup, seq, time.Duration(minSeconds*float64(time.Second)), func() error {
		if ran++; ran%perEngine == 0 {
			close0()
			var err error
			if e0, close0, err = b.engine(b.agent0, 0); err != nil {
				return err
			}
		}
		c.trace = c.trace[:0]
		return runFlow(e0, c, b.stack)
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
	// The engine is let go: the floor, and then the flows in flight, are
	// measured with no history on the heap.
	close0()
	e0 = nil

	// (a') The floor: the same agents in a plain loop.
	dc := &client{}
	used = measure()
	dds, dwall, err := sequential(warmup, seq, time.Duration(minSeconds*float64(time.Second)), func() error {
		dc.trace = dc.trace[:0]
		return b.direct(dc)
	})
	used.report(out, "direct", len(dds)+warmup)
	if err != nil {
		return err
	}
	out["direct_mean_us"] = float64(dwall.Microseconds()) / float64(len(dds))
	out["direct_streamed_bytes_per_flow"] = dc.bytes / (len(dds) + warmup)

	// (b) Concurrent, at conc and then at concBig.
	if err := b.atOnce(out, "conc_", conc, rounds, delay, o); err != nil {
		return err
	}
	if concBig > 0 {
		if err := b.atOnce(out, "big_", concBig, rounds, delay, o); err != nil {
			return err
		}
	}

	if withHTTP {
		if err := b.http(out, warmup, seq, time.Duration(minSeconds*float64(time.Second))); err != nil {
			return err
		}
	}
	w.close(out)
	line, err := json.Marshal(out)
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	return nil
}
