package bootstrap

import (
	"errors"
	"strings"
	"testing"
)

func TestParseInfo(t *testing.T) {
	f := func(body string, want Info, wantErr string) {
		t.Helper()
		got, err := parseInfo([]byte(body))
		checkInfo(t, body, got, err, want, wantErr)
	}
	// The exact answer of a current server.
	f(`{"attn_tp_size": 2, "attn_cp_size": 1, "dp_size": 4, "pp_size": 1, "page_size": 64,
	 "kv_cache_dtype": "fp8_e4m3", "follow_bootstrap_room": false, "enable_dsa_cache_layer_split": false,
	 "prefill_http_port": 30000, "target_tp_rank": null, "target_tp_ranks": null,
	 "target_cp_ranks": null, "target_pp_ranks": null, "required_dst_info_num": null,
	 "required_prefill_response_num": null}`,
		Info{DPSize: 4, AttnTPSize: 2, AttnCPSize: 1, PPSize: 1, PageSize: 64, KVCacheDType: "fp8_e4m3"}, "")
	// Optional fields absent or null take SGLang's defaults.
	f(`{"attn_tp_size":1,"dp_size":2,"pp_size":3}`,
		Info{DPSize: 2, AttnTPSize: 1, AttnCPSize: 1, PPSize: 3, FollowBootstrapRoom: true}, "")
	f(`{"attn_tp_size":1,"attn_cp_size":null,"dp_size":2,"pp_size":1,"page_size":null,"kv_cache_dtype":null,"follow_bootstrap_room":null}`,
		Info{DPSize: 2, AttnTPSize: 1, AttnCPSize: 1, PPSize: 1, FollowBootstrapRoom: true}, "")
	f(`{"attn_tp_size":1,"attn_cp_size":2,"dp_size":1,"pp_size":1}`,
		Info{DPSize: 1, AttnTPSize: 1, AttnCPSize: 2, PPSize: 1, FollowBootstrapRoom: true}, "")

	f(`{"attn_tp_size":1,"dp_size":null,"pp_size":1}`, Info{}, "not fully registered yet: dp_size is null")
	f(`{"dp_size":1,"pp_size":1}`, Info{}, "not fully registered yet: attn_tp_size is null")
	f(`{"attn_tp_size":1,"dp_size":0,"pp_size":1}`, Info{}, "bad dp_size in parallel info")
	f(`{"attn_tp_size":1,"dp_size":"4","pp_size":1}`, Info{}, "bad dp_size")
	f(`{"attn_tp_size":1,"dp_size":1.5,"pp_size":1}`, Info{}, "bad dp_size")
	f(`{"attn_tp_size":1,"attn_cp_size":0,"dp_size":1,"pp_size":1}`, Info{}, "bad attn_cp_size")
	f(`{"attn_tp_size":1,"dp_size":1,"pp_size":1,"page_size":-1}`, Info{}, "bad page_size")
	f(`{"attn_tp_size":1,"dp_size":1,"pp_size":1,"follow_bootstrap_room":1}`, Info{}, "bad follow_bootstrap_room")
	f(`{"attn_tp_size":1,"dp_size":1,"pp_size":1,"kv_cache_dtype":1}`, Info{}, "bad kv_cache_dtype")
	f(`[1]`, Info{}, "got array, not an object")
	f(`Internal Server Error`, Info{}, "cannot parse parallel info")
}

func TestParseLegacyInfo(t *testing.T) {
	f := func(body string, want Info, wantErr string) {
		t.Helper()
		got, err := parseLegacyInfo([]byte(body))
		checkInfo(t, body, got, err, want, wantErr)
	}
	f(`{"prefill_attn_tp_size": 8, "prefill_dp_size": 2, "prefill_pp_size": 1, "prefill_page_size": 16}`,
		Info{DPSize: 2, AttnTPSize: 8, AttnCPSize: 1, PPSize: 1, PageSize: 16, FollowBootstrapRoom: true, Legacy: true}, "")
	f(`{"prefill_attn_tp_size": 8, "prefill_dp_size": 2, "prefill_pp_size": 1, "prefill_page_size": null}`,
		Info{DPSize: 2, AttnTPSize: 8, AttnCPSize: 1, PPSize: 1, FollowBootstrapRoom: true, Legacy: true}, "")
	// Before registration: nulls, with a 200.
	f(`{"prefill_attn_tp_size": null, "prefill_dp_size": null, "prefill_pp_size": null, "prefill_page_size": null}`,
		Info{}, "not fully registered yet: prefill_dp_size is null")
	f(`{"prefill_attn_tp_size": 1, "prefill_dp_size": -2, "prefill_pp_size": 1}`, Info{}, "bad prefill_dp_size")
	f(`{`, Info{}, "cannot parse parallel info")
}

// checkInfo checks a parse result: want when wantErr is "", else an error
// containing wantErr, which wraps ErrNotRegistered exactly when it says so.
func checkInfo(t *testing.T, body string, got Info, err error, want Info, wantErr string) {
	t.Helper()
	if wantErr == "" {
		if err != nil {
			t.Errorf("%s: got error %v; want none", body, err)
		} else if got != want {
			t.Errorf("%s: got %+v; want %+v", body, got, want)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), wantErr) {
		t.Errorf("%s: got error %v; want one containing %q", body, err, wantErr)
		return
	}
	if notReg := strings.Contains(wantErr, "not fully registered"); errors.Is(err, ErrNotRegistered) != notReg {
		t.Errorf("%s: got errors.Is(err, ErrNotRegistered) = %t; want %t", body, !notReg, notReg)
	}
}

func TestParseRankAddr(t *testing.T) {
	f := func(body, wantIP string, wantPort int, wantErr string) {
		t.Helper()
		ip, port, err := parseRankAddr([]byte(body))
		if wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Errorf("%s: got error %v; want one containing %q", body, err, wantErr)
			}
			return
		}
		if err != nil || ip != wantIP || port != wantPort {
			t.Errorf("%s: got %q, %d, %v; want %q, %d, no error", body, ip, port, err, wantIP, wantPort)
		}
	}
	f(`{"rank_ip": "10.0.0.5", "rank_port": 12345}`, "10.0.0.5", 12345, "")
	f(`{"rank_ip": "fe80::1", "rank_port": 1}`, "fe80::1", 1, "")
	f(`{"rank_port": 12345}`, "", 0, "bad rank_ip")
	f(`{"rank_ip": "", "rank_port": 12345}`, "", 0, "bad rank_ip")
	f(`{"rank_ip": 5, "rank_port": 12345}`, "", 0, "bad rank_ip")
	f(`{"rank_ip": "10.0.0.5"}`, "", 0, "bad rank_port")
	f(`{"rank_ip": "10.0.0.5", "rank_port": 65536}`, "", 0, "bad rank_port")
	f(`{"rank_ip": "10.0.0.5", "rank_port": "1"}`, "", 0, "bad rank_port")
	f(`nope`, "", 0, "cannot parse rank address")
	f(`null`, "", 0, "got null, not an object")
}
