package telemetry_test

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// Prometheus asks for OpenMetrics and gets it, with exemplars: a model or
// tool call's latency bucket names the trace of a call that fell in it.
// Without traces there are none; nothing hidden is in either exposition.
func TestOpenMetricsWithExemplars(t *testing.T) {
	// Prometheus' own Accept header, as it scrapes.
	const accept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
	for _, traces := range []bool{true, false} {
		f := serve(t, traces, false)
		evs := f.execute(t, "gated", "What is 6*7?", nil)
		f.close(t)
		req, _ := http.NewRequest("GET", f.url+"/metrics", nil)
		req.Header.Set("Accept", accept)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := string(b)
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") || !strings.HasSuffix(body, "# EOF\n") {
			t.Fatalf("traces %v: Content-Type %q, want OpenMetrics", traces, ct)
		}
		exemplars := regexp.MustCompile(`(?m)^(superego_\w+)_bucket\{[^}]*\} \d+ # \{trace_id="([0-9a-f]{32})"\}`).FindAllStringSubmatch(body, -1)
		if !traces {
			if len(exemplars) != 0 {
				t.Errorf("exemplars without traces: %q", exemplars)
			}
			continue
		}
		trace := f.spans.GetSpans()[0].SpanContext.TraceID().String()
		seen := map[string]bool{}
		for _, e := range exemplars {
			seen[e[1]] = true
			if e[2] != trace {
				t.Errorf("%s's exemplar names trace %s, not the run's %s", e[1], e[2], trace)
			}
		}
		if !seen["superego_model_call_seconds"] || !seen["superego_tool_call_seconds"] {
			t.Errorf("exemplars of %v, want the model and tool calls':\n%s", seen, body)
		}
		noMarkers(t, "the OpenMetrics exposition", body)
		if status(t, evs) != "completed" {
			t.Errorf("the run: %v", evs)
		}
	}
}
