// Command actions compares, in one run, ways of judging an agent's
// side-effecting tool calls before they run (docs/actions.md):
//
//	(a) superego: the real server, its inner agent's calls judged by a
//	    tool_judge as soon as each call's arguments have streamed in;
//	(b) the naive loop: read the model's whole reply, then judge each call
//	    and run it, one call at a time;
//	(c) OpenAI's Agents SDK for JavaScript: tool input guardrails on the
//	    tools of an MCP server (agents.mjs);
//
// and, as a control that shows the check for unjudged calls can fail, ours
// with no judge at all.
//
// One fake model speaks OpenAI's wire protocol over loopback HTTP to all of
// them: the agent's reply streams three calls of the tool "send", whose
// arguments are whole 200, 400 and 600 ms after the reply starts, and every
// judgement is a model call the fake answers after 200 ms. The tool is the
// same for all: the MCP test server's "send" (tools/mcptest), served over
// streamable HTTP on loopback, which writes each call to its log before it
// answers. The program times each execution where it happens, at the tool
// server, and each judgement at the fake, all on one clock; a call counts as
// judged when the fake had sent the verdict on exactly that call before the
// tool server received the call.
//
//	go run ./bench/actions [-rounds 12] [-warmup 2] [-store sqlite|memory] [-sdk bench/actions]
//
// Without node, or without the SDK installed in -sdk (npm ci), it runs the
// rest and says that it skipped (c).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tmc/langchaingo/llms"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/bench/internal/loopback"
	"superego/bench/internal/stats"
	"superego/bench/internal/wiretap"
	"superego/flow"
	"superego/tools"
	"superego/tools/mcptest"
)

// The workload: what the comparison runs, and how many times.
const (
	calls     = 3
	callGap   = 200 * time.Millisecond // each call's arguments are whole this long after the previous one's
	judgeTime = 200 * time.Millisecond

	judgeWords = "You are the tool judge." // in every judge's system prompt
	judgedArgs = "with these arguments:\n" // before the judged call's arguments, in every judge's message
	finalText  = "Sent the three reports."
)

// goalMS is the goal for (a): 1.1 × (the reply + one judgement).
var goalMS = 1.1 * stats.Ms(calls*callGap+judgeTime)

// keyRe finds a call's key, "run-N report K", in its arguments; runRe the
// run's token in the user's message.
var (
	keyRe = regexp.MustCompile(`run-\d+ report \d+`)
	runRe = regexp.MustCompile(`run-\d+`)
)

// script is the fake model's, for every mode. It tells a judge by its
// system prompt, and ours from the others by the prompt our agents write
// (our agent answers in the model protocol, docs/flows.md; the others in text).
func script(r agentstest.Request) agentstest.Answer {
	switch {
	case strings.Contains(r.System, judgeWords):
		return agentstest.Answer{Text: agentstest.JSON("", flow.Accept, "", ""), Chunk: 1 << 20, Delay: judgeTime}
	case len(r.ToolResults()) > 0 && r.Node() == "assistant":
		return agentstest.Reply("", flow.Complete, "", finalText)
	case len(r.ToolResults()) > 0:
		return agentstest.Answer{Text: finalText}
	}
	i := slices.IndexFunc(r.Tools, func(t string) bool { return t == "send" || strings.HasSuffix(t, "__send") })
	run := runRe.FindString(r.LastUser())
	if i < 0 || run == "" {
		return agentstest.Answer{Status: http.StatusBadRequest, Text: "the bench's agent is offered send and names its run"}
	}
	a := agentstest.Answer{}
	for k := 1; k <= calls; k++ {
		a.ToolCalls = append(a.ToolCalls, agentstest.Call{ID: fmt.Sprintf("call_%d", k), Name: r.Tools[i], Delay: callGap,
			Args: fmt.Sprintf(`{"to": "team@example.com", "body": "%s report %d"}`, run, k)})
	}
	return a
}

// execution is one call of send, as the tool server saw it.
type execution struct {
	key     string
	at, end time.Time // the request came; the tool had run and answered
}

// toolTap records the tool server's calls of send. Other requests (the
// session's setup, a client's standing GET) pass through unrecorded.
type toolTap struct {
	mu       sync.Mutex
	idle     *sync.Cond
	inFlight int
	execs    []execution
}

func (t *toolTap) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			h.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var m struct {
			Method string `json:"method"`
			Params struct {
				Name      string `json:"name"`
				Arguments struct {
					Body string `json:"body"`
				} `json:"arguments"`
			} `json:"params"`
		}
		if json.Unmarshal(body, &m) != nil || m.Method != "tools/call" || m.Params.Name != "send" {
			h.ServeHTTP(w, r)
			return
		}
		t.mu.Lock()
		t.inFlight++
		t.mu.Unlock()
		e := execution{key: keyRe.FindString(m.Params.Arguments.Body), at: time.Now()}
		h.ServeHTTP(w, r)
		e.end = time.Now()
		t.mu.Lock()
		defer t.mu.Unlock()
		t.execs = append(t.execs, e)
		if t.inFlight--; t.inFlight == 0 {
			t.cond().Broadcast()
		}
	})
}

// take waits until no call of send is in flight, then returns those
// recorded since the last take.
func (t *toolTap) take() []execution {
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.inFlight > 0 {
		t.cond().Wait()
	}
	e := t.execs
	t.execs = nil
	return e
}

func (t *toolTap) cond() *sync.Cond {
	if t.idle == nil {
		t.idle = sync.NewCond(&t.mu)
	}
	return t.idle
}

// logged counts the lines the tool server wrote to its log for the run.
func logged(log, run string) (int, error) {
	b, err := os.ReadFile(log)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "send\t") && runRe.FindString(line) == run {
			n++
		}
	}
	return n, err
}

// request is a model call as the fake's wire carried it: its system
// prompt, its last user message, whether it carries tool results.
type request struct {
	system, lastUser string
	results          bool
}

func readRequest(body []byte) request {
	var b struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	json.Unmarshal(body, &b)
	var r request
	for _, m := range b.Messages {
		switch m.Role {
		case "system":
			r.system += text(m.Content)
		case "user":
			r.lastUser = text(m.Content)
		case "tool":
			r.results = true
		}
	}
	return r
}

// text is a message's content, a string or a list of parts.
func text(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// judgedKey is the key of the call a judge was asked about: the one whose
// arguments follow judgedArgs (the judge may be shown the reply's other
// calls too, after it).
func judgedKey(msg string) string {
	_, after, ok := strings.Cut(msg, judgedArgs)
	if !ok {
		return ""
	}
	line, _, _ := strings.Cut(after, "\n")
	return keyRe.FindString(line)
}

// ---- (a) ours, and the control ----

// flows are ours: the assistant with a tool judge, and the control
// without.
var flows = map[string]string{
	"judged": `{"name": "actions bench", "graph": {"start": "assistant", "nodes": {
  "assistant": {"type": "inner_agent", "agent_id": "assistant", "system_prompt": "Send what the user asks with the send tool.",
    "tools": ["mcp__web__send"], "tool_judge": "tool_judge", "max_iterations": 3,
    "transitions": {"COMPLETE": null, "NEEDS_TOOL": "self"}},
  "tool_judge": {"type": "superego", "agent_id": "tool_judge",
    "constitution": "` + judgeWords + ` Accept a call the user asked for; block the rest."}}}}`,
	"unjudged": `{"name": "actions bench, no judge", "graph": {"start": "assistant", "nodes": {
  "assistant": {"type": "inner_agent", "agent_id": "assistant", "system_prompt": "Send what the user asks with the send tool.",
    "tools": ["mcp__web__send"], "max_iterations": 3,
    "transitions": {"COMPLETE": null, "NEEDS_TOOL": "self"}}}}}`,
}

// serve starts the server `superego serve` runs, with the flows, on a
// loopback port: its model the fake at modelURL, its MCP servers m.
func serve(modelURL, store, dir string, m *tools.MCP) (url string, stop func(), err error) {
	defs := map[string]*flow.Flow{}
	for id, text := range flows {
		def, err := flow.Parse([]byte(text), flow.Catalog{MCPServers: m.Names()})
		if err != nil {
			return "", nil, fmt.Errorf("flow %s: %w", id, err)
		}
		defs[id] = &flow.Flow{ID: id, Def: def}
	}
	return loopback.Server{Flows: defs, ModelURL: modelURL, Store: store, Dir: dir, MCP: m}.Serve()
}

// ours runs one of our flows as a client would, to its end.
func ours(client *http.Client, url, flowID, input string) error {
	body, _ := json.Marshal(map[string]string{"flow_id": flowID, "input": input})
	req, err := http.NewRequest(http.MethodPost, url+"/flow/execute", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var out struct {
		Status   string `json:"status"`
		Response string `json:"response"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return fmt.Errorf("%s: %s: %w", flowID, resp.Status, err)
	}
	if out.Status != flow.StatusCompleted || out.Response != finalText {
		return fmt.Errorf("%s: the run ended %s: %q", flowID, out.Status, out.Response)
	}
	return nil
}

// ---- (b) the naive loop ----

// naive is (b): an application's own agent loop, on the model client our
// agents use (langchaingo's OpenAI client, streamed, as the fake always
// streams). It reads the model's whole reply; then, for each call in turn,
// asks the judge (a model call on the same fake, with the call) and runs
// the call once the judge said ACCEPT; then hands the results back to the
// model for its answer.
type naive struct {
	model agents.Model
	send  tools.Tool
}

var drain = llms.WithStreamingFunc(func(context.Context, []byte) error { return nil })

func (n *naive) run(ctx context.Context, input string) error {
	offered := llms.WithTools([]llms.Tool{{Type: "function", Function: &llms.FunctionDefinition{
		Name: "send", Description: n.send.Description, Parameters: n.send.Parameters}}})
	msgs := []llms.MessageContent{
		llms.TextParts(llms.ChatMessageTypeSystem, "Send what the user asks with the send tool."),
		llms.TextParts(llms.ChatMessageTypeHuman, input),
	}
	resp, err := n.model.LLM.GenerateContent(ctx, msgs, drain, offered)
	if err != nil {
		return fmt.Errorf("the agent's reply: %w", err)
	}
	asked := resp.Choices[0].ToolCalls
	turn := llms.MessageContent{Role: llms.ChatMessageTypeAI}
	for _, c := range asked {
		turn.Parts = append(turn.Parts, c)
	}
	msgs = append(msgs, turn)
	for _, c := range asked {
		out := "refused by the tool judge"
		decision, err := n.judge(ctx, input, c)
		if err != nil {
			return err
		}
		if decision == flow.Accept {
			if out, err = n.send.Call(ctx, json.RawMessage(c.FunctionCall.Arguments)); err != nil {
				out = "error: " + err.Error()
			}
		}
		msgs = append(msgs, llms.MessageContent{Role: llms.ChatMessageTypeTool,
			Parts: []llms.ContentPart{llms.ToolCallResponse{ToolCallID: c.ID, Name: c.FunctionCall.Name, Content: out}}})
	}
	resp, err = n.model.LLM.GenerateContent(ctx, msgs, drain, offered)
	if err != nil {
		return fmt.Errorf("the agent's answer: %w", err)
	}
	if got := resp.Choices[0].Content; got != finalText {
		return fmt.Errorf("the agent answered %q", got)
	}
	return nil
}

// judge asks the judge about one call, as our judges are asked.
func (n *naive) judge(ctx context.Context, input string, c llms.ToolCall) (string, error) {
	msgs := []llms.MessageContent{
		llms.TextParts(llms.ChatMessageTypeSystem, judgeWords+` Accept a call the user asked for; block the rest. Reply {"decision": "ACCEPT"} or {"decision": "BLOCK"}.`),
		llms.TextParts(llms.ChatMessageTypeHuman, "The user's message for this turn:\n"+input+"\n\nThe agent asks to call "+c.FunctionCall.Name+" "+judgedArgs+c.FunctionCall.Arguments),
	}
	resp, err := n.model.LLM.GenerateContent(ctx, msgs, append([]llms.CallOption{drain}, n.model.Options...)...)
	if err != nil {
		return "", fmt.Errorf("the judge: %w", err)
	}
	var v struct {
		Decision string `json:"decision"`
	}
	if err := json.Unmarshal([]byte(resp.Choices[0].Content), &v); err != nil {
		return "", fmt.Errorf("the judge's reply: %w", err)
	}
	return v.Decision, nil
}

// ---- (c) the Agents SDK ----

// sdk is the Node process that runs (c).
type sdk struct {
	cmd      *exec.Cmd
	in       io.WriteCloser
	out      *bufio.Scanner
	versions string
}

// startSDK starts agents.mjs in dir, on the fake model and the tool
// server; nil, and why, when node or the SDK is missing.
func startSDK(dir, modelURL, mcpURL string) (*sdk, string) {
	if _, err := exec.LookPath("node"); err != nil {
		return nil, "node is not installed"
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@openai", "agents")); err != nil {
		return nil, "@openai/agents is not installed in " + dir + " (make bench-actions runs npm ci there)"
	}
	cmd := exec.Command("node", "agents.mjs")
	cmd.Dir, cmd.Stderr = dir, os.Stderr
	cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+modelURL+"/v1", "OPENAI_API_KEY=fake-key", "MCP_URL="+mcpURL)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err.Error()
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err.Error()
	}
	if err := cmd.Start(); err != nil {
		return nil, err.Error()
	}
	s := &sdk{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	if !s.out.Scan() {
		s.close()
		return nil, "agents.mjs did not start"
	}
	s.versions = s.out.Text()
	return s, ""
}

func (s *sdk) run(input string) error {
	line, _ := json.Marshal(map[string]string{"input": input})
	if _, err := fmt.Fprintf(s.in, "%s\n", line); err != nil {
		return err
	}
	if !s.out.Scan() {
		return errors.New("agents.mjs ended")
	}
	var o struct {
		Outcome string `json:"outcome"`
		Final   string `json:"final"`
		Error   string `json:"error"`
	}
	if err := json.Unmarshal(s.out.Bytes(), &o); err != nil {
		return err
	}
	if o.Outcome != "completed" || o.Final != finalText {
		return fmt.Errorf("agents.mjs: %s %q %s", o.Outcome, o.Final, o.Error)
	}
	return nil
}

func (s *sdk) close() {
	s.in.Close()
	s.cmd.Wait()
}

// ---- measuring ----

// sample is one run, in ms: from the start of the agent's reply (the
// fake's first write of it), unless named from the request.
type sample struct {
	replyStart float64 // from the request
	replyEnd   float64
	judgeAsked []float64 // each judge request's arrival, in order
	verdict    float64   // the last verdict sent
	firstRun   float64   // the first call of send reached the tool server
	lastRun    float64   // the last call of send had run and answered
	lastRunReq float64   // the same, from the request
	done       float64   // the run's end, as its client saw it, from the request
	ran        int       // calls of send that ran
	judgements int       // judge requests
	unjudged   int       // of them, with no verdict on that call before it reached the tool server
}

// measure reads one run off the wires: the fake's calls and the tool
// server's executions.
func measure(start, end time.Time, model []wiretap.Call, execs []execution) (sample, error) {
	// A verdict is sent with the judge's text, its answer's second write
	// (the first is the role's); the write's time is taken before the
	// write, so before any client could read it.
	judged := map[string][]time.Time{}
	var agent *wiretap.Call
	var asked []time.Time
	for i, c := range model {
		r := readRequest(c.Body)
		switch {
		case strings.Contains(r.system, judgeWords):
			k := judgedKey(r.lastUser)
			if k == "" {
				return sample{}, errors.New("a judge was asked about no call of this bench")
			}
			if len(c.Writes) > 1 {
				judged[k] = append(judged[k], c.Writes[1])
			}
			asked = append(asked, c.At)
		case !r.results && (agent == nil || c.At.Before(agent.At)):
			agent = &model[i]
		}
	}
	if agent == nil || len(agent.Writes) == 0 {
		return sample{}, errors.New("the fake saw no reply with the calls")
	}
	t0 := agent.Writes[0]
	since := func(t time.Time) float64 { return stats.Ms(t.Sub(t0)) }
	s := sample{replyStart: stats.Ms(t0.Sub(start)), replyEnd: since(agent.Writes[len(agent.Writes)-1]), done: stats.Ms(end.Sub(start)), ran: len(execs), judgements: len(asked)}
	slices.SortFunc(asked, func(a, b time.Time) int { return a.Compare(b) })
	for _, a := range asked {
		s.judgeAsked = append(s.judgeAsked, since(a))
	}
	for _, vs := range judged {
		for _, v := range vs {
			s.verdict = max(s.verdict, since(v))
		}
	}
	keys := map[string]bool{}
	for i, e := range execs {
		if e.key == "" || keys[e.key] {
			return sample{}, fmt.Errorf("send ran with %q: not one of this run's calls, or twice", e.key)
		}
		keys[e.key] = true
		if i == 0 || since(e.at) < s.firstRun {
			s.firstRun = since(e.at)
		}
		s.lastRun = max(s.lastRun, since(e.end))
		s.lastRunReq = max(s.lastRunReq, stats.Ms(e.end.Sub(start)))
		if !slices.ContainsFunc(judged[e.key], func(v time.Time) bool { return v.Before(e.at) }) {
			s.unjudged++
		}
	}
	return s, nil
}

func main() {
	rounds := flag.Int("rounds", 12, "measured rounds; each runs every mode once, in a rotating order")
	warmup := flag.Int("warmup", 2, "unmeasured rounds first")
	store := flag.String("store", "sqlite", "where our server keeps instances: sqlite (its default) or memory")
	dir := flag.String("sdk", "bench/actions", `where agents.mjs and its node_modules are; "" skips (c)`)
	flag.Parse()
	res, err := run(config{rounds: *rounds, warmup: *warmup, store: *store, sdkDir: *dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, "actions:", err)
		os.Exit(1)
	}
	report(os.Stdout, res)
	if !res.goalUnjudged {
		os.Exit(1) // ours ran a call no judge had accepted: a bug, not a slow run
	}
}

type config struct {
	rounds, warmup int
	store          string
	sdkDir         string
}

// mode is one way of running the workload.
type mode struct {
	name, what string
	run        func(input string) error
}

// results are a run of the program.
type results struct {
	cfg          config
	modes        []mode
	samples      map[string][]sample
	sdk, skipped string
	goalUnjudged bool // ours ran no unjudged call
}

func run(cfg config) (*results, error) {
	if cfg.store != "sqlite" && cfg.store != "memory" {
		return nil, errors.New(`-store is "sqlite" or "memory"`)
	}
	if cfg.rounds < 1 || cfg.warmup < 0 {
		return nil, errors.New("-rounds is at least 1, and -warmup not negative")
	}
	tmp, err := os.MkdirTemp("", "superego-actions")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	sent := filepath.Join(tmp, "sent.log")
	os.Setenv(mcptest.LogEnv, sent) // the tool server, in this process, logs each send there

	tap := &wiretap.Tap{}
	model := agentstest.NewOpenAI(script)
	model.Config.Handler = tap.Wrap(model.Config.Handler)
	model.Start()
	defer model.Close()
	toolTap := &toolTap{}
	web := httptest.NewServer(toolTap.wrap(mcptest.ActionsHandler()))
	defer web.Close()

	m := &tools.MCP{Servers: []tools.MCPServer{{Name: "web", URL: web.URL}}, Log: slog.New(slog.DiscardHandler)}
	m.Start()
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	m.Wait(ctx)
	cancel()
	send, ok := m.Tool("mcp__web__send")
	if !ok {
		return nil, errors.New("the MCP test server offers no send")
	}
	url, stop, err := serve(model.URL, cfg.store, tmp, m)
	if err != nil {
		return nil, err
	}
	defer stop()
	client := &http.Client{Transport: &http.Transport{}}
	p := &agents.Providers{Default: "openai:fake", OpenAIKey: "k", OpenAIBaseURL: model.URL + "/v1"}
	llm, err := p.Model("")
	if err != nil {
		return nil, err
	}
	b := &naive{model: llm, send: send}

	res := &results{cfg: cfg, samples: map[string][]sample{}}
	res.modes = []mode{
		{"a_superego", "ours, tool_judge, calls judged as they stream", func(in string) error { return ours(client, url, "judged", in) }},
		{"b_naive", "the whole reply, then judge and run one call at a time", func(in string) error { return b.run(context.Background(), in) }},
		{"control", "ours with no judge: the check must count 3 unjudged", func(in string) error { return ours(client, url, "unjudged", in) }},
	}
	res.skipped = "-sdk is empty"
	if cfg.sdkDir != "" {
		var js *sdk
		if js, res.skipped = startSDK(cfg.sdkDir, model.URL, web.URL); js != nil {
			defer js.close()
			res.sdk = js.versions
			res.modes = slices.Insert(res.modes, 2, mode{"c_agents_sdk", "tool input guardrails on the MCP server's tools", js.run})
		}
	}

	n := 0
	for round := range cfg.warmup + cfg.rounds {
		for i := range res.modes {
			md := res.modes[(round+i)%len(res.modes)] // each round starts with the next mode
			n++
			runID := "run-" + strconv.Itoa(n)
			input := "Send the team the three reports. " + runID
			tap.Take()
			toolTap.take()
			start := time.Now() // for (c), as the line goes to Node
			if err := md.run(input); err != nil {
				return nil, fmt.Errorf("%s: %w", md.name, err)
			}
			end := time.Now()
			s, err := measure(start, end, tap.Take(), toolTap.take())
			if err != nil {
				return nil, fmt.Errorf("%s: %w", md.name, err)
			}
			if l, err := logged(sent, runID); err != nil || l != s.ran || s.ran != calls {
				return nil, fmt.Errorf("%s: send ran %d times by the tool server's log, %d by its wire (%v); want %d", md.name, l, s.ran, err, calls)
			}
			if round >= cfg.warmup {
				res.samples[md.name] = append(res.samples[md.name], s)
			}
		}
	}
	res.goalUnjudged = !slices.ContainsFunc(res.samples["a_superego"], func(s sample) bool { return s.unjudged > 0 })
	return res, nil
}

// column is one measure across a mode's samples.
func column(ss []sample, f func(sample) float64) stats.Summary {
	xs := make([]float64, len(ss))
	for i, s := range ss {
		xs[i] = f(s)
	}
	return stats.Summarize(xs)
}

func total(ss []sample, f func(sample) int) int {
	n := 0
	for _, s := range ss {
		n += f(s)
	}
	return n
}

func report(w io.Writer, res *results) {
	cfg := res.cfg
	fmt.Fprintf(w, "actions: %d rounds (after %d warm-up), modes in a rotating order; %d calls of send whose arguments are whole every %s; each judgement %s; store %s; GOMAXPROCS %d\n",
		cfg.rounds, cfg.warmup, calls, callGap, judgeTime, cfg.store, runtime.GOMAXPROCS(0))
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Fprintf(w, "load average at the end: %s\n", strings.Join(strings.Fields(string(load))[:3], " "))
	}
	if res.sdk != "" {
		fmt.Fprintf(w, "(c) runs OpenAI's Agents SDK for JavaScript: %s\n", res.sdk)
	} else {
		fmt.Fprintf(w, "SKIPPED (c), the Agents SDK: %s\n", res.skipped)
	}
	fmt.Fprintln(w, "\nms from the start of the agent's reply (the fake's first write of it) to the last call having run (its tool server answered), and from the client's request:")
	fmt.Fprintf(w, "%-13s %-26s %-26s %-26s %-12s %-10s %s\n", "mode", "reply start → last run", "request → last run", "request → done", "calls ran", "unjudged", "judgements")
	out := map[string]any{"bench": "actions", "rounds": cfg.rounds, "store": cfg.store, "calls": calls, "call_gap_ms": stats.Ms(callGap),
		"judge_ms": stats.Ms(judgeTime), "goal_ms": goalMS, "go": runtime.Version(), "gomaxprocs": runtime.GOMAXPROCS(0)}
	if res.sdk != "" {
		var v any
		json.Unmarshal([]byte(res.sdk), &v)
		out["sdk"] = v
	} else {
		out["sdk_skipped"] = res.skipped
	}
	for _, md := range res.modes {
		ss := res.samples[md.name]
		last, lastReq, done := column(ss, func(s sample) float64 { return s.lastRun }), column(ss, func(s sample) float64 { return s.lastRunReq }),
			column(ss, func(s sample) float64 { return s.done })
		ran, unjudged := total(ss, func(s sample) int { return s.ran }), total(ss, func(s sample) int { return s.unjudged })
		judgements := total(ss, func(s sample) int { return s.judgements })
		fmt.Fprintf(w, "%-13s %-26s %-26s %-26s %-12s %-10d %d\n", md.name, last, lastReq, done, fmt.Sprintf("%d of %d", ran, calls*len(ss)), unjudged, judgements)
		out[md.name] = map[string]any{"what": md.what, "last_run_ms": last, "last_run_from_request_ms": lastReq, "done_ms": done,
			"calls_ran": ran, "unjudged": unjudged, "judgements": judgements}
	}

	fmt.Fprintln(w, "\nwhere the time goes (medians, ms from the start of the agent's reply; the first column from the client's request):")
	fmt.Fprintf(w, "%-13s %-14s %-12s %-22s %-18s %-22s %s\n", "mode", "reply started", "reply ended", "judges asked", "last verdict sent", "first call at server", "last call ran")
	for _, md := range res.modes {
		ss := res.samples[md.name]
		med := func(f func(sample) float64) string { return strconv.FormatFloat(column(ss, f).Median, 'f', 0, 64) }
		var asked []string
		for k := range calls {
			if !slices.ContainsFunc(ss, func(s sample) bool { return len(s.judgeAsked) > k }) {
				break
			}
			asked = append(asked, med(func(s sample) float64 { return s.judgeAsked[min(k, len(s.judgeAsked)-1)] }))
		}
		if len(asked) == 0 {
			asked = []string{"-"}
		}
		verdict := "-"
		if ss[0].verdict > 0 {
			verdict = med(func(s sample) float64 { return s.verdict })
		}
		fmt.Fprintf(w, "%-13s %-14s %-12s %-22s %-18s %-22s %s\n", md.name, med(func(s sample) float64 { return s.replyStart }),
			med(func(s sample) float64 { return s.replyEnd }), strings.Join(asked, ", "), verdict,
			med(func(s sample) float64 { return s.firstRun }), med(func(s sample) float64 { return s.lastRun }))
	}

	a := res.samples["a_superego"]
	last := column(a, func(s sample) float64 { return s.lastRun })
	within := len(slices.DeleteFunc(slices.Clone(a), func(s sample) bool { return s.lastRun > goalMS }))
	met := last.Median <= goalMS && res.goalUnjudged
	fmt.Fprintf(w, "\ngoal: (a) last run ≤ 1.1 × (reply %s + one judgement %s) = %.0f ms, and 0 unjudged: measured %s ms, %d unjudged: %s (%d of %d runs within)\n",
		calls*callGap, judgeTime, goalMS, last, total(a, func(s sample) int { return s.unjudged }), verdictWord(met), within, len(a))
	out["goal_met"], out["goal_runs_within"] = met, within
	line, _ := json.Marshal(out)
	fmt.Fprintln(w, string(line))
}

func verdictWord(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}
