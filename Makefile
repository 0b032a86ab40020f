# The two commands of the README: `make run` and `make test`.
GO ?= go

.PHONY: run test bench bench-peer bench-experiments vet build docker

# run builds the server, then becomes it (exec), so that the server is
# make's own child: kill PID (make's) reaches it, as make passes SIGTERM to
# its children, and it shuts down as on Ctrl-C. `go run` was the child
# instead, and died alone, leaving the server running.
run:
	$(GO) build -o bin/superego ./cmd/superego && exec bin/superego serve

# vet builds with -race, as the tests do, so that the packages it compiles
# are the ones the tests link: a first `make test` compiles everything
# once, not twice (206 s against 297 s of building on 2 cores).
test:
	$(GO) vet -race ./...
	@test -z "$$(gofmt -l .)" || { echo "gofmt would change:"; gofmt -l .; exit 1; }
	$(GO) test -race -count=1 ./...
	@test -n "$$SUPEREGO_CHROME" || echo "skipped: the browser tests (api TestPageInBrowser, experiment TestPlotFitsItsCanvas); set SUPEREGO_CHROME to a Chromium binary, as .ci/run does"
	@test -n "$$SUPEREGO_PDFLATEX" || command -v pdflatex >/dev/null || echo "skipped: the LaTeX tables compiled with pdflatex (experiment TestLaTeXCompiles); install Debian's texlive-latex-base, or set SUPEREGO_PDFLATEX, as .ci/run does"
	@test -n "$$SUPEREGO_CLAUDE" || echo "skipped: the tests with the real Claude Code CLI (cmd/sg TestClaudeCode, api TestClaudeCodeThroughTheGuard); set SUPEREGO_CLAUDE to claude from npm @anthropic-ai/claude-code, as .ci/run does"
	@test -n "$$SUPEREGO_TEST_POSTGRES" || echo "skipped: the PostgreSQL tests (postgres, replica, cmd/superego *Postgres* and *Replica*); set SUPEREGO_TEST_POSTGRES to a server's URL, as .ci/run does"
	@test -n "$$SUPEREGO_OPENAI_NODE" || echo "skipped: OpenAI's JavaScript client, OpenAI's Agents SDK, the Vercel AI SDK, LangChain and LangGraph against the server, on Chat Completions and Responses (api TestOpenAINodeClient, TestOpenAINodeClientTools, TestAgentFrameworks); set SUPEREGO_OPENAI_NODE to a directory where npm installed api/testdata/package.json, as .ci/run does"
	@test -n "$$SUPEREGO_CODEX" || echo "skipped: OpenAI's Codex CLI against the server (api TestCodex); set SUPEREGO_CODEX to codex from npm @openai/codex, as .ci/run does"
	@test -n "$$SUPEREGO_ANTHROPIC_NODE" || echo "skipped: Anthropic's TypeScript SDK against the server (api TestAnthropicSDK); set SUPEREGO_ANTHROPIC_NODE to a directory where npm installed api/testdata/anthropic/package.json, as .ci/run does"
	@test -n "$$SUPEREGO_PROMPTFOO" || echo "skipped: promptfoo reading a flow's guardrails (api TestPromptfooReadsGuardrails); set SUPEREGO_PROMPTFOO to promptfoo from npm, as .ci/run does"
	@command -v promtool >/dev/null || echo "skipped: the alerting rules' unit tests (telemetry TestAlertRules); install promtool (Debian's prometheus package), as .ci/run does"
	@test -n "$$SUPEREGO_MCP_NODE" || echo "skipped: the tests with the MCP filesystem server from npm (tools TestNodeFilesystemServer, cmd/superego TestServeWithNodeMCPServer); set SUPEREGO_MCP_NODE to mcp-server-filesystem from npm @modelcontextprotocol/server-filesystem, as .ci/run does"

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./engine ./agents ./api

# Experiments on a real server process and a fake model answering after
# 200 ms: 2,000 outcomes at concurrency 64, and a replay against a full
# re-run. Five rounds each; each line is one round.
bench-experiments:
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 5 -timeout 60m ./bench/experiments

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o bin/superego ./cmd/superego

docker:
	docker build -t superego .

# The guarded-calculator workload (bench/guarded_calculator), on each store,
# with the loopback HTTP comparison; one JSON line each.
bench-peer:
	$(GO) run ./bench/guarded_calculator -http
	$(GO) run ./bench/guarded_calculator -store sqlite

# The same workload on superego and on CloudWeGo Eino, in alternating
# rounds, side by side: medians and ranges (bench/peers/run_all.sh).
.PHONY: bench-peers
bench-peers:
	bash bench/peers/run_all.sh

# Output gating's latency: the whole draft judged, judge_stream
# and gating off, interleaved, over loopback HTTP; bench/gating/README.md.
.PHONY: bench-gating bench-speculation bench-actions
bench-gating:
	$(GO) run ./bench/gating

# An agent framework's task of three tool round trips through guarded_agent
# against the same task straight to the model;
# bench/agent_overhead/README.md.
.PHONY: bench-agent
bench-agent:
	$(GO) run ./bench/agent_overhead

# The guarded model's transparency and cost: an agent
# framework's requests through bare_agent and guarded_agent on Chat
# Completions, Responses and Messages against the same requests straight to
# the model; bench/gateway/README.md.
.PHONY: bench-gateway
bench-gateway:
	$(GO) run ./bench/gateway

# Speculation against OpenAI's Agents SDK for JavaScript;
# bench/speculation/README.md. npm ci installs the SDK at its pinned version
# in bench/speculation/node_modules, which git ignores; without npm, or
# when the install fails, the Go side runs alone and says it skipped the SDK.
bench-speculation:
	@if command -v npm >/dev/null; then \
		npm ci --prefix bench/speculation --no-audit --no-fund --loglevel=error || echo "npm ci failed: the Agents SDK will be skipped"; \
	else echo "npm not found: the Agents SDK will be skipped"; fi
	$(GO) run ./bench/speculation

# Judged actions against judging after the reply and OpenAI's Agents SDK's
# tool input guardrails; bench/actions/README.md. As for
# bench-speculation, npm ci installs the SDK at its pinned version in
# bench/actions/node_modules; without it the Go side runs alone and says so.
bench-actions:
	@if command -v npm >/dev/null; then \
		npm ci --prefix bench/actions --no-audit --no-fund --loglevel=error || echo "npm ci failed: the Agents SDK will be skipped"; \
	else echo "npm not found: the Agents SDK will be skipped"; fi
	$(GO) run ./bench/actions
