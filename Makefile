# pdlb: `make run` for the demo, `make test` for the tests.

GO      ?= go
BIN     := bin/pdlb
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
export PDLB := $(BIN)

.PHONY: build run test hostile hostile-short bench bench-routing soak fuzz clean

# A static binary, without cgo: it maps no C library and starts no threads
# through it, which keeps pdlb's peak RSS at 1,024 streams 2-3 MiB lower.
# DNS names are resolved by Go's own resolver.
build:
	CGO_ENABLED=0 $(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) .

# The demo: fake workers, pdlb in front of them, a short load run.
run: build
	scripts/demo.sh

# What CI runs: formatting, vet, and every test under the race detector.
# A race-built binary waits a second as it exits, for reports from
# goroutines still running; a race is reported and fails its test either
# way, so the tests' binaries (and the processes they start) do not wait.
test: export GORACE := atexit_sleep_ms=0
test:
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

# The hostile-client suite (bench/hostile): each attack of issue 19 against a
# pdlb process beside a steady well-behaved load, at the sizes the issue
# reports; hostile-short is its short form, which CI runs (a minute or two).
hostile:
	PDLB_HOSTILE=full $(GO) test -count=1 -run '^TestHostile$$' -v -timeout 30m ./bench/hostile/

hostile-short:
	PDLB_HOSTILE=short $(GO) test -count=1 -run '^TestHostile$$' -v -timeout 10m ./bench/hostile/

# pdlb against the direct path, as ratios (see scripts/bench.sh), and the
# micro-benchmarks of the hot path.
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./bootstrap/ ./lb/ ./lb/wire/
	scripts/bench.sh

# The routing policies side by side on a simulated cluster of fakes with a
# performance model, on SGLang's generated-shared-prefix workload (see
# scripts/bench-routing.sh); and the Go benchmarks of the policies' picks.
bench-routing: build
	$(GO) test -run '^$$' -bench . -benchmem ./lb/policy/
	scripts/bench-routing.sh

# A minute of mixed traffic while workers are killed and restarted at random:
# nothing may be lost or hang. PDLB_SOAK_DURATION changes the minute. Then
# the same with pdlb reaching the workers over loopback TCP. Then a minute of
# planned changes (PDLB_SOAK_ROLL): every worker, prefills, decodes and
# fallbacks, rolled in turn through DNS (taken out, drained, restarted, put
# back), where not one request may fail, be cut or hang.
soak:
	PDLB_SOAK=1 $(GO) test -race -count=1 -run '^TestSoak$$' -v ./lb/
	PDLB_SOAK=1 PDLB_SOAK_TCP=1 $(GO) test -race -count=1 -run '^TestSoak$$' -v ./lb/
	PDLB_SOAK_ROLL=1 $(GO) test -race -count=1 -run '^TestSoakRoll$$' -v ./lb/

# Longer fuzzing sessions than the tests run: the body parser, validator and
# injector, and the relay's chunked-body decoder against fasthttp's.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzAppend -fuzztime 60s ./bootstrap/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./bootstrap/
	$(GO) test -run '^$$' -fuzz FuzzValidate -fuzztime 60s ./bootstrap/
	$(GO) test -run '^$$' -fuzz FuzzChunkedBody -fuzztime 60s ./lb/wire/

clean:
	rm -rf bin
