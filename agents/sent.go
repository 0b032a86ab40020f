package agents

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"sync"

	"superego/flow"
)

// A paper that reports a model's judgements names the model that made
// them and how it was asked. What a provider's client library says it
// sends is not that: OpenAI's sends "temperature": 0 whether or not it was
// asked to, and a provider answers "gpt-4o-mini" with a dated snapshot.
// So a model call's HTTP exchange itself is read, by the transport every
// provider's client is given: the sampling parameters its request carried,
// and the model the provider's reply named.

// exchange is what one model call's HTTP exchange said, filled in by
// watchExchange as the request goes and its reply is read. A call retried
// keeps the last request's and reply's.
type exchange struct {
	mu     sync.Mutex
	params *flow.Parameters
	served string
}

// exchangeKey carries a call's *exchange in its context to the transport.
type exchangeKey struct{}

func (e *exchange) result() (served string, params *flow.Parameters) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.served, e.params
}

// watchExchange is an http.RoundTripper that fills in the exchange of a
// request's context, if it has one, and otherwise only sends the request.
type watchExchange struct{ next http.RoundTripper }

func (w watchExchange) RoundTrip(req *http.Request) (*http.Response, error) {
	e, _ := req.Context().Value(exchangeKey{}).(*exchange)
	if e == nil {
		return w.next.RoundTrip(req)
	}
	if req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			b, _ := io.ReadAll(io.LimitReader(body, maxWatchedRequest))
			body.Close()
			if p, ok := sentParameters(b); ok {
				e.mu.Lock()
				e.params = p
				e.mu.Unlock()
			}
		}
	}
	resp, err := w.next.RoundTrip(req)
	if err == nil {
		resp.Body = &servedReader{ReadCloser: resp.Body, e: e}
	}
	return resp, err
}

// maxWatchedRequest bounds the request read for its parameters: a call's
// messages may be long, and its parameters are read wherever they are.
const maxWatchedRequest = 64 << 20

// sentParameters reads the sampling parameters of a provider's JSON
// request: OpenAI's and Ollama's chat completions and Anthropic's
// messages name them alike, OpenAI's newer max_completion_tokens aside.
func sentParameters(body []byte) (*flow.Parameters, bool) {
	var r struct {
		Temperature         *float64 `json:"temperature"`
		TopP                *float64 `json:"top_p"`
		Seed                *int64   `json:"seed"`
		MaxTokens           *int64   `json:"max_tokens"`
		MaxCompletionTokens *int64   `json:"max_completion_tokens"`
	}
	if json.Unmarshal(body, &r) != nil {
		return nil, false
	}
	if r.MaxTokens == nil {
		r.MaxTokens = r.MaxCompletionTokens
	}
	return &flow.Parameters{Temperature: r.Temperature, TopP: r.TopP, Seed: r.Seed, MaxTokens: r.MaxTokens}, true
}

// servedReader reads a provider's reply, a JSON object or a stream of
// them, and notes the first "model" it names: OpenAI's and Ollama's
// replies and chunks name it at their top level, Anthropic's message_start
// in its message. Inside a JSON string a quote is escaped, so the pattern
// matches a key, never text the model wrote. It looks at the first
// servedWindow bytes only.
type servedReader struct {
	io.ReadCloser
	e    *exchange
	seen []byte // what has been read, while the model is not found
	done bool
}

var servedModel = regexp.MustCompile(`"model"\s*:\s*("(?:[^"\\]|\\.)*")`)

const servedWindow = 64 << 10

func (r *servedReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if r.done || n == 0 {
		return n, err
	}
	r.seen = append(r.seen, p[:n]...)
	if m := servedModel.FindSubmatch(r.seen); m != nil {
		var name string
		if json.Unmarshal(m[1], &name) == nil {
			r.e.mu.Lock()
			r.e.served = name
			r.e.mu.Unlock()
		}
		r.done, r.seen = true, nil
	} else if len(r.seen) > servedWindow {
		r.done, r.seen = true, nil
	}
	return n, err
}
