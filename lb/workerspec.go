package lb

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"pdlb/bootstrap"
)

// The body of POST /workers is sglang_router's worker spec (SMG's
// WorkerSpec, crates/protocols/src/worker.rs, read at lightseekorg/smg
// v1.9.0-48-g73da68ca9). pdlb acts on four of its fields: url,
// worker_type, bootstrap_port and api_key. SMG's other fields (models,
// labels, priority, cost, dp_size, ...) are taken and not acted on: a
// client written for SMG works unchanged, and pdlb learns what it needs
// (a prefill's DP size) from the worker itself.
//
// SMG takes unknown fields silently (its WorkerSpec does not deny them), so
// a misspelt "worker_typ": "prefill" there adds a regular worker. pdlb
// refuses a field that is not SMG's with a 400 naming it, since a worker
// added to the wrong pool takes traffic it should not. SMG answers a
// field of the wrong type with axum's 422; pdlb with a 400 naming the
// field, as for every bad spec.

// workerSpec is what pdlb takes of a worker spec.
type workerSpec struct {
	// url is the worker's, without a trailing slash.
	url string
	// workerType is SMG's: "regular", "prefill" or "decode".
	workerType string
	// bootstrapPort is a prefill's, 0 when none was given.
	bootstrapPort int
	// ignored are the SMG fields given that pdlb does not act on, for the
	// change's log line.
	ignored []string
}

// isSMGField reports whether name is one of SMG WorkerSpec's fields that
// pdlb does not act on ("runtime" is runtime_type's alias there).
func isSMGField(name string) bool {
	switch name {
	case "models", "connection_mode", "runtime_type", "runtime", "provider", "labels", "priority", "cost",
		"dp_base_url", "dp_rank", "dp_size", "kv_connector", "kv_role", "kv_engine_id", "kv_block_size",
		"health", "http_pool", "resilience", "max_connection_attempts", "load_monitor_interval_secs",
		"multimodal_tensor_transport", "multimodal_shm_min_bytes", "zmq_handshake_address":
		return true
	}
	return false
}

// roleOfWorkerType is the pool of SMG's worker type, "" for none: a
// regular worker serves whole requests, as pdlb's fallback pool does.
// SMG's encode workers (EPD) have no pool in pdlb.
func roleOfWorkerType(workerType string) string {
	switch workerType {
	case "regular":
		return roleFallback
	case "prefill":
		return rolePrefill
	case "decode":
		return roleDecode
	}
	return ""
}

// workerTypeOf is SMG's worker_type of pdlb's role.
func workerTypeOf(role string) string {
	if role == roleFallback {
		return "regular"
	}
	return role
}

// specError is a bad worker spec: the field at fault, and why.
type specError struct {
	field string
	why   string
}

func (e *specError) Error() string { return "invalid worker spec: " + e.field + ": " + e.why }

// parseWorkerSpec reads a POST /workers body. apiKey is pdlb's --api-key,
// the only api_key a spec may give: pdlb sends every worker that one. The
// error is a *specError naming the field at fault ("body" when there is no
// JSON object to read).
func parseWorkerSpec(body []byte, apiKey string) (workerSpec, error) {
	if err := bootstrap.CheckObject(body); err != nil {
		return workerSpec{}, &specError{"body", "a worker spec is a JSON object: " + err.Error()}
	}
	spec := workerSpec{workerType: "regular"} // SMG's default
	seen := map[string]bool{}
	var err error
	gjson.ParseBytes(body).ForEach(func(key, value gjson.Result) bool {
		name := key.String()
		if seen[name] {
			err = &specError{name, "given twice"}
			return false
		}
		seen[name] = true
		err = spec.set(name, value, apiKey)
		return err == nil
	})
	if err != nil {
		return workerSpec{}, err
	}
	if !seen["url"] {
		return workerSpec{}, &specError{"url", "missing: the worker's URL, e.g. \"http://10.0.0.5:30000\""}
	}
	return spec, nil
}

// set takes field name of a spec, of value.
func (spec *workerSpec) set(name string, value gjson.Result, apiKey string) error {
	switch name {
	case "url":
		url, err := specURL(value)
		if err != nil {
			return &specError{name, err.Error()}
		}
		spec.url = url
	case "worker_type":
		if value.Type != gjson.String || roleOfWorkerType(value.Str) == "" {
			return &specError{name, "must be one of \"regular\", \"prefill\", \"decode\"; got " + value.Raw}
		}
		spec.workerType = value.Str
	case "bootstrap_port":
		port, ok := specPort(value)
		if !ok {
			return &specError{name, "must be a port, an integer from 1 to 65535, or null; got " + value.Raw}
		}
		spec.bootstrapPort = port
	case "api_key":
		if value.Type == gjson.Null || (value.Type == gjson.String && value.Str == apiKey) {
			return nil
		}
		return &specError{name, "pdlb sends every worker its own --api-key; a spec may give that key or none"}
	default:
		if !isSMGField(name) {
			return &specError{name, "unknown field: a worker spec's fields are sglang_router's, and pdlb reads url, worker_type, bootstrap_port and api_key"}
		}
		spec.ignored = append(spec.ignored, name)
	}
	return nil
}

// specURL is a spec's url, checked as a worker URL and without a trailing
// slash. Like SMG, pdlb wants its scheme: the URL is the worker's
// identity, which "host:port" and "http://host:port" would split in two.
func specURL(value gjson.Result) (string, error) {
	if value.Type != gjson.String || value.Str == "" {
		return "", fmt.Errorf("must be the worker's URL, a non-empty string; got %s", value.Raw)
	}
	if !strings.HasPrefix(value.Str, "http://") && !strings.HasPrefix(value.Str, "https://") {
		return "", fmt.Errorf("%q must start with http:// or https://", value.Str)
	}
	if _, err := parseWorkerURL(value.Str); err != nil {
		return "", err
	}
	return trimURL(value.Str), nil
}

// specPort reads a bootstrap_port: a port, or null (0) for none. SMG's
// u16 takes 0, which is no port a server listens on.
func specPort(value gjson.Result) (int, bool) {
	if value.Type == gjson.Null {
		return 0, true
	}
	if value.Type != gjson.Number {
		return 0, false
	}
	port, err := strconv.Atoi(value.Raw)
	return port, err == nil && port >= 1 && port <= 65535
}
