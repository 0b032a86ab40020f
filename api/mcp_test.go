package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/api"
	"superego/engine"
	"superego/flow"
	"superego/internal/eventually"
	"superego/memstore"
	"superego/tools"
	"superego/tools/mcptest"
)

// The test binary doubles as an MCP server (mcptest.Command).
func TestMain(m *testing.M) {
	mcptest.Main()
	mcptest.ExitAtOnce()
	os.Exit(m.Run())
}

// mcpSecret is an env value of the stdio server: it must reach neither
// /healthz nor the log, even though the server prints it.
const mcpSecret = "sk-mcp-SECRET-7788"

// mcpFixture serves flows whose agents use the MCP servers "t" (the test
// server over stdio, kept down while the file down exists) and "web" (the
// same server over streamable HTTP), both with their annotations trusted,
// on a scripted model.
type mcpFixture struct {
	*fixture
	mcp  *tools.MCP
	down string
	// webCalls gets the name of every tool called on "web", as the
	// server receives the call.
	webCalls chan string
}

func serveMCP(t *testing.T, defs map[string]string, play func(agentstest.Request) agentstest.Answer) *mcpFixture {
	t.Helper()
	down := filepath.Join(t.TempDir(), "down")
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	webCalls := make(chan string, 100) // more than any test calls
	h := mcptest.Handler()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		var call struct {
			Method string `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		if json.Unmarshal(b, &call) == nil && call.Method == "tools/call" {
			webCalls <- call.Params.Name
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(web.Close)
	stdio := mcptest.Command(t, "t", map[string]string{mcptest.DownEnv: down, mcptest.SecretEnv: mcpSecret})
	stdio.TrustAnnotations = true // the read-only tools speculate
	m := &tools.MCP{Servers: []tools.MCPServer{stdio, {Name: "web", URL: web.URL, TrustAnnotations: true}}, Log: log}
	m.Start()
	t.Cleanup(m.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	m.Wait(ctx)
	cancel()
	set := tools.Set{"calculator": tools.Calculator()}
	flows := map[string]*flow.Flow{}
	for id, def := range defs {
		d, err := flow.Parse([]byte(def), flow.Catalog{Tools: set.Names(), MCPServers: m.Names()})
		if err != nil {
			t.Fatal(err)
		}
		flows[id] = &flow.Flow{ID: id, Def: d}
	}
	model := agentstest.OpenAI(t, play)
	p := &agents.Providers{Default: "openai:gpt-test", OpenAIKey: "k", OpenAIBaseURL: model.URL + "/v1"}
	engine := &engine.Engine{Flows: flows, Exec: &engine.Executor{Agent: &agents.Agent{Model: p.Model, Tools: set, MCP: m, Timeout: 5 * time.Second}},
		Store: &memstore.Store{}, Log: log}
	srv := httptest.NewServer((&api.Server{Engine: engine, Model: "openai:gpt-test", MCP: m, Log: log}).Handler())
	t.Cleanup(func() {
		srv.Close()
		expired, cancel := context.WithCancel(context.Background())
		cancel()
		engine.Close(expired)
	})
	return &mcpFixture{fixture: &fixture{url: srv.URL, srv: srv, engine: engine, logs: logs, model: model}, mcp: m, down: down, webCalls: webCalls}
}

// waitMCP polls until server is in state: the bounded wait a restart with
// backoff needs.
func (f *mcpFixture) waitMCP(t *testing.T, server, state string) {
	t.Helper()
	eventually.Holds(t, 20*time.Second, func() string {
		if states := f.mcp.States(); !slices.Contains(states, tools.MCPState{Name: server, State: state, Tools: 4}) {
			return fmt.Sprintf("%s never reached %s: %+v", server, state, states)
		}
		return ""
	})
}

const mcpAssistant = `{"name": "MCP assistant", "graph": {"start": "assistant", "nodes": {
  "assistant": {"type": "inner_agent", "agent_id": "assistant", "system_prompt": "Use your tools.", "tools": ["calculator", "mcp__t__*", "mcp__web__echo"],
    "max_iterations": 5, "transitions": {"COMPLETE": null, "NEEDS_TOOL": "self"}}}}}`

// An agent calls MCP tools over stdio and over HTTP, and their results
// reach its model; a server killed in the middle of a run gives a tool
// error naming it, the run goes on, and the server comes back.
func TestAgentUsesMCPTools(t *testing.T) {
	t.Parallel()
	var f *mcpFixture
	f = serveMCP(t, map[string]string{"mcp": mcpAssistant}, func(r agentstest.Request) agentstest.Answer {
		results := r.ToolResults()
		kill := strings.Contains(r.LastUser(), "kill")
		switch {
		case len(results) == 0 && kill:
			return agentstest.Answer{ToolCalls: []agentstest.Call{{ID: "c1", Name: "mcp__t__pid", Args: `{}`}}}
		case len(results) == 0:
			return agentstest.Answer{ToolCalls: []agentstest.Call{
				{ID: "c1", Name: "mcp__t__echo", Args: `{"text": "over stdio"}`},
				{ID: "c2", Name: "mcp__web__echo", Args: `{"text": "over http"}`},
			}}
		case len(results) == 1 && kill:
			// The server dies between two tool calls of the run, and
			// stays down until the test lets it up.
			os.WriteFile(f.down, nil, 0o644)
			pid, _ := strconv.Atoi(results[0].Text)
			syscall.Kill(pid, syscall.SIGKILL)
			f.waitMCP(t, "t", tools.MCPRestarting)
			return agentstest.Answer{ToolCalls: []agentstest.Call{{ID: "c2", Name: "mcp__t__echo", Args: `{"text": "anyone?"}`}}}
		}
		var got []string
		for _, m := range results {
			got = append(got, m.Text)
		}
		return agentstest.Reply("", "COMPLETE", "", strings.Join(got, " | "))
	})
	res := execute(t, f.fixture, "mcp", "use your tools", "")
	if res.Status != flow.StatusCompleted || res.Response != "over stdio | over http" {
		t.Fatalf("status %s, response %q", res.Status, res.Response)
	}
	first := f.model.Requests()[0]
	if strings.Join(first.Tools, " ") != "calculator mcp__t__add_note mcp__t__echo mcp__t__env mcp__t__pid mcp__web__echo" {
		t.Errorf("offered %v", first.Tools)
	}

	res = execute(t, f.fixture, "mcp", "kill the server", "")
	use := res.Steps[len(res.Steps)-2].ToolUsage
	if res.Status != flow.StatusCompleted || len(use) != 1 || !strings.Contains(use[0].Error, `mcp server "t" is not running`) ||
		!strings.Contains(res.Response, `error: mcp server "t" is not running`) {
		t.Fatalf("a dead server: status %s, response %q, tool usage %+v", res.Status, res.Response, use)
	}
	os.Remove(f.down)
	f.waitMCP(t, "t", tools.MCPRunning)
	if res := execute(t, f.fixture, "mcp", "again", ""); res.Response != "over stdio | over http" {
		t.Errorf("after the restart: %q", res.Response)
	}
	health := body(t, f.do(t, "GET", "/healthz", ""))
	if !strings.Contains(health, `"mcp":[{"name":"t","state":"running","tools":4},{"name":"web","state":"running","tools":4}]`) {
		t.Errorf("healthz: %s", health)
	}
	for where, s := range map[string]string{"healthz": health, "log": f.logs.String()} {
		if strings.Contains(s, mcpSecret) {
			t.Errorf("the MCP server's env secret reached the %s:\n%s", where, s)
		}
	}
	if !strings.Contains(f.logs.String(), "[redacted]") {
		t.Error("the dead server's standard error, which printed its secret, was not logged redacted")
	}
}

const supervisedTools = `{"name": "Supervised tools", "graph": {"start": "supervisor", "nodes": {
  "supervisor": {"type": "superego", "agent_id": "supervisor", "constitution": "Curate the assistant's tools.",
    "allowed_actions": ["READ_ONLY", "MODIFY_CONTEXT"], "max_iterations": 4,
    "transitions": {"ACCEPT": "assistant", "BLOCK": null, "NEEDS_TOOL": "self"}},
  "assistant": {"type": "inner_agent", "agent_id": "assistant", "system_prompt": "Help.", "tools": ["calculator", "mcp__t__*", "mcp__web__echo"],
    "max_iterations": 3, "transitions": {"COMPLETE": null, "NEEDS_TOOL": "self"}}}}}`

// supervisorMoves plays a supervisor whose move the user's message picks,
// planting markers in its hidden fields, and an assistant that tries the
// stdio server's echo when asked to. Requests to the assistant are kept.
func supervisorMoves(mu *sync.Mutex, assistant *[]agentstest.Request) func(agentstest.Request) agentstest.Answer {
	moves := map[string][]agentstest.Call{
		"exclude t":    {{ID: "s1", Name: "supervised_exclude_tool_server", Args: `{"server": "t"}`}},
		"include echo": {{ID: "s1", Name: "supervised_include_tool", Args: `{"server": "t", "tool": "echo"}`}},
		"list":         {{ID: "s1", Name: "supervised_list_tool_servers", Args: `{}`}, {ID: "s2", Name: "supervised_list_context_tools", Args: `{}`}},
		"propose":      {{ID: "s1", Name: "supervised_create_rule", Args: `{"name": "cite", "text": "RULE-CITE-SOURCES", "priority": 3}`}},
	}
	return func(r agentstest.Request) agentstest.Answer {
		switch r.Node() {
		case "supervisor":
			if len(r.ToolResults()) == 0 {
				for move, calls := range moves {
					if strings.Contains(r.LastUser(), move) {
						return agentstest.Answer{ToolCalls: calls}
					}
				}
			}
			return agentstest.Reply(thinkingMarker, "ACCEPT", guidanceMarker, "")
		case "assistant":
			mu.Lock()
			*assistant = append(*assistant, r)
			mu.Unlock()
			if strings.Contains(r.LastUser(), "try echo") && len(r.ToolResults()) == 0 {
				return agentstest.Answer{ToolCalls: []agentstest.Call{{ID: "a1", Name: "mcp__t__echo", Args: `{"text": "hi"}`}}}
			}
			var got []string
			for _, m := range r.ToolResults() {
				got = append(got, m.Text)
			}
			return agentstest.Reply(thinkingMarker, "COMPLETE", guidanceMarker, "done "+strings.Join(got, " | "))
		}
		return agentstest.Answer{Status: 400, Text: "unknown node"}
	}
}

// A supervisor excludes a tool server, and the agent's next request no
// longer offers its tools, nor runs them; it includes one tool back; another
// instance keeps every tool; a READ_ONLY supervisor changes nothing.
func TestSupervisorManagesTools(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var assistant []agentstest.Request
	readOnly := strings.Replace(supervisedTools, `["READ_ONLY", "MODIFY_CONTEXT"]`, `["READ_ONLY"]`, 1)
	f := serveMCP(t, map[string]string{"sup": supervisedTools, "sup_ro": readOnly}, supervisorMoves(&mu, &assistant))
	offered := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(assistant[len(assistant)-1].Tools, " ")
	}
	const all = "calculator mcp__t__add_note mcp__t__echo mcp__t__env mcp__t__pid mcp__web__echo"

	res := execute(t, f.fixture, "sup", "exclude t, then try echo", "")
	if got := offered(); got != "calculator mcp__web__echo" {
		t.Errorf("after exclude_tool_server: offered %s", got)
	}
	use := res.Steps[len(res.Steps)-2].ToolUsage
	if res.Status != flow.StatusCompleted || len(use) != 1 || use[0].Error != `no tool "mcp__t__echo" here; the tools are: calculator, mcp__web__echo` {
		t.Errorf("an excluded tool was run, or not refused so: %s %+v", res.Status, use)
	}
	if sup := res.Steps[1].ToolUsage; len(sup) != 1 || sup[0].Output != `excluded tool server "t": its tools are out of context` {
		t.Errorf("the change is not in the supervisor's step: %+v", sup)
	}
	instance := res.InstanceID

	execute(t, f.fixture, "sup", "include echo", instance)
	if got := offered(); got != "calculator mcp__t__echo mcp__web__echo" {
		t.Errorf("after include_tool: offered %s", got)
	}
	execute(t, f.fixture, "sup", "hello", instance)
	if got := offered(); got != "calculator mcp__t__echo mcp__web__echo" {
		t.Errorf("the next turn lost the instance's tool context: offered %s", got)
	}
	execute(t, f.fixture, "sup", "hello", "")
	if got := offered(); got != all {
		t.Errorf("another instance: offered %s", got)
	}

	res = execute(t, f.fixture, "sup", "list", "")
	lists := res.Steps[1].ToolUsage
	if len(lists) != 2 || lists[0].Output != `[{"server":"builtin","state":"running","mode":"always","tools":1,"in_context":1},{"server":"t","state":"running","mode":"always","tools":4,"in_context":4},{"server":"web","state":"running","mode":"always","tools":1,"in_context":1}]` ||
		!strings.Contains(lists[1].Output, `"name":"mcp__t__echo","description":"Returns its text.","read_only":true`) {
		t.Errorf("listings: %+v", lists)
	}

	res = execute(t, f.fixture, "sup_ro", "exclude t, then try echo", "")
	if got := offered(); got != all {
		t.Errorf("a READ_ONLY supervisor changed the tools: offered %s", got)
	}
	refused := res.Steps[1].ToolUsage
	if len(refused) != 1 || refused[0].Error != "refused: supervised_exclude_tool_server needs MODIFY_CONTEXT, and this supervisor is allowed only READ_ONLY" {
		t.Errorf("the refusal is not recorded: %+v", refused)
	}
	var last agentstest.Request
	for _, r := range f.model.Requests() {
		if r.Node() == "supervisor" {
			last = r
		}
	}
	if len(last.Tools) != 10 || !slices.Contains(last.Tools, "supervised_list_tools") || slices.Contains(last.Tools, "supervised_exclude_tool_server") {
		t.Errorf("a READ_ONLY supervisor is offered %v", last.Tools)
	}
	testMCPLeaks(t, f)
}

// testMCPLeaks follows the supervisor's and the assistant's hidden
// markers, and the MCP server's secret, through everything a client or an
// operator sees.
func testMCPLeaks(t *testing.T, f *mcpFixture) {
	t.Helper()
	seen := map[string]string{
		"healthz":   body(t, f.do(t, "GET", "/healthz", "")),
		"flows":     body(t, f.do(t, "GET", "/flows", "")),
		"instances": body(t, f.do(t, "GET", "/flow/instances", "")),
		"log":       f.logs.String(),
	}
	var list []flow.Summary
	json.Unmarshal([]byte(seen["instances"]), &list)
	if len(list) == 0 {
		t.Fatal("no instances")
	}
	for _, inst := range list {
		seen["instance "+inst.ID] = body(t, f.do(t, "GET", "/flow/instances/"+inst.ID, ""))
		seen["stream "+inst.ID] = body(t, f.do(t, "GET", "/flow/instances/"+inst.ID+"/stream?after=0", ""))
	}
	for where, s := range seen {
		noLeak(t, where, s)
		if strings.Contains(s, mcpSecret) {
			t.Errorf("%s leaks the MCP server's env secret", where)
		}
	}
	// The tool listings a supervisor reads are in its steps, seen above;
	// its own reads show no hidden field of anyone's either.
	for _, r := range f.model.Requests() {
		for _, m := range r.ToolResults() {
			noLeak(t, "a tool result", m.Text)
		}
	}
}

const reviewedRules = `{"name": "Reviewed rules", "graph": {"start": "supervisor", "nodes": {
  "supervisor": {"type": "superego", "agent_id": "supervisor", "constitution": "Propose rules.",
    "allowed_actions": ["READ_ONLY", "MODIFY_CONTEXT"], "review_changes": true, "max_iterations": 4,
    "transitions": {"ACCEPT": "assistant", "BLOCK": null, "NEEDS_TOOL": "self"}},
  "assistant": {"type": "inner_agent", "agent_id": "assistant", "system_prompt": "Help.", "transitions": {"COMPLETE": null}}}}}`

// A supervisor with review_changes proposes a rule: the run waits, and the
// rule applies once a person approves it; rejected, it is dropped and the
// run goes on without it.
func TestReviewedChanges(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var assistant []agentstest.Request
	f := serveMCP(t, map[string]string{"reviewed": reviewedRules}, supervisorMoves(&mu, &assistant))
	asked := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(assistant)
	}
	last := func() string {
		mu.Lock()
		defer mu.Unlock()
		return assistant[len(assistant)-1].LastUser()
	}
	for _, approve := range []bool{true, false} {
		before := asked()
		res := execute(t, f.fixture, "reviewed", "propose a rule", "")
		proposal := res.Steps[1].ToolUsage
		if res.Status != flow.StatusAwaitingReview || asked() != before || len(proposal) != 1 || !proposal[0].Proposed ||
			!strings.HasPrefix(proposal[0].Output, `proposed: created rule "cite"`) {
			t.Fatalf("the proposal does not wait: %s, %d assistant calls, %+v", res.Status, asked()-before, proposal)
		}
		b, _ := json.Marshal(map[string]any{"approve": approve, "note": "reviewed by a person"})
		code, after, raw := post(t, f.url+"/flow/instances/"+res.InstanceID+"/review", string(b))
		if code != 200 || after.Status != flow.StatusCompleted || asked() != before+1 {
			t.Fatalf("review: %d %s", code, raw)
		}
		verdict := after.Steps[len(after.Steps)-2]
		if verdict.AgentID != flow.Reviewer || verdict.Decision != map[bool]string{true: flow.Approved, false: flow.Rejected}[approve] {
			t.Errorf("the review's step: %+v", verdict)
		}
		if got := strings.Contains(last(), "RULE-CITE-SOURCES"); got != approve {
			t.Errorf("approve %v: the assistant was given the rule: %v", approve, got)
		}
		// The next turn keeps what the review decided.
		execute(t, f.fixture, "reviewed", "thanks", res.InstanceID)
		if got := strings.Contains(last(), "RULE-CITE-SOURCES"); got != approve {
			t.Errorf("approve %v, next turn: the assistant was given the rule: %v", approve, got)
		}
	}
	testMCPLeaks(t, f)
}

const speculativeMCP = `{"name": "Speculative MCP", "graph": {"start": "input_superego", "nodes": {
  "input_superego": {"type": "superego", "agent_id": "input_superego", "constitution": "Screen.", "speculate": true,
    "transitions": {"BLOCK": null, "ACCEPT": "assistant"}},
  "assistant": {"type": "inner_agent", "agent_id": "assistant", "system_prompt": "Answer.", "tools": ["mcp__web__*"],
    "transitions": {"COMPLETE": null, "NEEDS_TOOL": "self"}}}}}`

// A speculative turn (docs/gating.md) runs an MCP tool whose readOnlyHint says it
// changes nothing before its judge has decided, and one without it only
// once the judge accepts.
func TestSpeculationWaitsForMCPWrites(t *testing.T) {
	t.Parallel()
	var f *mcpFixture
	f = serveMCP(t, map[string]string{"spec": speculativeMCP}, func(r agentstest.Request) agentstest.Answer {
		switch r.Node() {
		case "assistant":
			if len(r.ToolResults()) == 0 {
				return agentstest.Answer{ToolCalls: []agentstest.Call{
					{ID: "c1", Name: "mcp__web__echo", Args: `{"text": "reading"}`},
					{ID: "c2", Name: "mcp__web__add_note", Args: `{"text": "writing"}`},
				}}
			}
			return agentstest.Reply("", "COMPLETE", "", "done")
		case "input_superego":
			// The judge decides once the read-only call has reached the
			// server; the write waits for it.
			if got := <-f.webCalls; got != "echo" {
				t.Errorf("before the verdict, the server was called for %s", got)
			}
			if strings.Contains(r.LastUser(), "block") {
				return agentstest.Reply(thinkingMarker, "BLOCK", guidanceMarker, "No.")
			}
			return agentstest.Reply("", "ACCEPT", "", "")
		}
		return agentstest.Answer{Status: 400}
	})
	if res := execute(t, f.fixture, "spec", "please block this", ""); res.Status != flow.StatusBlocked {
		t.Fatalf("status %s", res.Status)
	}
	select {
	case got := <-f.webCalls:
		t.Errorf("after a BLOCK, the server was called for %s", got)
	default:
	}
	res := execute(t, f.fixture, "spec", "fine", "")
	if res.Status != flow.StatusCompleted || <-f.webCalls != "add_note" {
		t.Errorf("accepted: %s", res.Status)
	}
}

const supervisedDraft = `{"name": "Supervised draft", "graph": {"start": "assistant", "nodes": {
  "assistant": {"type": "inner_agent", "agent_id": "assistant", "system_prompt": "Draft.", "transitions": {"COMPLETE": "supervisor"}},
  "supervisor": {"type": "superego", "agent_id": "supervisor", "constitution": "Judge the draft.", "allowed_actions": ["READ_ONLY"],
    "transitions": {"ACCEPT": null, "BLOCK": null, "NEEDS_TOOL": "self"}}}}}`

// A supervisor that judges a draft reads the conversation without the
// draft, and its tool round, held with the draft while it judges, is
// withheld with it.
func TestSupervisorReadsNoHeldDraft(t *testing.T) {
	t.Parallel()
	history := make(chan string, 1)
	f := serveMCP(t, map[string]string{"draft": supervisedDraft}, func(r agentstest.Request) agentstest.Answer {
		switch r.Node() {
		case "assistant":
			return agentstest.Reply(thinkingMarker, "COMPLETE", guidanceMarker, draftMarker+" the draft")
		case "supervisor":
			results := r.ToolResults()
			if len(results) == 0 {
				return agentstest.Answer{ToolCalls: []agentstest.Call{{ID: "s1", Name: "supervised_get_conversation_history", Args: `{}`}}}
			}
			history <- results[0].Text
			return agentstest.Reply(thinkingMarker, "BLOCK", guidanceMarker, "Not that.")
		}
		return agentstest.Answer{Status: 400}
	})
	res := execute(t, f.fixture, "draft", "write something", "")
	var round *flow.Step
	for i, s := range res.Steps {
		if s.Node == "supervisor" && s.Decision == flow.NeedsTool {
			round = &res.Steps[i]
		}
	}
	if res.Status != flow.StatusBlocked || round == nil || round.Withheld != "supervisor" || len(round.ToolUsage) != 0 {
		t.Fatalf("status %s, steps %+v", res.Status, res.Steps)
	}
	if got := <-history; !strings.Contains(got, `"agent_id":"assistant"`) || strings.Contains(got, draftMarker) {
		t.Errorf("the supervisor read %s", got)
	}
	stream := body(t, f.do(t, "GET", "/flow/instances/"+res.InstanceID+"/stream?after=0", ""))
	for where, s := range map[string]string{"stream": stream, "instance": body(t, f.do(t, "GET", "/flow/instances/"+res.InstanceID, ""))} {
		if strings.Contains(s, draftMarker) {
			t.Errorf("the %s shows the withheld draft:\n%s", where, s)
		}
		noLeak(t, where, s)
	}
}
