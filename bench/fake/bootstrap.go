package fake

import (
	"strconv"
	"sync"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// BootstrapHandler is a prefill's bootstrap server (SGLang's
// CommonKVBootstrapServer, disaggregation/common/conn.py), plus the fake-only
// POST /fake/kv_transfer (kvhttp.go). Its plain-text answers are aiohttp's.
// On other roles it answers 404 to everything. Start mounts it on the
// bootstrap address.
func (s *Server) BootstrapHandler(ctx *fasthttp.RequestCtx) {
	if s.cfg.Role != RolePrefill {
		writeText(ctx, fasthttp.StatusNotFound, "404: Not Found")
		return
	}
	switch string(ctx.Path()) {
	case "/health":
		writeText(ctx, fasthttp.StatusOK, "OK")
	case "/route":
		s.serveRoute(ctx)
	case "/register_dp_rank", "/query_dp_ranks":
		s.serveDPRanks(ctx)
	case kvTransferPath:
		s.serveKVTransfer(ctx)
	default:
		writeText(ctx, fasthttp.StatusNotFound, "404: Not Found")
	}
}

// serveRoute answers /route: PUT is a rank registering, GET a lookup in the
// API version the server speaks.
func (s *Server) serveRoute(ctx *fasthttp.RequestCtx) {
	switch {
	case ctx.IsPut():
		writeText(ctx, fasthttp.StatusOK, "OK")
	case !ctx.IsGet():
		writeText(ctx, fasthttp.StatusMethodNotAllowed, "405: Method Not Allowed")
	case s.cfg.OldBootstrapAPI:
		s.st.bootstrapRoute.Add(1)
		s.serveOldRoute(ctx)
	default:
		s.st.bootstrapRoute.Add(1)
		s.serveNewRoute(ctx)
	}
}

// serveNewRoute is GET /route?prefill_dp_rank=&prefill_cp_rank=&target_tp_rank=&target_pp_rank=.
func (s *Server) serveNewRoute(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	raw := [4]string{
		string(args.Peek("prefill_dp_rank")), string(args.Peek("prefill_cp_rank")),
		string(args.Peek("target_tp_rank")), string(args.Peek("target_pp_rank")),
	}
	ranks, ok := s.parseRanks(ctx, raw[:])
	if !ok {
		return
	}
	if n := s.registeredWorkers(); n < s.cfg.DPSize {
		writeText(ctx, fasthttp.StatusServiceUnavailable,
			"Prefill server not fully registered yet ("+strconv.Itoa(n)+" workers registered).")
		return
	}
	if ranks == [4]int{-1, -1, -1, -1} {
		writeJSON(ctx, fasthttp.StatusOK, s.endpoint().routeInfo)
		return
	}
	if ranks[0] < 0 || ranks[0] >= s.cfg.DPSize || ranks[1] != 0 || ranks[2] != 0 || ranks[3] != 0 {
		writeText(ctx, fasthttp.StatusNotFound, "Bootstrap info not found for dp_rank="+raw[0]+
			" cp_rank="+raw[1]+" tp_rank="+raw[2]+" pp_rank="+raw[3])
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, s.appendRankInfo(nil, ranks[0]))
}

// serveOldRoute is GET /route?engine_rank=&target_dp_group=&target_pp_rank=
// of SGLang before 2026-02-23, which answered the info query even before
// registration, with nulls.
func (s *Server) serveOldRoute(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	raw := [3]string{
		string(args.Peek("engine_rank")), string(args.Peek("target_dp_group")), string(args.Peek("target_pp_rank")),
	}
	r, ok := s.parseRanks(ctx, raw[:])
	if !ok {
		return
	}
	registered := s.registered()
	if r[0] == -1 && r[1] == -1 && r[2] == -1 {
		writeJSON(ctx, fasthttp.StatusOK, s.appendOldRouteInfo(nil, registered))
		return
	}
	if !registered || r[1] < 0 || r[1] >= s.cfg.DPSize || r[0] != 0 || r[2] != 0 {
		writeText(ctx, fasthttp.StatusNotFound, "Bootstrap info not Found")
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, s.appendRankInfo(nil, r[1]))
}

// parseRanks parses rank query arguments, answering the request itself
// when one is missing (400) or not an integer (500, Python's int() raising).
func (s *Server) parseRanks(ctx *fasthttp.RequestCtx, raw []string) ([4]int, bool) {
	var ranks [4]int
	for _, r := range raw {
		if r == "" {
			writeText(ctx, fasthttp.StatusBadRequest, "Missing inputs for bootstrap server.")
			return ranks, false
		}
	}
	for i, r := range raw {
		n, err := strconv.Atoi(r)
		if err != nil {
			writeText(ctx, fasthttp.StatusInternalServerError, "500 Internal Server Error\n\nServer got itself in trouble")
			return ranks, false
		}
		ranks[i] = n
	}
	return ranks, true
}

// serveDPRanks keeps the DP rank /register_dp_rank gives a room, and
// answers /query_dp_ranks with those of the rooms asked for that it has,
// {"<room>": rank}, as SGLang's does. The fake's own prefills follow
// bootstrap_room % dp_size and register nothing; a client may.
func (s *Server) serveDPRanks(ctx *fasthttp.RequestCtx) {
	if !ctx.IsPost() {
		writeText(ctx, fasthttp.StatusMethodNotAllowed, "405: Method Not Allowed")
		return
	}
	v, err := fastjson.ParseBytes(ctx.PostBody())
	if err != nil {
		writeText(ctx, fasthttp.StatusBadRequest, "400: Bad Request: "+err.Error())
		return
	}
	if string(ctx.Path()) == "/register_dp_rank" {
		rv, kv := v.Get("bootstrap_room"), v.Get("dp_rank")
		var room uint64
		var rank int
		var err1, err2 error
		if rv != nil && kv != nil {
			room, err1 = rv.Uint64()
			rank, err2 = kv.Int()
		}
		if rv == nil || kv == nil || err1 != nil || err2 != nil {
			writeText(ctx, fasthttp.StatusBadRequest, "400: Bad Request: want an integer bootstrap_room and dp_rank")
			return
		}
		s.roomRanks.set(room, rank)
		writeText(ctx, fasthttp.StatusOK, "OK")
		return
	}
	out := []byte{'{'}
	for _, r := range v.GetArray("bootstrap_rooms") {
		room, err := r.Uint64()
		if err != nil {
			continue
		}
		if rank, ok := s.roomRanks.get(room); ok {
			if len(out) > 1 {
				out = append(out, ',')
			}
			out = append(out, '"')
			out = strconv.AppendUint(out, room, 10)
			out = append(out, `":`...)
			out = strconv.AppendInt(out, int64(rank), 10)
		}
	}
	writeJSON(ctx, fasthttp.StatusOK, append(out, '}'))
}

// roomRanks is the rank registered for each room. It forgets them all
// when full: a fake must not grow without bound under a long load.
type roomRanks struct {
	mu sync.Mutex
	m  map[uint64]int
}

const maxRoomRanks = 1 << 16

func (rr *roomRanks) set(room uint64, rank int) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.m == nil || len(rr.m) >= maxRoomRanks {
		rr.m = make(map[uint64]int)
	}
	rr.m[room] = rank
}

func (rr *roomRanks) get(room uint64) (int, bool) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rank, ok := rr.m[room]
	return rank, ok
}

// registered reports whether every rank has registered: RegisterDelay
// after Start.
func (s *Server) registered() bool {
	return s.registeredWorkers() == s.cfg.DPSize
}

// registeredWorkers is how many ranks have registered with the bootstrap
// server (PUT /route): one by one, evenly over RegisterDelay, the last at
// RegisterDelay after Start. The fake has one worker per DP rank (attention
// TP, CP and PP sizes of 1).
func (s *Server) registeredWorkers() int {
	d, delay, el := s.cfg.DPSize, s.cfg.RegisterDelay, s.elapsed()
	switch {
	case delay <= 0 || el >= delay:
		return d
	case el <= 0:
		return 0
	}
	return min(int(float64(d)*float64(el)/float64(delay)), d-1)
}

// appendRouteInfo appends the parallel info of the current API, with
// exactly the keys a real decode accepts: it rejects others.
func (s *Server) appendRouteInfo(dst []byte, apiPort int) []byte {
	dst = append(dst, `{"attn_tp_size":1,"attn_cp_size":1,"dp_size":`...)
	dst = strconv.AppendInt(dst, int64(s.cfg.DPSize), 10)
	dst = append(dst, `,"pp_size":1,"page_size":1,"kv_cache_dtype":"auto","follow_bootstrap_room":true,`+
		`"enable_dsa_cache_layer_split":false,"prefill_http_port":`...)
	dst = strconv.AppendInt(dst, int64(apiPort), 10)
	return append(dst, `,"target_tp_rank":null,"target_tp_ranks":null,"target_cp_ranks":null,`+
		`"target_pp_ranks":null,"required_dst_info_num":null,"required_prefill_response_num":null}`...)
}

// appendOldRouteInfo appends the parallel info of the old API: nulls until
// registered.
func (s *Server) appendOldRouteInfo(dst []byte, registered bool) []byte {
	if !registered {
		return append(dst, `{"prefill_attn_tp_size":null,"prefill_dp_size":null,"prefill_pp_size":null,"prefill_page_size":null}`...)
	}
	dst = append(dst, `{"prefill_attn_tp_size":1,"prefill_dp_size":`...)
	dst = strconv.AppendInt(dst, int64(s.cfg.DPSize), 10)
	return append(dst, `,"prefill_pp_size":1,"prefill_page_size":1}`...)
}

// appendRankInfo appends where DP rank r receives KV requests: the
// bootstrap host and a stable fake port per rank.
func (s *Server) appendRankInfo(dst []byte, r int) []byte {
	ep := s.endpoint()
	dst = append(dst, `{"rank_ip":`...)
	dst = appendString(dst, ep.bootHost)
	dst = append(dst, `,"rank_port":`...)
	dst = strconv.AppendInt(dst, int64(rankPort(ep.bootPort, r)), 10)
	return append(dst, '}')
}

// rankPort is the fake port of DP rank r: the ports after the bootstrap
// port, wrapping within the unprivileged range.
func rankPort(bootPort, r int) int {
	const lo, span = 1024, 65536 - 1024
	x := (bootPort + 1 + r - lo) % span
	if x < 0 {
		x += span
	}
	return lo + x
}
