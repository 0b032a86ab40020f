// Command load measures the server's memory under load (docs/benchmarks.md,
// "Memory under load"): its resident set against request size and concurrency on
// POST /v1/chat/completions and POST /flow/execute, and with clients that
// replay a large instance and read nothing. Each scenario runs on a fresh
// `superego serve` process, on a fresh SQLite file, with guarded_chat as
// the flow and a fake OpenAI model in this process that answers every call
// after -latency, so that a scenario's requests are in flight together.
// With -before, a binary built from an earlier commit runs every scenario
// too, interleaved round by round with this one, so that both meet the
// same spells of a busy machine.
//
//	go run ./bench/load [-before /tmp/superego-195ab26] [-rounds 3] [-only v1]
//
// It prints a JSON line per scenario, binary and round, then a Markdown
// table of the medians with their ranges. A server past -kill MiB is killed,
// and the scenario reported as such.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"superego/agents/agentstest"
	"superego/bench/internal/serving"
	"superego/bench/internal/stats"
)

type scenario struct {
	name  string // route and shape
	size  int    // bytes of the request body, about
	conc  int    // requests at once
	build func(size int) (path, body string)
}

// result is one scenario on one binary, one round.
type result struct {
	Scenario  string  `json:"scenario"`
	Size      int     `json:"size"`
	Conc      int     `json:"concurrency"`
	Binary    string  `json:"binary"`
	Round     int     `json:"round"`
	StartMiB  float64 `json:"start_mib"`
	PeakMiB   float64 `json:"peak_mib"`
	AfterMiB  float64 `json:"after_mib"` // a second after the last answer
	Statuses  string  `json:"statuses"`  // HTTP statuses of the requests: "200×16"
	ProbeMs   float64 `json:"probe_ms"`  // a small request sent while the load is in flight
	Killed    bool    `json:"killed,omitempty"`
	WallMs    float64 `json:"wall_ms"`
	ErrorText string  `json:"error,omitempty"`
}

func main() {
	before := flag.String("before", "", "a superego binary of an earlier commit, run on every scenario too")
	after := flag.String("after", "", "the superego binary to measure (default: built from ./cmd/superego)")
	rounds := flag.Int("rounds", 3, "rounds; each runs every scenario on each binary")
	latency := flag.Duration("latency", 500*time.Millisecond, "the fake model's time to answer a call")
	only := flag.String("only", "", "run only the scenarios whose name contains this")
	kill := flag.Float64("kill", 6144, "MiB of resident set past which a server is killed")
	flag.Parse()
	if err := run(*before, *after, *rounds, *latency, *only, *kill); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

// Request shapes. A /v1 conversation of many short messages is the most a
// body of a given size can make the server hold; one long message, the
// least.
func v1Messages(size int) (string, string) {
	var msgs []string
	for n := 0; n < size; {
		role := []string{"user", "assistant"}[len(msgs)%2]
		m := fmt.Sprintf(`{"role":%q,"content":"message %d"}`, role, len(msgs))
		msgs = append(msgs, m)
		n += len(m) + 1
	}
	if len(msgs)%2 == 0 {
		msgs = append(msgs, `{"role":"user","content":"and now?"}`)
	}
	return "/v1/chat/completions", `{"model":"guarded_chat","messages":[` + strings.Join(msgs, ",") + `]}`
}

// v1Long is a conversation of api.MaxMessages messages, size bytes in all:
// the most messages /v1 takes.
func v1Long(size int) (string, string) {
	var msgs []string
	for i := range 2047 {
		role := []string{"user", "assistant"}[i%2]
		msgs = append(msgs, fmt.Sprintf(`{"role":%q,"content":"%d %s"}`, role, i, strings.Repeat("a ", size/2048/2)))
	}
	msgs = append(msgs, `{"role":"user","content":"and now?"}`)
	return "/v1/chat/completions", `{"model":"guarded_chat","messages":[` + strings.Join(msgs, ",") + `]}`
}

func v1One(size int) (string, string) {
	return "/v1/chat/completions", `{"model":"guarded_chat","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("a ", size/2) + `"}]}`
}

func execute(size int) (string, string) {
	return "/flow/execute", `{"flow_id":"guarded_chat","input":"` + strings.Repeat("a ", size/2) + `"}`
}

func scenarios() []scenario {
	var out []scenario
	for _, size := range []int{100 << 10, 900 << 10} {
		for _, conc := range []int{1, 16} {
			out = append(out, scenario{"v1, many short messages", size, conc, v1Messages})
		}
	}
	for _, conc := range []int{1, 16} {
		out = append(out, scenario{"v1, 2,048 messages", 900 << 10, conc, v1Long})
	}
	for _, size := range []int{1 << 10, 100 << 10, 900 << 10} {
		for _, conc := range []int{1, 16, 64} {
			out = append(out, scenario{"v1 stream, one message", size, conc, v1One})
			out = append(out, scenario{"execute SSE", size, conc, execute})
		}
	}
	out = append(out, scenario{"stalled replays", 900 << 10, 200, nil})
	return out
}

func run(before, after string, rounds int, latency time.Duration, only string, kill float64) error {
	dir, err := os.MkdirTemp("", "superego-load")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if after == "" {
		after = filepath.Join(dir, "superego")
		if out, err := exec.Command("go", "build", "-o", after, "./cmd/superego").CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %v\n%s", err, out)
		}
	}
	model := agentstest.NewOpenAI(func(r agentstest.Request) agentstest.Answer {
		a := agentstest.Reply("", "ACCEPT", "", "")
		if r.Node() == "assistant" {
			a = agentstest.Reply("", "COMPLETE", "", "Here is an answer.")
		}
		a.Delay = latency
		return a
	})
	model.Start()
	defer model.Close()
	binaries := []string{after}
	if before != "" {
		binaries = []string{before, after}
	}
	var all []result
	for round := 1; round <= rounds; round++ {
		for _, sc := range scenarios() {
			if !strings.Contains(sc.name, only) {
				continue
			}
			for i, bin := range binaries {
				if round%2 == 0 { // alternate which binary goes first
					bin = binaries[len(binaries)-1-i]
				}
				res := measure(bin, dir, model.URL, sc, kill)
				res.Round = round
				res.Binary = "after"
				if bin == before {
					res.Binary = "before"
				}
				line, _ := json.Marshal(res)
				fmt.Println(string(line))
				all = append(all, res)
			}
		}
	}
	table(all, binaries, before != "")
	return nil
}

// measure runs one scenario on a fresh server.
func measure(bin, dir, modelURL string, sc scenario, kill float64) result {
	res := result{Scenario: sc.name, Size: sc.size, Conc: sc.conc}
	work, _ := os.MkdirTemp(dir, "run")
	defer os.RemoveAll(work)
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(work, "bench.db"), "--flows", "./flows",
		"--constitutions", "./constitutions", "--workspaces", filepath.Join(work, "ws"), "--experiments", work)
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=k", "OPENAI_BASE_URL="+modelURL+"/v1", "SUPEREGO_MODEL=openai:bench")
	cmd.Stderr = io.Discard
	addr, err := serving.Start(cmd)
	if err != nil {
		res.ErrorText = err.Error()
		return res
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	base := "http://" + addr
	pid := cmd.Process.Pid
	// Warm up: one small run, so that the start is a server that has run.
	post(base+"/flow/execute", `{"flow_id":"guarded_chat","input":"hello"}`, true)
	time.Sleep(200 * time.Millisecond)
	res.StartMiB = status(pid, "VmRSS")

	// Sample the resident set; kill past the limit.
	stop := make(chan struct{})
	var peak float64
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			rss := status(pid, "VmRSS")
			peak = max(peak, rss)
			if rss > kill {
				res.Killed = true
				cmd.Process.Kill()
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	start := time.Now()
	var codes []int
	if sc.build == nil {
		codes, res.ProbeMs = stalledReplays(base, sc)
	} else {
		codes, res.ProbeMs = requests(base, sc)
	}
	res.WallMs = float64(time.Since(start).Microseconds()) / 1000
	time.Sleep(time.Second)
	res.AfterMiB = status(pid, "VmRSS")
	close(stop)
	sampler.Wait()
	res.PeakMiB = max(peak, status(pid, "VmHWM"))
	res.Statuses = statuses(codes)
	return res
}

// requests sends sc.conc requests at once and reads each answer to its
// end; a small request sent 100 ms in says how long others wait meanwhile.
func requests(base string, sc scenario) ([]int, float64) {
	path, body := sc.build(sc.size)
	codes := make([]int, sc.conc)
	var wg sync.WaitGroup
	for i := range sc.conc {
		wg.Go(func() { codes[i] = post(base+path, body, false) })
	}
	time.Sleep(100 * time.Millisecond)
	probeStart := time.Now()
	post(base+"/v1/chat/completions", `{"model":"guarded_chat","messages":[{"role":"user","content":"hi"}]}`, false)
	probe := float64(time.Since(probeStart).Microseconds()) / 1000
	wg.Wait()
	return codes, probe
}

// stalledReplays makes an instance of 2,000 steps, sc.size bytes, then
// opens sc.conc streams of it from clients that read nothing and have
// almost no room to receive, holds them for two seconds and lets them go;
// three times, while other clients' runs go on.
func stalledReplays(base string, sc scenario) ([]int, float64) {
	// A conversation of 2,000 messages, sc.size bytes in all: an instance
	// of as many steps, each a small event.
	var msgs []string
	for i := range 2000 {
		role := []string{"user", "assistant"}[i%2]
		msgs = append(msgs, fmt.Sprintf(`{"role":%q,"content":"%d %s"}`, role, i, strings.Repeat("a ", sc.size/2000/2)))
	}
	msgs = append(msgs, `{"role":"user","content":"and now?"}`)
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(`{"model":"guarded_chat","messages":[`+strings.Join(msgs, ",")+`]}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return []int{0}, 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	id := resp.Header.Get("X-Superego-Instance-Id")
	if id == "" {
		return []int{resp.StatusCode}, 0
	}
	// Other clients' runs go on meanwhile, as they do on a server in use.
	others := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(others); wg.Wait() }()
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-others:
					return
				default:
				}
				post(base+"/v1/chat/completions", `{"model":"guarded_chat","messages":[{"role":"user","content":"hi"}]}`, false)
			}
		})
	}
	var codes []int
	var probe float64
	for range 3 { // waves, as clients come back
		conns := make([]net.Conn, sc.conc)
		codes = make([]int, sc.conc)
		var opening sync.WaitGroup
		for i := range sc.conc { // all at once
			opening.Go(func() {
				conns[i], codes[i] = stall(strings.TrimPrefix(base, "http://"), "/flow/instances/"+id+"/stream?after=0")
			})
		}
		opening.Wait()
		probeStart := time.Now()
		post(base+"/v1/chat/completions", `{"model":"guarded_chat","messages":[{"role":"user","content":"hi"}]}`, false)
		probe = max(probe, float64(time.Since(probeStart).Microseconds())/1000)
		time.Sleep(2 * time.Second)
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}
	return codes, probe
}

// stall opens a stream from a client that reads nothing past its headers.
func stall(addr, path string) (net.Conn, int) {
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, 0
	}
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 16), nil)
	if err != nil {
		c.Close()
		return nil, 0
	}
	return c, resp.StatusCode
}

// post sends a JSON body and reads the answer to its end.
func post(url, body string, wantJSON bool) int {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if wantJSON {
		req.Header.Set("Accept", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// status reads a field of /proc/PID/status, in MiB; 0 where the process
// is gone.
func status(pid int, field string) float64 {
	v, _ := serving.MiB(pid, field)
	return v
}

func statuses(codes []int) string {
	count := map[int]int{}
	for _, c := range codes {
		count[c]++
	}
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(count)) {
		parts = append(parts, fmt.Sprintf("%d×%d", c, count[c]))
	}
	return strings.Join(parts, " ")
}

// table prints the medians of each scenario and binary, with ranges.
func table(all []result, binaries []string, compare bool) {
	type key struct {
		name       string
		size, conc int
		binary     string
	}
	groups := map[key][]result{}
	var order []key
	for _, r := range all {
		k := key{r.Scenario, r.Size, r.Conc, r.Binary}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	var b bytes.Buffer
	fmt.Fprintln(&b, "\n| scenario | body | at once | binary | peak RSS, MiB | RSS 1 s after, MiB | small request meanwhile, ms | answers |")
	fmt.Fprintln(&b, "|---|---:|---:|---|---:|---:|---:|---|")
	for _, k := range order {
		rs := groups[k]
		killed := slices.ContainsFunc(rs, func(r result) bool { return r.Killed })
		peak := medianRange(rs, func(r result) float64 { return r.PeakMiB - r.StartMiB })
		if killed {
			peak = "killed past the limit"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | +%s | +%s | %s | %s |\n", k.name, sizeOf(k.size), k.conc, k.binary, peak,
			medianRange(rs, func(r result) float64 { return r.AfterMiB - r.StartMiB }),
			medianRange(rs, func(r result) float64 { return r.ProbeMs }), rs[0].Statuses)
	}
	fmt.Print(b.String())
}

func sizeOf(n int) string {
	if n >= 1<<10 {
		return fmt.Sprintf("%d KB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// medianRange is the median of f over rs, with its range.
func medianRange(rs []result, f func(result) float64) string {
	var v []float64
	for _, r := range rs {
		v = append(v, f(r))
	}
	return stats.Spread(v, "%.0f")
}
