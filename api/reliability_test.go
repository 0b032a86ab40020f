package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/api"
	"superego/flow"
	"superego/flow/storetest"
	"superego/internal/eventually"
	"superego/memstore"
)

// Replies that start as the protocol's object and do not parse, as real
// models write them: none shows its thinking or guidance on any path.
func TestMalformedRepliesLeakNothing(t *testing.T) {
	t.Parallel()
	whole := agentstest.JSON(thinkingMarker, "BLOCK", guidanceMarker, "I can't help with that.")
	replies := map[string]string{
		"cut at the token limit": whole[:len(whole)-10],
		"a trailing comma":       strings.TrimSuffix(whole, "}") + ",}",
		"a missing comma":        strings.Replace(whole, `", "agent_guidance"`, `" "agent_guidance"`, 1),
		"single quotes":          strings.ReplaceAll(whole, `"`, `'`),
		"an unquoted decision":   strings.Replace(whole, `"BLOCK"`, `BLOCK`, 1),
	}
	for name, reply := range replies {
		t.Run(name, func(t *testing.T) {
			model := agentstest.OpenAI(t, func(r agentstest.Request) agentstest.Answer {
				if r.Node() == "input_superego" {
					return agentstest.Answer{Text: reply}
				}
				return agentstest.Reply("t", "ACCEPT", "", "")
			})
			p := &agents.Providers{Default: "openai:gpt-test", OpenAIKey: "k", OpenAIBaseURL: model.URL + "/v1"}
			f := newServer(t, &memstore.Store{}, p.Model, 0)
			stream := body(t, f.do(t, "POST", "/flow/execute", `{"flow_id": "calc", "input": "What is 6*7?"}`))
			noLeak(t, "the stream", stream)
			noLeak(t, "the JSON answer", body(t, f.do(t, "POST", "/flow/execute", `{"flow_id": "calc", "input": "What is 6*7?"}`, "Accept", "application/json")))
			id := uuidRe.FindString(stream)
			for _, path := range []string{"/flow/instances/" + id, "/flow/instances", "/flow/instances/" + id + "/stream?after=0"} {
				noLeak(t, "GET "+path, body(t, f.do(t, "GET", path, "")))
			}
			noLeak(t, "the server's log", f.logs.String())
			// The text is kept, hidden: the research view shows it as thinking.
			var view struct {
				Steps []struct {
					AgentID  string `json:"agent_id"`
					Thinking string `json:"thinking"`
				} `json:"steps"`
			}
			json.Unmarshal([]byte(research(t, f, id)), &view)
			if len(view.Steps) < 2 || view.Steps[1].AgentID != "input_superego" || !strings.Contains(view.Steps[1].Thinking, thinkingMarker) {
				t.Errorf("research view: %+v", view.Steps)
			}
		})
	}
}

// heapPeak samples the heap while f runs and returns the most it saw above
// where it started.
func heapPeak(f func()) uint64 {
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > base.HeapInuse && m.HeapInuse-base.HeapInuse > peak {
				peak = m.HeapInuse - base.HeapInuse
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	f()
	close(stop)
	wg.Wait()
	return peak
}

// A small request cannot make a large run: task inputs nested without end
// are refused, and large ones are rendered compact.
func TestTaskInputsAreBounded(t *testing.T) {
	f, _ := workerChecker(t, 1)
	deep := strings.Repeat("[", 9999) + strings.Repeat("]", 9999)
	var status int
	var answer string
	peak := heapPeak(func() {
		resp := f.do(t, "POST", "/flow/execute", `{"flow_id": "worker_checker", "objective": "x", "inputs": `+deep+`}`, "Accept", "application/json")
		status, answer = resp.StatusCode, body(t, resp)
	})
	if status != 400 || !strings.Contains(answer, `{"field":"inputs","message":"must not nest deeper than 32 levels"}`) {
		t.Errorf("%d %s", status, answer)
	}
	if peak > 16<<20 {
		t.Errorf("a 20 KB request took %d MB of heap", peak>>20)
	}
	// 32 levels deep, 900 KB wide: the answer carries the message a few
	// times over, no more.
	wide := strings.Repeat("[", 31) + `[` + strings.Repeat(`1,`, 450_000) + `1]` + strings.Repeat("]", 31)
	resp := f.do(t, "POST", "/flow/execute", `{"flow_id": "worker_checker", "objective": "x", "inputs": `+wide+`}`, "Accept", "application/json")
	size := len(body(t, resp))
	if resp.StatusCode != 200 || size > 12*len(wide) {
		t.Errorf("%d, an answer of %d bytes for inputs of %d", resp.StatusCode, size, len(wide))
	}
}

// Three hundred clients replay an instance with a 1 MB input and read
// nothing: they share its events, so the heap stays bounded, and the
// server answers others at once.
func TestStalledReplaysHoldLittle(t *testing.T) {
	f := newFixture(t, nil, 0)
	big := strings.Repeat("6*7 ", 250_000)
	in, _ := json.Marshal(map[string]string{"flow_id": "calc", "input": big})
	answer := body(t, f.do(t, "POST", "/flow/execute", string(in), "Accept", "application/json"))
	id := uuidRe.FindString(answer)
	var probes []time.Duration
	peak := heapPeak(func() {
		for range 300 {
			stall(t, f.url, "/flow/instances/"+id+"/stream?after=0")
		}
		for range 15 {
			start := time.Now()
			resp, err := http.Get(f.url + "/healthz")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			probes = append(probes, time.Since(start))
		}
	})
	slices.Sort(probes)
	if median := probes[len(probes)/2]; median > 50*time.Millisecond {
		t.Errorf("/healthz took %s (median of %d; %s–%s) with 300 stalled streams", median, len(probes), probes[0], probes[len(probes)-1])
	}
	if peak > 128<<20 {
		t.Errorf("300 stalled replays of a 1 MB instance took %d MB of heap", peak>>20)
	}
	t.Logf("heap above the start with 300 stalled replays: %d MB", peak>>20)
}

// stall opens a stream of an instance from a client that reads nothing and
// has almost no room to receive, so the server's writes to it block.
func stall(t *testing.T, url, path string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	c, err := d.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
	// Its headers came: the stream is open, and from now on it is a client
	// that reads nothing.
	if _, err := http.ReadResponse(bufio.NewReaderSize(c, 16), nil); err != nil {
		t.Fatal(err)
	}
	return c
}

// A stalled client is dropped once a write has waited WriteTimeout; it
// held one of MaxStreams' places until then.
func TestStalledClientIsDropped(t *testing.T) {
	t.Parallel()
	model := agentstest.OpenAI(t, script(nil))
	p := &agents.Providers{Default: "openai:gpt-test", OpenAIKey: "k", OpenAIBaseURL: model.URL + "/v1"}
	store := &memstore.Store{}
	f := serveWith(t, testFlows, store, p.Model, 0, func(s *api.Server) { s.WriteTimeout, s.MaxStreams = 300*time.Millisecond, 2 })
	// An instance with ten steps of a 1 MB input: about 10 MB of events,
	// more than the kernel's buffers hold for a reader. They are written to
	// the store as a run would: runs that made them, with megabyte model
	// calls, outlast the model timeout on a loaded machine.
	id, now, big := "stalled", time.Now().UTC(), strings.Repeat("6*7 ", 250_000)
	events := []flow.Event{{ID: 1, Name: flow.EventRunStart, Time: now, Data: flow.RunStart{InstanceID: id, RunID: "r", FlowID: "calc"}}}
	for n := int64(2); n <= 11; n++ {
		events = append(events, flow.Event{ID: n, Name: flow.EventCompleteStep, Time: now,
			Data: &flow.Step{StepID: fmt.Sprint(n - 1), AgentID: "calculator", Node: "calculator", Role: flow.RoleAssistant, Timestamp: now, Input: big, Response: "42"}})
	}
	events = append(events, flow.Event{ID: 12, Name: flow.EventDone, Time: now, Data: flow.Done{InstanceID: id, Status: flow.StatusCompleted, Response: "42", Usage: &flow.RunUsage{}}})
	if err := flow.Wait(func(done func(error)) { store.Create(flow.Instance{ID: id, FlowID: "calc", CreatedAt: now}, done) }); err != nil {
		t.Fatal(err)
	}
	if err := flow.Wait(func(done func(error)) { store.Append(id, events, done) }); err != nil {
		t.Fatal(err)
	}
	path := "/flow/instances/" + id + "/stream?after=0"
	stall(t, f.url, path)
	stall(t, f.url, path)
	resp := f.do(t, "GET", path, "")
	if got := body(t, resp); resp.StatusCode != 429 || !strings.Contains(got, `"code":"too_many_streams"`) || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a third stream: %d %.300s", resp.StatusCode, got)
	}
	// The two are dropped after the timeout: a stream may open again.
	eventually.Holds(t, 10*time.Second, func() string {
		resp := f.do(t, "GET", path, "")
		events := readSSE(t, resp.Body)
		if resp.StatusCode != 200 {
			return fmt.Sprintf("stalled streams were never dropped: %d", resp.StatusCode)
		}
		if events[len(events)-1].Name != "done" {
			t.Errorf("the stream after the drop ended with %s", events[len(events)-1].Name)
		}
		return ""
	})
	if !strings.Contains(f.logs.String(), "stream client dropped") {
		t.Errorf("the drop is not logged:\n%.2000s", f.logs)
	}
}

// On a full disk, no route tells a client that a run completed which was
// never saved: the stream ends with an error of code storage and a failed
// done, the JSON answer says failed, /v1 answers 507 or, streaming, an
// error chunk then [DONE]. The instance reads failed, and once the disk has
// room, cancel records it so: nothing is left running.
func TestAFullDiskFailsEveryRoute(t *testing.T) {
	t.Parallel()
	const input = `"What is 6*7?"`
	for _, c := range []struct {
		route, path, body string
		header            []string
		check             func(t *testing.T, resp *http.Response, answer string) (instance string)
	}{
		{"execute, SSE", "/flow/execute", `{"flow_id": "calc", "input": ` + input + `}`, nil, func(t *testing.T, resp *http.Response, answer string) string {
			events := readSSE(t, strings.NewReader(answer))
			n := len(events)
			if n < 2 || events[n-2].Name != "error" || !strings.Contains(events[n-2].Data, `"code":"storage"`) ||
				events[n-1].Name != "done" || !strings.Contains(events[n-1].Data, `"status":"failed"`) {
				t.Errorf("the stream ends %+v", events[max(0, n-2):])
			}
			return uuidRe.FindString(answer)
		}},
		{"execute, JSON", "/flow/execute", `{"flow_id": "calc", "input": ` + input + `}`, []string{"Accept", "application/json"}, func(t *testing.T, resp *http.Response, answer string) string {
			if resp.StatusCode != 200 || !strings.Contains(answer, `"status":"failed"`) || !strings.Contains(answer, `"code":"storage"`) {
				t.Errorf("%d %.500s", resp.StatusCode, answer)
			}
			return uuidRe.FindString(answer)
		}},
		{"/v1", "/v1/chat/completions", `{"model": "calc", "messages": [{"role": "user", "content": ` + input + `}]}`, nil, func(t *testing.T, resp *http.Response, answer string) string {
			if resp.StatusCode != 507 || !strings.Contains(answer, `"code":"storage"`) || !strings.Contains(answer, `"type":"server_error"`) {
				t.Errorf("%d %.500s", resp.StatusCode, answer)
			}
			return resp.Header.Get("X-Superego-Instance-Id")
		}},
		{"/v1, streaming", "/v1/chat/completions", `{"model": "calc", "stream": true, "messages": [{"role": "user", "content": ` + input + `}]}`, nil, func(t *testing.T, resp *http.Response, answer string) string {
			lines := strings.Split(strings.TrimSpace(answer), "\n\n")
			n := len(lines)
			if n < 2 || !strings.Contains(lines[n-2], `"code":"storage"`) || lines[n-1] != "data: [DONE]" || strings.Contains(answer, `"finish_reason":"stop"`) {
				t.Errorf("the stream ends %q", lines[max(0, n-2):])
			}
			return resp.Header.Get("X-Superego-Instance-Id")
		}},
	} {
		t.Run(c.route, func(t *testing.T) {
			store := &storetest.Full{Store: &memstore.Store{}, Fills: storetest.Has(flow.EventDone)}
			f := newFixtureOn(t, store, nil, 0)
			resp := f.do(t, "POST", c.path, c.body, c.header...)
			answer := body(t, resp)
			if strings.Contains(answer, "completed") || strings.Contains(answer, `"finish_reason":"stop"`) {
				t.Errorf("a client was told an unsaved run completed:\n%.1000s", answer)
			}
			id := c.check(t, resp, answer)
			if id == "" {
				t.Fatalf("no instance in %.300s", answer)
			}
			if got := body(t, f.do(t, "GET", "/flow/instances/"+id, "")); !strings.Contains(got, `"status":"failed"`) {
				t.Errorf("the instance, the disk still full: %.300s", got)
			}
			if resp := f.do(t, "POST", "/flow/instances/"+id+"/cancel", ""); resp.StatusCode != 507 {
				t.Errorf("cancel, the disk still full: %d %s", resp.StatusCode, body(t, resp))
			}
			store.Room()
			if resp := f.do(t, "POST", "/flow/instances/"+id+"/cancel", ""); resp.StatusCode != 202 {
				t.Errorf("cancel: %d %s", resp.StatusCode, body(t, resp))
			}
			if got := body(t, f.do(t, "GET", "/flow/instances", "")); strings.Contains(got, `"running"`) || !strings.Contains(got, `"failed"`) {
				t.Errorf("the instances: %.500s", got)
			}
		})
	}
}

// A shutdown stops a run that a client streams from /flow/execute: the
// stream still ends with an error and a done (docs/reference.md), which say the run
// resumes when the server starts again and carry no id, so that the
// client's reconnect resumes after the last event of the instance.
func TestShutdownEndsAnExecuteStreamWithErrorAndDone(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	f := newFixture(t, gate, 0)
	t.Cleanup(func() { close(gate) }) // before the fake model's server closes
	resp := f.do(t, "POST", "/flow/execute", `{"flow_id": "calc", "input": "What is 6*7, slow?"}`)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, `data: {"node":"calculator"`) {
			break // its call waits at the gate
		}
	}
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	f.engine.Close(expired)
	events := readSSE(t, br)
	n := len(events)
	if n < 2 || events[n-2].Name != "error" || events[n-1].Name != "done" {
		t.Fatalf("the stream ends %+v", events)
	}
	id := uuidRe.FindString(events[n-1].Data)
	if events[n-2].ID != "" || events[n-1].ID != "" ||
		events[n-2].Data != `{"code":"shutting_down","message":"the server is shutting down; the run resumes when it starts again: follow it at /flow/instances/`+id+`/stream"}` ||
		events[n-1].Data != `{"instance_id":"`+id+`","status":"running","response":"Checking."}` {
		t.Errorf("the stream ends %+v", events[n-2:])
	}
}

// countingReads counts the reads of instances' logs, each taking at least
// slow once it is set: a large log on a busy disk.
type countingReads struct {
	flow.Store
	reads atomic.Int64
	slow  atomic.Int64 // a time.Duration
}

func (c *countingReads) Events(ctx context.Context, id string, after int64) ([]flow.Event, error) {
	c.reads.Add(1)
	time.Sleep(time.Duration(c.slow.Load()))
	return c.Store.Events(ctx, id, after)
}

// Two hundred clients that replay an instance of 1,000 steps all at once,
// and read nothing, share one read of its log: they used to read it each
// (200 copies of a 2,000-step log of 900 KB took over 600 MB).
func TestStalledReplaysComingAtOnceShareOneRead(t *testing.T) {
	store := &countingReads{Store: stores["sqlite"](t)}
	f := newFixtureOn(t, store, nil, 0)
	var msgs []string
	for i := range 1000 {
		msgs = append(msgs, []string{"user", "assistant"}[i%2], fmt.Sprintf("%d %s", i, strings.Repeat("a ", 100)))
	}
	resp := f.do(t, "POST", "/v1/chat/completions", chat("other", false, append(msgs, "user", "and now?")...))
	body(t, resp)
	id := resp.Header.Get("X-Superego-Instance-Id")
	if resp.StatusCode != 200 || id == "" {
		t.Fatalf("%d %q", resp.StatusCode, id)
	}
	// The log's read outlasts the replays' coming: on a fast disk the
	// first replay could be written whole to the kernel's buffers, and
	// done, before the last came, and that one would read the log again.
	store.slow.Store(int64(time.Second))
	before := store.reads.Load()
	peak := heapPeak(func() {
		var wg sync.WaitGroup
		for range 200 {
			wg.Go(func() { stall(t, f.url, "/flow/instances/"+id+"/stream?after=0") })
		}
		wg.Wait()
	})
	if n := store.reads.Load() - before; n != 1 {
		t.Errorf("200 replays at once read the log %d times", n)
	}
	if peak > 64<<20 {
		t.Errorf("200 stalled replays of a 1,000-step instance took %d MB of heap", peak>>20)
	}
	t.Logf("heap above the start with 200 stalled replays that came at once: %d MB", peak>>20)
}
