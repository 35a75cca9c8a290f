package hostile

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// largeAnswersEnv has the fakes generate without a delay, so that an
// answer of millions of tokens comes at once, as pdlb must withstand
// whatever its workers send.
func largeAnswersEnv(form) envConfig { return envConfig{instantTokens: true} }

// answerTokens is what each large-answer request asks for: the fakes
// answer about 70 MB for it, and pdlb merges the prefill's logprobs into a
// second copy.
const answerTokens = 5_000_000

// largeAnswers (found by the review of issue 19) has form.largeAnswers
// clients, each with a request of under 100 bytes, ask the workers for
// answers as large as they give (max_new_tokens in the millions, with
// return_logprob), again and again for form.hold. Sixteen of them once
// took pdlb out of memory: it held the workers' answers whole, outside any
// budget. pdlb must read them within --max-body-memory, refusing with a
// 503 what does not fit, and its RSS stay within the body memory and the
// overhead of its runtime memory limit (largeAnswersOverhead).
func largeAnswers(a *arena) {
	body := fmt.Sprintf(`{"text":"hi","return_logprob":true,"sampling_params":{"max_new_tokens":%d}}`, answerTokens)
	var mu sync.Mutex
	codes := map[int]int{}
	end := time.Now().Add(a.form.hold)
	var wg sync.WaitGroup
	for range a.form.largeAnswers {
		wg.Go(func() {
			c := &http.Client{Timeout: bodyTimeout}
			for time.Now().Before(end) {
				resp, err := c.Post(a.env.base+"/generate", "application/json", strings.NewReader(body))
				status := 0
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
				}
				mu.Lock()
				codes[status]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	a.Logf("large answers: %v (status: count; 0 is a transport error)", codes)
	if codes[0] > 0 {
		a.Errorf("%d large-answer requests got no answer; want a 200 or a 503 each", codes[0])
	}
}

// largeAnswersSlack is what the attack may add to the well-behaved p99:
// the fakes, which serve the well-behaved clients too, spend seconds of
// the machine's two cores building answers of 70 MB, and pdlb copies them
// to their clients.
func largeAnswersSlack(form) time.Duration { return 2 * time.Second }

// largeAnswersOverhead is what pdlb's RSS may reach beyond its body memory
// under largeAnswers: its runtime memory limit's overhead (512 MiB, cmd
// serve's memoryOverhead), near which the collector frees the answers let
// go (the body memory bounds the answers held, not their garbage), and
// rssOverhead more, as the limit is a soft one, on the runtime's memory
// alone.
const largeAnswersOverhead = 512<<20 + rssOverhead
