package lb

import (
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"slices"
	"strings"

	"github.com/valyala/fasthttp"

	"pdlb/health"
)

// The worker API: sglang_router's routes for workers that come and go at
// run time (issue 23 §2), read from SMG's model_gateway/src/server.rs and
// model_gateway/src/worker/service.rs (lightseekorg/smg
// v1.9.0-48-g73da68ca9). Every change goes through the membership path
// (membership.go). These routes change where traffic goes, so they are
// operator routes that --mini-lb never opens (operator.go).
//
// A worker's id is a UUID, as SMG's. SMG draws a random one (v7) per URL;
// pdlb derives it from the worker's type and URL (a v5 UUID), so that
// replicas, which share nothing, and a restarted pdlb give a worker the
// same id. A worker's URL, percent-encoded, names it too
// (DELETE /workers/http%3A%2F%2F10.0.0.5%3A30000), for scripts that know
// no id.
//
// SMG registers a worker in a background job and answers 202 at once;
// pdlb adds it at once, and answers as SMG does, 202 with SMG's body and
// Location. A DELETE also answers 202: the worker takes no new request at
// once and drains in the background; it stays listed, "draining", until
// its drain ends. SMG's PUT and PATCH (replace and update a worker's
// spec) are not served: pdlb acts on no field they could change but the
// URL, which they may not.

// Paths of the worker API; workerPath names the route of every
// /workers/{worker_id}.
const (
	workersPath = "/workers"
	workerPath  = "/workers/{worker_id}"
)

// isWorkerRoute reports whether path is one of the worker API's routes.
func isWorkerRoute(path string) bool { return path == workersPath || path == workerPath }

// workerMethods are the methods of the worker API's route at path, as
// Allow lists them.
func workerMethods(path string) string {
	if path == workersPath {
		return "GET, POST"
	}
	return "GET, DELETE"
}

// serveWorkers answers the worker API's route rt; serve has checked the
// method.
func (s *Server) serveWorkers(ctx *fasthttp.RequestCtx, rt *route) {
	ctx.SetContentType("application/json")
	if rt.path == workersPath {
		if ctx.IsPost() {
			s.createWorker(ctx)
		} else {
			s.writeJSON(ctx, s.listWorkers())
		}
		return
	}
	b, status, msg := s.findWorker(ctx)
	switch {
	case b == nil:
		r := reasonNotFound
		if status != fasthttp.StatusNotFound {
			r = reasonInvalidRequest
		}
		s.writeError(ctx, status, r, msg)
	case ctx.IsDelete():
		s.deleteWorker(ctx, b)
	default:
		s.writeJSON(ctx, s.workerInfoOf(b))
	}
}

// createWorker adds the worker a POST /workers body specifies.
func (s *Server) createWorker(ctx *fasthttp.RequestCtx) {
	spec, err := parseWorkerSpec(ctx.PostBody(), s.cfg.APIKey)
	if err != nil {
		s.writeError(ctx, fasthttp.StatusBadRequest, reasonInvalidRequest, err.Error())
		return
	}
	role := roleOfWorkerType(spec.workerType)
	id := workerID(role, spec.url)
	for _, p := range s.pools() {
		// SMG's 409, for a worker it already has: in any pool, since one
		// worker serves in one role.
		if b := p.find(spec.url); b != nil {
			s.writeError(ctx, fasthttp.StatusConflict, reasonInvalidRequest, "worker "+spec.url+" is already a "+
				workerTypeOf(b.role)+" worker, "+b.url+", with id "+workerID(b.role, b.url))
			return
		}
	}
	if s.isSelf(spec.url) {
		s.writeError(ctx, fasthttp.StatusBadRequest, reasonInvalidRequest,
			"url "+spec.url+" is pdlb itself (one of its listeners): it would send requests to itself")
		return
	}
	change := s.log.Info().Str("client", clientOf(ctx)).Str("worker_type", spec.workerType).
		Str("url", spec.url).Str("id", id).Int("bootstrap_port", spec.bootstrapPort).Strs("ignored_fields", spec.ignored)
	if _, err := s.addWorker(role, PrefillSpec{URL: spec.url, BootstrapPort: spec.bootstrapPort}, sourceAPI); err != nil {
		change.Err(err).Msg("worker api: cannot add worker")
		s.writeError(ctx, fasthttp.StatusBadRequest, reasonInvalidRequest, "cannot add worker "+spec.url+": "+err.Error())
		return
	}
	change.Msg("worker api: worker added")
	location := workersPath + "/" + id
	ctx.Response.Header.Set(fasthttp.HeaderLocation, location)
	ctx.SetStatusCode(fasthttp.StatusAccepted)
	s.writeJSON(ctx, map[string]string{"status": "accepted", "worker_id": id, "url": spec.url, "location": location,
		"message": "worker added: it takes requests once its health checks allow"})
}

// deleteWorker removes b, which drains in the background. A worker that
// drains already is left to its drain.
func (s *Server) deleteWorker(ctx *fasthttp.RequestCtx, b *Backend) {
	id := workerID(b.role, b.url)
	if !b.leaving.Load() {
		if _, err := s.removeWorker(b.role, b.url, sourceAll); err != nil {
			s.log.Info().Str("client", clientOf(ctx)).Str("worker_type", workerTypeOf(b.role)).Str("url", b.url).
				Str("id", id).Err(err).Msg("worker api: cannot remove worker")
			s.writeError(ctx, fasthttp.StatusBadRequest, reasonInvalidRequest, "cannot remove worker "+b.url+": "+err.Error())
			return
		}
		s.log.Info().Str("client", clientOf(ctx)).Str("worker_type", workerTypeOf(b.role)).Str("url", b.url).
			Str("id", id).Int32("inflight", b.inflight.Load()).Msg("worker api: worker removed")
	}
	ctx.SetStatusCode(fasthttp.StatusAccepted)
	s.writeJSON(ctx, map[string]string{"status": "accepted", "worker_id": id,
		"message": "worker removed: it takes no new request, and leaves once its requests in flight end"})
}

// clientOf is the client's address for the log of a change, with the
// client a proxy says it forwards.
func clientOf(ctx *fasthttp.RequestCtx) string {
	addr := ctx.RemoteAddr().String()
	if name := forwardingHeader(&ctx.Request.Header); name != "" {
		addr += " (" + name + ": " + string(ctx.Request.Header.Peek(name)) + ")"
	}
	return addr
}

// writeJSON answers v as JSON.
func (s *Server) writeJSON(ctx *fasthttp.RequestCtx, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		panic("BUG: cannot marshal a worker API answer: " + err.Error())
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// workerInfo is a worker as GET /workers shows it: SMG's WorkerInfo
// fields that pdlb has, then pdlb's own.
type workerInfo struct {
	ID         string `json:"id"`
	URL        string `json:"url"`
	WorkerType string `json:"worker_type"`
	// BootstrapPort is a prefill's, once known.
	BootstrapPort int `json:"bootstrap_port,omitempty"`
	// DPSize is the worker's dp_size, once learned (a prefill's from its
	// bootstrap server, a decode's when its pairs are warmed).
	DPSize int `json:"dp_size,omitempty"`
	// IsHealthy and Status are SMG's: Status is "ready" (pdlb may send it
	// requests), "not_ready" (health checks find it down, its bootstrap
	// server is unreachable, or its breaker is open) or "draining".
	IsHealthy bool   `json:"is_healthy"`
	Status    string `json:"status"`
	// Load is SMG's, pdlb's requests in flight on the worker.
	Load int `json:"load"`
	// JobStatus is SMG's, always null: pdlb runs no background jobs.
	JobStatus *struct{} `json:"job_status"`

	// Health is what health checks know: "unknown" (not probed yet), "up"
	// or "down".
	Health string `json:"health"`
	// Breaker is its circuit breaker's state: "closed", "open" or
	// "half-open"; absent with --disable-circuit-breaker.
	Breaker  string `json:"breaker,omitempty"`
	InFlight int    `json:"inflight"`
	// Draining is set once the worker is removed, until its drain ends.
	Draining bool `json:"draining"`
	// Sources are who give the worker: "command_line", "api", "dns"
	// (sources.go); empty once it is removed.
	Sources []string `json:"sources"`
	// WarmPairs and Pairs count a prefill's or decode's warm pairs and
	// all of them; absent without warm-up and for regular workers.
	WarmPairs *int `json:"warm_pairs,omitempty"`
	Pairs     *int `json:"pairs,omitempty"`
}

// workerInfoOf is b as the worker API shows it.
func (s *Server) workerInfoOf(b *Backend) workerInfo {
	w := workerInfo{
		ID: workerID(b.role, b.url), URL: b.url, WorkerType: workerTypeOf(b.role), DPSize: int(b.dpSize.Load()),
		Load: int(b.inflight.Load()), Health: health.State(b.health.Load()).String(),
		InFlight: int(b.inflight.Load()), Draining: b.leaving.Load(), Sources: b.givenBy().names(),
	}
	if w.Sources == nil {
		w.Sources = []string{}
	}
	if b.role == rolePrefill {
		w.BootstrapPort = s.bootstrapPort(b)
	}
	breakerOpen := false
	if b.breaker != nil {
		st := b.breaker.State()
		w.Breaker, breakerOpen = st.String(), st == health.Open
	}
	switch {
	case w.Draining:
		w.Status = "draining"
	case b.markedDown() || b.bootstrapDown.Load() || breakerOpen:
		w.Status = "not_ready"
	default:
		w.Status, w.IsHealthy = "ready", true
	}
	if s.warm != nil && b.role != roleFallback {
		prs := s.warm.pairsOf(b)
		warm := 0
		for _, pr := range prs {
			if s.warm.isWarm(pr) {
				warm++
			}
		}
		n := len(prs)
		w.WarmPairs, w.Pairs = &warm, &n
	}
	return w
}

// workerList is the answer of GET /workers, in SMG's shape.
type workerList struct {
	Workers []workerInfo `json:"workers"`
	Total   int          `json:"total"`
	Stats   struct {
		PrefillCount int `json:"prefill_count"`
		DecodeCount  int `json:"decode_count"`
		RegularCount int `json:"regular_count"`
	} `json:"stats"`
}

// listWorkers shows every worker: each pool's members in the order they
// joined, then those that drain.
func (s *Server) listWorkers() workerList {
	out := workerList{Workers: []workerInfo{}}
	for _, b := range s.allWorkers() {
		out.Workers = append(out.Workers, s.workerInfoOf(b))
		switch b.role {
		case rolePrefill:
			out.Stats.PrefillCount++
		case roleDecode:
			out.Stats.DecodeCount++
		default:
			out.Stats.RegularCount++
		}
	}
	out.Total = len(out.Workers)
	return out
}

// allWorkers are the pools' members and the workers that drain.
func (s *Server) allWorkers() []*Backend {
	var all []*Backend
	s.membersMu.Lock()
	defer s.membersMu.Unlock()
	for _, role := range []string{rolePrefill, roleDecode, roleFallback} {
		all = append(all, s.pool(role).backends()...)
		var leaving []*Backend
		for _, b := range s.draining {
			if b.role == role {
				leaving = append(leaving, b)
			}
		}
		slices.SortFunc(leaving, func(a, b *Backend) int { return strings.Compare(a.url, b.url) })
		all = append(all, leaving...)
	}
	return all
}

// findWorker returns the worker a /workers/{worker_id} path names, by id
// or percent-encoded URL; else nil, with the status and message of the
// error: 400 for a worker_id that is neither (SMG's for a non-UUID), 404
// for none, 409 for a URL in two pools.
func (s *Server) findWorker(ctx *fasthttp.RequestCtx) (*Backend, int, string) {
	// The path as sent: fasthttp's Path() would decode the URL's "//".
	raw := strings.TrimPrefix(string(ctx.URI().PathOriginal()), workersPath+"/")
	name, err := url.PathUnescape(raw)
	byURL := err == nil && (strings.HasPrefix(name, "http://") || strings.HasPrefix(name, "https://"))
	if !byURL && !isUUID(name) {
		return nil, fasthttp.StatusBadRequest, "invalid worker_id " + quoteID(raw) +
			": a worker_id is a worker's id (a UUID, from GET /workers) or its URL, percent-encoded"
	}
	var found []*Backend
	for _, b := range s.allWorkers() {
		if (byURL && b.url == trimURL(name)) || (!byURL && workerID(b.role, b.url) == strings.ToLower(name)) {
			found = append(found, b)
		}
	}
	switch len(found) {
	case 0:
		return nil, fasthttp.StatusNotFound, "no worker " + quoteID(name)
	case 1:
		return found[0], 0, ""
	}
	ids := make([]string, len(found))
	for i, b := range found {
		ids[i] = workerID(b.role, b.url) + " (" + workerTypeOf(b.role) + ")"
	}
	return nil, fasthttp.StatusConflict, "worker " + name + " is in several pools; name one by its id: " + strings.Join(ids, ", ")
}

// quoteID quotes a client's worker_id for an error, cut short.
func quoteID(id string) string {
	const most = 200
	if len(id) > most {
		id = id[:most] + "..."
	}
	return `"` + strings.ToValidUTF8(id, "?") + `"`
}

// uuidNamespaceURL is RFC 9562's namespace for URLs (6ba7b811-...).
const uuidNamespaceURL = "\x6b\xa7\xb8\x11\x9d\xad\x11\xd1\x80\xb4\x00\xc0\x4f\xd4\x30\xc8"

// workerID is the id of the worker of role at url: the name-based (v5)
// UUID of "<worker_type> <url>" in the URL namespace, the same in every
// replica.
func workerID(role, url string) string {
	h := sha1.New()
	h.Write([]byte(uuidNamespaceURL))
	h.Write([]byte(workerTypeOf(role) + " " + url))
	u := h.Sum(nil)[:16]
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	var buf [36]byte
	hex.Encode(buf[0:8], u[0:4])
	hex.Encode(buf[9:13], u[4:6])
	hex.Encode(buf[14:18], u[6:8])
	hex.Encode(buf[19:23], u[8:10])
	hex.Encode(buf[24:36], u[10:16])
	buf[8], buf[13], buf[18], buf[23] = '-', '-', '-', '-'
	return string(buf[:])
}

// isUUID reports whether s is a UUID in its text form, of either case.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'):
			return false
		}
	}
	return true
}
