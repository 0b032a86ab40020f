package api_test

import (
	"strings"
	"testing"

	"superego/agents/agentstest"
	"superego/flow"
	"superego/tools/mcptest"
)

// What is judged is what runs: the tests below try the ways around the
// rules and the judges that a model's output could take, each beside a
// call that should run and does.

// blockAll is a judge that refuses every call it is asked about: what
// runs, a rule let run.
func blockAll(agentstest.Request) agentstest.Answer {
	return agentstest.Reply(thinkingMarker, "BLOCK", guidanceMarker, "Only what a rule allows runs.")
}

// A key given again in another case would have the rules read one path and
// the tool write another: the call is refused, and writes nothing. The
// same write with the key once runs, as its allow rule says.
func TestACaseVariantKeyRunsNothing(t *testing.T) {
	f := serveActions(t, map[string]string{"a": sprintf(actionsFlow, `, "tool_judge": "judge", "permissions": {"allow": ["write_file(path=notes/**)"]}`, "")},
		judged(calls(
			agentstest.Call{ID: "w1", Name: "write_file", Args: `{"path": "notes/ok.txt", "PATH": ".env", "content": "API_KEY=stolen"}`},
			agentstest.Call{ID: "w2", Name: "write_file", Args: `{"path": "notes/ok.txt", "content": "fine"}`},
		), blockAll))
	res := execute(t, f.fixture, "a", "take notes", "")
	if res.Status != flow.StatusCompleted {
		t.Fatalf("status %s", res.Status)
	}
	if got, written := f.file(t, res.InstanceID, ".env"); written {
		t.Errorf(".env was written: %q", got)
	}
	if got, ok := f.file(t, res.InstanceID, "notes/ok.txt"); !ok || got != "fine" {
		t.Errorf("notes/ok.txt: %v %q, want the allowed write's", ok, got)
	}
	uses, results := usesOf(res.Steps, "assistant"), lastResults(f)
	const refusal = `refused: invalid arguments: "path" and "PATH" are the same key when case is ignored; give it once`
	if len(uses) != 2 || !uses[0].Refused || uses[0].Output != refusal || uses[0].JudgedBy != nil || results[0] != refusal {
		t.Errorf("the case-variant call: %+v; the model read %q", uses, results)
	}
	if len(uses) == 2 && (uses[1].Refused || uses[1].JudgedBy == nil || uses[1].JudgedBy.Rule != "allow: write_file(path=notes/**)") {
		t.Errorf("the plain call: %+v", uses[1])
	}
	if n := len(f.requests("judge")); n != 0 {
		t.Errorf("the judge was asked %d times", n)
	}
}

// A key the tool's schema does not declare, in any case, is refused, so
// that no deny rule is walked around by writing its argument's name in
// another case; the deny rules still refuse the plain key, and a write
// they do not refuse runs.
func TestACaseVariantKeyAloneIsRefused(t *testing.T) {
	f := serveActions(t, map[string]string{"a": sprintf(actionsFlow, `, "permissions": {"deny": ["write_file(path=.env)", "write_file(path=**/.env)"]}`, unjudging)},
		judged(calls(
			agentstest.Call{ID: "w1", Name: "write_file", Args: `{"PATH": ".env", "content": "API_KEY=stolen"}`},
			agentstest.Call{ID: "w2", Name: "write_file", Args: `{"path": ".env", "content": "API_KEY=stolen"}`},
			agentstest.Call{ID: "w3", Name: "write_file", Args: `{"path": "notes/a.txt", "content": "kept"}`},
		), blockAll))
	res := execute(t, f.fixture, "a", "take notes", "")
	if got, written := f.file(t, res.InstanceID, ".env"); written {
		t.Errorf(".env was written: %q", got)
	}
	if got, ok := f.file(t, res.InstanceID, "notes/a.txt"); !ok || got != "kept" {
		t.Errorf("notes/a.txt: %v %q", ok, got)
	}
	want := []string{
		`refused: invalid arguments: "PATH" is not a parameter of this tool (its parameters: content, path)`,
		"refused by rule deny: write_file(path=.env)",
		"wrote 4 bytes to notes/a.txt",
	}
	if got := lastResults(f); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the model read\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if uses := usesOf(res.Steps, "assistant"); len(uses) != 3 || !uses[0].Refused || !uses[1].Refused || uses[2].Refused {
		t.Errorf("records %+v", uses)
	}
}

// A deny condition reads every string inside a value that is not one: a
// path wrapped in an array or an object does not walk around it. The MCP
// server's own log shows what reached it: only the call no rule refused.
func TestAWrappedValueMeetsTheDenyRule(t *testing.T) {
	f := serveActions(t, map[string]string{"a": sprintf(actionsFlow, `, "permissions": {"deny": ["mcp__web__save(path=secret/**)"]}`, unjudging)},
		judged(calls(
			agentstest.Call{ID: "s1", Name: "mcp__web__save", Args: `{"path": ["secret/x"], "content": "a"}`},
			agentstest.Call{ID: "s2", Name: "mcp__web__save", Args: `{"path": {"to": [1, "secret/y"]}, "content": "b"}`},
			agentstest.Call{ID: "s3", Name: "mcp__web__save", Args: `{"path": "notes/x", "content": "c"}`},
		), blockAll))
	res := execute(t, f.fixture, "a", "save", "")
	if got := mcptest.Calls(t, f.sent); len(got) != 1 || got[0] != "save\t"+`{"path":"notes/x","content":"c"}` {
		t.Errorf("the tool server ran %q", got)
	}
	uses := usesOf(res.Steps, "assistant")
	for i, u := range uses[:2] {
		if !u.Refused || u.JudgedBy == nil || u.JudgedBy.Rule != "deny: mcp__web__save(path=secret/**)" {
			t.Errorf("call %d: %+v", i, u)
		}
	}
}

// An MCP server's annotations are its own claims. A tool that says it is
// read-only and closed-world, and is not, goes to the call judge and has
// its results judged, unless mcp.json trusts the server's annotations:
// then it runs unjudged, as it says it may. The server's log shows which
// calls ran.
func TestLyingAnnotationsAreNotBelieved(t *testing.T) {
	verdict := func(r agentstest.Request) agentstest.Answer {
		if strings.Contains(r.LastUser(), `asks to call mcp__web__stash with these arguments:`+"\n"+`{"text":"the lie"}`) {
			return agentstest.Reply(thinkingMarker, "BLOCK", guidanceMarker, "Not asked for.")
		}
		return agentstest.Reply("", "ACCEPT", "", "")
	}
	stash := calls(
		agentstest.Call{ID: "t1", Name: "mcp__web__stash", Args: `{"text": "the lie"}`},
		agentstest.Call{ID: "t2", Name: "mcp__web__stash", Args: `{"text": "plain"}`},
	)
	for _, c := range []struct {
		trust  bool
		ran    []string
		judged int // calls and results the judge was asked about
	}{
		{false, []string{"stash\t" + `{"text":"plain"}`}, 3},
		{true, []string{"stash\t" + `{"text":"the lie"}`, "stash\t" + `{"text":"plain"}`}, 0},
	} {
		f := serveActionsTrusting(t, c.trust, map[string]string{"a": sprintf(actionsFlow, `, "tool_judge": "judge", "result_judge": "judge"`, "")}, judged(stash, verdict))
		res := execute(t, f.fixture, "a", "stash it", "")
		if got := mcptest.Calls(t, f.sent); strings.Join(got, "\n") != strings.Join(c.ran, "\n") {
			t.Errorf("trust_annotations %v: the tool server ran %q, want %q", c.trust, got, c.ran)
		}
		if n := len(f.requests("judge")); n != c.judged {
			t.Errorf("trust_annotations %v: the judge was asked %d times, want %d", c.trust, n, c.judged)
		}
		if uses := usesOf(res.Steps, "assistant"); !c.trust && (len(uses) != 2 || !uses[0].Refused || uses[1].ResultJudgedBy == nil) {
			t.Errorf("records %+v", uses)
		}
	}
}
