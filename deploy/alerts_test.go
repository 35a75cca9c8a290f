package deploy

import (
	"bytes"
	"log/slog"
	"os"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
)

// TestAlertRulesParse loads the alert rules as Prometheus does, and shows
// the same load refuses each mistake a hand-edited rule file can hold.
func TestAlertRulesParse(t *testing.T) {
	const path = "prometheus/alerts.yaml"
	if qs := alertQueries(t, path); len(qs) < 5 {
		t.Errorf("%s has %d rules; want the five kinds issue 24 asks for at least", path, len(qs))
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, old, new string }{
		{"misspelled field", "    rules:", "    rule:"},
		{"unknown rule field", "        for: 5m", "        four: 5m"},
		{"expression that does not parse", "expr: absent(pdlb_body_memory_limit_bytes)", "expr: absent(pdlb_body_memory_limit_bytes"},
		{"bad duration", "for: 2m", "for: 2 minutes"},
		{"template that does not parse", "{{ $labels.instance }} has no usable prefill worker", "{{ $labels.instance has no usable prefill worker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			broken := bytes.Replace(data, []byte(tc.old), []byte(tc.new), 1)
			if bytes.Equal(broken, data) {
				t.Fatalf("%s has no %q to break", path, tc.old)
			}
			if _, errs := rulefmt.Parse(broken, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler)); len(errs) == 0 {
				t.Errorf("%s with %q for %q parsed; want an error", path, tc.new, tc.old)
			}
		})
	}
}
