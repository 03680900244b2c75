package harness

import (
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"

	"github.com/completiond/completiond/bench/mock"
)

// Config is one benchmark run. The zero value of a field means its default
// (Defaults).
type Config struct {
	// Levels are the numbers of concurrent streams measured, in order.
	Levels []int
	// Reps is the number of interleaved repetitions at each level.
	Reps int
	// Phases are the phases measured, of Phases (all when empty).
	Phases []string

	// StreamsPerChannel is how many streams of a level share one gRPC
	// channel (client connection) to a server. 0, the default, puts all of
	// them on one channel: what a caller using a gRPC library's defaults
	// does, and so what the shipped defaults must serve.
	StreamsPerChannel int
	// Spread is the second configuration: completiond again, its streams
	// spread over channels of Spread streams each, measured in the
	// streaming phase at the levels above Spread only (below, it is the
	// same load), to show what one channel costs against many. 0 is the
	// default (100, one connection per 100 streams, as the benchmark ran
	// before it used one channel); negative measures no second
	// configuration.
	Spread int

	// Tokens is the answer length of the streaming phase.
	Tokens int
	// TokenRate paces the streaming phase: tokens per second over all the
	// streams together, so that each stream waits level/TokenRate between
	// two tokens and the machine stays far from saturation at every level.
	TokenRate float64
	// TokenDelay, when set, is the wait between two tokens instead.
	TokenDelay time.Duration
	// MaxAnswer bounds how long a streaming answer lasts at the upstream:
	// at a level where Tokens at its pace would take longer, its answers
	// are shortened to fit (at 5 000 streams and 2 500 tokens/s a token
	// every 2 s: 11 tokens rather than 50), so that the top level's
	// streaming phase does not take minutes per measurement. The report
	// gives each level's answer length.
	MaxAnswer time.Duration
	// FirstToken is the upstream's time to first token (the mock's ttft);
	// the added TTFT is measured against a direct call with the same.
	FirstToken time.Duration
	// StreamFor is the streaming phase's length: no answer starts after it,
	// and each stream runs at least one.
	StreamFor time.Duration
	// MinAnswers is the fewest answers the streaming phase begins per
	// measurement: it goes on after StreamFor until so many have begun
	// (but for at most 4 × StreamFor), so that a p99 is not one outlier
	// (at 1 stream, 10 s begins about 160). Negative: no minimum.
	MinAnswers int
	// ShortFor is the length of the short-answer phase (1-token answers
	// back to back on every stream).
	ShortFor time.Duration
	// IdleSettle is the wait between the last idle stream being held and
	// the reading of RSS and goroutines.
	IdleSettle time.Duration

	// Quiet says when the machine is quiet enough to measure.
	Quiet Quiet

	// Go is the go command that builds completiond ("go").
	Go string
	// LogLevel is completiond's --log-level (INFO, its default).
	LogLevel string
	// ProfileDir, when set, receives CPU profiles of both servers under the
	// top level's streaming and short-answer load, and heap profiles with
	// its streams held idle, taken after measuring.
	ProfileDir string
	// ProfileFor is how long each profile's load lasts.
	ProfileFor time.Duration
	// Trace, with ProfileDir, also writes a runtime execution trace of each
	// server under the streaming load (beside its CPU profile, for as
	// long): where a first token waits, which a CPU profile cannot show.
	Trace bool
	// Self is the command that runs a role (see RunRole); empty is this
	// executable.
	Self []string
	// Progress receives a line per measurement (nil: none).
	Progress io.Writer

	// Fleet is the fleet benchmark's own configuration (RunFleet).
	Fleet Fleet
	// fleet is set by RunFleet: the run is the fleet benchmark.
	fleet bool
}

// Fleet configures the fleet benchmark (RunFleet): one completiond
// process against Replicas of them sharing one redis-server, in the
// streaming phase. The zero value of a field means its default
// (FleetDefaults).
type Fleet struct {
	// Replicas is the number of completiond processes of the fleet.
	Replicas int
	// ResumeGrace is the resume_grace of every request, to both the
	// single process and the fleet: a resumable Stream, which a fleet's
	// replica runs under a lease (fenced appends, renewals) so that
	// another may take it over, as a fleet's callers ask. Negative: none
	// (the events still go to Redis: a replica with Redis logs every
	// completion there).
	ResumeGrace time.Duration
	// RedisServer is the redis-server command.
	RedisServer string
	// CommitDelay, when not zero, is the replicas' redis.commit_delay
	// instead of the shipped default: a second configuration, to measure
	// what a longer group commit wait trades (fewer, larger writes to
	// Redis for a later event).
	CommitDelay time.Duration
	// SkipUnshared leaves out the replicas without Redis: by default
	// each repetition also measures the fleet's replicas alone, each on
	// its memory, so that the report tells what three processes cost
	// from what sharing Redis costs.
	SkipUnshared bool
	// AttributeFor is the length of the attribution pass at each level:
	// the fleet again under the same load, unmeasured, with Redis's
	// MONITOR on, which tells the commands scripts run from those the
	// replicas send; Redis's own counters do not. Negative: none.
	AttributeFor time.Duration
}

// Quiet says when the machine counts as quiet.
type Quiet struct {
	// MaxBusy is the busy share of all CPUs (0 to 1) at or under which
	// the machine is quiet.
	MaxBusy float64
	// Window is how long each sample of /proc/stat lasts.
	Window time.Duration
	// Timeout is how long to wait for quiet before measuring anyway, with
	// a warning in the report. Negative never waits: one sample only.
	Timeout time.Duration
}

// Defaults is the configuration `make loadbench` runs.
func Defaults() Config {
	return Config{
		Levels: []int{1, 100, 1000, 5000}, Reps: 3, Spread: 100,
		Tokens: 50, TokenRate: 2500, MaxAnswer: 20 * time.Second,
		StreamFor: 10 * time.Second, MinAnswers: 500, ShortFor: 5 * time.Second, IdleSettle: time.Second, ProfileFor: 20 * time.Second,
		Quiet:    Quiet{MaxBusy: 0.10, Window: time.Second, Timeout: 2 * time.Minute},
		Go:       "go",
		LogLevel: "INFO",
	}
}

// FleetDefaults is the configuration `make fleetbench` runs (RunFleet):
// Defaults' streaming phase at 100 and 1 000 streams, a fleet of three.
func FleetDefaults() Config {
	c := Defaults()
	c.Levels, c.Phases, c.Spread = []int{100, 1000}, []string{string(streaming)}, -1
	c.Fleet = Fleet{Replicas: 3, ResumeGrace: time.Minute, RedisServer: "redis-server", AttributeFor: 3 * time.Second}
	return c
}

// withDefaults fills the zero fields from Defaults (FleetDefaults for
// RunFleet).
func (c Config) withDefaults() (Config, error) {
	d := Defaults()
	if c.fleet {
		d = FleetDefaults()
		c.Phases, c.Spread = d.Phases, d.Spread
		c.Fleet.Replicas = or(c.Fleet.Replicas, d.Fleet.Replicas)
		c.Fleet.ResumeGrace = or(c.Fleet.ResumeGrace, d.Fleet.ResumeGrace)
		c.Fleet.RedisServer = or(c.Fleet.RedisServer, d.Fleet.RedisServer)
		c.Fleet.AttributeFor = or(c.Fleet.AttributeFor, d.Fleet.AttributeFor)
	}
	if len(c.Levels) == 0 {
		c.Levels = d.Levels
	}
	c.Reps = or(c.Reps, d.Reps)
	c.Tokens = or(c.Tokens, d.Tokens)
	c.TokenRate = or(c.TokenRate, d.TokenRate)
	c.MaxAnswer = or(c.MaxAnswer, d.MaxAnswer)
	c.Spread = or(c.Spread, d.Spread)
	c.StreamFor = or(c.StreamFor, d.StreamFor)
	c.MinAnswers = or(c.MinAnswers, d.MinAnswers)
	c.ShortFor = or(c.ShortFor, d.ShortFor)
	c.IdleSettle = or(c.IdleSettle, d.IdleSettle)
	c.ProfileFor = or(c.ProfileFor, d.ProfileFor)
	c.Quiet.MaxBusy = or(c.Quiet.MaxBusy, d.Quiet.MaxBusy)
	c.Quiet.Window = or(c.Quiet.Window, d.Quiet.Window)
	c.Quiet.Timeout = or(c.Quiet.Timeout, d.Quiet.Timeout)
	c.Go = or(c.Go, d.Go)
	c.LogLevel = or(c.LogLevel, d.LogLevel)
	if len(c.Self) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return c, err
		}
		c.Self = []string{exe}
	}
	return c, c.validate()
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func (c Config) validate() error {
	for _, l := range c.Levels {
		if l < 1 {
			return fmt.Errorf("levels must be positive, got %d", l)
		}
	}
	for _, p := range c.Phases {
		if !slices.Contains(Phases, p) {
			return fmt.Errorf("unknown phase %q (want some of %v)", p, Phases)
		}
	}
	if c.fleet && c.Fleet.Replicas < 1 {
		return fmt.Errorf("a fleet needs at least one replica, got %d", c.Fleet.Replicas)
	}
	if c.StreamsPerChannel < 0 {
		return fmt.Errorf("streams per channel must not be negative, got %d", c.StreamsPerChannel)
	}
	if c.Reps < 1 || c.Tokens < 1 || c.TokenRate <= 0 || c.TokenDelay < 0 || c.FirstToken < 0 || c.MaxAnswer < 0 {
		return fmt.Errorf("reps, tokens and token rate must be positive, delays not negative")
	}
	return nil
}

// phases are the phases to measure, in the order of Phases.
func (c Config) phases() []phase {
	var out []phase
	for _, p := range Phases {
		if len(c.Phases) == 0 || slices.Contains(c.Phases, p) {
			out = append(out, phase(p))
		}
	}
	return out
}

// streamSpec is the streaming phase's answer at level: Tokens paced so that
// all the streams together send about TokenRate tokens per second, fewer
// when so many would last longer than MaxAnswer.
func (c Config) streamSpec(level int) mock.Spec {
	d := c.TokenDelay
	if d == 0 {
		d = time.Duration(math.Round(float64(level) / c.TokenRate * float64(time.Second)))
	}
	tokens := c.Tokens
	if c.MaxAnswer > 0 && d > 0 {
		tokens = max(1, min(tokens, 1+int((c.MaxAnswer-c.FirstToken)/d)))
	}
	return mock.Spec{Tokens: tokens, FirstToken: c.FirstToken, TokenDelay: d}
}

// spreads reports whether the second configuration (Spread) is measured
// at level in phase ph: in the streaming phase, where the time to first
// token is, at the levels that need more than one of its channels.
func (c Config) spreads(level int, ph phase) bool {
	return ph == streaming && c.Spread > 0 && c.StreamsPerChannel != c.Spread && channels(level, c.Spread) > channels(level, c.StreamsPerChannel)
}

// answerTime is how long one answer of spec lasts at the upstream.
func answerTime(s mock.Spec) time.Duration {
	return s.FirstToken + time.Duration(s.Tokens-1)*s.TokenDelay
}

// minAnswersText says the streaming phase's minimum, for the report.
func (c Config) minAnswersText() string {
	if c.MinAnswers <= 0 {
		return ""
	}
	return fmt.Sprintf(" and until %d have begun (at most %v)", c.MinAnswers, 4*c.StreamFor)
}
