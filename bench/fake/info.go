package fake

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// The HTTP API's routes besides generation (SGLang's
// entrypoints/http_server.py).

// version is what /server_info reports as SGLang's version.
const version = "0.0.0-fake"

// serveHealth answers /health and /health_generate: 200 empty while
// serving, 503 while starting (StartDelay) or closing, or as a fault marked
// Health says.
func (s *Server) serveHealth(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() && !ctx.IsHead() {
		methodNotAllowed(ctx)
		return
	}
	if !s.healthFault(ctx) {
		return
	}
	if s.closing() || s.elapsed() < s.cfg.StartDelay {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		return
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
}

// serveServerInfo answers /server_info and /get_server_info with the
// server_args fields a router reads, and one internal state per DP rank.
func (s *Server) serveServerInfo(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() {
		methodNotAllowed(ctx)
		return
	}
	ep := s.endpoint()
	b := append(s.getBuf(), `{"model_path":`...)
	b = appendString(b, s.cfg.Model)
	b = append(b, `,"tokenizer_path":`...)
	b = appendString(b, s.cfg.Model)
	b = append(b, `,"served_model_name":`...)
	b = appendString(b, s.cfg.Model)
	b = append(b, `,"host":`...)
	b = appendString(b, ep.apiHost)
	b = append(b, `,"port":`...)
	b = strconv.AppendInt(b, int64(ep.apiPort), 10)
	b = append(b, `,"disaggregation_mode":`...)
	b = appendString(b, s.cfg.Role.disaggregationMode())
	b = append(b, `,"disaggregation_bootstrap_port":`...)
	b = strconv.AppendInt(b, int64(ep.bootPort), 10)
	b = append(b, `,"disaggregation_transfer_backend":"mooncake","tp_size":1,"pp_size":1,"dp_size":`...)
	b = strconv.AppendInt(b, int64(s.cfg.DPSize), 10)
	if s.cfg.Role == RoleDecode && s.cfg.ConditionalAgg {
		// The server arg of SGLang PR #34773, so a router can see the feature.
		b = append(b, `,"disaggregation_decode_enable_conditional_agg":true`...)
	}
	// SGLang's answer is all of server_args, its secrets included.
	b = append(b, `,"api_key":`...)
	if s.cfg.APIKey != "" {
		b = appendString(b, s.cfg.APIKey)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"admin_api_key":null,"ssl_keyfile_password":null`...)
	b = append(b, `,"page_size":`...)
	b = strconv.AppendInt(b, int64(s.cfg.PageSize), 10)
	b = append(b, `,"load_balance_method":"round_robin","max_total_num_tokens":`...)
	b = strconv.AppendInt(b, int64(s.maxTotalTokens()), 10)
	b = append(b, `,"internal_states":[`...)
	for r := range s.cfg.DPSize {
		if r > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"last_gen_throughput":0.0,"avg_spec_accept_length":null,"dp_rank":`...)
		b = strconv.AppendInt(b, int64(r), 10)
		b = append(b, '}')
	}
	b = append(b, `],"version":"`+version+`"}`...)
	writeJSON(ctx, fasthttp.StatusOK, b)
	s.putBuf(b)
}

// serveModelInfo answers /model_info and /get_model_info.
func (s *Server) serveModelInfo(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() {
		methodNotAllowed(ctx)
		return
	}
	b := append(s.getBuf(), `{"model_path":`...)
	b = appendString(b, s.cfg.Model)
	b = append(b, `,"tokenizer_path":`...)
	b = appendString(b, s.cfg.Model)
	b = append(b, `,"is_generation":true,"preferred_sampling_params":null,"weight_version":"default",`+
		`"has_image_understanding":false,"has_audio_understanding":false,"model_type":"llama",`+
		`"architectures":["LlamaForCausalLM"]}`...)
	writeJSON(ctx, fasthttp.StatusOK, b)
	s.putBuf(b)
}

// serveModels answers /v1/models.
func (s *Server) serveModels(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() {
		methodNotAllowed(ctx)
		return
	}
	b := append(s.getBuf(), `{"object":"list","data":[{"id":`...)
	b = appendString(b, s.cfg.Model)
	b = append(b, `,"object":"model","created":`...)
	b = strconv.AppendInt(b, s.startedAt.Load()/1e9, 10)
	b = append(b, `,"owned_by":"sglang","root":`...)
	b = appendString(b, s.cfg.Model)
	b = append(b, `,"parent":null,"max_model_len":131072}]}`...)
	writeJSON(ctx, fasthttp.StatusOK, b)
	s.putBuf(b)
}

// serveFlushCache answers /flush_cache (GET or POST, as SGLang) and
// records its timeout argument, so tests can see it was forwarded. As
// SGLang, it flushes only when no request is running, waiting up to
// ?timeout= seconds for them to finish, and answers 400 when it could not.
func (s *Server) serveFlushCache(ctx *fasthttp.RequestCtx) {
	if !ctx.IsPost() && !ctx.IsGet() {
		methodNotAllowed(ctx)
		return
	}
	timeout := string(ctx.QueryArgs().Peek("timeout"))
	s.st.flushTimeout.Store(&timeout)
	secs, _ := strconv.ParseFloat(timeout, 64)
	deadline := time.Now().Add(time.Duration(secs * float64(time.Second)))
	for s.st.inFlight.Load() > 0 {
		if !time.Now().Before(deadline) {
			writeText(ctx, fasthttp.StatusBadRequest, "Flush cache failed: there are running or waiting requests.\n")
			return
		}
		select {
		case <-s.quit:
			writeText(ctx, fasthttp.StatusServiceUnavailable, "Server is shutting down.\n")
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
	for i := range s.ranks {
		if c := s.ranks[i].cache; c != nil {
			c.flush()
		}
	}
	writeText(ctx, fasthttp.StatusOK, "Cache flushed.\nPlease check backend logs for more details. "+
		"(When there are running or waiting requests, the operation will not be performed.)\n")
}

// serveAbort answers /abort_request: {"rid": R} aborts the in-flight
// request with that rid, {"abort_all": true} every one. It answers 200
// whether or not a request was found, as SGLang does.
func (s *Server) serveAbort(ctx *fasthttp.RequestCtx) {
	if !ctx.IsPost() {
		methodNotAllowed(ctx)
		return
	}
	p := s.parsers.Get()
	v, err := loadJSON(p, ctx.PostBody())
	if err != nil {
		s.parsers.Put(p)
		writeBadRequest(ctx, routeGenerate, "JSON decode error: "+err.Error())
		return
	}
	all := v.GetBool("abort_all")
	rid := string(v.GetStringBytes("rid"))
	s.parsers.Put(p)
	if !all {
		if c, ok := s.calls.Load(rid); ok && c.(*call).abort() {
			s.st.aborts.Add(1)
		}
		ctx.SetStatusCode(fasthttp.StatusOK)
		return
	}
	s.calls.Range(func(_, c any) bool {
		if c.(*call).abort() {
			s.st.aborts.Add(1)
		}
		return true
	})
	ctx.SetStatusCode(fasthttp.StatusOK)
}
