package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// MaxRanks caps the rank addresses Client.Ranks fetches for one prefill:
// dp_size × attn_cp_size × attn_tp_size × pp_size queries. Real deployments
// stay far below it; a larger product means a bogus answer, not a prefill.
const MaxRanks = 4096

// ErrNotRegistered is wrapped by the errors of a bootstrap server whose
// prefill ranks have not all registered yet: 503 on the current API, nulls
// on the legacy one. The prefill is starting; ask again later.
var ErrNotRegistered = errors.New("prefill server not fully registered yet")

const (
	// rankFetchers bounds the concurrent rank queries of one Client.Ranks.
	rankFetchers = 4
	// clientMaxConns leaves every rank fetcher a connection.
	clientMaxConns = rankFetchers
	// maxAnswerSize bounds a bootstrap server's answer: parallel info is a
	// few hundred bytes.
	maxAnswerSize = 64 << 10
)

// The parallel-info queries of both API versions: the current one, and the
// legacy one of SGLang before 2026-02-23.
const (
	infoQuery       = "/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1"
	legacyInfoQuery = "/route?engine_rank=-1&target_dp_group=-1&target_pp_rank=-1"
)

// Info is a prefill's parallel info as its bootstrap server reports it.
type Info struct {
	// DPSize, AttnTPSize, AttnCPSize and PPSize are the prefill's data,
	// attention tensor, attention context and pipeline parallel sizes; all
	// at least 1 in an Info returned by Client.Info.
	DPSize     int `json:"dp_size"`
	AttnTPSize int `json:"attn_tp_size"`
	AttnCPSize int `json:"attn_cp_size"`
	PPSize     int `json:"pp_size"`
	// PageSize is the KV cache page size in tokens; 0 when not reported.
	PageSize int `json:"page_size"`
	// FollowBootstrapRoom is true when the prefill places a request on DP
	// rank bootstrap_room % DPSize, SGLang's default. The legacy API does not
	// report it; those servers always did.
	FollowBootstrapRoom bool `json:"follow_bootstrap_room"`
	// KVCacheDType is the prefill's kv_cache_dtype; "" on the legacy API.
	KVCacheDType string `json:"kv_cache_dtype"`
	// Legacy is true when the info came from the API of SGLang before
	// 2026-02-23 (engine_rank, target_dp_group); ranks are then asked the
	// same way.
	Legacy bool `json:"legacy_api"`
}

// Rank is the address of one prefill rank, where decodes reach it for KV
// transfers.
type Rank struct {
	// DPRank, CPRank, TPRank and PPRank place the rank in the prefill's
	// data, context, tensor and pipeline parallel groups.
	DPRank int `json:"dp_rank"`
	CPRank int `json:"cp_rank"`
	TPRank int `json:"tp_rank"`
	PPRank int `json:"pp_rank"`
	// IP and Port are the rank's rank_ip and rank_port.
	IP   string `json:"rank_ip"`
	Port int    `json:"rank_port"`
}

// Client asks one prefill's bootstrap server for its parallel info and rank
// addresses. It is safe for concurrent use. It keeps a few connections
// alive between calls: one may have died with a restarted server, and calls
// are never retried, so call CloseIdleConnections after a batch of calls,
// as the Registry does after each refresh.
type Client struct {
	addr    string
	timeout time.Duration
	hc      *fasthttp.HostClient
	legacy  atomic.Bool // the server last answered the legacy API
}

// NewClient returns a Client for the bootstrap server at addr ("host:port").
// dial connects to addr; nil means TCP (IPv4 and IPv6). Each HTTP call gives up after
// timeout; zero or less means DefaultTimeout.
func NewClient(addr string, dial fasthttp.DialFunc, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Client{
		addr:    addr,
		timeout: timeout,
		hc: &fasthttp.HostClient{
			Addr:                      addr,
			Name:                      "pdlb",
			Dial:                      dial,
			DialDualStack:             true,
			MaxConns:                  clientMaxConns,
			MaxConnWaitTimeout:        timeout,
			MaxIdemponentCallAttempts: 1,
			MaxResponseBodySize:       maxAnswerSize,
		},
	}
}

// Addr is the bootstrap server's address, as given to NewClient.
func (c *Client) Addr() string { return c.addr }

// CloseIdleConnections closes the Client's idle connections; calls in
// flight are not affected.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// Info fetches the prefill's parallel info. It asks in the API version the
// server last spoke (the current one at first) and tries the other version
// when the server answers 400 or 404, as an old server does to the current
// query and a new server to the legacy one.
//
// A prefill that has not fully registered yields an error wrapping
// ErrNotRegistered. Cancelling ctx stops Info before its next HTTP call;
// a call in flight ends by ctx's deadline or the Client's timeout.
func (c *Client) Info(ctx context.Context) (Info, error) {
	legacy := c.legacy.Load()
	info, status, err := c.info(ctx, legacy)
	if err != nil && (status == fasthttp.StatusBadRequest || status == fasthttp.StatusNotFound) {
		info2, status2, err2 := c.info(ctx, !legacy)
		if status2 == fasthttp.StatusOK || status2 == fasthttp.StatusServiceUnavailable {
			// The server speaks the other version, registered or not.
			c.legacy.Store(!legacy)
			info, err = info2, err2
		} else {
			err = fmt.Errorf("%s: %w; %s: %w", apiName(legacy), err, apiName(!legacy), err2)
		}
	}
	if err != nil {
		return Info{}, fmt.Errorf("cannot fetch parallel info from bootstrap server %s: %w", c.addr, err)
	}
	return info, nil
}

func apiName(legacy bool) string {
	if legacy {
		return "legacy API"
	}
	return "current API"
}

// info asks for the parallel info once in one API version. status is the
// HTTP status, 0 when none came.
func (c *Client) info(ctx context.Context, legacy bool) (Info, int, error) {
	uri := infoQuery
	if legacy {
		uri = legacyInfoQuery
	}
	body, status, err := c.get(ctx, uri)
	if err != nil {
		return Info{}, status, err
	}
	if legacy {
		info, err := parseLegacyInfo(body)
		return info, status, err
	}
	info, err := parseInfo(body)
	return info, status, err
}

// Ranks fetches the address of every rank of a prefill with the given
// info, in the order dp, cp, tp, pp (pp varying fastest), asking in the API
// version info came from. It fails when the ranks number more than
// MaxRanks, and at the first rank that cannot be fetched. Cancelling ctx
// stops it before its next HTTP call.
func (c *Client) Ranks(ctx context.Context, info Info) ([]Rank, error) {
	n, err := rankCount(info)
	if err != nil {
		return nil, fmt.Errorf("cannot fetch rank addresses from bootstrap server %s: %w", c.addr, err)
	}
	ranks := make([]Rank, n)
	var next atomic.Int64
	errs := make([]error, min(rankFetchers, n))
	var wg sync.WaitGroup
	for w := range errs {
		wg.Go(func() { errs[w] = c.fetchRanks(ctx, info, ranks, &next) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return ranks, nil
}

// fetchRanks fills in the ranks whose indices it takes from next, until
// none is left or one fails. A failure stops only its own fetcher: on a
// dead server each stops at its first call.
func (c *Client) fetchRanks(ctx context.Context, info Info, ranks []Rank, next *atomic.Int64) error {
	for {
		i := int(next.Add(1) - 1)
		if i >= len(ranks) {
			return nil
		}
		ranks[i] = rankAt(info, i)
		if err := c.rank(ctx, info.Legacy, &ranks[i]); err != nil {
			return err
		}
	}
}

// rankCount is the number of ranks of info, checked against MaxRanks
// factor by factor so that no product overflows.
func rankCount(info Info) (int, error) {
	n := 1
	for _, f := range [...]int{info.DPSize, info.AttnCPSize, info.AttnTPSize, info.PPSize} {
		if f < 1 {
			return 0, fmt.Errorf("bad parallel info %+v: every size must be at least 1", info)
		}
		if n *= f; n > MaxRanks {
			return 0, fmt.Errorf("dp_size %d × attn_cp_size %d × attn_tp_size %d × pp_size %d ranks exceed the limit of %d",
				info.DPSize, info.AttnCPSize, info.AttnTPSize, info.PPSize, MaxRanks)
		}
	}
	return n, nil
}

// rankAt is rank number i in Ranks' order, without its address.
func rankAt(info Info, i int) Rank {
	var r Rank
	r.PPRank, i = i%info.PPSize, i/info.PPSize
	r.TPRank, i = i%info.AttnTPSize, i/info.AttnTPSize
	r.CPRank, r.DPRank = i%info.AttnCPSize, i/info.AttnCPSize
	return r
}

// rank fetches the address of r into it.
func (c *Client) rank(ctx context.Context, legacy bool, r *Rank) error {
	body, _, err := c.get(ctx, rankQuery(legacy, r))
	if err == nil {
		r.IP, r.Port, err = parseRankAddr(body)
	}
	if err != nil {
		return fmt.Errorf("cannot fetch the address of rank dp=%d cp=%d tp=%d pp=%d from bootstrap server %s: %w",
			r.DPRank, r.CPRank, r.TPRank, r.PPRank, c.addr, err)
	}
	return nil
}

// rankQuery is the GET /route query for r's address. The legacy API has no
// context parallelism: its callers only ask for cp rank 0.
func rankQuery(legacy bool, r *Rank) string {
	b := make([]byte, 0, 96)
	if legacy {
		b = append(b, "/route?engine_rank="...)
		b = strconv.AppendInt(b, int64(r.TPRank), 10)
		b = append(b, "&target_dp_group="...)
		b = strconv.AppendInt(b, int64(r.DPRank), 10)
	} else {
		b = append(b, "/route?prefill_dp_rank="...)
		b = strconv.AppendInt(b, int64(r.DPRank), 10)
		b = append(b, "&prefill_cp_rank="...)
		b = strconv.AppendInt(b, int64(r.CPRank), 10)
		b = append(b, "&target_tp_rank="...)
		b = strconv.AppendInt(b, int64(r.TPRank), 10)
	}
	b = append(b, "&target_pp_rank="...)
	b = strconv.AppendInt(b, int64(r.PPRank), 10)
	return string(b)
}

// get performs GET uri and returns the body of a 200 answer. A 503 is an
// error wrapping ErrNotRegistered; any other status is an error with the
// server's text. status is the HTTP status, 0 when none came.
func (c *Client) get(ctx context.Context, uri string) ([]byte, int, error) {
	status, body, err := doGet(ctx, c.hc, c.timeout, uri, "")
	switch {
	case err != nil:
		return nil, 0, err
	case status == fasthttp.StatusOK:
		return body, status, nil
	case status == fasthttp.StatusServiceUnavailable:
		return nil, status, notRegistered(body)
	default:
		return nil, status, fmt.Errorf("answered %d %q", status, clip(body))
	}
}

// doGet performs GET uri on hc, unless ctx is done, giving up at ctx's
// deadline or after timeout, whichever comes first. It returns the status
// and a copy of the body of any answer; err is for calls that got none.
// doGet GETs uri from hc within timeout; authorization, when not empty, is
// sent as the Authorization header.
func doGet(ctx context.Context, hc *fasthttp.HostClient, timeout time.Duration, uri, authorization string) (int, []byte, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(uri)
	if hc.IsTLS { // a URI with a scheme writes its own host as Host
		req.URI().SetScheme("https")
		req.URI().SetHost(hc.Addr)
	}
	req.Header.SetHost(hc.Addr)
	if authorization != "" {
		req.Header.Set(fasthttp.HeaderAuthorization, authorization)
	}
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := hc.DoDeadline(req, resp, deadline); err != nil {
		return 0, nil, err
	}
	return resp.StatusCode(), append([]byte(nil), resp.Body()...), nil
}

// notRegistered is the error of a 503 answer, which SGLang words
// "Prefill server not fully registered yet (N workers registered)."
func notRegistered(body []byte) error {
	const prefix = "Prefill server not fully registered yet ("
	s := string(body)
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		if end := strings.IndexByte(s[len(prefix):], ' '); end > 0 {
			if n, err := strconv.Atoi(s[len(prefix) : len(prefix)+end]); err == nil {
				return fmt.Errorf("%w (%d workers registered)", ErrNotRegistered, n)
			}
		}
	}
	return fmt.Errorf("%w: answered 503 %q", ErrNotRegistered, clip(body))
}

// clip shortens a server's answer for an error message.
func clip(b []byte) string {
	const limit = 200
	if len(b) > limit {
		return string(b[:limit]) + "..."
	}
	return string(b)
}
