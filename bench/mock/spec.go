package mock

import (
	"fmt"
	"net/url"
	"strconv"
	"time"
)

// Spec is what the server answers one request with.
type Spec struct {
	// Tokens is the number of text deltas of the answer (at least 1).
	Tokens int
	// FirstToken is the wait between the response headers and the first
	// token; TokenDelay the wait before each later token.
	FirstToken, TokenDelay time.Duration
	// Hold sends the headers and then nothing until the client goes away.
	Hold bool
}

// Model renders s as the model name that asks for it.
func (s Spec) Model() string {
	if s.Hold {
		return "hold=1"
	}
	v := url.Values{}
	v.Set("tokens", strconv.Itoa(s.Tokens))
	v.Set("ttft", s.FirstToken.String())
	v.Set("delay", s.TokenDelay.String())
	return v.Encode()
}

// ParseSpec reads a model name written by Spec.Model (fields may be left
// out: one token, no waits).
func ParseSpec(model string) (Spec, error) {
	v, err := url.ParseQuery(model)
	if err != nil {
		return Spec{}, fmt.Errorf("model %q is not a load spec: %w", model, err)
	}
	s := Spec{Tokens: 1, Hold: v.Get("hold") == "1"}
	if t := v.Get("tokens"); t != "" {
		if s.Tokens, err = strconv.Atoi(t); err != nil || s.Tokens < 1 {
			return Spec{}, fmt.Errorf("model %q: tokens must be a positive integer", model)
		}
	}
	if s.FirstToken, err = duration(v, "ttft"); err != nil {
		return Spec{}, fmt.Errorf("model %q: %w", model, err)
	}
	if s.TokenDelay, err = duration(v, "delay"); err != nil {
		return Spec{}, fmt.Errorf("model %q: %w", model, err)
	}
	return s, nil
}

// duration is the field key of v, 0 when absent.
func duration(v url.Values, key string) (time.Duration, error) {
	s := v.Get(key)
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s must be a non-negative duration", key)
	}
	return d, nil
}
