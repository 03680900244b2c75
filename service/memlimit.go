package service

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// MemoryLimit is the memory the process may use, from which the Auto
// limits are derived (config.Limits.Resolve), and where the number comes
// from.
type MemoryLimit struct {
	// Bytes is the limit.
	Bytes int64
	// Source says where it comes from: GOMEMLIMIT, cgroup memory.max,
	// cgroup memory.limit_in_bytes, MemTotal (the machine's memory, when
	// nothing limits the process), or what set it otherwise.
	Source string
}

// ReadMemoryLimit is the smallest of the limits the process runs under:
// GOMEMLIMIT (the Go runtime's soft limit, as runtime/debug.SetMemoryLimit
// reads it), its cgroup's memory.max (v2) or memory.limit_in_bytes (v1),
// and the machine's memory (MemTotal of /proc/meminfo). Without any of
// them (not Linux) it is 1 GiB, marked "unknown".
func ReadMemoryLimit() MemoryLimit {
	return readMemoryLimit(os.ReadFile, debug.SetMemoryLimit(-1))
}

// unknownMemory is the limit assumed when nothing says one.
const unknownMemory = 1 << 30

// readMemoryLimit is ReadMemoryLimit over read (os.ReadFile in the
// process, a map in tests) and the runtime's limit goLimit
// (math.MaxInt64: none).
func readMemoryLimit(read func(string) ([]byte, error), goLimit int64) MemoryLimit {
	best := MemoryLimit{Bytes: math.MaxInt64}
	take := func(n int64, source string) {
		if n > 0 && n < best.Bytes {
			best = MemoryLimit{Bytes: n, Source: source}
		}
	}
	if goLimit < math.MaxInt64 {
		take(goLimit, "GOMEMLIMIT")
	}
	v2, v1 := cgroupPaths(read)
	for _, dir := range v2 {
		if b, err := read(filepath.Join(dir, "memory.max")); err == nil {
			take(parseLimit(b), "cgroup memory.max")
			break
		}
	}
	for _, dir := range v1 {
		if b, err := read(filepath.Join(dir, "memory.limit_in_bytes")); err == nil {
			take(parseLimit(b), "cgroup memory.limit_in_bytes")
			break
		}
	}
	if b, err := read("/proc/meminfo"); err == nil {
		take(memTotal(b), "MemTotal")
	}
	if best.Source == "" {
		return MemoryLimit{Bytes: unknownMemory, Source: "unknown"}
	}
	return best
}

// cgroupPaths are the directories that may hold the process's cgroup
// memory limit, v2 and v1, its own cgroup's first (from
// /proc/self/cgroup), then the mount's root (which is the process's own
// cgroup inside a container with a cgroup namespace).
func cgroupPaths(read func(string) ([]byte, error)) (v2, v1 []string) {
	const root = "/sys/fs/cgroup"
	if b, err := read("/proc/self/cgroup"); err == nil {
		for line := range strings.Lines(string(b)) {
			// hierarchy-ID:controllers:path
			f := strings.SplitN(strings.TrimSpace(line), ":", 3)
			if len(f) != 3 || f[2] == "/" {
				continue
			}
			switch {
			case f[0] == "0" && f[1] == "":
				v2 = append(v2, filepath.Join(root, f[2]))
			case hasController(f[1], "memory"):
				v1 = append(v1, filepath.Join(root, "memory", f[2]))
			}
		}
	}
	return append(v2, root), append(v1, filepath.Join(root, "memory"))
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// parseLimit reads a cgroup limit: bytes, or "max" (v2) or a number near
// the largest (v1, 9223372036854771712) for none, which give 0.
func parseLimit(b []byte) int64 {
	s := strings.TrimSpace(string(b))
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n >= 1<<62 {
		return 0
	}
	return n
}

// memTotal reads MemTotal (kB) of /proc/meminfo, in bytes; 0 without it.
func memTotal(b []byte) int64 {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}
