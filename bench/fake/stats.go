package fake

import "sync/atomic"

// Stats is a snapshot of a Server's counters, taken by Server.Stats. Counters
// only grow, except InFlight.
type Stats struct {
	// Requests by HTTP API route.
	Generate        uint64 // POST /generate
	Completions     uint64 // POST /v1/completions
	ChatCompletions uint64 // POST /v1/chat/completions
	Health          uint64 // GET /health and /health_generate
	HealthGenerate  uint64 // GET /health_generate alone (counted in Health too)
	ServerInfo      uint64 // GET /server_info and /get_server_info
	ModelInfo       uint64 // GET /model_info, /get_model_info and /v1/models
	FlushCache      uint64 // POST or GET /flush_cache
	AbortRequest    uint64 // POST /abort_request
	Loads           uint64 // GET /v1/loads and /get_load
	Other           uint64 // anything else (answered 404 or 405)
	Unauthorized    uint64 // refused for a missing or wrong API key (Config.APIKey)

	// GenerateRequests counts requests on the three generate routes that
	// carried a valid JSON object.
	GenerateRequests uint64

	// RejectedNoRoom counts generate requests a prefill or decode refused
	// because an item had no bootstrap_room, with SGLang's 400
	// "Disaggregated request received without bootstrap room id".
	RejectedNoRoom uint64

	// KVTransfersOK and KVTransfersFailed count request items whose KV
	// transfer succeeded or failed (timeout, unreachable bootstrap server,
	// duplicate room, DP-rank conflict, first-request bug, prefill DP rank
	// unknown to the bootstrap server, prefill info dropped by the health
	// polls), on whichever side this server is.
	// Aborted items count in neither.
	KVTransfersOK     uint64
	KVTransfersFailed uint64

	// LocalPrefills counts request items a decode with Config.ConditionalAgg
	// prefilled itself (do_local_prefill, SGLang PR #34773), once their
	// prefill is done: aborted ones do not count. They count in neither
	// KVTransfersOK nor KVTransfersFailed.
	LocalPrefills uint64

	// FlushCacheTimeout is the timeout query argument of the last
	// /flush_cache, "" when it had none.
	FlushCacheTimeout string

	// Canaries counts the requests to the HTTP API that carried
	// Config.Canary; always 0 without one.
	Canaries uint64

	// Aborts counts the in-flight requests /abort_request aborted.
	Aborts uint64

	// InFlight is the number of generate requests being served.
	InFlight int64

	// BootstrapRoute counts GET /route requests to the bootstrap server.
	BootstrapRoute uint64

	// KVTransferHTTP counts POST /fake/kv_transfer requests to the bootstrap
	// server: decodes of other processes meeting this prefill.
	KVTransferHTTP uint64

	// PrefillInfoFetches counts the prefill parallel infos a decode fetched
	// and cached: once per DP rank and bootstrap address while it stays
	// cached, as each DP rank keeps its own table.
	PrefillInfoFetches uint64

	// PrefillInfoDrops counts the prefill parallel infos a decode dropped
	// because their bootstrap server failed Config.HeartbeatMaxFailures
	// health polls in a row (heartbeat.go): once per DP rank and address.
	PrefillInfoDrops uint64

	// RankRequests counts, per DP rank (index), the request items
	// dispatched to it: each prompt or sample of a batch counts on its own
	// rank. Requests refused before dispatch (400) count nowhere. Its length
	// is Config.DPSize; the snapshot is a copy.
	RankRequests []uint64

	// DPConflicts counts prefill items failed for a follow_bootstrap_room
	// conflict: routed_dp_rank against bootstrap_room % DPSize, with no
	// disagg_prefill_dp_rank. They count in KVTransfersFailed too.
	DPConflicts uint64

	// FirstRequestFailures counts decode items failed by the first-request
	// bug (Config.FirstRequestBug): disagg_prefill_dp_rank given to a DP
	// rank without the prefill's info cached. They count in
	// KVTransfersFailed too.
	FirstRequestFailures uint64

	// FaultsInjected counts the times a fault (Server.SetFault) acted on a
	// request: each generate request or health check answered by
	// FaultError, held by FaultHang, cut by FaultCut or held by FaultStall
	// counts once per fault it met. Dials refused and connections closed
	// by FaultRefuse or CloseIdleConnections do not count.
	FaultsInjected uint64

	// ClientGone counts generate requests that ended because their client
	// closed the connection before their answer was out (before [DONE] for
	// a stream): in flight, the request was aborted at once, its KV wait
	// ended, as SGLang aborts a request whose HTTP client disconnected;
	// held by FaultHang, it was dropped. A connection the server closed
	// itself (FaultRefuse, FaultCut, Close) is no client going away.
	ClientGone uint64
}

// counters are a Server's live counters; Stats snapshots them.
type counters struct {
	generate, completions, chat                      atomic.Uint64
	health, serverInfo, modelInfo, flush, abort      atomic.Uint64
	healthGenerate, canaries, loads                  atomic.Uint64
	other, generateRequests, rejectedNoRoom          atomic.Uint64
	unauthorized                                     atomic.Uint64
	kvOK, kvFailed, aborts, localPrefills            atomic.Uint64
	bootstrapRoute, kvTransferHTTP, prefillInfoFetch atomic.Uint64
	prefillInfoDrops                                 atomic.Uint64
	dpConflicts, firstRequestFailures                atomic.Uint64
	faultsInjected, clientGone                       atomic.Uint64
	inFlight                                         atomic.Int64
	flushTimeout                                     atomic.Pointer[string]
	ranks                                            []atomic.Uint64 // per DP rank, made by New
}

// Stats returns a snapshot of the server's counters. It is safe to call at
// any time, from any goroutine.
func (s *Server) Stats() Stats {
	c := &s.st
	st := Stats{
		Generate:           c.generate.Load(),
		Completions:        c.completions.Load(),
		ChatCompletions:    c.chat.Load(),
		Health:             c.health.Load(),
		HealthGenerate:     c.healthGenerate.Load(),
		Canaries:           c.canaries.Load(),
		ServerInfo:         c.serverInfo.Load(),
		ModelInfo:          c.modelInfo.Load(),
		FlushCache:         c.flush.Load(),
		AbortRequest:       c.abort.Load(),
		Loads:              c.loads.Load(),
		Other:              c.other.Load(),
		Unauthorized:       c.unauthorized.Load(),
		GenerateRequests:   c.generateRequests.Load(),
		RejectedNoRoom:     c.rejectedNoRoom.Load(),
		KVTransfersOK:      c.kvOK.Load(),
		KVTransfersFailed:  c.kvFailed.Load(),
		LocalPrefills:      c.localPrefills.Load(),
		Aborts:             c.aborts.Load(),
		InFlight:           c.inFlight.Load(),
		BootstrapRoute:     c.bootstrapRoute.Load(),
		KVTransferHTTP:     c.kvTransferHTTP.Load(),
		PrefillInfoFetches: c.prefillInfoFetch.Load(),
		PrefillInfoDrops:   c.prefillInfoDrops.Load(),
		RankRequests:       make([]uint64, len(c.ranks)),

		DPConflicts:          c.dpConflicts.Load(),
		FirstRequestFailures: c.firstRequestFailures.Load(),
		FaultsInjected:       c.faultsInjected.Load(),
		ClientGone:           c.clientGone.Load(),
	}
	for i := range c.ranks {
		st.RankRequests[i] = c.ranks[i].Load()
	}
	if p := c.flushTimeout.Load(); p != nil {
		st.FlushCacheTimeout = *p
	}
	return st
}
