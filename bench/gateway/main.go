// Command gateway measures how transparent the guarded model is, and what
// it costs: an agent framework's requests (instructions, a two-turn history
// with a call and its result, tools, temperature, seed, stop sequences,
// structured output, then the continuation with the new call's result)
// through bare_agent and guarded_agent, whose judges accept, on Chat
// Completions, Responses and Anthropic's Messages (to an Anthropic
// upstream, FLOW@anthropic:fake).
//
// One fake of each provider (agentstest, over loopback HTTP) answers: the
// agent after agentTime, every judge after judgeTime; bench/internal/wiretap records
// what the agent's model was sent. For each request through the server,
// the same client sends the same request straight to the fake: the fields
// of the agent's upstream request that differ from it are counted (the
// goal is none, the model's name aside; the upstream sees the call ids the
// client was given where it would see its own, one for one). A Responses
// client's request is translated for a Chat Completions upstream: its
// straight request is the translation, and the fields it drops (hints,
// named in x-superego-dropped) are listed. The time a request adds is its
// latency through the server, less the same request's straight to the
// fake, less the judges' own time (the time only judges' calls were in
// flight). Requests alternate, in pairs whose order alternates too.
//
//	go run ./bench/gateway [-rounds 50] [-warmup 3] [-store sqlite|memory]
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/bench/internal/loopback"
	"superego/bench/internal/stats"
	"superego/bench/internal/wiretap"
	"superego/flow"
)

// The workload.
const (
	agentTime = 10 * time.Millisecond // each of the agent model's replies
	judgeTime = 20 * time.Millisecond // each judge's
)

// script plays the models: the agent writes a.txt, then, given the
// result, says so; every judge accepts.
func script(r agentstest.Request) agentstest.Answer {
	if r.Node() != "" {
		return agentstest.Answer{Text: agentstest.JSON("", flow.Accept, "", ""), Delay: judgeTime, Chunk: 1 << 20}
	}
	if n := len(r.Messages); r.Messages[n-1].Role == "tool" {
		return agentstest.Answer{Text: `{"text": "Wrote a.txt."}`, Delay: agentTime, Chunk: 1 << 20}
	}
	name, args := "write_file", `{"path":"a.txt","content":"hi"}`
	if slices.Contains(r.Tools, "Write") {
		name, args = "Write", `{"file_path":"a.txt","content":"hi"}`
	}
	return agentstest.Answer{Text: "Writing it.", ToolCalls: []agentstest.Call{{ID: "up_1", Name: name, Args: args}}, Delay: agentTime, Chunk: 1 << 20}
}

// A protocol's client: the path it posts to, its first request, and how
// it continues from an answer with the call's result.
type protocol struct {
	name, path string
	first      func(model string) map[string]any
	next       func(req map[string]any, answer []byte) (map[string]any, error)
	// straight is where the same request goes straight to the fake, and
	// as what: the client's own body (nil), or what the server sent (a
	// translation).
	straight string
	same     bool
}

const schema = `{"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}`

var protocols = []protocol{
	{
		name: "chat", path: "/v1/chat/completions", straight: "/v1/chat/completions", same: true,
		first: func(model string) map[string]any {
			return parse(`{"model": "` + model + `", "temperature": 0.3, "seed": 7, "stop": ["END"], "max_completion_tokens": 300,
			  "response_format": {"type": "json_schema", "json_schema": {"name": "reply", "strict": true, "schema": ` + schema + `}},
			  "tools": [{"type": "function", "function": {"name": "write_file", "description": "Writes a file.", "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}}],
			  "messages": [{"role": "system", "content": "You write files when asked."}, {"role": "user", "content": "Make notes.txt"},
			    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_h1", "type": "function", "function": {"name": "write_file", "arguments": "{\"path\":\"notes.txt\",\"content\":\"\"}"}}]},
			    {"role": "tool", "tool_call_id": "call_h1", "content": "wrote 0 bytes"}, {"role": "assistant", "content": "Made notes.txt."},
			    {"role": "user", "content": "Write a.txt"}]}`)
		},
		next: func(req map[string]any, answer []byte) (map[string]any, error) {
			var a struct {
				Choices []struct {
					Message map[string]any `json:"message"`
				} `json:"choices"`
			}
			if json.Unmarshal(answer, &a) != nil || len(a.Choices) == 0 || a.Choices[0].Message["tool_calls"] == nil {
				return nil, fmt.Errorf("no call in %s", answer)
			}
			msg := a.Choices[0].Message
			id := msg["tool_calls"].([]any)[0].(map[string]any)["id"]
			req["messages"] = append(req["messages"].([]any), msg, map[string]any{"role": "tool", "tool_call_id": id, "content": "wrote 2 bytes"})
			return req, nil
		},
	},
	{
		name: "responses", path: "/v1/responses", straight: "/v1/chat/completions",
		first: func(model string) map[string]any {
			return parse(`{"model": "` + model + `", "instructions": "You write files when asked.", "temperature": 0.3, "max_output_tokens": 300,
			  "text": {"format": {"type": "json_schema", "name": "reply", "strict": true, "schema": ` + schema + `}},
			  "tools": [{"type": "function", "name": "write_file", "description": "Writes a file.", "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}],
			  "input": [{"role": "user", "content": "Make notes.txt"},
			    {"type": "function_call", "call_id": "call_h1", "name": "write_file", "arguments": "{\"path\":\"notes.txt\",\"content\":\"\"}"},
			    {"type": "function_call_output", "call_id": "call_h1", "output": "wrote 0 bytes"},
			    {"role": "assistant", "content": "Made notes.txt."}, {"role": "user", "content": "Write a.txt"}]}`)
		},
		next: func(req map[string]any, answer []byte) (map[string]any, error) {
			var a struct {
				Output []map[string]any `json:"output"`
			}
			json.Unmarshal(answer, &a)
			input := req["input"].([]any)
			for _, item := range a.Output {
				input = append(input, item)
				if item["type"] == "function_call" {
					input = append(input, map[string]any{"type": "function_call_output", "call_id": item["call_id"], "output": "wrote 2 bytes"})
				}
			}
			req["input"] = input
			return req, nil
		},
	},
	{
		name: "messages", path: "/v1/messages", straight: "/v1/messages", same: true,
		first: func(model string) map[string]any {
			return parse(`{"model": "` + model + `", "max_tokens": 300, "temperature": 0.3, "stop_sequences": ["END"],
			  "system": [{"type": "text", "text": "You write files when asked.", "cache_control": {"type": "ephemeral"}}],
			  "thinking": {"type": "adaptive"}, "metadata": {"user_id": "u-1"}, "output_config": {"effort": "high"},
			  "tools": [{"name": "Write", "description": "Writes a file.", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}}}}],
			  "messages": [{"role": "user", "content": "Make notes.txt"},
			    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_h1", "name": "Write", "input": {"file_path": "notes.txt", "content": ""}}]},
			    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_h1", "content": "wrote 0 bytes"}]},
			    {"role": "assistant", "content": "Made notes.txt."}, {"role": "user", "content": "Write a.txt"}]}`)
		},
		next: func(req map[string]any, answer []byte) (map[string]any, error) {
			var a struct {
				Content []map[string]any `json:"content"`
			}
			json.Unmarshal(answer, &a)
			var result []any
			for _, b := range a.Content {
				if b["type"] == "tool_use" {
					result = append(result, map[string]any{"type": "tool_result", "tool_use_id": b["id"], "content": "wrote 2 bytes"})
				}
			}
			if len(result) == 0 {
				return nil, fmt.Errorf("no call in %s", answer)
			}
			req["messages"] = append(req["messages"].([]any), map[string]any{"role": "assistant", "content": a.Content}, map[string]any{"role": "user", "content": result})
			return req, nil
		},
	},
}

func parse(s string) map[string]any {
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		panic(err)
	}
	return m
}

// bench is a run's fakes, server and client.
type bench struct {
	http           *http.Client
	server, openai string
	anthropic      string
	tap            *wiretap.Tap
	fakes          []*agentstest.Server
}

// post sends a body and reads the answer, timed.
func (b *bench) post(url string, body []byte) ([]byte, http.Header, time.Duration, error) {
	start := time.Now()
	resp, err := b.http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, nil, 0, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s %s", url, resp.Status, answer)
	}
	return answer, resp.Header, took, err
}

// sample is one request measured both ways.
type sample struct {
	through, straight, judges time.Duration
	differ                    []string // fields of the upstream's request that differ from the straight one
	dropped                   string
}

// exchange is what one request of a task did: its latency, its answer,
// the judges' own time, the agent's upstream request, and what the server
// dropped.
type exchange struct {
	took, judges time.Duration
	answer, sent []byte // sent: the agent model's request, as the fake got it
	dropped      string
}

// run runs a protocol's task of two requests at url: through the server
// (model a flow), or straight to a fake (model the fake's).
func (b *bench) run(p protocol, url, model string) ([]exchange, error) {
	req := p.first(model)
	var out []exchange
	for i := range 2 {
		body, _ := json.Marshal(req)
		b.tap.Take()
		answer, h, took, err := b.post(url, body)
		if err != nil {
			return nil, fmt.Errorf("request %d: %w", i+1, err)
		}
		calls := b.tap.Take()
		x := exchange{took: took, judges: wiretap.JudgesAlone(calls), answer: answer, dropped: h.Get("X-Superego-Dropped")}
		for _, c := range calls {
			if !strings.Contains(string(c.Body), "Your node: ") {
				x.sent = c.Body // the agent's request: the last, where a speculative one was discarded
			}
		}
		if x.sent == nil {
			return nil, fmt.Errorf("request %d: the agent's model was asked nothing", i+1)
		}
		out = append(out, x)
		if i == 0 {
			if req, err = p.next(req, answer); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// callID is the id of the first call an answer sends.
func callID(answer []byte) string {
	m := regexp.MustCompile(`"(?:id|call_id)":"((?:call_|toolu_|up_)[0-9a-zA-Z_]+)"`).FindSubmatch(answer)
	if m == nil {
		return ""
	}
	return string(m[1])
}

// task runs a protocol's task through the server for the flow and
// straight to the fake, in the order throughFirst says, and compares each
// request the agent's model got through the server with the one the
// client sent straight, the call ids mapped: the fake's where the client
// was given the server's. A Responses task's straight requests are the
// server's translations, sent again, for the time alone.
func (b *bench) task(p protocol, flowID string, throughFirst bool) ([]sample, error) {
	model := flowID
	if p.name == "messages" {
		model += "@anthropic:fake"
	}
	var through, straight []exchange
	var err error
	viaServer := func() error { through, err = b.run(p, b.server+p.path, model); return err }
	viaFake := func() error {
		if !p.same {
			for _, x := range through {
				b.tap.Take()
				_, _, took, err := b.post(b.openai+p.straight, x.sent)
				b.tap.Take()
				if err != nil {
					return err
				}
				straight = append(straight, exchange{took: took, sent: x.sent})
			}
			return nil
		}
		fake := b.openai
		if p.name == "messages" {
			fake = b.anthropic
		}
		straight, err = b.run(p, fake+p.straight, "fake")
		return err
	}
	steps := []func() error{viaServer, viaFake}
	if !throughFirst && p.same {
		steps = []func() error{viaFake, viaServer}
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, fmt.Errorf("%s %s: %w", p.name, flowID, err)
		}
	}
	ours, theirs := callID(through[0].answer), callID(straight[0].answer)
	var out []sample
	for i := range through {
		s := sample{through: through[i].took, straight: straight[i].took, judges: through[i].judges, dropped: through[i].dropped}
		if p.same {
			got := through[i].sent
			if ours != "" && theirs != "" {
				got = bytes.ReplaceAll(got, []byte(ours), []byte(theirs))
			}
			s.differ = differ(straight[i].sent, got)
		}
		out = append(out, s)
	}
	return out, nil
}

// differ names the top-level fields in which two bodies differ.
func differ(a, b []byte) []string {
	var x, y map[string]any
	json.Unmarshal(a, &x)
	json.Unmarshal(b, &y)
	var out []string
	for k := range x {
		if !reflect.DeepEqual(x[k], y[k]) {
			out = append(out, k)
		}
	}
	for k := range y {
		if _, ok := x[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func main() {
	rounds := flag.Int("rounds", 50, "measured tasks of each kind, interleaved")
	warmup := flag.Int("warmup", 3, "unmeasured rounds first")
	store := flag.String("store", "sqlite", "where the server keeps instances: sqlite (its default) or memory")
	flows := flag.String("flows", "./flows", "flow definitions directory (bare_agent.json, guarded_agent.json)")
	constitutions := flag.String("constitutions", "./constitutions", "constitutions directory")
	profile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (server, fakes and client) to this file")
	waiting := flag.Int("waiting", 0, "then leave this many guarded_agent tasks of each protocol waiting for the client's result, and report the heap each waiting instance holds")
	flag.Parse()
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gateway:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if err := run(*rounds, *warmup, *waiting, *store, *flows, *constitutions); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

func run(rounds, warmup, waiting int, store, flowsDir, constitutionsDir string) error {
	if store != "sqlite" && store != "memory" {
		return errors.New(`-store is "sqlite" or "memory"`)
	}
	dir, err := os.MkdirTemp("", "superego-bench-gateway")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	texts, err := flow.Constitutions(constitutionsDir)
	if err != nil {
		return err
	}
	flows := map[string]*flow.Flow{}
	for _, id := range []string{"bare_agent", "guarded_agent"} {
		b, err := os.ReadFile(filepath.Join(flowsDir, id+".json"))
		if err != nil {
			return err
		}
		def, err := flow.Parse(b, flow.Catalog{Providers: agents.ProviderNames, Texts: texts})
		if err != nil {
			return fmt.Errorf("%s: %w", id, err)
		}
		flows[id] = &flow.Flow{ID: id, Def: def}
	}
	tap := &wiretap.Tap{}
	openai, anthropic := agentstest.NewOpenAI(script), agentstest.NewAnthropic(script)
	for _, fake := range []*agentstest.Server{openai, anthropic} {
		fake.Config.Handler = tap.Wrap(fake.Config.Handler)
		fake.Start()
		defer fake.Close()
	}
	url, stop, err := loopback.Server{Flows: flows, ModelURL: openai.URL, AnthropicURL: anthropic.URL, UpstreamModels: []string{"anthropic:fake"}, Store: store, Dir: dir}.Serve()
	if err != nil {
		return err
	}
	defer stop()
	b := &bench{http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}, server: url, openai: openai.URL, anthropic: anthropic.URL, tap: tap,
		fakes: []*agentstest.Server{openai, anthropic}}

	type key struct{ protocol, flow string }
	type series struct {
		through, straight, judges, beyond []float64
		differ                            map[string]int
		dropped                           map[string]bool
		n                                 int
	}
	results := map[key]*series{}
	var order []key
	for round := range warmup + rounds {
		for _, p := range protocols {
			for _, flowID := range []string{"bare_agent", "guarded_agent"} {
				samples, err := b.task(p, flowID, round%2 == 0)
				if err != nil {
					return err
				}
				if round < warmup {
					continue
				}
				k := key{p.name, flowID}
				s := results[k]
				if s == nil {
					s = &series{differ: map[string]int{}, dropped: map[string]bool{}}
					results[k] = s
					order = append(order, k)
				}
				for _, x := range samples {
					s.through = append(s.through, stats.Ms(x.through))
					s.straight = append(s.straight, stats.Ms(x.straight))
					s.judges = append(s.judges, stats.Ms(x.judges))
					s.beyond = append(s.beyond, stats.Ms(x.through-x.straight-x.judges))
					s.n++
					if p.same {
						for _, f := range x.differ {
							s.differ[f]++
						}
					}
					for _, f := range strings.Split(x.dropped, ", ") {
						if f != "" {
							s.dropped[f] = true
						}
					}
				}
			}
		}
		if round == warmup-1 {
			runtime.GC()
		}
	}

	fmt.Printf("gateway: %d rounds (after %d warm-up) of two requests a task, each through the server and straight to the fake, interleaved; agent %s, judges %s a reply; store %s; GOMAXPROCS %d\n\n",
		rounds, warmup, agentTime, judgeTime, store, runtime.GOMAXPROCS(0))
	fmt.Printf("%-10s %-14s %-22s %-22s %-22s %-22s %s\n", "protocol", "flow", "through (ms)", "straight (ms)", "judges' own (ms)", "added beyond judges", "upstream's request: fields differing from the straight one")
	out := map[string]any{"bench": "gateway", "rounds": rounds, "store": store, "go": runtime.Version(), "gomaxprocs": runtime.GOMAXPROCS(0)}
	for _, k := range order {
		s := results[k]
		fields := "0, in every request"
		if len(s.differ) > 0 {
			var list []string
			for f, n := range s.differ {
				list = append(list, fmt.Sprintf("%s in %d of %d", f, n, s.n))
			}
			slices.Sort(list)
			fields = strings.Join(list, "; ")
		}
		if p := k.protocol; p == "responses" && len(s.dropped) == 0 {
			fields = "translated for Chat Completions, every field carried"
		} else if p == "responses" {
			fields = "translated for Chat Completions; dropped: " + strings.Join(slices.Sorted(maps.Keys(s.dropped)), ", ")
		} else if len(s.dropped) > 0 {
			fields += "; dropped: " + strings.Join(slices.Sorted(maps.Keys(s.dropped)), ", ")
		}
		row := map[string]any{"through_ms": stats.Summarize(s.through), "straight_ms": stats.Summarize(s.straight), "judges_ms": stats.Summarize(s.judges),
			"added_beyond_judges_ms": stats.Summarize(s.beyond), "fields_differing": s.differ, "requests": s.n}
		out[k.protocol+"/"+k.flow] = row
		fmt.Printf("%-10s %-14s %-22s %-22s %-22s %-22s %s\n", k.protocol, k.flow, stats.Summarize(s.through), stats.Summarize(s.straight),
			stats.Summarize(s.judges), stats.Summarize(s.beyond), fields)
	}
	if waiting > 0 {
		fmt.Printf("\n%-10s %s\n", "protocol", "heap live per instance waiting for the client's result (bytes)")
		for _, p := range protocols { // unmeasured: what the first of each kind sets up once
			if _, err := b.waiting(p, 16); err != nil {
				return err
			}
		}
		for _, p := range protocols {
			per, err := b.waiting(p, waiting)
			if err != nil {
				return err
			}
			out[p.name+"/waiting_heap_bytes"] = per
			fmt.Printf("%-10s %.0f (%d instances)\n", p.name, per, waiting)
		}
	}
	j, err := json.Marshal(out)
	if err != nil {
		return err
	}
	fmt.Println()
	fmt.Println(string(j))
	return nil
}

// waiting starts n guarded_agent tasks of protocol p, 16 at a time, each
// of whose first request ends with a call for the client to run: n
// instances that wait for their client's result, as a gateway in front of
// many agents holds them. It returns what each holds of the heap: the
// live heap after a collection, less what it was before them, over n.
func (b *bench) waiting(p protocol, n int) (float64, error) {
	model := "guarded_agent"
	if p.name == "messages" {
		model += "@anthropic:fake"
	}
	body, _ := json.Marshal(p.first(model))
	live := func() uint64 {
		b.tap.Take() // what the fakes were sent is the bench's, not the server's
		for _, f := range b.fakes {
			f.Forget()
		}
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := live()
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for range n {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			answer, _, _, err := b.post(b.server+p.path, body)
			if err == nil && callID(answer) == "" {
				err = fmt.Errorf("%s: the answer sends the client no call: %s", p.name, answer)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			return 0, err
		}
	}
	return float64(int64(live())-int64(before)) / float64(n), nil
}
