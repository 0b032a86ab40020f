// Command gating measures output gating (docs/gating.md): how
// long a client waits for the first byte of an assistant's draft that a
// superego judges, with the whole draft judged at the end, with
// judge_stream, and with gating off; and how many judge calls a draft costs.
//
// A fake model speaks OpenAI's wire protocol over loopback HTTP: the
// assistant streams a 2,000-character draft, 50 bytes every 10 ms; the judge
// answers ACCEPT after 100 ms. The real server (engine, agents, api, SQLite)
// serves three flows on another loopback port, and an SSE client times each
// run from its request to the first released byte of the assistant's text
// and to done. The modes are interleaved, round after round. For every
// gated run the program checks, against the judge requests the fake saw,
// that every byte the client was sent had been judged and accepted before
// it arrived.
//
//	go run ./bench/gating [-rounds 25] [-store sqlite|memory]
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"superego/agents/agentstest"
	"superego/bench/internal/loopback"
	"superego/bench/internal/stats"
	"superego/bench/internal/wiretap"
	"superego/flow"
)

// The workload: what the comparison runs, and how many times.
const (
	draftChars   = 2000
	pieceBytes   = 50                    // the model streams this many bytes…
	pace         = 10 * time.Millisecond // …this often
	judgeTime    = 100 * time.Millisecond
	chunkChars   = 200
	contextChars = 100
)

// modes are the three flows compared: the same graph, the assistant's
// draft judged whole, judged as it streams, and not gated.
var modes = []struct{ name, flow string }{
	{"whole", graph("", "")},
	{"judge_stream", graph(fmt.Sprintf(`"judge_stream": {"chunk_chars": %d, "context_chars": %d},`, chunkChars, contextChars), "")},
	{"ungated", graph("", `"gating": "off",`)},
}

func graph(judgeStream, gating string) string {
	return `{"name": "gating bench", ` + gating + ` "graph": {"start": "assistant", "nodes": {
  "assistant": {"type": "inner_agent", "agent_id": "assistant", "system_prompt": "Answer at length.",
    "transitions": {"COMPLETE": "output_superego"}},
  "output_superego": {"type": "superego", "agent_id": "output_superego", "constitution": "Nothing harmful goes out.", ` + judgeStream + `
    "transitions": {"ACCEPT": null, "BLOCK": null}}}}}`
}

// draft is the assistant's visible text: numbered sentences, so that every
// chunk a judge is shown is found in it at one place only.
var draft = func() string {
	var b strings.Builder
	for i := 1; b.Len() < draftChars; i++ {
		fmt.Fprintf(&b, "Sentence %03d of the draft says nothing that harms anyone. ", i)
	}
	return b.String()[:draftChars]
}()

// reply is the assistant's whole answer in the model protocol (docs/flows.md);
// its visible text starts after prefix bytes.
var (
	reply  = agentstest.JSON("", "COMPLETE", "", draft)
	prefix = strings.Index(reply, draft)
)

// call is one request the fake model answered.
type call struct {
	node     string
	at       time.Time // the request arrived
	verdict  time.Time // a judge's answer was about to be written
	chunk    bool      // a chunk judgement, else the whole draft's
	from     int       // where the judged text starts in the draft, -1 if it is not in it
	text     string    // what the judge was shown to judge
	decision string
}

// fake is the model: the assistant streams the draft, the judge accepts
// everything after judgeTime. It keeps the calls of the run in progress.
type fake struct {
	mu    sync.Mutex
	calls []call
}

func (f *fake) script(r agentstest.Request) agentstest.Answer {
	c := call{node: r.Node(), at: time.Now()}
	var a agentstest.Answer
	switch c.node {
	case "assistant":
		a = agentstest.Answer{Text: reply, Chunk: pieceBytes, Pace: pace}
	case "output_superego":
		time.Sleep(judgeTime)
		c.decision, c.verdict = flow.Accept, time.Now()
		c.chunk, c.from, c.text = judged(r.LastUser())
		a = agentstest.Answer{Text: agentstest.JSON("", c.decision, "", ""), Chunk: 1 << 20}
	default:
		a = agentstest.Answer{Status: http.StatusBadRequest, Text: "unknown node " + c.node}
	}
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	return a
}

// judged reads what a judge request asks to judge, in the wording of
// agents/prompt.go, and where that text is in the draft.
func judged(msg string) (chunk bool, from int, text string) {
	const part, before, whole = "Judge this part, the next to go out (the draft may go on after it):\n",
		"The text just before this part, judged already:\n", "The draft from assistant:\n"
	if i := strings.Index(msg, part); i >= 0 {
		text = msg[i+len(part):]
		ctx := ""
		if j := strings.Index(msg, before); j >= 0 {
			ctx = strings.TrimSuffix(msg[j+len(before):i], "\n\n")
		}
		if k := strings.Index(draft, ctx+text); k >= 0 {
			return true, k + len(ctx), text
		}
		return true, -1, text
	}
	if i := strings.Index(msg, whole); i >= 0 {
		text = msg[i+len(whole):]
		if strings.HasPrefix(draft, text) {
			return false, 0, text
		}
	}
	return false, -1, text
}

func (f *fake) take() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// delta is a piece of the assistant's released text as the client got it.
type delta struct {
	at   time.Time
	from int
	text string
}

// result is one run as the client and the fake saw it.
type result struct {
	firstByte, done time.Duration
	judgeCalls      int
	chunkCalls      int
	chunksInStep    int           // the judge's step lists them too
	unjudged        int           // released bytes no accepted judgement covered when they arrived
	genFirstChunk   time.Duration // the model had written the first judged chunk
	reached         time.Duration // and chunk_chars of text, when the chunker may cut
	firstJudge      time.Duration // the first chunk judgement took
	askedAt         time.Duration // the first chunk judgement was asked for
	verdictAt       time.Duration // and answered
	// Where the time to done goes: the model's stream ended, the last
	// chunk judgement was answered, the whole draft's was asked for and
	// answered.
	streamEnd, lastChunk, finalAsked, finalVerdict time.Duration
}

type bench struct {
	url    string
	client *http.Client
	fake   *fake
	tap    *wiretap.Tap // the fake's wire
}

// run runs one flow and reads its stream to done.
func (b *bench) run(flowID string) (result, error) {
	var r result
	b.tap.Take()
	b.fake.take()
	body := fmt.Sprintf(`{"flow_id": %q, "input": "Tell me about it at length."}`, flowID)
	start := time.Now()
	resp, err := b.client.Post(b.url+"/flow/execute", "application/json", strings.NewReader(body))
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	var deltas []delta
	var got strings.Builder
	var status string
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for ev := (event{}); ; {
		line, err := br.ReadString('\n')
		if err != nil {
			return r, fmt.Errorf("%s: the stream ended before done: %w", flowID, err)
		}
		line = strings.TrimRight(line, "\r\n")
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			ev.name = v
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok {
			ev.data = v
		}
		if line != "" || ev.name == "" {
			continue
		}
		now := time.Now()
		switch ev.name {
		case "partial_output":
			var p flow.Partial
			if err := json.Unmarshal([]byte(ev.data), &p); err != nil {
				return r, err
			}
			if p.Node == "assistant" {
				deltas = append(deltas, delta{now, got.Len(), p.Delta})
				got.WriteString(p.Delta)
			}
		case "complete_step":
			var s flow.Step
			if err := json.Unmarshal([]byte(ev.data), &s); err != nil {
				return r, err
			}
			if s.Node == "output_superego" {
				r.chunksInStep = len(s.Chunks)
			}
		case "done":
			var d flow.Done
			if err := json.Unmarshal([]byte(ev.data), &d); err != nil {
				return r, err
			}
			r.done, status = now.Sub(start), d.Status
		}
		if ev.name == "done" {
			break
		}
		ev = event{}
	}
	if status != flow.StatusCompleted || got.String() != draft {
		return r, fmt.Errorf("%s: status %s, %d of the draft's %d bytes released", flowID, status, got.Len(), len(draft))
	}
	if len(deltas) > 0 {
		r.firstByte = deltas[0].at.Sub(start)
	}
	var writes []time.Time // of the assistant's answer: its role, then each piece of text, then the end
	for _, c := range b.tap.Take() {
		if bytes.Contains(c.Body, []byte(`You are the agent \"assistant\"`)) {
			writes = c.Writes
		}
	}
	calls := b.fake.take()
	var firstChunk *call
	for i, c := range calls {
		switch {
		case c.node == "assistant":
		case c.from < 0:
			return r, fmt.Errorf("%s: a judge was shown text that is not the draft's: %.80q", flowID, c.text)
		case c.chunk:
			r.judgeCalls++
			r.chunkCalls++
			if firstChunk == nil || c.from < firstChunk.from {
				firstChunk = &calls[i]
			}
			r.lastChunk = max(r.lastChunk, c.verdict.Sub(start))
		default:
			r.judgeCalls++
			r.finalAsked, r.finalVerdict = c.at.Sub(start), c.verdict.Sub(start)
		}
	}
	if len(writes) < 2+len(reply)/pieceBytes {
		return r, fmt.Errorf("%s: the assistant's answer was cut short", flowID)
	}
	r.streamEnd = writes[len(writes)-1].Sub(start)
	if firstChunk != nil {
		// The model wrote the chunk's last byte with the piece it is in,
		// after the role's event.
		end := prefix + firstChunk.from + len(firstChunk.text) - 1
		r.genFirstChunk = writes[1+end/pieceBytes].Sub(start)
		r.reached = writes[1+(prefix+chunkChars-1)/pieceBytes].Sub(start)
		r.firstJudge = firstChunk.verdict.Sub(firstChunk.at)
		r.askedAt, r.verdictAt = firstChunk.at.Sub(start), firstChunk.verdict.Sub(start)
	}
	r.unjudged = unjudged(deltas, calls)
	return r, nil
}

type event struct{ name, data string }

// unjudged counts the released bytes that had not been judged, and
// accepted, when they reached the client: each byte must lie in a judged
// text whose ACCEPT the judge sent before the byte arrived.
func unjudged(deltas []delta, calls []call) int {
	n := 0
	for _, d := range deltas {
		for i := range len(d.text) {
			pos, ok := d.from+i, false
			for _, c := range calls {
				if c.decision == flow.Accept && c.from >= 0 && c.from <= pos && pos < c.from+len(c.text) && c.verdict.Before(d.at) {
					ok = true
					break
				}
			}
			if !ok {
				n++
			}
		}
	}
	return n
}

// serve starts the server `superego serve` runs, with the flows, on a
// loopback port, its model the fake at modelURL.
func serve(modelURL, store, dir string) (url string, stop func(), err error) {
	flows := map[string]*flow.Flow{}
	for _, m := range modes {
		def, err := flow.Parse([]byte(m.flow), flow.Catalog{})
		if err != nil {
			return "", nil, fmt.Errorf("flow %s: %w", m.name, err)
		}
		flows[m.name] = &flow.Flow{ID: m.name, Def: def}
	}
	return loopback.Server{Flows: flows, ModelURL: modelURL, Store: store, Dir: dir}.Serve()
}

func main() {
	rounds := flag.Int("rounds", 25, "measured runs of each mode, interleaved")
	warmup := flag.Int("warmup", 2, "unmeasured rounds first")
	store := flag.String("store", "sqlite", "where the server keeps instances: sqlite (its default) or memory")
	flag.Parse()
	if err := run(*rounds, *warmup, *store); err != nil {
		fmt.Fprintln(os.Stderr, "gating:", err)
		os.Exit(1)
	}
}

func run(rounds, warmup int, store string) error {
	if store != "sqlite" && store != "memory" {
		return errors.New(`-store is "sqlite" or "memory"`)
	}
	dir, err := os.MkdirTemp("", "superego-gating")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	f, tap := &fake{}, &wiretap.Tap{}
	model := agentstest.NewOpenAI(f.script)
	model.Config.Handler = tap.Wrap(model.Config.Handler)
	model.Start()
	defer model.Close()
	url, stop, err := serve(model.URL, store, dir)
	if err != nil {
		return err
	}
	defer stop()
	b := &bench{url: url, fake: f, tap: tap, client: &http.Client{Transport: &http.Transport{}}}

	type series struct {
		first, done, calls, chunkCalls, goal, gen, reached, judge, asked []float64
		verdict                                                          []float64
		streamEnd, lastChunk, finalAsked, finalVerdict                   []float64
		unjudged, chunkMismatch                                          int
	}
	all := map[string]*series{}
	for _, m := range modes {
		all[m.name] = &series{}
	}
	for round := range warmup + rounds {
		// Each round starts with the next mode, so none is always first.
		for i := range modes {
			m := modes[(round+i)%len(modes)]
			r, err := b.run(m.name)
			if err != nil {
				return err
			}
			if round < warmup {
				continue
			}
			s := all[m.name]
			s.first = append(s.first, stats.Ms(r.firstByte))
			s.done = append(s.done, stats.Ms(r.done))
			s.calls = append(s.calls, float64(r.judgeCalls))
			s.chunkCalls = append(s.chunkCalls, float64(r.chunkCalls))
			s.unjudged += r.unjudged // ungated: the whole draft, by design
			s.streamEnd = append(s.streamEnd, stats.Ms(r.streamEnd))
			s.lastChunk = append(s.lastChunk, stats.Ms(r.lastChunk))
			s.finalAsked = append(s.finalAsked, stats.Ms(r.finalAsked))
			s.finalVerdict = append(s.finalVerdict, stats.Ms(r.finalVerdict))
			// A judgement still in flight when the draft ends is called off
			// (the whole draft is judged next): the step lists the others.
			if r.chunksInStep > r.chunkCalls {
				s.chunkMismatch++
			}
			if m.name == "judge_stream" {
				s.gen = append(s.gen, stats.Ms(r.genFirstChunk))
				s.reached = append(s.reached, stats.Ms(r.reached))
				s.judge = append(s.judge, stats.Ms(r.firstJudge))
				s.goal = append(s.goal, 1.5*stats.Ms(r.genFirstChunk+r.firstJudge))
				s.asked = append(s.asked, stats.Ms(r.askedAt))
				s.verdict = append(s.verdict, stats.Ms(r.verdictAt))
			}
		}
	}

	fmt.Printf("gating: %d rounds (after %d warm-up), modes interleaved; draft %d chars at %d bytes per %s, judge %s; store %s; GOMAXPROCS %d\n\n",
		rounds, warmup, draftChars, pieceBytes, pace, judgeTime, store, runtime.GOMAXPROCS(0))
	fmt.Printf("%-13s %-26s %-26s %-27s %s\n", "mode", "first byte ms (min–max)", "done ms (min–max)", "judge calls/draft (chunks)", "released bytes not judged first")
	out := map[string]any{"bench": "gating", "rounds": rounds, "store": store, "draft_chars": draftChars, "judge_ms": stats.Ms(judgeTime),
		"chunk_chars": chunkChars, "context_chars": contextChars, "go": runtime.Version(), "gomaxprocs": runtime.GOMAXPROCS(0)}
	for _, m := range modes {
		s := all[m.name]
		first, done, calls := stats.Summarize(s.first), stats.Summarize(s.done), stats.Summarize(s.calls)
		chunks := stats.Summarize(s.chunkCalls)
		fmt.Printf("%-13s %6.1f (%6.1f–%6.1f)      %6.1f (%6.1f–%6.1f)      %4.0f (%.0f–%.0f), %2.0f chunks     %d of %d runs' %d bytes\n", m.name,
			first.Median, first.Min, first.Max, done.Median, done.Min, done.Max, calls.Median, calls.Min, calls.Max, chunks.Median, s.unjudged, rounds, rounds*len(draft))
		out[m.name] = map[string]any{"first_byte_ms": first, "done_ms": done, "judge_calls": calls, "chunk_judge_calls": stats.Summarize(s.chunkCalls), "unjudged_bytes": s.unjudged, "chunk_count_mismatches": s.chunkMismatch}
	}
	js := all["judge_stream"]
	gen, judge, goal, first := stats.Summarize(js.gen), stats.Summarize(js.judge), stats.Summarize(js.goal), stats.Summarize(js.first)
	asked, verdict := stats.Summarize(js.asked), stats.Summarize(js.verdict)
	met := 0
	for i := range js.first {
		if js.first[i] <= js.goal[i] {
			met++
		}
	}
	fmt.Printf("\ngoal (judge_stream): first byte ≤ 1.5 × (first chunk generated + one judge call)\n")
	fmt.Printf("  first chunk generated at %.1f ms (%.1f–%.1f), judge call %.1f ms (%.1f–%.1f): goal %.1f ms (%.1f–%.1f)\n",
		gen.Median, gen.Min, gen.Max, judge.Median, judge.Min, judge.Max, goal.Median, goal.Min, goal.Max)
	fmt.Printf("  measured first byte %.1f ms (%.1f–%.1f): met in %d of %d runs\n", first.Median, first.Min, first.Max, met, rounds)
	fmt.Printf("  timeline (medians from the request, ms): chunk written %.1f → %d characters written %.1f → judge asked %.1f → verdict %.1f → first byte at the client %.1f\n",
		gen.Median, chunkChars, stats.Summarize(js.reached).Median, asked.Median, verdict.Median, first.Median)
	fmt.Println("\nwhere the time to done goes (medians from the request, ms):")
	fmt.Printf("%-13s %-12s %-18s %-18s %-14s %s\n", "mode", "stream ends", "last chunk judged", "whole draft asked", "its verdict", "done")
	for _, m := range modes {
		s := all[m.name]
		last := "-"
		if m.name == "judge_stream" {
			last = fmt.Sprintf("%.1f", stats.Summarize(s.lastChunk).Median)
		}
		fmt.Printf("%-13s %-12.1f %-18s %-18.1f %-14.1f %.1f\n", m.name, stats.Summarize(s.streamEnd).Median, last,
			stats.Summarize(s.finalAsked).Median, stats.Summarize(s.finalVerdict).Median, stats.Summarize(s.done).Median)
	}
	gated := all["whole"].unjudged + js.unjudged
	fmt.Printf("never a byte that was not judged (whole, judge_stream): %d unjudged bytes in %d runs\n", gated, 2*rounds)
	fmt.Printf("the judge's step lists no chunk the fake did not judge in %d of %d judge_stream runs (a judgement in flight when the draft ends is called off, and not listed)\n", rounds-js.chunkMismatch, rounds)
	out["goal_ms"], out["goal_met_runs"], out["first_chunk_generated_ms"], out["first_chunk_judge_ms"] = goal, met, gen, judge
	out["unjudged_gated_bytes"] = gated
	line, err := json.Marshal(out)
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	if gated > 0 {
		return fmt.Errorf("%d released bytes had not been judged", gated)
	}
	return nil
}
