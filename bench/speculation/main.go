// Command speculation compares, in one run, three ways to put an input
// judge in front of a streaming agent (docs/gating.md):
//
//	(a) superego, sequential: the judge, then the agent;
//	(b) superego with speculate: the agent starts with the judge, its
//	    events held until the verdict;
//	(c) OpenAI's Agents SDK for JavaScript: an input guardrail that runs in
//	    parallel with the agent, the SDK's default (agents.mjs).
//
// One fake model speaks OpenAI's wire protocol over loopback HTTP to all
// three: the judge answers in 400 ms; the agent sends its first token after
// 300 ms and streams for 1,000 ms more. It tells the judge's calls from the
// agent's by their system prompt. The real server (engine, agents, api,
// SQLite) runs (a) and (b) on another loopback port, read by an SSE client;
// a Node process runs (c). Each round runs every mode on an input the judge
// accepts and on one it blocks, interleaved, and measures what the client
// sees: the first token of the agent's text, the end, and on BLOCK how many
// bytes of the agent's text reached it.
//
//	go run ./bench/speculation [-rounds 12] [-sdk bench/speculation]
//
// Without node, or without the SDK installed in -sdk (npm ci), it runs (a)
// and (b) and says that it skipped (c).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"superego/agents/agentstest"
	"superego/bench/internal/loopback"
	"superego/bench/internal/stats"
	"superego/bench/internal/wiretap"
	"superego/flow"
)

// The workload: what the comparison runs, and how many times.
const (
	judgeTime  = 400 * time.Millisecond
	firstToken = 300 * time.Millisecond
	pieces     = 51 // the agent's text: the first piece at firstToken, the last 1,000 ms later
	pace       = 20 * time.Millisecond
	pieceBytes = 80

	judgeWords = "You are the input judge." // in both judges' system prompts
	blockWord  = "BLOCK-ME"                 // in the input the judge blocks
)

var inputs = map[string]string{
	flow.Accept: "Tell me a long story about the sea.",
	flow.Block:  blockWord + ": tell me how to hurt someone.",
}

func graph(speculate bool) string {
	return fmt.Sprintf(`{"name": "speculation bench", "graph": {"start": "input_superego", "nodes": {
  "input_superego": {"type": "superego", "agent_id": "input_superego", "speculate": %t,
    "constitution": "%s Block what asks for harm; accept the rest.",
    "transitions": {"ACCEPT": "assistant", "BLOCK": null}},
  "assistant": {"type": "inner_agent", "agent_id": "assistant", "system_prompt": "Answer at length.",
    "transitions": {"COMPLETE": null}}}}}`, speculate, judgeWords)
}

// text is n bytes of plain words.
func text(n int) string {
	return strings.Repeat("The sea goes on and on. ", n/24+1)[:n]
}

// The agent's answers, pieces × pieceBytes bytes each: ours in the model
// protocol (docs/flows.md), whose first piece holds the JSON before the visible
// text and the first few characters of it; the SDK's in plain text.
var (
	empty    = agentstest.JSON("", "COMPLETE", "", "")
	ourReply = agentstest.JSON("", "COMPLETE", "", text(pieces*pieceBytes-len(empty)))
	sdkReply = text(pieces * pieceBytes)
)

// script is the fake model's, for every mode.
func script(r agentstest.Request) agentstest.Answer {
	switch {
	case strings.Contains(r.System, judgeWords):
		d, why := flow.Accept, ""
		if strings.Contains(r.LastUser(), blockWord) {
			d, why = flow.Block, "I will not help with that."
		}
		return agentstest.Answer{Text: agentstest.JSON("", d, "", why), Chunk: 1 << 20, Delay: judgeTime}
	case r.Node() == "assistant":
		return agentstest.Answer{Text: ourReply, Chunk: pieceBytes, Pace: pace, Delay: firstToken}
	}
	return agentstest.Answer{Text: sdkReply, Chunk: pieceBytes, Pace: pace, Delay: firstToken}
}

// result is one run as the client saw it, and the model's side of it.
type result struct {
	firstToken time.Duration // -1: none
	done       time.Duration
	bytes      int    // of the agent's text, received
	ending     string // the run's status, or how the SDK's run ended
}

// ours runs one of our flows and reads its stream to done.
func ours(client *http.Client, url, flowID, input string) (result, error) {
	r := result{firstToken: -1}
	body, _ := json.Marshal(map[string]string{"flow_id": flowID, "input": input})
	start := time.Now()
	resp, err := client.Post(url+"/flow/execute", "application/json", bytes.NewReader(body))
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var name, data string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return r, fmt.Errorf("%s: the stream ended before done: %w", flowID, err)
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			name = line[7:]
		case strings.HasPrefix(line, "data: "):
			data = line[6:]
		case line == "" && name == "partial_output":
			var p flow.Partial
			if err := json.Unmarshal([]byte(data), &p); err != nil {
				return r, err
			}
			if p.Node == "assistant" {
				if r.firstToken < 0 {
					r.firstToken = time.Since(start)
				}
				r.bytes += len(p.Delta)
			}
		case line == "" && name == "done":
			var d flow.Done
			if err := json.Unmarshal([]byte(data), &d); err != nil {
				return r, err
			}
			r.done, r.ending = time.Since(start), d.Status
			return r, nil
		}
	}
}

// sdk is the Node process that runs (c).
type sdk struct {
	cmd      *exec.Cmd
	in       io.WriteCloser
	out      *bufio.Scanner
	versions string
}

// startSDK starts agents.mjs in dir, on the fake model; nil, and why, when
// node or the SDK is missing.
func startSDK(dir, modelURL string) (*sdk, string) {
	if _, err := exec.LookPath("node"); err != nil {
		return nil, "node is not installed"
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@openai", "agents")); err != nil {
		return nil, "@openai/agents is not installed in " + dir + " (make bench-speculation runs npm ci there)"
	}
	cmd := exec.Command("node", "agents.mjs")
	cmd.Dir, cmd.Stderr = dir, os.Stderr
	cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+modelURL+"/v1", "OPENAI_API_KEY=fake-key")
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

func (s *sdk) run(input string) (result, error) {
	line, _ := json.Marshal(map[string]string{"input": input})
	if _, err := fmt.Fprintf(s.in, "%s\n", line); err != nil {
		return result{}, err
	}
	if !s.out.Scan() {
		return result{}, errors.New("agents.mjs ended")
	}
	var o struct {
		FirstTokenMS *float64 `json:"first_token_ms"`
		DoneMS       float64  `json:"done_ms"`
		Bytes        int      `json:"bytes"`
		Outcome      string   `json:"outcome"`
		RaisedBy     string   `json:"raised_by"`
		Error        string   `json:"error"`
	}
	if err := json.Unmarshal(s.out.Bytes(), &o); err != nil {
		return result{}, err
	}
	if o.Outcome == "error" {
		return result{}, fmt.Errorf("agents.mjs: %s", o.Error)
	}
	r := result{firstToken: -1, done: msDuration(o.DoneMS), bytes: o.Bytes, ending: o.Outcome}
	if o.RaisedBy != "" {
		r.ending += " (from " + o.RaisedBy + ")"
	}
	if o.FirstTokenMS != nil {
		r.firstToken = msDuration(*o.FirstTokenMS)
	}
	return r, nil
}

func (s *sdk) close() {
	s.in.Close()
	s.cmd.Wait()
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// serve starts the server `superego serve` runs, with the two flows, on a
// loopback port, its model the fake at modelURL.
func serve(modelURL, dir string) (url string, stop func(), err error) {
	flows := map[string]*flow.Flow{}
	for id, spec := range map[string]bool{"sequential": false, "speculative": true} {
		def, err := flow.Parse([]byte(graph(spec)), flow.Catalog{})
		if err != nil {
			return "", nil, fmt.Errorf("flow %s: %w", id, err)
		}
		flows[id] = &flow.Flow{ID: id, Def: def}
	}
	return loopback.Server{Flows: flows, ModelURL: modelURL, Store: "sqlite", Dir: dir}.Serve()
}

func main() {
	rounds := flag.Int("rounds", 12, "measured rounds; each runs every mode on ACCEPT and on BLOCK, interleaved")
	warmup := flag.Int("warmup", 2, "unmeasured rounds first")
	dir := flag.String("sdk", "bench/speculation", "where agents.mjs and its node_modules are")
	flag.Parse()
	if err := run(*rounds, *warmup, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "speculation:", err)
		os.Exit(1)
	}
}

// mode is one way of running the flow.
type mode struct {
	name string
	run  func(input string) (result, error)
	text int // bytes of the agent's visible text, once it is all out
}

func run(rounds, warmup int, sdkDir string) error {
	tmp, err := os.MkdirTemp("", "superego-speculation")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	tap := &wiretap.Tap{}
	model := agentstest.NewOpenAI(script)
	model.Config.Handler = tap.Wrap(model.Config.Handler)
	model.Start()
	defer model.Close()
	url, stop, err := serve(model.URL, tmp)
	if err != nil {
		return err
	}
	defer stop()
	client := &http.Client{Transport: &http.Transport{}}
	modes := []mode{
		{"a_sequential", func(in string) (result, error) { return ours(client, url, "sequential", in) }, len(ourReply) - len(empty)},
		{"b_speculate", func(in string) (result, error) { return ours(client, url, "speculative", in) }, len(ourReply) - len(empty)},
	}
	js, skipped := startSDK(sdkDir, model.URL)
	if js != nil {
		defer js.close()
		modes = append(modes, mode{"c_agents_sdk", js.run, len(sdkReply)})
	}

	type series struct {
		first, done, bytes, agentPieces                       []float64
		judgeAsked, verdict, agentAsked, agentFirst, agentEnd []float64
		cut, agentCalls                                       int
		endings                                               map[string]int
	}
	all := map[string]*series{}
	key := func(m, c string) string { return m + "/" + c }
	for _, m := range modes {
		for c := range inputs {
			all[key(m.name, c)] = &series{endings: map[string]int{}}
		}
	}
	for round := range warmup + rounds {
		for _, c := range []string{flow.Accept, flow.Block} {
			for i := range modes {
				m := modes[(round+i)%len(modes)] // each round starts with the next mode
				tap.Take()
				start := time.Now() // for (c), within a millisecond of the script's own start
				r, err := m.run(inputs[c])
				if err != nil {
					return fmt.Errorf("%s on %s: %w", m.name, c, err)
				}
				if c == flow.Accept && (r.ending != flow.StatusCompleted || r.bytes != m.text) || c == flow.Block && r.ending == flow.StatusCompleted {
					return fmt.Errorf("%s on %s: ended %s with %d bytes of the agent's text", m.name, c, r.ending, r.bytes)
				}
				if round < warmup {
					continue
				}
				s := all[key(m.name, c)]
				s.endings[r.ending]++
				if r.firstToken >= 0 {
					s.first = append(s.first, stats.Ms(r.firstToken))
				}
				s.done = append(s.done, stats.Ms(r.done))
				s.bytes = append(s.bytes, float64(r.bytes))
				// The fake's side; an answer's first write is the role's
				// event, then one per piece of text.
				for _, call := range tap.Take() {
					switch judge := bytes.Contains(call.Body, []byte(judgeWords)); {
					case judge && len(call.Writes) > 0:
						s.judgeAsked = append(s.judgeAsked, stats.Ms(call.At.Sub(start)))
						s.verdict = append(s.verdict, stats.Ms(call.Writes[0].Sub(start)))
					case !judge:
						s.agentCalls++
						s.agentAsked = append(s.agentAsked, stats.Ms(call.At.Sub(start)))
						if len(call.Writes) > 1 {
							s.agentFirst = append(s.agentFirst, stats.Ms(call.Writes[1].Sub(start)))
						}
						s.agentPieces = append(s.agentPieces, float64(max(min(len(call.Writes)-1, pieces), 0)))
						s.agentEnd = append(s.agentEnd, stats.Ms(call.End.Sub(start)))
						if call.HungUp {
							s.cut++
						}
					}
				}
			}
		}
	}

	fmt.Printf("speculation: %d rounds (after %d warm-up), modes and cases interleaved; judge %s, agent %s to its first token then %d pieces of %d bytes every %s; GOMAXPROCS %d\n",
		rounds, warmup, judgeTime, firstToken, pieces, pieceBytes, pace, runtime.GOMAXPROCS(0))
	if js != nil {
		fmt.Printf("(c) runs OpenAI's Agents SDK for JavaScript: %s\n\n", js.versions)
	} else {
		fmt.Printf("SKIPPED (c), the Agents SDK: %s\n\n", skipped)
	}
	fmt.Printf("%-13s %-7s %-22s %-25s %-18s %-30s %s\n", "mode", "case", "first token ms", "done ms", "agent bytes seen", "ended", "agent pieces sent (of 51), cut")
	out := map[string]any{"bench": "speculation", "rounds": rounds, "judge_ms": stats.Ms(judgeTime), "agent_first_token_ms": stats.Ms(firstToken),
		"agent_stream_ms": stats.Ms(time.Duration(pieces-1) * pace), "go": runtime.Version(), "gomaxprocs": runtime.GOMAXPROCS(0)}
	if js != nil {
		var v any
		json.Unmarshal([]byte(js.versions), &v)
		out["sdk"] = v
	} else {
		out["sdk_skipped"] = skipped
	}
	for _, m := range modes {
		for _, c := range []string{flow.Accept, flow.Block} {
			s := all[key(m.name, c)]
			endings := []string{}
			for e, n := range s.endings {
				endings = append(endings, fmt.Sprintf("%s×%d", e, n))
			}
			slices.Sort(endings)
			fmt.Printf("%-13s %-7s %-22s %-25s %-18s %-30s %s, %d of %d cut\n", m.name, c, stats.Summarize(s.first), stats.Summarize(s.done), stats.Summarize(s.bytes),
				strings.Join(endings, " "), stats.Summarize(s.agentPieces), s.cut, s.agentCalls)
			out[key(m.name, c)] = map[string]any{"first_token_ms": stats.Summarize(s.first), "done_ms": stats.Summarize(s.done), "agent_bytes": stats.Summarize(s.bytes),
				"endings": s.endings, "agent_pieces_sent": stats.Summarize(s.agentPieces), "agent_calls": s.agentCalls, "agent_calls_cut": s.cut}
		}
	}
	fmt.Println("\nwhere the time goes (medians, ms from the request; the model's side as its wire saw it):")
	fmt.Printf("%-13s %-7s %-12s %-13s %-12s %-18s %-16s %-12s %s\n", "mode", "case", "judge asked", "verdict sent", "agent asked", "agent 1st piece", "client 1st token", "agent ended", "client done")
	for _, m := range modes {
		for _, c := range []string{flow.Accept, flow.Block} {
			s := all[key(m.name, c)]
			med := func(xs []float64) string {
				if len(xs) == 0 {
					return "-"
				}
				return fmt.Sprintf("%.0f", stats.Summarize(xs).Median)
			}
			fmt.Printf("%-13s %-7s %-12s %-13s %-12s %-18s %-16s %-12s %s\n", m.name, c, med(s.judgeAsked), med(s.verdict), med(s.agentAsked),
				med(s.agentFirst), med(s.first), med(s.agentEnd), med(s.done))
		}
	}
	bound := 1.05 * stats.Ms(max(judgeTime, firstToken+time.Duration(pieces-1)*pace))
	b, a := all[key("b_speculate", flow.Accept)], all[key("a_sequential", flow.Accept)]
	bBlock := all[key("b_speculate", flow.Block)]
	done, leaked := stats.Summarize(b.done), stats.Summarize(bBlock.bytes)
	within := 0
	for _, d := range b.done {
		if d <= bound {
			within++
		}
	}
	fmt.Printf("\ngoal: (b) done ≤ 1.05 × max(judge, agent) = 1.05 × %.0f = %.0f ms: measured %s ms, %s (%d of %d runs within)\n",
		bound/1.05, bound, done, verdict(done.Median <= bound), within, len(b.done))
	fmt.Printf("      (b) done after the model's last byte: %s ms\n", stats.Summarize(subtract(b.done, b.agentEnd)))
	fmt.Printf("      (b) bytes on BLOCK = 0: measured %s, %s\n", leaked, verdict(leaked.Max == 0))
	fmt.Printf("      (a) pays judge + agent = %.0f ms: measured %s\n", stats.Ms(judgeTime+firstToken+time.Duration(pieces-1)*pace), stats.Summarize(a.done))
	if js != nil {
		fmt.Printf("      (c) bytes on BLOCK: measured %s\n", stats.Summarize(all[key("c_agents_sdk", flow.Block)].bytes))
	}
	out["goal_done_ms"], out["goal_met"], out["goal_runs_within"] = bound, done.Median <= bound && leaked.Max == 0, within
	line, err := json.Marshal(out)
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	return nil
}

// subtract is x - y, element by element.
func subtract(x, y []float64) []float64 {
	d := make([]float64, min(len(x), len(y)))
	for i := range d {
		d[i] = x[i] - y[i]
	}
	return d
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}
