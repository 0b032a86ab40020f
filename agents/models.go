package agents

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/anthropic"
	"github.com/tmc/langchaingo/llms/openai"

	"superego/backoff"
	"superego/gateway"
)

// Model is a resolved model: the client, the name steps record, and the
// call options its provider needs. ID is the provider's name for it;
// Upstream, for a provider with a model API, speaks it for the agent
// that takes a model API client's request (relay).
type Model struct {
	LLM      llms.Model
	Name     string
	Options  []llms.CallOption
	ID       string
	Upstream *gateway.Upstream
}

// Providers resolves "provider:model" strings to models. Settings mirror the
// providers' SDK environment variables; Default is used for nodes without
// a model of their own.
type Providers struct {
	Default          string
	OpenAIKey        string
	OpenAIBaseURL    string
	AnthropicKey     string
	AnthropicBaseURL string
	OllamaHost       string
	// HTTPClient calls the providers. By default it waits out their 429
	// answers (backoff.Transport), for served runs and experiments alike;
	// one given here should too.
	HTTPClient *http.Client

	mu      sync.Mutex
	cache   map[string]Model
	backoff backoff.Transport // the default client's
}

// Provider names a node's "model" may start with.
var ProviderNames = []string{"anthropic", "offline", "ollama", "openai"}

// Default model names where a spec gives only the provider.
var defaultModels = map[string]string{
	"openai":    "gpt-4o-mini",
	"anthropic": "claude-sonnet-4-5",
	"ollama":    "llama3.2",
}

// ErrNoKey is returned for a provider whose API key is not set.
var ErrNoKey = errors.New("agents: API key not set")

// Model resolves spec, or the default for "". Models are made once and shared.
func (p *Providers) Model(spec string) (Model, error) {
	if spec == "" {
		spec = p.Default
	}
	if spec == "" {
		spec = "offline"
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.cache[spec]; ok {
		return m, nil
	}
	m, err := p.build(spec)
	if err != nil {
		return Model{}, fmt.Errorf("model %q: %w", spec, err)
	}
	if p.cache == nil {
		p.cache = map[string]Model{}
	}
	p.cache[spec] = m
	return m, nil
}

func (p *Providers) build(spec string) (Model, error) {
	provider, name, _ := strings.Cut(spec, ":")
	if name == "" {
		name = defaultModels[provider]
	}
	client := &http.Client{Transport: &p.backoff}
	if p.HTTPClient != nil {
		c := *p.HTTPClient
		client = &c
	}
	if client.Transport == nil {
		client.Transport = http.DefaultTransport
	}
	client.Transport = watchExchange{client.Transport} // what each call sent and was answered (sent.go)
	m := Model{Name: provider + ":" + name, ID: name}
	var err error
	switch provider {
	case "offline":
		return Model{LLM: Offline{}, Name: OfflineName}, nil
	case "openai":
		if p.OpenAIKey == "" {
			return Model{}, fmt.Errorf("%w: set OPENAI_API_KEY (any value for a local OpenAI-compatible server)", ErrNoKey)
		}
		opts := []openai.Option{openai.WithToken(p.OpenAIKey), openai.WithModel(name), openai.WithHTTPClient(client)}
		if p.OpenAIBaseURL != "" {
			opts = append(opts, openai.WithBaseURL(p.OpenAIBaseURL))
		}
		m.LLM, err = openai.New(opts...)
		m.Options = []llms.CallOption{llms.WithJSONMode()}
		m.Upstream = &gateway.Upstream{Wire: gateway.Chat, BaseURL: cmp.Or(p.OpenAIBaseURL, "https://api.openai.com/v1"), Key: p.OpenAIKey, Client: client}
	case "ollama":
		// Ollama's own API, as langchaingo speaks it, drops tools; its
		// OpenAI-compatible /v1 keeps them.
		host := p.OllamaHost
		if host == "" {
			host = "http://127.0.0.1:11434"
		}
		if !strings.Contains(host, "://") {
			host = "http://" + host
		}
		m.LLM, err = openai.New(openai.WithToken("ollama"), openai.WithModel(name),
			openai.WithBaseURL(strings.TrimRight(host, "/")+"/v1"), openai.WithHTTPClient(client))
		m.Options = []llms.CallOption{llms.WithJSONMode()}
		m.Upstream = &gateway.Upstream{Wire: gateway.Chat, BaseURL: host, Key: "ollama", Client: client}
	case "anthropic":
		if p.AnthropicKey == "" {
			return Model{}, fmt.Errorf("%w: set ANTHROPIC_API_KEY", ErrNoKey)
		}
		opts := []anthropic.Option{anthropic.WithToken(p.AnthropicKey), anthropic.WithModel(name), anthropic.WithHTTPClient(client)}
		if p.AnthropicBaseURL != "" {
			base := strings.TrimRight(p.AnthropicBaseURL, "/")
			if !strings.HasSuffix(base, "/v1") {
				base += "/v1" // the SDKs' ANTHROPIC_BASE_URL has no /v1
			}
			opts = append(opts, anthropic.WithBaseURL(base))
		}
		m.LLM, err = anthropic.New(opts...)
		m.Options = []llms.CallOption{llms.WithMaxTokens(gateway.DefaultMaxTokens)}
		m.Upstream = &gateway.Upstream{Wire: gateway.Messages, BaseURL: cmp.Or(p.AnthropicBaseURL, "https://api.anthropic.com"), Key: p.AnthropicKey, Client: client}
	default:
		return Model{}, fmt.Errorf("unknown provider %q (providers: %s)", provider, strings.Join(ProviderNames, ", "))
	}
	return m, err
}
