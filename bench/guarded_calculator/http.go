package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"superego/api"
	"superego/flow"
)

// http runs the flow as a client of POST /flow/execute over loopback, and
// the floor: a bare net/http handler that writes the same events, already
// encoded, flushing each as the server does. Both are read to the end by
// the same client code.
func (b *bench) http(out map[string]any, warmup, seq int, minDur time.Duration) error {
	e, closeStore, err := b.engine(b.agent0, 0)
	if err != nil {
		return err
	}
	defer closeStore()
	s := &api.Server{Engine: e}
	if b.watch != nil {
		s.Streams = b.watch.tel.StreamSubscribers()
	}
	srv := &http.Server{Handler: s.Handler()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/flow/execute"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	body := `{"flow_id": "g", "input": "What is 5*10?"}`
	if len(b.stack) > 0 {
		picks := make([]flow.Pick, len(b.stack)) // names and levels: a request carries no text
		for i, l := range b.stack {
			picks[i] = flow.Pick{Name: l.Name, Adherence: &l.Adherence}
		}
		named, _ := json.Marshal(picks)
		body = `{"flow_id": "g", "input": "What is 5*10?", "constitutions": ` + string(named) + `}`
	}
	post := func() ([]byte, error) {
		resp, err := client.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && !bytes.Contains(body, []byte(`"status":"completed"`)) {
			err = fmt.Errorf("run did not complete: %s", body)
		}
		return body, err
	}
	transcript, err := post()
	if err != nil {
		return err
	}
	ds, wall, err := sequential(warmup, seq, minDur, func() error { _, err := post(); return err })
	if err != nil {
		return err
	}
	out["http_mean_us"] = float64(wall.Microseconds()) / float64(len(ds))
	out["http_events_per_flow"] = bytes.Count(transcript, []byte("\nevent: ")) + 1

	// The floor writes that transcript's events, one write and flush each.
	var events [][]byte
	sc := bufio.NewScanner(bytes.NewReader(transcript))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var cur bytes.Buffer
	for sc.Scan() {
		cur.Write(sc.Bytes())
		cur.WriteByte('\n')
		if sc.Text() == "" {
			events = append(events, bytes.Clone(cur.Bytes()))
			cur.Reset()
		}
	}
	floor := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		f.Flush()
		for _, ev := range events {
			w.Write(ev)
			f.Flush()
		}
	})}
	fln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go floor.Serve(fln)
	defer floor.Close()
	url = "http://" + fln.Addr().String() + "/flow/execute"
	ds, wall, err = sequential(warmup, seq, minDur, func() error { _, err := post(); return err })
	if err != nil {
		return err
	}
	out["http_floor_mean_us"] = float64(wall.Microseconds()) / float64(len(ds))
	return nil
}
