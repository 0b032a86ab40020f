package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Reply is an upstream model's answer: its text, its calls, why it
// stopped and what it cost.
type Reply struct {
	Text  string
	Calls []Call
	Stop  string
	Usage Usage
	// Thinking is the model's reasoning as its protocol carries it
	// (Anthropic's thinking blocks, with their signatures): no client is
	// sent it; it goes back to the same upstream with the reply's calls.
	Thinking []json.RawMessage
}

// Stop reasons, wire-neutral.
const (
	StopEnd      = "end"
	StopCalls    = "tool_calls"
	StopLength   = "length"
	StopSequence = "stop_sequence"
	StopRefusal  = "refusal" // the model refused, or a judge did
)

// Usage counts a reply's tokens.
type Usage struct {
	Input  int
	Output int
}

// Sink takes a streamed reply as it comes: its text as it is written, and
// each call as soon as its arguments are whole. Either may be nil.
type Sink struct {
	Text func(delta string)
	Call func(i int, c Call)
}

func (s Sink) text(d string) {
	if s.Text != nil && d != "" {
		s.Text(d)
	}
}

func (s Sink) call(i int, c Call) {
	if s.Call != nil {
		s.Call(i, c)
	}
}

// Upstream is a model provider's API: its protocol (Chat or Messages),
// base URL and key.
type Upstream struct {
	Wire    string
	BaseURL string // up to /v1, which it may include
	Key     string
	Client  *http.Client // default http.DefaultClient
	// Header, where set, is sent with every request: an Anthropic
	// client's anthropic-beta and anthropic-version, to an Anthropic
	// upstream.
	Header http.Header
}

// UpstreamError is an upstream's answer that is no reply: its status and
// body, for the log and the research view. A client is never sent it.
type UpstreamError struct {
	Status int
	Body   string
}

func (e *UpstreamError) Error() string {
	return fmt.Sprintf("upstream answered %d: %s", e.Status, e.Body)
}

// maxErrorBody bounds how much of an upstream's error is kept.
const maxErrorBody = 4 << 10

// Call sends req to the upstream and reads its reply, streamed into sink
// where req streams. A same-protocol request goes as the client sent it,
// changed only where For changed it.
func (u *Upstream) Call(ctx context.Context, req *Request, sink Sink) (Reply, error) {
	body, err := req.Encode(u.Wire)
	if err != nil {
		return Reply{}, err
	}
	path := "/chat/completions"
	if u.Wire == Messages {
		path = "/messages"
	}
	base := strings.TrimRight(u.BaseURL, "/")
	if !strings.HasSuffix(base, "/v1") {
		base += "/v1"
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		return Reply{}, err
	}
	for k, vs := range u.Header {
		hreq.Header[k] = vs
	}
	hreq.Header.Set("Content-Type", "application/json")
	if u.Wire == Messages {
		hreq.Header.Set("X-Api-Key", u.Key)
		if hreq.Header.Get("Anthropic-Version") == "" {
			hreq.Header.Set("Anthropic-Version", "2023-06-01")
		}
	} else {
		hreq.Header.Set("Authorization", "Bearer "+u.Key)
	}
	client := u.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(hreq)
	if err != nil {
		return Reply{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return Reply{}, &UpstreamError{Status: resp.StatusCode, Body: string(b)}
	}
	streamed := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	switch {
	case u.Wire == Messages && streamed:
		return readMessagesStream(resp.Body, sink)
	case u.Wire == Messages:
		return readMessagesReply(resp.Body, sink)
	case streamed:
		return readChatStream(resp.Body, sink)
	}
	return readChatReply(resp.Body, sink)
}

// Encode is the body of the request for an upstream of the given protocol.
func (r *Request) Encode(wire string) ([]byte, error) {
	if wire == Messages {
		return r.encodeMessages()
	}
	return r.encodeChat()
}

// maxEvent bounds one event of a stream an upstream sends.
const maxEvent = 16 << 20

// events reads Server-Sent Events, calling each with its event name and
// data, until it returns done or an error, or the stream ends.
func events(r io.Reader, each func(name string, data []byte) (done bool, err error)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxEvent)
	name, data := "", []byte(nil)
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if data != nil {
				done, err := each(name, data)
				if done || err != nil {
					return err
				}
			}
			name, data = "", nil
		case line[0] == ':':
		case bytes.HasPrefix(line, []byte("event:")):
			name = strings.TrimSpace(string(line[len("event:"):]))
		case bytes.HasPrefix(line, []byte("data:")):
			d := bytes.TrimPrefix(line[len("data:"):], []byte(" "))
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, d...)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if data != nil {
		_, err := each(name, data)
		return err
	}
	return nil
}

// errNoEnd is a stream that ended before its reply did.
var errNoEnd = errors.New("gateway: the upstream's stream ended before its reply did")

// whole reports whether a call's arguments, streamed so far, are a whole
// JSON object: the call may be judged while the rest of the reply comes.
func whole(args string) bool {
	args = strings.TrimSpace(args)
	return strings.HasSuffix(args, "}") && json.Valid([]byte(args))
}

// list is items as one JSON array, as they are: the request they go into
// is encoded once, which compacts and checks them then.
func list(items []json.RawMessage) json.RawMessage {
	out := []byte{'['}
	for i, it := range items {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, it...)
	}
	return append(out, ']')
}
