package api_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"superego/api"
	"superego/flow"
	"superego/memstore"
)

// waitListings is a store that counts how often the instances that wait
// for a client's results are listed: a read of every instance of a flow.
type waitListings struct {
	flow.Store
	n atomic.Int32
}

func (s *waitListings) List(ctx context.Context, opt flow.ListOptions) ([]flow.Summary, error) {
	if opt.Status == flow.StatusAwaitingToolResult {
		s.n.Add(1)
	}
	return s.Store.List(ctx, opt)
}

// A request with the results of calls this server sent finds their
// instance without reading every instance that waits, which grows with
// every task a server has had; one whose calls a server did not send
// itself (it restarted, or another replica sent them) still finds it.
func TestResultsFindTheirInstanceAtOnce(t *testing.T) {
	t.Parallel()
	store := &waitListings{Store: &memstore.Store{}}
	f := newTaskFixtureOn(t, store)
	answers, _ := clientLoop(t, f, "What is the weather in Paris? E-mail it to me@example.com.", "")
	if len(answers) != 3 || answers[2].instance != answers[0].instance {
		t.Fatalf("%d answers; the last %s", len(answers), answers[len(answers)-1].raw)
	}
	if n := store.n.Load(); n != 0 {
		t.Errorf("the task's two continuations listed the waiting instances %d times", n)
	}

	// Another server on the same engine, which sent no call.
	other := httptest.NewServer((&api.Server{Engine: f.engine, APIKeys: []string{apiKey}}).Handler())
	defer other.Close()
	user := "What is the weather in Rome?"
	first := ask(t, f, "guarded_agent", `[{"role": "user", "content": "`+user+`"}]`)
	g := *f
	g.url = other.URL
	second := ask(t, &g, "guarded_agent", toolRound(user, first, "Sunny, 21°C in Rome"))
	var got struct {
		Choices []struct {
			Message struct{ Content string }
		}
	}
	json.Unmarshal([]byte(second.raw), &got)
	if second.instance != first.instance || len(got.Choices) == 0 || got.Choices[0].Message.Content != "Sunny, 21°C in Rome." {
		t.Errorf("the other server's answer, of instance %s (the first's %s): %s", second.instance, first.instance, second.raw)
	}
	if n := store.n.Load(); n != 1 {
		t.Errorf("the other server listed the waiting instances %d times; want 1", n)
	}
}
