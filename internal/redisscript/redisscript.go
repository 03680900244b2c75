package redisscript

import (
	"context"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Table is a package's table of Redis key names: the key each name stands
// for, built from the subject a script runs on (a completion's id, a
// route, an API key's name). A key that does not depend on the subject
// ignores it.
type Table map[string]func(subject string) string

// Fixed is the Table entry of a key that does not depend on the subject.
func Fixed(key string) func(string) string { return func(string) string { return key } }

// Script is one Lua script of a package, with the keys it declares.
type Script struct {
	name     string
	src      string
	lua      *redis.Script
	keyNames []string // every name, the repeated ones too
	keys     []func(string) string
	each     []func(string) string // the keys repeated per Group
	// args and argsEach count its arguments declared once and per group.
	args, argsEach int
}

// Group is one repetition of the names a script declares after "|": the
// subject its keys are built for, and its arguments.
type Group struct {
	Subject string
	Args    []any
}

var nameList = regexp.MustCompile(`^-- (KEYS|ARGV):((?: [A-Za-z_][A-Za-z0-9_]*)*)(?: \|((?: [A-Za-z_][A-Za-z0-9_]*)+))?\s*$`)

// Load reads the script file from fsys and binds the key names of its
// first line to table. It panics when the file is missing, its first two
// lines are not the KEYS and ARGV lines, or a key is not in table: scripts
// are loaded when their package is, and such a script is a bug that every
// test of the package then reports.
func Load(fsys fs.FS, file string, table Table) *Script {
	b, err := fs.ReadFile(fsys, file)
	if err != nil {
		panic(fmt.Sprintf("redisscript: %v", err))
	}
	src, names, each, argc, err := bind(string(b))
	if err != nil {
		panic(fmt.Sprintf("redisscript: %s: %v", file, err))
	}
	s := &Script{name: file, src: src, lua: redis.NewScript(src), keyNames: append(slices.Clip(names), each...),
		args: argc[0], argsEach: argc[1]}
	s.keys = lookUp(file, names, table)
	s.each = lookUp(file, each, table)
	return s
}

// lookUp is the table's entry of each name; it panics on a name the table
// lacks.
func lookUp(file string, names []string, table Table) []func(string) string {
	var out []func(string) string
	for _, n := range names {
		k, ok := table[n]
		if !ok {
			panic(fmt.Sprintf("redisscript: %s: key %s is not in the table", file, n))
		}
		out = append(out, k)
	}
	return out
}

// bind replaces the KEYS and ARGV lines of src with the Lua that binds
// their names, and returns the key names in declaration order: those
// bound once, and those repeated per group (after "|"); and how many
// arguments are declared once and per group. The two lines repeat names
// together or not at all.
func bind(src string) (string, []string, []string, [2]int, error) {
	var argc [2]int
	lines := strings.SplitN(src, "\n", 3)
	if len(lines) < 3 {
		return "", nil, nil, argc, fmt.Errorf("want a KEYS line and an ARGV line first")
	}
	var keys, each []string
	repeats := 0
	for i, want := range []string{"KEYS", "ARGV"} {
		m := nameList.FindStringSubmatch(lines[i])
		if m == nil || m[1] != want {
			return "", nil, nil, argc, fmt.Errorf("line %d: want %q followed by names", i+1, "-- "+want+":")
		}
		names, group := strings.Fields(m[2]), strings.Fields(m[3])
		if want == "KEYS" {
			keys, each = names, group
		} else {
			argc = [2]int{len(names), len(group)}
		}
		if len(group) > 0 {
			repeats++
		}
		lines[i] = binding(names, group, want)
	}
	if repeats == 1 {
		return "", nil, nil, argc, fmt.Errorf("a group (|) in one of the KEYS and ARGV lines only")
	}
	return strings.Join(lines, "\n"), keys, each, argc, nil
}

// binding is one line of Lua: local a, b = ARR[1], ARR[2], then what
// reads the repeated names (grouping); a comment when there are no names,
// so that the line numbers stay the file's.
func binding(names, group []string, arr string) string {
	var parts []string
	if len(names) > 0 {
		idx := make([]string, len(names))
		for i := range names {
			idx[i] = fmt.Sprintf("%s[%d]", arr, i+1)
		}
		parts = append(parts, "local "+strings.Join(names, ", ")+" = "+strings.Join(idx, ", "))
	}
	parts = append(parts, grouping(names, group, arr)...)
	if len(parts) == 0 {
		return "-- no " + arr
	}
	return strings.Join(parts, "; ")
}

// grouping is the Lua that reads the repeated names of arr: ARR_OF(i),
// the values of group i, and with KEYS, GROUPS, how many groups there are.
func grouping(names, group []string, arr string) []string {
	if len(group) == 0 {
		return nil
	}
	n, k := len(names), len(group)
	idx := make([]string, k)
	for i := range group {
		idx[i] = fmt.Sprintf("%s[b + %d]", arr, i+1)
	}
	out := []string{fmt.Sprintf("local function %s_OF(i) local b = %d + %d * (i - 1) return %s end", arr, n, k, strings.Join(idx, ", "))}
	if arr == "KEYS" {
		out = append(out, fmt.Sprintf("local GROUPS = (#KEYS - %d) / %d", n, k))
	}
	return out
}

// Name is the script's file name.
func (s *Script) Name() string { return s.name }

// Keys are the keys the script declares, for subject.
func (s *Script) Keys(subject string) []string {
	out := make([]string, len(s.keys))
	for i, k := range s.keys {
		out[i] = k(subject)
	}
	return out
}

// KeysOf are the keys of a script with groups: those declared once, for
// the first group's subject (the groups of one call share those keys: on
// a Redis Cluster, one slot), then each group's, for its subject.
func (s *Script) KeysOf(groups []Group) []string {
	subject := ""
	if len(groups) > 0 {
		subject = groups[0].Subject
	}
	out := s.Keys(subject)
	for _, g := range groups {
		for _, k := range s.each {
			out = append(out, k(g.Subject))
		}
	}
	return out
}

// argsOf are args, then each group's arguments.
func argsOf(args []any, groups []Group) []any {
	out := slices.Clip(args)
	for _, g := range groups {
		out = append(out, g.Args...)
	}
	return out
}

// RunGroups runs a script with groups, as Run does: args are the
// arguments declared once, and each group adds its keys and arguments.
func (s *Script) RunGroups(ctx context.Context, c redis.Scripter, args []any, groups []Group) *redis.Cmd {
	return s.lua.Run(ctx, c, s.KeysOf(groups), argsOf(args, groups)...)
}

// GroupKeys are the keys of one group of the script for subject, as
// command arguments: a caller that writes the same subject again keeps
// them, so that adding its group to a Batch builds no key.
func (s *Script) GroupKeys(subject string) []any {
	out := make([]any, len(s.each))
	for i, k := range s.each {
		out[i] = k(subject)
	}
	return out
}

// Batch is one EVALSHA of a script with groups, built in place: the
// command's arguments in one slice sized for its groups, the keys
// declared once from FixedKeys and each group's from GroupKeys, so that a
// call of many groups allocates one slice rather than a slice per group,
// the keys' strings and the copies RunGroups makes. Add fills the groups
// in order; EvalSha queues the call.
type Batch struct {
	s         *Script
	cmd       []any
	key, arg  int // where the next group's keys and arguments go
	groups, n int // groups added, and announced
	err       error
}

// FixedKeys are the keys a script with groups declares once, for
// subject, as command arguments: a caller keeps them for the calls on
// that subject's keys (on a Redis Cluster, its slot), so that a Batch
// builds none.
func (s *Script) FixedKeys(subject string) []any {
	out := make([]any, len(s.keys))
	for i, k := range s.keys {
		out[i] = k(subject)
	}
	return out
}

// Batch starts a call of the script with n groups and args, the
// arguments declared once; fixed are its keys declared once (FixedKeys).
func (s *Script) Batch(fixed []any, n int, args ...any) *Batch {
	b := &Batch{s: s, n: n}
	if len(args) != s.args || len(s.each) == 0 || len(fixed) != len(s.keys) {
		b.err = fmt.Errorf("redisscript: %s: a batch of %d keys and %d arguments declared once, the script declares %d, %d and %d keys per group", s.name, len(fixed), len(args), len(s.keys), s.args, len(s.each))
		return b
	}
	nkeys := len(fixed) + n*len(s.each)
	b.cmd = make([]any, 3+nkeys+s.args+n*s.argsEach)
	b.cmd[0], b.cmd[1], b.cmd[2] = "evalsha", s.lua.Hash(), nkeys
	copy(b.cmd[3:], fixed)
	b.key = 3 + len(fixed)
	b.arg = 3 + nkeys + copy(b.cmd[3+nkeys:], args)
	return b
}

// Add adds the next group: its keys (GroupKeys of its subject) and its
// arguments.
func (b *Batch) Add(keys []any, args ...any) {
	switch {
	case b.err != nil:
		return
	case b.groups == b.n || len(keys) != len(b.s.each) || len(args) != b.s.argsEach:
		b.err = fmt.Errorf("redisscript: %s: group %d of %d with %d keys and %d arguments, want %d and %d", b.s.name, b.groups+1, b.n, len(keys), len(args), len(b.s.each), b.s.argsEach)
		return
	}
	b.key += copy(b.cmd[b.key:], keys)
	b.arg += copy(b.cmd[b.arg:], args)
	b.groups++
}

// EvalSha queues the call in a pipeline (Load the script first: a
// pipeline cannot fall back to EVAL). A batch built wrong (arguments or
// groups that the script does not declare) is not sent: its command
// fails with the error.
func (b *Batch) EvalSha(ctx context.Context, p redis.Pipeliner) *redis.Cmd {
	if b.err == nil && b.groups != b.n {
		b.err = fmt.Errorf("redisscript: %s: %d groups added of %d", b.s.name, b.groups, b.n)
	}
	if b.err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(b.err)
		return cmd
	}
	cmd := redis.NewCmd(ctx, b.cmd...)
	cmd.SetFirstKeyPos(3)
	_ = p.Process(ctx, cmd)
	return cmd
}

// Eval queues the call in a pipeline with the script's source (EVAL),
// which Redis caches as it runs it: for a call that found NOSCRIPT, on
// whichever node its keys are now, without loading the script first.
func (b *Batch) Eval(ctx context.Context, p redis.Pipeliner) *redis.Cmd {
	if b.err != nil {
		return b.EvalSha(ctx, p)
	}
	args := slices.Clone(b.cmd)
	args[0], args[1] = "eval", b.s.src
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	_ = p.Process(ctx, cmd)
	return cmd
}

// Run runs the script on subject's keys: EVALSHA, and EVAL when Redis
// does not have it yet.
func (s *Script) Run(ctx context.Context, c redis.Scripter, subject string, args ...any) *redis.Cmd {
	return s.lua.Run(ctx, c, s.Keys(subject), args...)
}

// EvalSha queues the script on subject's keys in a pipeline; Load it
// first, since a pipeline cannot fall back to EVAL.
func (s *Script) EvalSha(ctx context.Context, p redis.Pipeliner, subject string, args ...any) *redis.Cmd {
	return p.EvalSha(ctx, s.lua.Hash(), s.Keys(subject), args...)
}

// Load loads the script into Redis's script cache.
func (s *Script) Load(ctx context.Context, c redis.Scripter) error {
	return s.lua.Load(ctx, c).Err()
}

// Source is the Lua that Redis runs: the file with its names bound.
func (s *Script) Source() string { return s.src }

// keyCommand finds each Redis command a script calls with a literal name;
// its arguments follow.
var keyCommand = regexp.MustCompile(`redis\.p?call\(\s*'([A-Za-z]+)'\s*,`)

// multiKey are the commands whose every argument is a key; the others
// take one key, their first argument.
var multiKey = map[string]bool{"DEL": true, "EXISTS": true, "UNLINK": true, "TOUCH": true}

// notAKey are the commands whose first argument is not a key.
var notAKey = map[string]bool{"PUBLISH": true}

// Undeclared lists the calls of the script whose key is not one of the
// names it declares: a string built in the script, or a name it did not
// list in its KEYS line. Redis Cluster refuses such a script, and a
// standalone Redis runs it without knowing which keys it touches.
func (s *Script) Undeclared() []string {
	declared := map[string]bool{}
	for _, n := range s.keyNames {
		declared[n] = true
	}
	var out []string
	for _, m := range keyCommand.FindAllStringSubmatchIndex(s.src, -1) {
		cmd := strings.ToUpper(s.src[m[2]:m[3]])
		if notAKey[cmd] {
			continue
		}
		args := arguments(s.src[m[1]:])
		if !multiKey[cmd] {
			args = args[:1]
		}
		for _, a := range args {
			if !declared[a] {
				out = append(out, cmd+" "+a)
			}
		}
	}
	return out
}

// arguments splits the argument list that src starts with at its commas,
// up to the parenthesis that closes it (nested calls and strings kept
// whole).
func arguments(src string) []string {
	var args []string
	depth, start, quote := 0, 0, byte(0)
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '(' || c == '{':
			depth++
		case (c == ')' || c == '}') && depth > 0:
			depth--
		case c == ')' || c == ',' && depth == 0:
			args = append(args, strings.TrimSpace(src[start:i]))
			if c == ')' {
				return args
			}
			start = i + 1
		}
	}
	return append(args, strings.TrimSpace(src[start:]))
}

// Audit lists what is wrong with a package's scripts: a call whose key a
// script does not declare (Undeclared), and a .lua file of fsys that none
// of scripts was loaded from, or that two were. A package's test calls it
// with every script it loads.
func Audit(fsys fs.FS, scripts ...*Script) []string {
	var out []string
	loaded := map[string]int{}
	for _, s := range scripts {
		loaded[s.name]++
		for _, u := range s.Undeclared() {
			out = append(out, s.name+": a key it does not declare: "+u)
		}
	}
	_ = fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".lua") && loaded[path] != 1 {
			out = append(out, fmt.Sprintf("%s: loaded %d times, want once", path, loaded[path]))
		}
		return err
	})
	return out
}
