package bootstrap

import "unicode/utf8"

// MaxAdded returns the most bytes Append can write beyond the body it is
// given, for Fields whose Host is host and that write items rooms as lists
// (Batch), or one when items is negative; LocalPrefill and the DP-rank
// fields included. Append drops members of the client's and adds its own,
// so a caller that holds bodies within a memory budget reserves the body's
// length plus MaxAdded before appending. It does not allocate.
func MaxAdded(host string, items int) int {
	const (
		comma   = 1  // before the new members, or between list items
		maxPort = 5  // 65535, or null
		maxRoom = 19 // MaxRoom has 19 digits
		// ,"disagg_prefill_dp_rank": or ,"routed_dp_rank": and an int.
		dpMember = len(`,"disagg_prefill_dp_rank":`) + len("-9223372036854775808")
	)
	n := comma + 2*dpMember
	if items < 0 {
		// do_local_prefill, written instead, is shorter.
		return n + len(`"bootstrap_host":,"bootstrap_port":,"bootstrap_room":`) + maxString(host) + maxPort + maxRoom
	}
	perItem := maxString(host) + comma + maxPort + comma + maxRoom + comma
	return n + len(`"bootstrap_host":[],"bootstrap_port":[],"bootstrap_room":[]`) + items*perItem
}

// maxString bounds the length of s written by appendString: quotes, and
// six bytes for each byte it may escape (\u00XX), or six for each invalid
// byte replaced by \ufffd.
func maxString(s string) int {
	n := 2 + len(s)
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			n += 5
		}
	}
	return n
}
