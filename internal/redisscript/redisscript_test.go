package redisscript

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/completiond/completiond/internal/redistest"
)

var table = Table{
	"A": Fixed("k:a"),
	"B": func(s string) string { return "k:{" + s + "}:b" },
}

func TestBind(t *testing.T) {
	for _, tc := range []struct {
		name, src, want, err string
		keys                 []string
		argc                 [2]int
	}{
		{
			name: "keys and arguments bound by name, line for line",
			src:  "-- KEYS: B A\n-- ARGV: x y\nreturn x\n",
			want: "local B, A = KEYS[1], KEYS[2]\nlocal x, y = ARGV[1], ARGV[2]\nreturn x\n",
			keys: []string{"B", "A"},
			argc: [2]int{2, 0},
		},
		{
			name: "no arguments keeps the line",
			src:  "-- KEYS: A\n-- ARGV:\nreturn 1",
			want: "local A = KEYS[1]\n-- no ARGV\nreturn 1",
			keys: []string{"A"},
		},
		{
			name: "names repeated per group, read by KEYS_OF and ARGV_OF",
			src:  "-- KEYS: A | B\n-- ARGV: x | y z\nreturn GROUPS\n",
			want: "local A = KEYS[1]; local function KEYS_OF(i) local b = 1 + 1 * (i - 1) return KEYS[b + 1] end; local GROUPS = (#KEYS - 1) / 1\n" +
				"local x = ARGV[1]; local function ARGV_OF(i) local b = 1 + 2 * (i - 1) return ARGV[b + 1], ARGV[b + 2] end\nreturn GROUPS\n",
			keys: []string{"A"},
			argc: [2]int{1, 2},
		},
		{
			name: "only names repeated",
			src:  "-- KEYS: | B\n-- ARGV: | y\nreturn 1\n",
			want: "local function KEYS_OF(i) local b = 0 + 1 * (i - 1) return KEYS[b + 1] end; local GROUPS = (#KEYS - 0) / 1\n" +
				"local function ARGV_OF(i) local b = 0 + 1 * (i - 1) return ARGV[b + 1] end\nreturn 1\n",
			argc: [2]int{0, 1},
		},
		{name: "a group of keys without one of arguments", src: "-- KEYS: A | B\n-- ARGV: x\nreturn 1", err: "one of the KEYS and ARGV lines only"},
		{name: "an empty group", src: "-- KEYS: A |\n-- ARGV: x |\nreturn 1", err: "line 1"},
		{name: "no KEYS line", src: "-- ARGV: x\n-- KEYS: A\nreturn 1", err: "line 1"},
		{name: "no ARGV line", src: "-- KEYS: A\nreturn 1\n", err: "line 2"},
		{name: "a name that is not one", src: "-- KEYS: A-B\n-- ARGV:\n", err: "line 1"},
		{name: "too short", src: "-- KEYS: A", err: "want a KEYS line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, keys, _, argc, err := bind(tc.src)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want || !slices.Equal(keys, tc.keys) || argc != tc.argc {
				t.Fatalf("bind = %q, %v, %v, %v; want %q, %v, %v", got, keys, argc, err, tc.want, tc.keys, tc.argc)
			}
		})
	}
}

func TestLoadPanicsOnAKeyNotInTheTable(t *testing.T) {
	fsys := fstest.MapFS{"x.lua": {Data: []byte("-- KEYS: A C\n-- ARGV:\nreturn 1\n")}}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "key C is not in the table") {
			t.Fatalf("recover() = %v", r)
		}
	}()
	Load(fsys, "x.lua", table)
}

func TestKeysInDeclarationOrder(t *testing.T) {
	fsys := fstest.MapFS{"x.lua": {Data: []byte("-- KEYS: B A\n-- ARGV:\nreturn 1\n")}}
	s := Load(fsys, "x.lua", table)
	if got, want := s.Keys("id7"), []string{"k:{id7}:b", "k:a"}; !slices.Equal(got, want) {
		t.Fatalf("Keys = %v, want %v", got, want)
	}
}

func TestUndeclared(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"every key declared", "-- KEYS: A B\n-- ARGV: id\nredis.call('DEL', A, B)\nredis.call('ZADD', A, 1, id)\nredis.call('PUBLISH', id, 'x')\n", nil},
		{"a key built in the script", "-- KEYS: A\n-- ARGV: id\nredis.call('DEL', 'k:{' .. id .. '}:b')\n", []string{"DEL 'k:{' .. id .. '}:b'"}},
		{"a literal key", "-- KEYS: A\n-- ARGV:\nredis.call('INCR', 'k:seq')\n", []string{"INCR 'k:seq'"}},
		{"the second of two keys", "-- KEYS: A\n-- ARGV: id\nredis.pcall('DEL', A, other)\n", []string{"DEL other"}},
		{"a call inside a call", "-- KEYS: A\n-- ARGV: id\nredis.call('ZADD', A, redis.call('INCR', 'k:seq') % 10, id)\n", []string{"INCR 'k:seq'"}},
		{"a key built with a call", "-- KEYS: A\n-- ARGV: id\nredis.call('SET', string.format('k:%s', id), 1)\n", []string{"SET string.format('k:%s', id)"}},
		{"an argument used as a key", "-- KEYS: A\n-- ARGV: id\nredis.call('GET', id)\n", []string{"GET id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Load(fstest.MapFS{"x.lua": {Data: []byte(tc.src)}}, "x.lua", table)
			if got := s.Undeclared(); !slices.Equal(got, tc.want) {
				t.Fatalf("Undeclared = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRunBindsKeysAndArguments runs a script on a real Redis: EVAL the
// first time, EVALSHA in a pipeline after Load.
func TestRunBindsKeysAndArguments(t *testing.T) {
	rdb, ctx := newRedis(t)
	src := "-- KEYS: A B\n-- ARGV: x y\nredis.call('SET', B, x .. y)\nreturn {A, B, redis.call('GET', B)}\n"
	s := Load(fstest.MapFS{"x.lua": {Data: []byte(src)}}, "x.lua", table)
	got, err := s.Run(ctx, rdb, "c1", "p", "q").StringSlice()
	if want := []string{"k:a", "k:{c1}:b", "pq"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("Run = %v, %v; want %v", got, err, want)
	}
	if err := s.Load(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	pipe := rdb.Pipeline()
	cmd := s.EvalSha(ctx, pipe, "c2", "r", "s")
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := cmd.StringSlice(); err != nil || got[2] != "rs" || got[1] != "k:{c2}:b" {
		t.Fatalf("EvalSha = %v, %v", got, err)
	}
}

// TestRunGroups runs a script whose names repeat per group on a real
// Redis: each group's keys are built for its subject, in order, after the
// keys declared once.
func TestRunGroups(t *testing.T) {
	rdb, ctx := newRedis(t)
	src := "-- KEYS: A | B\n-- ARGV: sep | x y\nlocal out = {A}\n" +
		"for i = 1, GROUPS do\n  local B = KEYS_OF(i)\n  local x, y = ARGV_OF(i)\n  redis.call('SET', B, x .. sep .. y)\n  table.insert(out, B .. '=' .. redis.call('GET', B))\nend\nreturn out\n"
	s := Load(fstest.MapFS{"x.lua": {Data: []byte(src)}}, "x.lua", table)
	groups := []Group{{Subject: "c1", Args: []any{"p", "q"}}, {Subject: "c2", Args: []any{"r", "s"}}}
	want := []string{"k:a", "k:{c1}:b=p-q", "k:{c2}:b=r-s"}
	if got, err := s.RunGroups(ctx, rdb, []any{"-"}, groups).StringSlice(); err != nil || !slices.Equal(got, want) {
		t.Fatalf("RunGroups = %v, %v; want %v", got, err, want)
	}
	if got := s.Undeclared(); len(got) != 0 {
		t.Fatalf("Undeclared = %q: the names of a group are declared", got)
	}
	if got, err := s.RunGroups(ctx, rdb, []any{"-"}, nil).StringSlice(); err != nil || !slices.Equal(got, []string{"k:a"}) {
		t.Fatalf("RunGroups with no group = %v, %v", got, err)
	}
}

// TestBatch builds calls of a script with groups in place and runs them
// on a real Redis: the same answers as RunGroups, and a batch built wrong
// fails its command without sending it.
func TestBatch(t *testing.T) {
	rdb, ctx := newRedis(t)
	src := "-- KEYS: A | B\n-- ARGV: sep | x y\nlocal out = {A}\n" +
		"for i = 1, GROUPS do\n  local B = KEYS_OF(i)\n  local x, y = ARGV_OF(i)\n  redis.call('SET', B, x .. sep .. y)\n  table.insert(out, B .. '=' .. redis.call('GET', B))\nend\nreturn out\n"
	s := Load(fstest.MapFS{"x.lua": {Data: []byte(src)}}, "x.lua", table)
	if err := s.Load(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	c1, c2, fixed := s.GroupKeys("c1"), s.GroupKeys("c2"), s.FixedKeys("c1")
	for _, tc := range []struct {
		name  string
		build func() *Batch
		want  []string
		err   string
	}{
		{"two groups", func() *Batch {
			b := s.Batch(fixed, 2, "-")
			b.Add(c1, "p", []byte("q"))
			b.Add(c2, "r", 7)
			return b
		}, []string{"k:a", "k:{c1}:b=p-q", "k:{c2}:b=r-7"}, ""},
		{"no group", func() *Batch { return s.Batch(fixed, 0, "+") }, []string{"k:a"}, ""},
		{"fewer groups than announced", func() *Batch {
			b := s.Batch(fixed, 2, "-")
			b.Add(c1, "p", "q")
			return b
		}, nil, "1 groups added of 2"},
		{"more groups than announced", func() *Batch {
			b := s.Batch(fixed, 1, "-")
			b.Add(c1, "p", "q")
			b.Add(c2, "r", "s")
			return b
		}, nil, "group 2 of 1"},
		{"a group's arguments short", func() *Batch {
			b := s.Batch(fixed, 1, "-")
			b.Add(c1, "p")
			return b
		}, nil, "1 arguments, want 1 and 2"},
		{"arguments declared once missing", func() *Batch { return s.Batch(fixed, 1) }, nil, "a batch of 1 keys and 0 arguments"},
		{"keys declared once missing", func() *Batch { return s.Batch(nil, 1, "-") }, nil, "a batch of 0 keys and 1 arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pipe := rdb.Pipeline()
			cmd := tc.build().EvalSha(ctx, pipe)
			queued := pipe.Len()
			if _, err := pipe.Exec(ctx); err != nil && tc.err == "" {
				t.Fatal(err)
			}
			got, err := cmd.StringSlice()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || queued != 0 {
					t.Fatalf("err = %v with %d commands queued, want %q and none", err, queued, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("EvalSha = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestBatchEval: a batch sent with its script's source runs on a Redis
// that lacks the script (NOSCRIPT to EvalSha), and leaves it cached there;
// a batch built wrong is not sent either way.
func TestBatchEval(t *testing.T) {
	rdb, ctx := newRedis(t)
	src := "-- KEYS: A | B\n-- ARGV: sep | x\nlocal out = {A}\n" +
		"for i = 1, GROUPS do\n  local B = KEYS_OF(i)\n  local x = ARGV_OF(i)\n  table.insert(out, B .. sep .. x)\nend\nreturn out\n"
	s := Load(fstest.MapFS{"x.lua": {Data: []byte(src)}}, "x.lua", table)
	run := func(send func(*Batch, redis.Pipeliner) *redis.Cmd, groups int) ([]string, error) {
		b := s.Batch(s.FixedKeys("c1"), 1, "=")
		for range groups {
			b.Add(s.GroupKeys("c1"), "v")
		}
		pipe := rdb.Pipeline()
		cmd := send(b, pipe)
		_, _ = pipe.Exec(ctx)
		return cmd.StringSlice()
	}
	evalSha := func(b *Batch, p redis.Pipeliner) *redis.Cmd { return b.EvalSha(ctx, p) }
	eval := func(b *Batch, p redis.Pipeliner) *redis.Cmd { return b.Eval(ctx, p) }
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := run(evalSha, 1); !redis.HasErrorPrefix(err, "NOSCRIPT") {
		t.Fatalf("EvalSha on a Redis without the script: %v, want NOSCRIPT", err)
	}
	want := []string{"k:a", "k:{c1}:b=v"}
	if got, err := run(eval, 1); err != nil || !slices.Equal(got, want) {
		t.Fatalf("Eval = %v, %v; want %v", got, err, want)
	}
	if got, err := run(evalSha, 1); err != nil || !slices.Equal(got, want) {
		t.Fatalf("EvalSha after Eval = %v, %v; want %v (the script cached)", got, err, want)
	}
	if _, err := run(eval, 2); err == nil || !strings.Contains(err.Error(), "group 2 of 1") {
		t.Fatalf("Eval of a batch built wrong: %v", err)
	}
}

// TestErrorLinesAreTheFiles: Redis reports an error on the file's line.
func TestErrorLinesAreTheFiles(t *testing.T) {
	rdb, ctx := newRedis(t)
	src := "-- KEYS: A\n-- ARGV:\nlocal x = 1\nreturn redis.call('NOSUCHCOMMAND', A)\n"
	err := Load(fstest.MapFS{"x.lua": {Data: []byte(src)}}, "x.lua", table).Run(ctx, rdb, "c").Err()
	if err == nil || !strings.Contains(err.Error(), ":4") {
		t.Fatalf("err = %v, want one on line 4", err)
	}
}

func TestAudit(t *testing.T) {
	fsys := fstest.MapFS{
		"lua/ok.lua":     {Data: []byte("-- KEYS: A\n-- ARGV:\nreturn redis.call('GET', A)\n")},
		"lua/bad.lua":    {Data: []byte("-- KEYS: A\n-- ARGV: id\nreturn redis.call('GET', 'k:' .. id)\n")},
		"lua/unused.lua": {Data: []byte("-- KEYS:\n-- ARGV:\nreturn 1\n")},
	}
	ok, bad := Load(fsys, "lua/ok.lua", table), Load(fsys, "lua/bad.lua", table)
	got := Audit(fsys, ok, bad, ok)
	want := []string{
		"lua/bad.lua: a key it does not declare: GET 'k:' .. id",
		"lua/ok.lua: loaded 2 times, want once",
		"lua/unused.lua: loaded 0 times, want once",
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("Audit =\n%q\nwant\n%q", got, want)
	}
}

// newRedis is a client of a real redis-server and a context bounded for a
// test.
func newRedis(t *testing.T) (*redis.Client, context.Context) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(t)})
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return rdb, ctx
}
