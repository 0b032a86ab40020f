package tools_test

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"superego/tools"
	"superego/tools/mcptest"
)

// BenchmarkMCPStart is what a stdio server's keeper adds to its start: the
// time until the server has listed its tools, as MCP starts it (with its
// keeper) and, interleaved, straight from the MCP SDK (without one). It
// reports the medians; -v logs the ranges.
func BenchmarkMCPStart(b *testing.B) {
	server := mcptest.Command(b, "t", nil)
	ctx := context.Background()
	kept := func() time.Duration {
		m := &tools.MCP{Servers: []tools.MCPServer{server}}
		start := time.Now()
		m.Start()
		m.Wait(ctx)
		took := time.Since(start)
		if s := m.States()[0]; s.State != tools.MCPRunning {
			b.Fatalf("with its keeper: %+v", s)
		}
		m.Close()
		return took
	}
	direct := func() time.Duration {
		cmd := exec.Command(server.Command)
		cmd.Env = os.Environ()
		for k, v := range server.Env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		start := time.Now()
		session, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			b.Fatal(err)
		}
		for _, err := range session.Tools(ctx, nil) {
			if err != nil {
				b.Fatal(err)
			}
		}
		took := time.Since(start)
		session.Close()
		return took
	}
	var with, without []time.Duration
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			with, without = append(with, kept()), append(without, direct())
		} else {
			without, with = append(without, direct()), append(with, kept())
		}
	}
	for _, d := range [][]time.Duration{with, without} {
		slices.Sort(d)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(with[len(with)/2]), "ms/start-kept")
	b.ReportMetric(ms(without[len(without)/2]), "ms/start-direct")
	b.Logf("%d starts each: kept %v to %v, direct %v to %v", len(with), with[0], with[len(with)-1], without[0], without[len(without)-1])
}
