package bootstrap

import (
	"errors"
	"fmt"

	"github.com/valyala/fastjson"
)

// The bootstrap server's JSON answers (SGLang's CommonKVBootstrapServer, in
// disaggregation/common/conn.py), read with fastjson:
// they are small, rare, and come from a server pdlb does not control, so
// every field is type-checked.

// errNull marks a required field that is null or missing.
var errNull = errors.New("is null or missing")

// parseInfo reads the parallel info of the current API. Required sizes that
// are null mean the prefill is not registered; attn_cp_size, which older
// servers of this API lack, defaults to 1, and follow_bootstrap_room to
// SGLang's default, true.
func parseInfo(body []byte) (Info, error) {
	v, err := parseObject(body)
	if err != nil {
		return Info{}, fmt.Errorf("cannot parse parallel info %q: %w", clip(body), err)
	}
	info := Info{AttnCPSize: 1, FollowBootstrapRoom: true}
	sizes := []struct {
		key string
		dst *int
	}{{"dp_size", &info.DPSize}, {"attn_tp_size", &info.AttnTPSize}, {"pp_size", &info.PPSize}}
	for _, s := range sizes {
		if *s.dst, err = size(v, s.key); err != nil {
			return Info{}, infoError(body, s.key, err)
		}
	}
	if present(v, "attn_cp_size") {
		if info.AttnCPSize, err = size(v, "attn_cp_size"); err != nil {
			return Info{}, infoError(body, "attn_cp_size", err)
		}
	}
	if info.PageSize, err = optionalInt(v, "page_size"); err != nil {
		return Info{}, infoError(body, "page_size", err)
	}
	if present(v, "follow_bootstrap_room") {
		if info.FollowBootstrapRoom, err = v.Get("follow_bootstrap_room").Bool(); err != nil {
			return Info{}, infoError(body, "follow_bootstrap_room", err)
		}
	}
	if present(v, "kv_cache_dtype") {
		b, err := v.Get("kv_cache_dtype").StringBytes()
		if err != nil {
			return Info{}, infoError(body, "kv_cache_dtype", err)
		}
		info.KVCacheDType = string(b)
	}
	return info, nil
}

// parseLegacyInfo reads the parallel info of the legacy API, which answers
// nulls until the prefill has registered. Servers of that API followed
// bootstrap_room and had no context parallelism.
func parseLegacyInfo(body []byte) (Info, error) {
	v, err := parseObject(body)
	if err != nil {
		return Info{}, fmt.Errorf("cannot parse parallel info %q: %w", clip(body), err)
	}
	info := Info{AttnCPSize: 1, FollowBootstrapRoom: true, Legacy: true}
	sizes := []struct {
		key string
		dst *int
	}{{"prefill_dp_size", &info.DPSize}, {"prefill_attn_tp_size", &info.AttnTPSize}, {"prefill_pp_size", &info.PPSize}}
	for _, s := range sizes {
		if *s.dst, err = size(v, s.key); err != nil {
			return Info{}, infoError(body, s.key, err)
		}
	}
	if info.PageSize, err = optionalInt(v, "prefill_page_size"); err != nil {
		return Info{}, infoError(body, "prefill_page_size", err)
	}
	return info, nil
}

// parseObject parses a JSON object.
func parseObject(body []byte) (*fastjson.Value, error) {
	v, err := fastjson.ParseBytes(body)
	if err != nil {
		return nil, err
	}
	if v.Type() != fastjson.TypeObject {
		return nil, fmt.Errorf("got %s, not an object", v.Type())
	}
	return v, nil
}

// infoError explains a bad field; a null one means not registered.
func infoError(body []byte, key string, err error) error {
	if errors.Is(err, errNull) {
		return fmt.Errorf("%w: %s is null in %q", ErrNotRegistered, key, clip(body))
	}
	return fmt.Errorf("bad %s in parallel info %q: %w", key, clip(body), err)
}

// present reports whether v has key with a value other than null.
func present(v *fastjson.Value, key string) bool {
	f := v.Get(key)
	return f != nil && f.Type() != fastjson.TypeNull
}

// size reads a required positive integer.
func size(v *fastjson.Value, key string) (int, error) {
	if !present(v, key) {
		return 0, errNull
	}
	n, err := v.Get(key).Int()
	if err != nil {
		return 0, err
	}
	if n < 1 {
		return 0, fmt.Errorf("%d is not a positive size", n)
	}
	return n, nil
}

// optionalInt reads a non-negative integer that may be null or missing (0).
func optionalInt(v *fastjson.Value, key string) (int, error) {
	if !present(v, key) {
		return 0, nil
	}
	n, err := v.Get(key).Int()
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, fmt.Errorf("%d is negative", n)
	}
	return n, nil
}

// parseRankAddr reads a rank lookup's {"rank_ip", "rank_port"}.
func parseRankAddr(body []byte) (string, int, error) {
	v, err := parseObject(body)
	if err != nil {
		return "", 0, fmt.Errorf("cannot parse rank address %q: %w", clip(body), err)
	}
	ip := v.GetStringBytes("rank_ip") // nil unless a string
	if len(ip) == 0 {
		return "", 0, fmt.Errorf("bad rank_ip in %q", clip(body))
	}
	port := v.GetInt("rank_port") // 0 unless an integer
	if port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("bad rank_port in %q", clip(body))
	}
	return string(ip), port, nil
}
