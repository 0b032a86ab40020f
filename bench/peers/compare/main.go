// Command compare runs two guarded-calculator benchmarks, superego's and a
// peer's, round after round, alternating which goes first, and prints
// their figures side by side: the median of the rounds, their range, and
// the ratio of each round's pair. bench/peers/run_all.sh builds both and
// runs it.
//
//	compare [-rounds N] [-args "..."] OURS PEER
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"text/tabwriter"
	"time"

	"superego/bench/internal/stats"
)

// figure is one row of the table: a name, and how to read it from a JSON line.
type figure struct {
	name  string
	value func(line) (float64, bool)
}

// line is one run's JSON line.
type line map[string]any

func (l line) num(k string) (float64, bool) {
	v, ok := l[k].(float64)
	return v, ok
}

func field(k string, scale float64) func(line) (float64, bool) {
	return func(l line) (float64, bool) {
		v, ok := l.num(k)
		return v * scale, ok
	}
}

// perRun is what each run in flight added to the RSS at its peak, in kB,
// over the RSS under key: at rest, before anything ran, or just before the
// phase's measured rounds, after a round like them.
func perRun(prefix, key string) func(line) (float64, bool) {
	return func(l line) (float64, bool) {
		peak, ok1 := l.num(prefix + "peak_rss_kb")
		base, ok2 := l.num(key)
		n, ok3 := l.num(prefix + "flows")
		return (peak - base) / n, ok1 && ok2 && ok3 && n > 0
	}
}

const mib = 1.0 / 1024

var figures = []figure{
	{"sequential, µs per flow (mean)", field("seq_mean_us", 1)},
	{"sequential, p50 µs", field("seq_p50_us", 1)},
	{"sequential, p99 µs", field("seq_p99_us", 1)},
	{"no-engine floor, µs per flow", field("direct_mean_us", 1)},
	{"engine's own, µs per flow (mean − floor)", func(l line) (float64, bool) {
		a, ok1 := l.num("seq_mean_us")
		b, ok2 := l.num("direct_mean_us")
		return a - b, ok1 && ok2
	}},
	{"sequential, CPU µs per flow (all threads, the collector's too)", field("seq_cpu_us", 1)},
	{"sequential, kB allocated per flow", field("seq_alloc_bytes_per_flow", 1.0/1000)},
	{"no-engine floor, kB allocated per flow", field("direct_alloc_bytes_per_flow", 1.0/1000)},
	{"1,000 at once: wall ms (ideal 80)", field("conc_wall_ms", 1)},
	{"1,000 at once: CPU µs per flow", field("conc_cpu_us", 1)},
	{"1,000 at once: peak RSS MiB", field("conc_peak_rss_kb", mib)},
	{"1,000 at once: RSS before the rounds MiB", field("conc_base_rss_kb", mib)},
	{"1,000 at once: kB per run in flight (peak − rest)", perRun("conc_", "rest_rss_kb")},
	{"1,000 at once: kB per run in flight (peak − before the rounds)", perRun("conc_", "conc_base_rss_kb")},
	{"1,000 at once: max heap live after a collection MiB", field("conc_max_heap_live_kb", mib)},
	{"1,000 at once: max heap objects MiB", field("conc_max_heap_objects_kb", mib)},
	{"1,000 at once: max stacks MiB", field("conc_max_stacks_kb", mib)},
	{"10,000 at once: wall ms (ideal 80)", field("big_wall_ms", 1)},
	{"10,000 at once: CPU µs per flow", field("big_cpu_us", 1)},
	{"10,000 at once: peak RSS MiB", field("big_peak_rss_kb", mib)},
	{"10,000 at once: RSS before the rounds MiB", field("big_base_rss_kb", mib)},
	{"10,000 at once: kB per run in flight (peak − rest)", perRun("big_", "rest_rss_kb")},
	{"10,000 at once: kB per run in flight (peak − before the rounds)", perRun("big_", "big_base_rss_kb")},
	{"10,000 at once: max heap live after a collection MiB", field("big_max_heap_live_kb", mib)},
	{"10,000 at once: max heap objects MiB", field("big_max_heap_objects_kb", mib)},
	{"10,000 at once: max stacks MiB", field("big_max_stacks_kb", mib)},
	{"RSS at rest, MiB", field("rest_rss_kb", mib)},
	{"  of it anonymous (not the binary's pages), MiB", field("rest_rss_anon_kb", mib)},
	{"  heap in use at rest, MiB", field("rest_heap_kb", mib)},
	{"streamed bytes per flow", field("streamed_bytes_per_flow", 1)},
}

func main() {
	rounds := flag.Int("rounds", 3, "rounds; each runs both, the first of them alternating")
	args := flag.String("args", "", "flags for both benchmarks, split at spaces")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: compare [-rounds N] [-args FLAGS] OURS PEER")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(os.Stdout, *rounds, strings.Fields(*args), flag.Arg(0), flag.Arg(1)); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, rounds int, args []string, ours, peer string) error {
	if rounds < 1 {
		return errors.New("-rounds is at least 1")
	}
	bins := [2]string{ours, peer}
	var lines [2][]line
	fmt.Fprintf(w, "load average before: %s\n", loadavg())
	for r := range rounds {
		order := []int{0, 1}
		if r%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			start := time.Now()
			l, raw, err := runOne(bins[i], args)
			if err != nil {
				return err
			}
			lines[i] = append(lines[i], l)
			fmt.Fprintf(w, "round %d, %s (%.1f s, load %s): %s\n", r+1, l["engine"], time.Since(start).Seconds(), loadavg(), raw)
		}
	}
	fmt.Fprintf(w, "load average after: %s\n\n", loadavg())
	for i := range bins {
		if a, b := lines[i][0]["constitution_sha256_16"], lines[1-i][0]["constitution_sha256_16"]; a != b {
			return fmt.Errorf("the two read different constitutions: %v and %v", a, b)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintf(tw, "figure (%d rounds: median, range)\t%s\t%s\tratio (paired: median, range)\t\n", rounds, lines[0][0]["engine"], lines[1][0]["engine"])
	for _, f := range figures {
		a, b, ratios := values(f, lines[0]), values(f, lines[1]), []float64(nil)
		if len(a) == 0 && len(b) == 0 {
			continue
		}
		if len(a) == len(b) {
			for i := range a {
				if b[i] != 0 {
					ratios = append(ratios, a[i]/b[i])
				}
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", f.name, stats.Spread(a, "%.1f"), stats.Spread(b, "%.1f"), stats.Spread(ratios, "%.2f"))
	}
	return tw.Flush()
}

func values(f figure, lines []line) []float64 {
	var out []float64
	for _, l := range lines {
		if v, ok := f.value(l); ok {
			out = append(out, v)
		}
	}
	return out
}

func runOne(bin string, args []string) (line, string, error) {
	var out, errOut bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, "", fmt.Errorf("%s: %w: %s", bin, err, errOut.String())
	}
	raw := strings.TrimSpace(out.String())
	var l line
	if err := json.Unmarshal([]byte(raw), &l); err != nil {
		return nil, "", fmt.Errorf("%s printed no JSON line: %w", bin, err)
	}
	return l, raw, nil
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
