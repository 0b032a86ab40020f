package engine_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"testing"

	"superego/engine"
	"superego/flow"
	"superego/flow/storetest"
	"superego/tools"
)

// allowListFlow is an agent whose writes run only where a rule allows
// them: under notes/, never a .env.
const allowListFlow = `{"name": "notes", "graph": {"start": "a", "nodes": {
  "a": {"type": "inner_agent", "agent_id": "a", "tools": ["write_file"],
    "permissions": {"allow": ["write_file(path=notes/**)"], "deny": ["write_file(path=**/.env)"], "default": "deny"},
    "transitions": {"COMPLETE": null, "NEEDS_TOOL": "self"}}}}}`

// FuzzWhatIsJudgedIsWhatRuns checks the contract of judged actions for
// any arguments a model may write: the value the rules matched is the
// value the tool ran with, or the call did not run. The tool is the real
// write_file, behind the executor's rules; what it ran with is read where
// it acted, on disk. A call that ran was let run by the allow rule, the
// tool got the very arguments the step records, and the only file in the
// workspace is the one at the path the rule matched, holding the content
// those arguments give.
func FuzzWhatIsJudgedIsWhatRuns(f *testing.F) {
	def, err := flow.Parse([]byte(allowListFlow), flow.Catalog{Tools: []string{"write_file"}})
	if err != nil {
		f.Fatal(err)
	}
	ws := &tools.Workspaces{Root: f.TempDir()}
	write := ws.Tools()["write_file"]
	for _, seed := range []string{
		`{"path": "notes/ok.txt", "content": "fine"}`,
		`{"path": "notes/ok.txt", "PATH": ".env", "content": "API_KEY=stolen"}`,
		`{"PATH": ".env", "content": "x"}`,
		`{"Path": "notes/a", "content": "x"}`,
		`{"path": "notes/a", "path": ".env", "content": "x"}`,
		`{"p\u0061th": "notes/a", "content": "x"}`,
		`{"path": ["notes/a"], "content": "x"}`,
		`{"path": "notes/../.env", "content": "x"}`,
		`{"path": "notes/a/.env", "content": "x"}`,
		`{"path": "notes/\u212a", "conten\u212a": "x", "content": "y"}`,
		`{"path": "notes/a", "content": "x"} {"path": ".env"}`,
		`{"path": "notes/a", "content": 5}`,
		`{"path": "notes/a", "content": "x", "extra": {"path": ".env"}}`,
		`{"path":"notes/a","content":"x"`,
		``,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, args string) {
		const instance = "fuzz"
		dir := filepath.Join(ws.Root, instance)
		defer os.RemoveAll(dir)
		var ran []json.RawMessage // what the tool was called with
		var recorded []flow.ToolUse
		agent := agentFunc(func(task *engine.Task) (engine.Reply, error) {
			if len(task.ToolRounds) > 0 {
				return reply(flow.Complete, "done"), nil
			}
			task.Calls.Propose(0, flow.ToolUse{ID: "c1", ToolName: "write_file", Input: json.RawMessage(args)},
				engine.ToolInfo{ClosedWorld: true, Parameters: write.Parameters},
				func(ctx context.Context, input json.RawMessage) engine.Result {
					ran = append(ran, input)
					out, err := write.Call(tools.WithInstance(ctx, instance), input)
					if err != nil {
						return engine.Result{Error: err.Error()}
					}
					return engine.Result{Output: out}
				})
			uses, err := task.Calls.Finish(context.Background(), 1)
			recorded = uses
			return engine.Reply{ToolUsage: uses}, err
		})
		var records storetest.Records // and no step changes once it is in an event
		sink := engine.Sink{Emit: func(evs ...flow.Event) error { records.See(evs...); return nil }, Sync: func() error { return nil }}
		out := (&engine.Executor{Agent: agent}).Execute(context.Background(), engine.Turn{FlowID: "notes", Def: def, InstanceID: instance, RunID: "r", Input: "Take notes."}, sink)
		records.Check(t)
		if out.Status != flow.StatusCompleted || len(recorded) != 1 {
			t.Fatalf("the run: %+v, calls %+v", out, recorded)
		}
		u := recorded[0]
		if !json.Valid(u.Input) {
			t.Fatalf("the record's arguments are not JSON: %q", u.Input)
		}
		files := filesIn(t, dir)
		if len(ran) == 0 {
			if !u.Refused || len(files) > 0 {
				t.Fatalf("a call that did not run: refused %v, files %q", u.Refused, files)
			}
			return
		}
		if len(ran) != 1 || u.Refused || u.JudgedBy == nil || u.JudgedBy.Rule != "allow: write_file(path=notes/**)" {
			t.Fatalf("ran %d times; record %+v", len(ran), u)
		}
		if string(ran[0]) != string(u.Input) {
			t.Fatalf("the tool ran with %s; the record, which the rules and judges read, holds %s", ran[0], u.Input)
		}
		// The value the rules read is the one the record's JSON holds.
		_, value, err := flow.DecodeArguments(u.Input, write.Parameters)
		if err != nil {
			t.Fatalf("the record's arguments do not decode: %v", err)
		}
		p, _ := value["path"].(string)
		content, _ := value["content"].(string)
		if r := def.Graph.Nodes["a"].Permissions.Decide("write_file", value); r.Effect != flow.EffectAllow {
			t.Fatalf("the rules do not allow the arguments that ran, %s: %+v", u.Input, r)
		}
		if u.Error != "" {
			if len(files) > 0 {
				t.Fatalf("a write that failed (%s) left %q", u.Error, files)
			}
			return
		}
		if got, ok := files[path.Clean(p)]; len(files) != 1 || !ok || got != content {
			t.Fatalf("the rules matched path %q with content %q; the workspace holds %q", p, content, files)
		}
	})
}

// filesIn are the regular files under dir, by slash-separated path
// relative to it, with their contents.
func filesIn(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		files[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
