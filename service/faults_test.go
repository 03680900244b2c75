package service

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"google.golang.org/grpc/codes"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider"
	pt "github.com/completiond/completiond/provider/providertest"
	"github.com/completiond/completiond/recovery"
)

// The fault suite: every way a real upstream fails, on the exact wire of
// both provider kinds, through the whole service — gRPC (bufconn) → handler
// → driver → recovery machine → the real provider on its official SDK →
// a providertest fault server on loopback.

// faultPolicy is the default policy with a short backoff, so the suite runs
// fast; Retry-After is still honoured at its real length (the 429 cases).
func faultPolicy() recovery.Policy {
	p := recovery.DefaultPolicy()
	p.Retry.BackoffBase = 10 * time.Millisecond
	p.Retry.BackoffMax = 40 * time.Millisecond
	return p
}

// faultRand is the jitter source of the suite: backoffs are exact.
const faultRand = 0.5

// bo is the backoff before retry n on a step, as the suite's policy computes it.
func bo(n int) time.Duration { return faultPolicy().Retry.Backoff(n, faultRand) }

// Route names and models of the suite.
const (
	primaryRoute  = "primary"
	fallbackRoute = "fallback"
	primaryModel  = "primary-model"
	fallbackModel = "fallback-model"
)

// generous are the timeouts of a route that is not under test for them.
var generous = provider.Timeouts{Headers: 3 * time.Second, FirstToken: 4 * time.Second, Idle: 3 * time.Second, Total: 10 * time.Second}

// The answers the upstreams stream, one token per delta. A resumed attempt
// continues the primary's answer exactly where the cut happened: tokens
// start with their space, so a prefill never ends in whitespace.
var (
	primaryTokens  = []string{"Recovery", " keeps", " every", " token", " in", " order", "."}
	fallbackTokens = []string{"The", " fallback", " answers", " in", " full", "."}
	primaryUsage   = pt.Usage{Input: 11, Output: 7}
	fallbackUsage  = pt.Usage{Input: 13, Output: 5}
	primaryText    = strings.Join(primaryTokens, "")
	fallbackText   = strings.Join(fallbackTokens, "")
	cutAt          = 3
	cutPrefix      = strings.Join(primaryTokens[:cutAt], "")
)

// full is the primary's whole answer; rest what follows its first cutAt
// tokens; fb the fallback's answer.
func full() pt.Answer {
	return pt.Answer{Model: primaryModel, Text: primaryTokens, Usage: primaryUsage}
}

func rest() pt.Answer {
	return pt.Answer{Model: primaryModel, Text: primaryTokens[cutAt:], Usage: primaryUsage}
}

func fb() pt.Answer {
	return pt.Answer{Model: fallbackModel, Text: fallbackTokens, Usage: fallbackUsage}
}

// faultWant is what a case must produce.
type faultWant struct {
	// transitions are the reasons, in order.
	transitions []string
	// backoffs are the backoffs of those transitions (exact: the policy's,
	// or the provider's Retry-After).
	backoffs []time.Duration
	// code is the RPC status.
	code codes.Code
	// primary and fallback are the requests each upstream saw.
	primary, fallback int
	// text is the final answer ("" for an error).
	text string
	// route answered ("" for an error).
	route string
	// discard are the attempts whose output was voided.
	discard []int32
	// prefills are, per upstream request in time order, the assistant
	// prefill it ended with ("" for a request ending with the user's
	// message); nil means no request carries one.
	prefills []string
	// errKinds are the error kinds of the transitions ("" for none); nil
	// does not check.
	errKinds []string
	// minTook is how long the case must take at least: a Retry-After, a
	// timeout.
	minTook time.Duration
}

// faultCase is one upstream failure scenario.
type faultCase struct {
	name string
	// primary is the script of the primary route's upstream.
	primary pt.Script
	// prefill says the primary route supports assistant prefill.
	prefill bool
	// timeouts are the primary route's (generous when zero).
	timeouts provider.Timeouts
	// fallback, when set, is the script of a second upstream serving a
	// fallback route.
	fallback        pt.Script
	fallbackPrefill bool
	fallbackWindow  int
	// want is the expected outcome; per overrides it for a provider kind
	// whose wire differs.
	want faultWant
	per  map[string]faultWant
	// check makes case-specific assertions.
	check func(t *testing.T, r *faultRun)
}

// faultRun is what one case produced.
type faultRun struct {
	kind     string
	evs      []*completionv1.CompletionEvent
	res      *completionv1.Result
	primary  *pt.Server
	fallback *pt.Server
	took     time.Duration
}

func faultCases() []faultCase {
	return []faultCase{
		{
			name:    "429 with Retry-After in seconds is honoured for its real length",
			primary: pt.Seq(pt.RateLimited("1"), pt.OK(full())),
			want: faultWant{transitions: []string{"RETRY", "COMPLETED"}, backoffs: []time.Duration{time.Second, 0},
				primary: 2, text: primaryText, route: primaryRoute, errKinds: []string{"RATE_LIMIT", ""}, minTook: time.Second},
			check: func(t *testing.T, r *faultRun) {
				e := transitionEvents(r.evs)[0].GetTransition().GetError()
				if e.GetHttpStatus() != 429 || e.GetRetryAfter().AsDuration() != time.Second {
					t.Errorf("RETRY error %v, want HTTP 429 with retry_after 1s", e)
				}
			},
		},
		{
			name:    "429 with retry-after-ms",
			primary: pt.Seq(pt.RateLimitedMS(300), pt.OK(full())),
			want: faultWant{transitions: []string{"RETRY", "COMPLETED"}, backoffs: []time.Duration{300 * time.Millisecond, 0},
				primary: 2, text: primaryText, route: primaryRoute, errKinds: []string{"RATE_LIMIT", ""}, minTook: 300 * time.Millisecond},
		},
		{
			name:    "429 without Retry-After backs off exponentially",
			primary: pt.Seq(pt.RateLimited(""), pt.RateLimited(""), pt.OK(full())),
			want: faultWant{transitions: []string{"RETRY", "RETRY", "COMPLETED"}, backoffs: []time.Duration{bo(1), bo(2), 0},
				primary: 3, text: primaryText, route: primaryRoute, errKinds: []string{"RATE_LIMIT", "RATE_LIMIT", ""}},
		},
		{
			name:    "500 once",
			primary: pt.Seq(pt.Fail(pt.ServerError), pt.OK(full())),
			want: faultWant{transitions: []string{"RETRY", "COMPLETED"}, backoffs: []time.Duration{bo(1), 0},
				primary: 2, text: primaryText, route: primaryRoute, errKinds: []string{"SERVER", ""}},
		},
		{
			// A route with a fallback gets three retries (the default
			// fallback budget), then the completion moves on: a fallback is
			// worth more than a long wait.
			name:     "503 persistent falls back after the retry budget",
			primary:  pt.Always(pt.Fail(pt.Unavailable)),
			fallback: pt.Always(pt.OK(fb())),
			want: faultWant{transitions: []string{"RETRY", "RETRY", "RETRY", "MODEL_FALLBACK", "COMPLETED"},
				backoffs: []time.Duration{bo(1), bo(2), bo(3), 0, 0},
				primary:  4, fallback: 1, text: fallbackText, route: fallbackRoute,
				errKinds: []string{"SERVER", "SERVER", "SERVER", "SERVER", ""}},
		},
		{
			name:     "overloaded persistent (529, OpenAI 503 overloaded) falls back after three",
			primary:  pt.Always(pt.Fail(pt.Overloaded)),
			fallback: pt.Always(pt.OK(fb())),
			want: faultWant{transitions: []string{"RETRY", "RETRY", "MODEL_FALLBACK", "COMPLETED"},
				backoffs: []time.Duration{bo(1), bo(2), 0, 0},
				primary:  3, fallback: 1, text: fallbackText, route: fallbackRoute,
				errKinds: []string{"OVERLOADED", "OVERLOADED", "OVERLOADED", ""}},
		},
		{
			name:    "TCP reset before the headers",
			primary: pt.Seq(pt.Reset(), pt.OK(full())),
			want: faultWant{transitions: []string{"RETRY", "COMPLETED"}, backoffs: []time.Duration{bo(1), 0},
				primary: 2, text: primaryText, route: primaryRoute, errKinds: []string{"CONNECTION", ""}},
		},
		{
			name:     "no response at all: the headers timeout moves to the next route",
			primary:  pt.Always(pt.Hang()),
			timeouts: provider.Timeouts{Headers: 150 * time.Millisecond, FirstToken: time.Second, Idle: time.Second, Total: 5 * time.Second},
			fallback: pt.Always(pt.OK(fb())),
			want: faultWant{transitions: []string{"MODEL_FALLBACK", "COMPLETED"}, backoffs: []time.Duration{0, 0},
				primary: 1, fallback: 1, text: fallbackText, route: fallbackRoute,
				errKinds: []string{"TIMEOUT", ""}, minTook: 150 * time.Millisecond},
			check: func(t *testing.T, r *faultRun) {
				r.primary.Request(t, 1).WaitGone(t, 2*time.Second)
				if s := transitionEvents(r.evs)[0].GetTransition().GetError().GetHttpStatus(); s != 0 {
					t.Errorf("headers timeout with HTTP status %d", s)
				}
			},
		},
		{
			name:     "slow first token: the first-token timeout retries the only route",
			primary:  pt.Seq(pt.SlowFirstToken(3*time.Second, full()), pt.OK(full())),
			timeouts: provider.Timeouts{Headers: time.Second, FirstToken: 300 * time.Millisecond, Idle: time.Second, Total: 5 * time.Second},
			want: faultWant{transitions: []string{"RETRY", "COMPLETED"}, backoffs: []time.Duration{bo(1), 0},
				primary: 2, text: primaryText, route: primaryRoute, errKinds: []string{"TIMEOUT", ""}, minTook: 300 * time.Millisecond},
			check: func(t *testing.T, r *faultRun) { r.primary.Request(t, 1).WaitGone(t, 2*time.Second) },
		},
		{
			name:     "slow first token with a fallback moves to it",
			primary:  pt.Always(pt.SlowFirstToken(3*time.Second, full())),
			timeouts: provider.Timeouts{Headers: time.Second, FirstToken: 300 * time.Millisecond, Idle: time.Second, Total: 5 * time.Second},
			fallback: pt.Always(pt.OK(fb())),
			want: faultWant{transitions: []string{"MODEL_FALLBACK", "COMPLETED"}, backoffs: []time.Duration{0, 0},
				primary: 1, fallback: 1, text: fallbackText, route: fallbackRoute, errKinds: []string{"TIMEOUT", ""}, minTook: 300 * time.Millisecond},
			check: func(t *testing.T, r *faultRun) { r.primary.Request(t, 1).WaitGone(t, 2*time.Second) },
		},
		{
			name:    "stream cut after N tokens resumes by prefill",
			primary: pt.Seq(pt.CutAfter(cutAt, full()), pt.OK(rest())),
			prefill: true,
			want: faultWant{transitions: []string{"STREAM_RESUME", "COMPLETED"}, backoffs: []time.Duration{bo(1), 0},
				primary: 2, text: primaryText, route: primaryRoute, prefills: []string{"", cutPrefix},
				errKinds: []string{"STREAM_BROKEN", ""}},
		},
		{
			name:    "stream cut after N tokens without prefill restarts cleanly",
			primary: pt.Seq(pt.CutAfter(cutAt, full()), pt.OK(full())),
			want: faultWant{transitions: []string{"RETRY", "COMPLETED"}, backoffs: []time.Duration{bo(1), 0},
				primary: 2, text: primaryText, route: primaryRoute, discard: []int32{1}, errKinds: []string{"STREAM_BROKEN", ""}},
		},
		{
			name:     "stall mid-stream: the idle timeout resumes by prefill",
			primary:  pt.Seq(pt.StallAfter(cutAt, full()), pt.OK(rest())),
			prefill:  true,
			timeouts: provider.Timeouts{Headers: time.Second, FirstToken: time.Second, Idle: 200 * time.Millisecond, Total: 5 * time.Second},
			want: faultWant{transitions: []string{"STREAM_RESUME", "COMPLETED"}, backoffs: []time.Duration{bo(1), 0},
				primary: 2, text: primaryText, route: primaryRoute, prefills: []string{"", cutPrefix},
				errKinds: []string{"TIMEOUT", ""}, minTook: 200 * time.Millisecond},
			check: func(t *testing.T, r *faultRun) { r.primary.Request(t, 1).WaitGone(t, 2*time.Second) },
		},
		{
			name:    "malformed chunk resumes by prefill",
			primary: pt.Seq(pt.MalformedAfter(cutAt, full()), pt.OK(rest())),
			prefill: true,
			want: faultWant{transitions: []string{"STREAM_RESUME", "COMPLETED"}, backoffs: []time.Duration{bo(1), 0},
				primary: 2, text: primaryText, route: primaryRoute, prefills: []string{"", cutPrefix},
				errKinds: []string{"STREAM_BROKEN", ""}},
			check: func(t *testing.T, r *faultRun) { r.primary.Request(t, 1).WaitGone(t, 2*time.Second) },
		},
		{
			name:    "overloaded_error inside the 200 stream resumes by prefill",
			primary: pt.Seq(pt.ErrorAfter(cutAt, pt.Overloaded, full()), pt.OK(rest())),
			prefill: true,
			want: faultWant{transitions: []string{"STREAM_RESUME", "COMPLETED"}, backoffs: []time.Duration{bo(1), 0},
				primary: 2, text: primaryText, route: primaryRoute, prefills: []string{"", cutPrefix},
				errKinds: []string{"OVERLOADED", ""}},
		},
		{
			// The finish came (OpenAI finish_reason and usage, Anthropic
			// message_delta with its stop_reason), so the answer is complete
			// without the terminator ([DONE], message_stop).
			name:    "no terminator ([DONE] / message_stop)",
			primary: pt.Seq(pt.NoEnd(full()), pt.OK(full())),
			want: faultWant{transitions: []string{"COMPLETED"}, backoffs: []time.Duration{0},
				primary: 1, text: primaryText, route: primaryRoute, errKinds: []string{""}},
		},
		{
			name:           "context length exceeded moves to the larger-context route",
			primary:        pt.Always(pt.Fail(pt.ContextExceeded)),
			fallback:       pt.Always(pt.OK(fb())),
			fallbackWindow: 1_000_000,
			want: faultWant{transitions: []string{"MODEL_FALLBACK", "COMPLETED"}, backoffs: []time.Duration{0, 0},
				primary: 1, fallback: 1, text: fallbackText, route: fallbackRoute, errKinds: []string{"PROMPT_TOO_LONG", ""}},
		},
		{
			name:     "context length exceeded with no larger route ends PROMPT_TOO_LONG",
			primary:  pt.Always(pt.Fail(pt.ContextExceeded)),
			fallback: pt.Always(pt.OK(fb())), // same window: no use
			want: faultWant{transitions: []string{"PROMPT_TOO_LONG"}, backoffs: []time.Duration{0}, code: codes.FailedPrecondition,
				primary: 1, errKinds: []string{"PROMPT_TOO_LONG"}},
		},
		{
			name:     "content filter ends MODEL_ERROR, never retried nor fallen back",
			primary:  pt.Always(pt.Fail(pt.ContentFilter)),
			fallback: pt.Always(pt.OK(fb())),
			want: faultWant{transitions: []string{"MODEL_ERROR"}, backoffs: []time.Duration{0}, code: codes.FailedPrecondition,
				primary: 1, errKinds: []string{"CONTENT_FILTER"}},
			check: func(t *testing.T, r *faultRun) {
				if k := r.res.GetError().GetKind(); k != completionv1.ErrorKind_ERROR_KIND_CONTENT_FILTER {
					t.Errorf("result error %v, want CONTENT_FILTER", r.res.GetError())
				}
			},
		},
		{
			// The primary stalls mid-answer; its fallback claims prefill
			// support but refuses it: the partial answer is discarded and
			// the fallback answers from scratch.
			name:            "prefill refused by the fallback restarts cleanly",
			primary:         pt.Always(pt.StallAfter(cutAt, full())),
			prefill:         true,
			timeouts:        provider.Timeouts{Headers: time.Second, FirstToken: time.Second, Idle: 200 * time.Millisecond, Total: 5 * time.Second},
			fallback:        pt.Seq(pt.Fail(pt.PrefillRefused), pt.OK(fb())),
			fallbackPrefill: true,
			want: faultWant{transitions: []string{"MODEL_FALLBACK", "STREAM_RESUME", "RETRY", "COMPLETED"},
				backoffs: []time.Duration{0, 0, 0, 0},
				primary:  1, fallback: 2, text: fallbackText, route: fallbackRoute, discard: []int32{1},
				prefills: []string{"", cutPrefix, ""}, errKinds: []string{"TIMEOUT", "TIMEOUT", "PREFILL_REJECTED", ""},
				minTook: 200 * time.Millisecond},
		},
	}
}

// TestFaultSuite runs every fault case against both provider kinds.
func TestFaultSuite(t *testing.T) {
	for _, kind := range providerKinds {
		t.Run(kind, func(t *testing.T) {
			for _, tc := range faultCases() {
				t.Run(tc.name, func(t *testing.T) {
					want := tc.want
					if w, ok := tc.per[kind]; ok {
						want = w
					}
					r := runFault(t, kind, tc)
					checkFault(t, r, want)
					if tc.check != nil {
						tc.check(t, r)
					}
				})
			}
		})
	}
}

// runFault serves tc's routes through the whole service and runs one Stream.
func runFault(t *testing.T, kind string, tc faultCase) *faultRun {
	t.Helper()
	r := &faultRun{kind: kind, primary: upstreamServer(t, kind, tc.primary)}
	to := tc.timeouts
	if to == (provider.Timeouts{}) {
		to = generous
	}
	routes := map[string]*config.Route{}
	var fallbacks []string
	if tc.fallback != nil {
		r.fallback = upstreamServer(t, kind, tc.fallback)
		window := tc.fallbackWindow
		if window == 0 {
			window = 200_000
		}
		routes[fallbackRoute] = upstreamRoute(fallbackRoute, fallbackModel, kind,
			realProvider(t, kind, r.fallback, "sk-test-3Kd8wZ1nRb6Y"), window, tc.fallbackPrefill, generous)
		fallbacks = []string{fallbackRoute}
	}
	routes[primaryRoute] = upstreamRoute(primaryRoute, primaryModel, kind,
		realProvider(t, kind, r.primary, "sk-test-7Hq2xV9pLm4T"), 200_000, tc.prefill, to, fallbacks...)
	client, _ := grpcClient(t, faultConfig(routes))
	env := &testEnv{client: client}
	start := time.Now()
	evs, st := env.streamAll(t, prompt("Explain recovery.", nil))
	r.took = time.Since(start)
	r.evs = evs
	r.res = checkContract(t, evs, st)
	if st.Code() != codeOf(tc, kind) {
		t.Errorf("status %v, want %v", st, codeOf(tc, kind))
	}
	return r
}

func codeOf(tc faultCase, kind string) codes.Code {
	if w, ok := tc.per[kind]; ok {
		return w.code
	}
	return tc.want.code
}

// faultConfig is the suite's server configuration over routes.
func faultConfig(routes map[string]*config.Route) Config {
	cfg := DefaultConfig()
	cfg.DefaultRoute = primaryRoute
	cfg.Routes = routes
	cfg.Policy = faultPolicy()
	cfg.Rand = func() float64 { return faultRand }
	return cfg
}

// checkFault asserts everything a fault case promises.
func checkFault(t *testing.T, r *faultRun, want faultWant) {
	t.Helper()
	trs := transitionEvents(r.evs)
	if got := transitions(r.evs); !slices.Equal(got, want.transitions) {
		t.Fatalf("transitions %v, want %v", got, want.transitions)
	}

	// Backoffs: exactly the policy's, or the provider's Retry-After.
	for i, ev := range trs {
		if got := ev.GetTransition().GetBackoff().AsDuration(); got != want.backoffs[i] {
			t.Errorf("transition %d (%v) backoff %v, want %v", i, want.transitions[i], got, want.backoffs[i])
		}
		if want.errKinds != nil {
			got := strings.TrimPrefix(ev.GetTransition().GetError().GetKind().String(), "ERROR_KIND_")
			if ev.GetTransition().GetError() == nil {
				got = ""
			}
			if got != want.errKinds[i] {
				t.Errorf("transition %d (%v) error kind %q, want %q", i, want.transitions[i], got, want.errKinds[i])
			}
		}
		// No hammering: a retry of the same route after a transient
		// failure always waits at least the backoff base.
		tr := ev.GetTransition()
		sameRoute := tr.GetReason() == completionv1.TransitionReason_TRANSITION_REASON_RETRY ||
			tr.GetReason() == completionv1.TransitionReason_TRANSITION_REASON_STREAM_RESUME && (i == 0 ||
				trs[i-1].GetTransition().GetReason() != completionv1.TransitionReason_TRANSITION_REASON_MODEL_FALLBACK)
		if sameRoute && tr.GetError().GetKind() != completionv1.ErrorKind_ERROR_KIND_PREFILL_REJECTED &&
			tr.GetBackoff().AsDuration() < faultPolicy().Retry.BackoffBase {
			t.Errorf("transition %d retries %s after %v: hammering", i, tr.GetToRoute(), tr.GetBackoff().AsDuration())
		}
		if tr.GetReason() == completionv1.TransitionReason_TRANSITION_REASON_MODEL_FALLBACK &&
			(tr.GetFromRoute() != primaryRoute || tr.GetToRoute() != fallbackRoute || tr.GetToModel() != fallbackModel) {
			t.Errorf("MODEL_FALLBACK from %s to %s/%s", tr.GetFromRoute(), tr.GetToRoute(), tr.GetToModel())
		}
	}

	// The attempts each upstream saw.
	if n := r.primary.Count(); n != want.primary {
		t.Errorf("the primary saw %d requests, want %d", n, want.primary)
	}
	fallbackCount := 0
	if r.fallback != nil {
		fallbackCount = r.fallback.Count()
	}
	if fallbackCount != want.fallback {
		t.Errorf("the fallback saw %d requests, want %d", fallbackCount, want.fallback)
	}

	// The requests are the attempts that reached an upstream (an attempt
	// refused by an open circuit reaches none), in order, and the gap
	// before each is at least the backoff the service announced.
	reqs := allRequests(map[string]*pt.Server{primaryRoute: r.primary, fallbackRoute: r.fallback})
	circuitOpen := map[int32]bool{}
	backoffAfter := map[int32]time.Duration{}
	for _, ev := range trs {
		tr := ev.GetTransition()
		if tr.GetError().GetKind() == completionv1.ErrorKind_ERROR_KIND_CIRCUIT_OPEN {
			circuitOpen[ev.GetAttempt()] = true
		}
		backoffAfter[ev.GetAttempt()] += tr.GetBackoff().AsDuration()
	}
	var sent []*completionv1.AttemptUsage
	for _, a := range r.res.GetAttempts() {
		if !circuitOpen[a.GetAttempt()] {
			sent = append(sent, a)
		}
	}
	if len(sent) != len(reqs) {
		t.Fatalf("%d attempts were sent (result attempts %v), the upstreams saw %d requests", len(sent), r.res.GetAttempts(), len(reqs))
	}
	for i, rq := range reqs {
		if sent[i].GetRoute() != rq.upstream {
			t.Errorf("request %d went to %s, but attempt %d was on %s", i+1, rq.upstream, sent[i].GetAttempt(), sent[i].GetRoute())
		}
		if i == 0 {
			continue
		}
		var wait time.Duration
		for a := sent[i-1].GetAttempt(); a < sent[i].GetAttempt(); a++ {
			wait += backoffAfter[a]
		}
		if gap := rq.at.Sub(reqs[i-1].at); gap < wait {
			t.Errorf("gap before request %d is %v, less than the announced backoff %v", i+1, gap, wait)
		}
	}

	// What each request ended with: the user's message, or a prefill.
	for i, rq := range reqs {
		wantPrefill := ""
		if want.prefills != nil {
			if len(want.prefills) != len(reqs) {
				t.Fatalf("case lists %d prefills for %d requests", len(want.prefills), len(reqs))
			}
			wantPrefill = want.prefills[i]
		}
		role, text := lastMessage(t, rq.req)
		switch {
		case wantPrefill == "" && role != "user":
			t.Errorf("request %d ends with a %s message %q, want the user's", i+1, role, text)
		case wantPrefill != "" && (role != "assistant" || text != wantPrefill):
			t.Errorf("request %d ends with %s %q, want the assistant prefill %q", i+1, role, text, wantPrefill)
		}
	}

	// The answer: complete and exactly what the upstream streamed, or a
	// clean typed error with no answer.
	if got := resultText(r.res); got != want.text {
		t.Errorf("final text %q, want %q", got, want.text)
	}
	if got := discardedAttempts(r.evs); !slices.Equal(got, want.discard) {
		t.Errorf("discarded attempts %v, want %v", got, want.discard)
	}
	if want.code == codes.OK {
		if r.res.GetStopReason() != completionv1.StopReason_STOP_REASON_END_TURN || r.res.GetTruncated() {
			t.Errorf("stop %v truncated %v, want END_TURN, complete", r.res.GetStopReason(), r.res.GetTruncated())
		}
		checkAnsweredBy(t, r.res, want.route)
	} else if r.res.GetError() == nil {
		t.Errorf("ended %v without the upstream error", r.res.GetReason())
	}

	if r.took < want.minTook {
		t.Errorf("took %v, less than %v: a wait was not taken", r.took, want.minTook)
	}
	if r.took > 5*time.Second {
		t.Errorf("took %v, want < 5s", r.took)
	}
}

// checkAnsweredBy asserts that route answered: the result names it and its
// model, its last attempt is the only answered one and carries the
// answer's usage, and the total is the sum of the attempts.
func checkAnsweredBy(t *testing.T, res *completionv1.Result, route string) {
	t.Helper()
	model, usage := primaryModel, primaryUsage
	if route == fallbackRoute {
		model, usage = fallbackModel, fallbackUsage
	}
	if res.GetRoute() != route || res.GetModel() != model {
		t.Errorf("answered by %s/%s, want %s/%s", res.GetRoute(), res.GetModel(), route, model)
	}
	attempts := res.GetAttempts()
	if len(attempts) == 0 {
		t.Fatal("no attempts in the result")
	}
	last := attempts[len(attempts)-1]
	if last.GetRoute() != route || last.GetModel() != model || last.GetOutcome() != completionv1.AttemptOutcome_ATTEMPT_OUTCOME_ANSWERED {
		t.Errorf("last attempt %v, want answered on %s/%s", last, route, model)
	}
	if last.GetUsage().GetInputTokens() != int64(usage.Input) || last.GetUsage().GetOutputTokens() != int64(usage.Output) {
		t.Errorf("answering attempt usage %v, want %d in / %d out", last.GetUsage(), usage.Input, usage.Output)
	}
	var in, out int64
	for _, a := range attempts {
		if o := a.GetOutcome(); a != last && o != completionv1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED && o != completionv1.AttemptOutcome_ATTEMPT_OUTCOME_DISCARDED {
			t.Errorf("attempt %d before the answer is reported %v, want failed or discarded", a.GetAttempt(), o)
		}
		in += a.GetUsage().GetInputTokens()
		out += a.GetUsage().GetOutputTokens()
	}
	if res.GetUsage().GetInputTokens() != in || res.GetUsage().GetOutputTokens() != out {
		t.Errorf("total usage %v, but the attempts add up to %d in / %d out", res.GetUsage(), in, out)
	}
}

// TestCircuitBreakerOverAPrimaryDownForAWhile: a primary is down for a
// while, then healthy. Its circuit opens after Failures failures; while it
// is open, completions go to the fallback without touching the primary;
// after the cooldown one probe goes to the primary — refused while it is
// still down, which opens the circuit again — and once the primary is
// healthy the probe succeeds and the circuit closes.
func TestCircuitBreakerOverAPrimaryDownForAWhile(t *testing.T) {
	const (
		failures = 3
		cooldown = 300 * time.Millisecond
		down     = time.Second
	)
	for _, kind := range providerKinds {
		t.Run(kind, func(t *testing.T) {
			began := time.Now()
			primary := upstreamServer(t, kind, pt.DownFor(down, pt.Fail(pt.ServerError), pt.OK(full())))
			fallback := upstreamServer(t, kind, pt.Always(pt.OK(fb())))
			routes := map[string]*config.Route{
				primaryRoute: upstreamRoute(primaryRoute, primaryModel, kind, realProvider(t, kind, primary, "sk-test-7Hq2xV9pLm4T"),
					200_000, false, generous, fallbackRoute),
				fallbackRoute: upstreamRoute(fallbackRoute, fallbackModel, kind, realProvider(t, kind, fallback, "sk-test-3Kd8wZ1nRb6Y"),
					200_000, false, generous),
			}
			cfg := faultConfig(routes)
			cfg.Breaker = config.BreakerSettings{Failures: failures, Cooldown: cooldown}
			client, g := grpcClient(t, cfg)
			env := &testEnv{client: client}
			state := func() gobreaker.State { return gobreaker.State(g.Completion.breakers.States()[primaryRoute]) }

			run := func(step string, wantTr []string, wantPrimary, wantFallback int, route string) *completionv1.Result {
				t.Helper()
				start := time.Now()
				evs, st := env.streamAll(t, prompt("Explain recovery.", nil))
				took := time.Since(start)
				res := checkContract(t, evs, st)
				if got := transitions(evs); !slices.Equal(got, wantTr) {
					t.Fatalf("%s: transitions %v, want %v", step, got, wantTr)
				}
				if st.Code() != codes.OK {
					t.Fatalf("%s: status %v", step, st)
				}
				if p, f := primary.Count(), fallback.Count(); p != wantPrimary || f != wantFallback {
					t.Fatalf("%s: primary saw %d, fallback %d; want %d and %d", step, p, f, wantPrimary, wantFallback)
				}
				checkAnsweredBy(t, res, route)
				want := primaryText
				if route == fallbackRoute {
					want = fallbackText
				}
				if resultText(res) != want {
					t.Errorf("%s: text %q, want %q", step, resultText(res), want)
				}
				if took > 5*time.Second {
					t.Errorf("%s took %v", step, took)
				}
				return res
			}

			// 1. Three failures open the circuit; the machine learns it with
			// the third and falls back at once, without announcing a retry.
			run("opening", []string{"RETRY", "RETRY", "MODEL_FALLBACK", "COMPLETED"}, failures, 1, fallbackRoute)
			if s := state(); s != gobreaker.StateOpen {
				t.Fatalf("after %d failures the circuit is %v, want open", failures, s)
			}
			reqs := primary.Requests()
			for i := 1; i < len(reqs); i++ {
				if gap := reqs[i].Time.Sub(reqs[i-1].Time); gap < bo(i) {
					t.Errorf("gap before primary request %d is %v, want ≥ %v", i+1, gap, bo(i))
				}
			}
			opened := reqs[len(reqs)-1].Time

			// 2. While it is open, traffic goes to the fallback at once and
			// the primary's count stops growing.
			for i := range 2 {
				res := run("open", []string{"MODEL_FALLBACK", "COMPLETED"}, failures, 2+i, fallbackRoute)
				if as := res.GetAttempts(); len(as) != 1 || as[0].GetRoute() != fallbackRoute {
					t.Errorf("attempts %v: the open primary must not be attempted at all", as)
				}
			}
			t.Logf("the open phase was served %v after the circuit opened (cooldown %v)", time.Since(opened), cooldown)
			if time.Since(opened) >= cooldown {
				t.Fatalf("the open phase outlasted the cooldown (%v): the test cannot tell open from half-open", time.Since(opened))
			}

			// 3. After the cooldown, one probe goes to the primary. It is
			// still down: the circuit opens again and the completion falls
			// back at once.
			waitState(t, state, gobreaker.StateHalfOpen)
			if time.Since(primary.Requests()[0].Time) >= down {
				t.Fatalf("the primary was already healthy at the first probe; the test is too slow to tell")
			}
			run("probe while down", []string{"MODEL_FALLBACK", "COMPLETED"}, failures+1, 4, fallbackRoute)
			if s := state(); s != gobreaker.StateOpen {
				t.Fatalf("after a failed probe the circuit is %v, want open", s)
			}

			// 4. Once the primary is healthy, the next probe succeeds and
			// the circuit closes; traffic stays on the primary.
			waitState(t, state, gobreaker.StateHalfOpen)
			for time.Since(primary.Requests()[0].Time) < down+20*time.Millisecond {
				time.Sleep(10 * time.Millisecond)
			}
			run("probe when healthy", []string{"COMPLETED"}, failures+2, 4, primaryRoute)
			if s := state(); s != gobreaker.StateClosed {
				t.Fatalf("after a successful probe the circuit is %v, want closed", s)
			}
			run("closed", []string{"COMPLETED"}, failures+3, 4, primaryRoute)
			if took := time.Since(began); took > 5*time.Second {
				t.Errorf("took %v", took)
			}
		})
	}
}

// waitState waits (bounded) until the circuit is in want.
func waitState(t *testing.T, state func() gobreaker.State, want gobreaker.State) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for state() != want {
		if time.Now().After(deadline) {
			t.Fatalf("the circuit stayed %v, want %v", state(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
