package wiretap

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestTapRecordsWritesAndHangUps(t *testing.T) {
	tap := &Tap{}
	answering := make(chan struct{})
	srv := httptest.NewServer(tap.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
		}
		if r.URL.Path == "/hang" {
			close(answering)
			<-r.Context().Done()
		}
	})))
	defer srv.Close()

	resp, err := http.Post(srv.URL+"/whole", "text/plain", strings.NewReader("the body"))
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/hang", strings.NewReader("hung"))
	go func() {
		<-answering
		cancel()
	}()
	if resp, err := http.DefaultClient.Do(req); err == nil {
		io.ReadAll(resp.Body)
		resp.Body.Close()
	}

	calls := tap.Take() // waits for the hung-up call's handler to end
	if len(calls) != 2 {
		t.Fatalf("%d calls, want 2", len(calls))
	}
	whole, hung := calls[0], calls[1]
	if string(whole.Body) != "the body" || len(whole.Writes) != 3 || whole.HungUp || whole.End.Before(whole.Writes[2]) {
		t.Errorf("whole answer: body %q, %d writes, hung up %t", whole.Body, len(whole.Writes), whole.HungUp)
	}
	if string(hung.Body) != "hung" || !hung.HungUp {
		t.Errorf("hung-up answer: body %q, hung up %t", hung.Body, hung.HungUp)
	}
	if len(tap.Take()) != 0 {
		t.Error("Take returned calls twice")
	}
}

// A judge's time counts only where no agent call overlaps it.
func TestJudgesAloneCountsOnlyTheJudgesOwnTime(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	judge, agent := []byte("Your node: input_superego"), []byte("hello")
	calls := []Call{
		{Body: judge, At: at(0), End: at(30)},  // 0–10 alone
		{Body: agent, At: at(10), End: at(50)}, // covers the judges from 10 to 50
		{Body: judge, At: at(40), End: at(70)}, // 50–70 alone
		{Body: judge, At: at(60), End: at(80)}, // overlaps the judge before: 70–80 alone
	}
	if got := JudgesAlone(calls); got != 40*time.Millisecond {
		t.Errorf("%v, want 40ms", got)
	}
}
