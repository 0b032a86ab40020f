// Command agent_overhead measures what an agent framework's task costs
// through flows/guarded_agent (docs/gateway.md) over the same task sent straight
// to the model: a task of three tool round trips, four Chat Completions
// requests, with every judge accepting.
//
// One fake model (agentstest, OpenAI's wire protocol over loopback HTTP)
// answers both: the agent calls get_weather for three cities, one at a
// time, then answers, each reply after agentTime; every judge accepts after
// judgeTime. A small Go client plays the agent framework: it streams each
// request, runs each call it is sent, and sends the whole conversation
// back, to the real server (engine, agents, api, SQLite) serving
// guarded_agent on its own port, or straight to the fake. Tasks alternate,
// in pairs whose order alternates too.
//
// The judges' own time is measured on the fake's wire: for each request,
// the time during which a judge's call was in flight and no agent call was
// (the input superego speculates, beside the agent). The overhead is what
// a request adds beyond that: guarded − direct − judges' time. The goal is
// at most 5 ms a request.
//
//	go run ./bench/agent_overhead [-rounds 100] [-warmup 5] [-store sqlite|memory]
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
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
	requests  = 4                     // a task's: three tool round trips, then the answer
)

var cities = []string{"Paris", "Rome", "Oslo"}

// tools are the client's function tools.
const tools = `[{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city, now.",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]`

// system is the framework's instructions to its agent, by which the fake
// knows the agent's requests: guarded_agent's agent gets them as the client
// sent them, as the model does straight.
const system = `You are the agent "agent", with tools.`

// script plays the model: the agent asks for the weather of the next city
// until it has all three, then answers; every judge accepts.
func script(r agentstest.Request) agentstest.Answer {
	if r.Node() != "agent" {
		return agentstest.Answer{Text: agentstest.JSON("", flow.Accept, "", ""), Delay: judgeTime, Chunk: 1 << 20}
	}
	n := len(r.ToolResults())
	if n < len(cities) {
		return agentstest.Answer{Delay: agentTime, ToolCalls: []agentstest.Call{{ID: fmt.Sprintf("up_%d", n), Name: "get_weather", Args: `{"city":"` + cities[n] + `"}`}}}
	}
	var read []string
	for _, m := range r.ToolResults() {
		read = append(read, m.Text)
	}
	return agentstest.Answer{Text: strings.Join(read, "; "), Delay: agentTime, Chunk: 1 << 20}
}

// client is an agent framework's loop, streamed: it asks, runs the calls
// it is sent, and asks again with the whole conversation.
type client struct {
	http  *http.Client
	url   string // a chat completions endpoint
	model string
	sys   bool // send the agent's system message
	tap   *wiretap.Tap
}

// request is one request of a task as the client and the fake's wire saw it.
type request struct {
	took   time.Duration
	judges time.Duration // the fake's judges alone were in flight
}

// task runs the task and times each of its requests.
func (c *client) task() ([]request, error) {
	msgs := []any{map[string]string{"role": "user", "content": "What is the weather in Paris, Rome and Oslo? One city at a time."}}
	if c.sys {
		msgs = append([]any{map[string]string{"role": "system", "content": system}}, msgs...)
	}
	var out []request
	for range requests {
		c.tap.Take()
		start := time.Now()
		calls, content, finish, err := c.ask(msgs)
		took := time.Since(start)
		if err != nil {
			return nil, err
		}
		out = append(out, request{took: took, judges: wiretap.JudgesAlone(c.tap.Take())})
		if finish != "tool_calls" {
			if len(out) != requests || !strings.Contains(content, "Sunny in Oslo") {
				return nil, fmt.Errorf("%s: request %d ended %s: %q", c.model, len(out), finish, content)
			}
			return out, nil
		}
		msgs = append(msgs, map[string]any{"role": "assistant", "content": nil, "tool_calls": calls})
		for _, call := range calls {
			var args struct{ City string }
			json.Unmarshal([]byte(call.Function.Arguments), &args)
			msgs = append(msgs, map[string]string{"role": "tool", "tool_call_id": call.ID, "content": "Sunny in " + args.City})
		}
	}
	return nil, fmt.Errorf("%s: the task took more than %d requests", c.model, requests)
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// ask sends one streamed request and puts its chunks together, as the
// frameworks do: the calls by index, the text, the finish reason.
func (c *client) ask(msgs []any) (calls []toolCall, content, finish string, err error) {
	b, _ := json.Marshal(map[string]any{"model": c.model, "stream": true, "messages": msgs, "tools": json.RawMessage(tools)})
	resp, err := c.http.Post(c.url, "application/json", strings.NewReader(string(b)))
	if err != nil {
		return nil, "", "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, "", "", fmt.Errorf("%s: %s", c.model, resp.Status)
	}
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			return calls, text.String(), finish, nil
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content   string `json:"content"`
					ToolCalls []struct {
						Index int `json:"index"`
						toolCall
					} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil || chunk.Error != nil {
			return nil, "", "", fmt.Errorf("%s: %v %s", c.model, err, data)
		}
		for _, ch := range chunk.Choices {
			text.WriteString(ch.Delta.Content)
			for _, d := range ch.Delta.ToolCalls {
				for len(calls) <= d.Index {
					calls = append(calls, toolCall{Type: "function"})
				}
				tc := &calls[d.Index]
				tc.ID += d.ID
				tc.Function.Name += d.Function.Name
				tc.Function.Arguments += d.Function.Arguments
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
	}
	return nil, "", "", fmt.Errorf("%s: the stream ended before [DONE]: %v", c.model, sc.Err())
}

// serve starts the server `superego serve` runs, with guarded_agent, on a
// loopback port, its model the fake at modelURL.
func serve(flowsDir, constitutionsDir, modelURL, store, dir string) (url string, stop func(), err error) {
	texts, err := flow.Constitutions(constitutionsDir)
	if err != nil {
		return "", nil, err
	}
	b, err := os.ReadFile(filepath.Join(flowsDir, "guarded_agent.json"))
	if err != nil {
		return "", nil, err
	}
	def, err := flow.Parse(b, flow.Catalog{Providers: agents.ProviderNames, Texts: texts})
	if err != nil {
		return "", nil, fmt.Errorf("guarded_agent: %w", err)
	}
	return loopback.Server{Flows: map[string]*flow.Flow{"guarded_agent": {ID: "guarded_agent", Def: def}}, ModelURL: modelURL, Store: store, Dir: dir}.Serve()
}

// spread is a sample's median and spread.
type spread struct {
	Median float64 `json:"median"`
	P10    float64 `json:"p10"`
	P90    float64 `json:"p90"`
}

func summarize(xs []float64) spread {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	round := func(x float64) float64 { return math.Round(x*100) / 100 }
	return spread{round(stats.Median(s)), round(s[n/10]), round(s[n*9/10])}
}

func main() {
	rounds := flag.Int("rounds", 100, "measured tasks of each kind, interleaved")
	warmup := flag.Int("warmup", 5, "unmeasured rounds first")
	store := flag.String("store", "sqlite", "where the server keeps instances: sqlite (its default) or memory")
	flows := flag.String("flows", "./flows", "flow definitions directory (guarded_agent.json)")
	constitutions := flag.String("constitutions", "./constitutions", "constitutions directory")
	flag.Parse()
	if err := run(*rounds, *warmup, *store, *flows, *constitutions); err != nil {
		fmt.Fprintln(os.Stderr, "agent_overhead:", err)
		os.Exit(1)
	}
}

func run(rounds, warmup int, store, flowsDir, constitutionsDir string) error {
	if store != "sqlite" && store != "memory" {
		return errors.New(`-store is "sqlite" or "memory"`)
	}
	if rounds < 10 {
		return errors.New("-rounds is at least 10")
	}
	dir, err := os.MkdirTemp("", "superego-agent-overhead")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tap := &wiretap.Tap{}
	model := agentstest.NewOpenAI(script)
	model.Config.Handler = tap.Wrap(model.Config.Handler)
	model.Start()
	defer model.Close()
	url, stop, err := serve(flowsDir, constitutionsDir, model.URL, store, dir)
	if err != nil {
		return err
	}
	defer stop()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	guarded := &client{http: hc, url: url + "/v1/chat/completions", model: "guarded_agent", sys: true, tap: tap}
	direct := &client{http: hc, url: model.URL + "/v1/chat/completions", model: "fake", sys: true, tap: tap}

	// By request (1 to 4, then all of them) and by task: the guarded and
	// direct latencies, what guarded added, the judges' time, and what was
	// added beyond it.
	type series struct{ guarded, direct, added, judges, overhead []float64 }
	byRequest := make([]series, requests+1) // [requests]: every request
	var task series
	for round := range warmup + rounds {
		pair := []*client{guarded, direct}
		if round%2 == 1 {
			pair[0], pair[1] = direct, guarded
		}
		var g, d []request
		for _, c := range pair {
			rs, err := c.task()
			if err != nil {
				return err
			}
			if c == guarded {
				g = rs
			} else {
				d = rs
			}
		}
		if round < warmup {
			if round == warmup-1 {
				runtime.GC()
			}
			continue
		}
		var tg, td, tj time.Duration
		for i := range requests {
			added, judges := g[i].took-d[i].took, g[i].judges
			for _, s := range []*series{&byRequest[i], &byRequest[requests]} {
				s.guarded = append(s.guarded, stats.Ms(g[i].took))
				s.direct = append(s.direct, stats.Ms(d[i].took))
				s.added = append(s.added, stats.Ms(added))
				s.judges = append(s.judges, stats.Ms(judges))
				s.overhead = append(s.overhead, stats.Ms(added-judges))
			}
			tg, td, tj = tg+g[i].took, td+d[i].took, tj+judges
		}
		task.guarded = append(task.guarded, stats.Ms(tg))
		task.direct = append(task.direct, stats.Ms(td))
		task.added = append(task.added, stats.Ms(tg-td))
		task.judges = append(task.judges, stats.Ms(tj))
		task.overhead = append(task.overhead, stats.Ms(tg-td-tj))
	}

	fmt.Printf("agent_overhead: %d tasks of each kind (after %d warm-up), interleaved; %d requests a task; agent %s, judges %s a reply; store %s; GOMAXPROCS %d\n\n",
		rounds, warmup, requests, agentTime, judgeTime, store, runtime.GOMAXPROCS(0))
	fmt.Printf("%-12s %-24s %-24s %-24s %-24s %s\n", "ms: median (p10–p90)", "guarded_agent", "straight to the model", "added", "judges' own time", "added beyond the judges")
	out := map[string]any{"bench": "agent_overhead", "rounds": rounds, "store": store, "agent_ms": stats.Ms(agentTime), "judge_ms": stats.Ms(judgeTime),
		"go": runtime.Version(), "gomaxprocs": runtime.GOMAXPROCS(0)}
	line := func(name string, s series) map[string]spread {
		row := map[string]spread{"guarded": summarize(s.guarded), "direct": summarize(s.direct), "added": summarize(s.added),
			"judges": summarize(s.judges), "overhead": summarize(s.overhead)}
		fmt.Printf("%-20s", name)
		for _, k := range []string{"guarded", "direct", "added", "judges", "overhead"} {
			fmt.Printf(" %7.2f (%7.2f–%7.2f)", row[k].Median, row[k].P10, row[k].P90)
		}
		fmt.Println()
		return row
	}
	for i, r := range []struct{ key, name string }{
		{"request_1", "request 1 (calls)"}, {"request_2", "request 2 (results)"}, {"request_3", "request 3 (results)"},
		{"request_4", "request 4 (answer)"}, {"every_request", "every request"},
	} {
		out[r.key] = line(r.name, byRequest[i])
	}
	out["task"] = line("task", task)
	all := byRequest[requests].overhead
	within := 0
	for _, o := range all {
		if o <= 5 {
			within++
		}
	}
	median := summarize(all).Median
	fmt.Printf("\ngoal: added ≤ the judges' time + 5 ms a request: median %.2f ms beyond the judges; %d of %d requests within 5 ms: %s\n",
		median, within, len(all), map[bool]string{true: "met", false: "NOT met"}[median <= 5])
	out["goal_met"], out["requests_within_goal"], out["requests"] = median <= 5, within, len(all)
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}
