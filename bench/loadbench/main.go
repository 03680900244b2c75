// Command loadbench measures completiond against a bare gRPC relay and a
// direct openai-go call, each server in a process of its own, under a mock
// OpenAI upstream, at several numbers of concurrent streams, and prints a
// markdown table: added time to first token, CPU per 1 000 tokens, RSS and
// goroutines per idle stream, and short answers per second, each also as a
// ratio to the relay measured in the same run. See bench/harness and the
// README's "Performance".
//
// With "fleet" as its first argument it measures instead one completiond
// process against a fleet of completiond replicas sharing one
// redis-server, in the streaming phase, with what Redis counted: its CPU
// and commands per 1 000 tokens (harness.RunFleet).
//
// Run it from the repository (it builds cmd/completiond): make loadbench
// or make fleetbench, or go run ./bench/loadbench -h, go run
// ./bench/loadbench fleet -h.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/completiond/completiond/bench/harness"
)

func main() {
	if ran, err := harness.RunRole(os.Args[1:]); ran {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		os.Exit(1)
	}
}

// run parses args, runs the benchmark (the fleet benchmark when args
// begin with "fleet"), and writes the table to stdout and to the -out
// file.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	bench, parseArgs := harness.Run, parse
	if len(args) > 0 && args[0] == "fleet" {
		bench, parseArgs, args = harness.RunFleet, parseFleet, args[1:]
	}
	cfg, out, err := parseArgs(args, stderr)
	if err != nil {
		return err
	}
	report, err := bench(ctx, cfg)
	if err != nil {
		return err
	}
	md := report.Markdown()
	fmt.Fprint(stdout, md)
	if out != "" {
		if err := os.WriteFile(out, []byte(md), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "loadbench: wrote %s\n", out)
	}
	if n := report.Errors(); n > 0 {
		return fmt.Errorf("%d calls failed: see the table's notes", n)
	}
	return nil
}

func parse(args []string, stderr io.Writer) (harness.Config, string, error) {
	cfg := harness.Defaults()
	fs := flag.NewFlagSet("loadbench", flag.ContinueOnError)
	finish := streamFlags(fs, &cfg, stderr)
	phases := fs.String("phases", strings.Join(harness.Phases, ","), "phases to measure, comma-separated: stream (paced answers), short (1-token answers), idle (held streams)")
	fs.IntVar(&cfg.StreamsPerChannel, "streams-per-channel", cfg.StreamsPerChannel, "streams that share one gRPC channel to a server (0: one channel for all the streams of a level, as a caller with a gRPC library's defaults has)")
	fs.IntVar(&cfg.Spread, "spread", cfg.Spread, "second configuration: completiond with this many streams per channel, in the streaming phase at the levels above it, to compare the time to first token (negative: none)")
	fs.DurationVar(&cfg.ShortFor, "short-for", cfg.ShortFor, "short-answer phase length")
	fs.DurationVar(&cfg.IdleSettle, "idle-settle", cfg.IdleSettle, "idle phase: wait after the last stream is held before reading RSS and goroutines")
	fs.StringVar(&cfg.ProfileDir, "profile-dir", "", "after measuring, write CPU profiles (streaming, short answers) and heap profiles (idle streams) of both servers at the top level here")
	fs.DurationVar(&cfg.ProfileFor, "profile-for", cfg.ProfileFor, "length of each profile's load (with -profile-dir)")
	fs.BoolVar(&cfg.Trace, "trace", false, "with -profile-dir: also write a runtime execution trace of each server under the streaming load (go tool trace)")
	out, err := finish(args)
	cfg.Phases = strings.Split(*phases, ",")
	return cfg, out, err
}

// parseFleet parses the flags of loadbench fleet.
func parseFleet(args []string, stderr io.Writer) (harness.Config, string, error) {
	cfg := harness.FleetDefaults()
	fs := flag.NewFlagSet("loadbench fleet", flag.ContinueOnError)
	finish := streamFlags(fs, &cfg, stderr)
	fs.IntVar(&cfg.Fleet.Replicas, "replicas", cfg.Fleet.Replicas, "completiond replicas of the fleet, sharing one redis-server")
	fs.DurationVar(&cfg.Fleet.ResumeGrace, "resume-grace", cfg.Fleet.ResumeGrace, "every request's resume_grace: a resumable Stream, run by a fleet replica under a lease (negative: none)")
	fs.DurationVar(&cfg.Fleet.CommitDelay, "commit-delay", 0, "the replicas' redis.commit_delay, the longest their group commit waits for more events (0: the shipped default; a second configuration)")
	fs.StringVar(&cfg.Fleet.RedisServer, "redis-server", cfg.Fleet.RedisServer, "the redis-server command")
	fs.StringVar(&cfg.ProfileDir, "profile-dir", "", "after measuring, write CPU profiles of completiond alone and of the fleet's first replica, streaming at the top level, here")
	fs.DurationVar(&cfg.ProfileFor, "profile-for", cfg.ProfileFor, "length of each profile's load (with -profile-dir)")
	fs.BoolVar(&cfg.Trace, "trace", false, "with -profile-dir: also write a runtime execution trace of each (go tool trace)")
	unshared := fs.Bool("unshared", true, "in each repetition, also measure the fleet's replicas without Redis (each on its memory): what running several processes costs, apart from what sharing Redis costs")
	fs.DurationVar(&cfg.Fleet.AttributeFor, "attribute-for", cfg.Fleet.AttributeFor, "at each level, the fleet again under the same load for this long with Redis's MONITOR on, unmeasured, to tell the commands scripts run from those the replicas send (negative: none)")
	out, err := finish(args)
	cfg.Fleet.SkipUnshared = !*unshared
	return cfg, out, err
}

// streamFlags defines on fs the flags of the streaming phase, the levels,
// repetitions and the machine, into cfg; finish parses args and returns
// the -out file.
func streamFlags(fs *flag.FlagSet, cfg *harness.Config, stderr io.Writer) (finish func(args []string) (string, error)) {
	cfg.Progress = stderr
	fs.SetOutput(stderr)
	levels := fs.String("levels", joinInts(cfg.Levels), "concurrent streams to measure, comma-separated")
	fs.IntVar(&cfg.Reps, "reps", cfg.Reps, "interleaved repetitions per level")
	fs.DurationVar(&cfg.MaxAnswer, "max-answer", cfg.MaxAnswer, "streaming phase: the longest an answer may last at the upstream; fewer tokens at the levels where -tokens at their pace would last longer")
	fs.IntVar(&cfg.Tokens, "tokens", cfg.Tokens, "tokens per answer in the streaming phase")
	fs.Float64Var(&cfg.TokenRate, "token-rate", cfg.TokenRate, "streaming phase: tokens per second over all streams together (paces each stream)")
	fs.DurationVar(&cfg.TokenDelay, "token-delay", 0, "streaming phase: wait between two tokens of a stream, instead of -token-rate's")
	fs.DurationVar(&cfg.FirstToken, "ttft", cfg.FirstToken, "the upstream's time to first token")
	fs.DurationVar(&cfg.StreamFor, "stream-for", cfg.StreamFor, "streaming phase length (answers begun)")
	fs.IntVar(&cfg.MinAnswers, "min-answers", cfg.MinAnswers, "streaming phase: go on after -stream-for until this many answers have begun (at most 4 × -stream-for; negative: no minimum)")
	fs.Float64Var(&cfg.Quiet.MaxBusy, "quiet-busy", cfg.Quiet.MaxBusy, "the machine is quiet at or under this busy share of all CPUs (0-1)")
	fs.DurationVar(&cfg.Quiet.Timeout, "quiet-timeout", cfg.Quiet.Timeout, "wait this long for a quiet machine, then measure with a warning (negative: never wait)")
	fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "completiond's --log-level")
	out := fs.String("out", "", "also write the table to this file")
	return func(args []string) (string, error) {
		if err := fs.Parse(args); err != nil {
			return "", err
		}
		var err error
		cfg.Levels, err = parseInts(*levels)
		return *out, err
	}
}

func parseInts(s string) ([]int, error) {
	var v []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("-levels %q: %w", s, err)
		}
		v = append(v, n)
	}
	return v, nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
