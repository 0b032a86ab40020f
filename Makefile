# The two commands of the README: `make run` and `make test`.
GO ?= go

.PHONY: run test bench vet build docker

run:
	$(GO) run ./cmd/superego serve

test:
	$(GO) vet ./...
	@test -z "$$(gofmt -l .)" || { echo "gofmt would change:"; gofmt -l .; exit 1; }
	$(GO) test -race -count=1 ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./flow ./api

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o bin/superego ./cmd/superego

docker:
	docker build -t superego .
