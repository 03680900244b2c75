package service

import (
	"io/fs"
	"math"
	"testing"
)

// TestReadMemoryLimit: the memory limit is the least of GOMEMLIMIT, the
// process's cgroup limit (v2, v1) and the machine's MemTotal; a cgroup
// without a limit says nothing; with nothing at all, 1 GiB, unknown.
func TestReadMemoryLimit(t *testing.T) {
	const (
		gib     = 1 << 30
		meminfo = "MemTotal:       16384000 kB\nMemFree:         1000 kB\n"
		total   = 16384000 << 10
	)
	for _, tc := range []struct {
		name    string
		files   map[string]string
		goLimit int64
		want    MemoryLimit
	}{
		{"the machine only", map[string]string{"/proc/meminfo": meminfo}, math.MaxInt64,
			MemoryLimit{total, "MemTotal"}},
		{"cgroup v2 of the process", map[string]string{
			"/proc/self/cgroup": "0::/kubepods/pod1/c1\n", "/sys/fs/cgroup/kubepods/pod1/c1/memory.max": "1073741824\n",
			"/proc/meminfo": meminfo}, math.MaxInt64, MemoryLimit{gib, "cgroup memory.max"}},
		{"cgroup v2 at the namespace's root", map[string]string{
			"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/memory.max": "536870912", "/proc/meminfo": meminfo},
			math.MaxInt64, MemoryLimit{gib / 2, "cgroup memory.max"}},
		{"cgroup v2 without a limit", map[string]string{
			"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/memory.max": "max\n", "/proc/meminfo": meminfo},
			math.MaxInt64, MemoryLimit{total, "MemTotal"}},
		{"cgroup v1", map[string]string{
			"/proc/self/cgroup": "4:memory:/docker/abc\n3:cpu:/docker/abc\n", "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "2147483648",
			"/proc/meminfo": meminfo}, math.MaxInt64, MemoryLimit{2 * gib, "cgroup memory.limit_in_bytes"}},
		{"cgroup v1 without a limit", map[string]string{
			"/proc/self/cgroup": "4:memory:/\n", "/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712",
			"/proc/meminfo": meminfo}, math.MaxInt64, MemoryLimit{total, "MemTotal"}},
		{"GOMEMLIMIT under the cgroup's", map[string]string{
			"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/memory.max": "1073741824", "/proc/meminfo": meminfo},
			gib / 4, MemoryLimit{gib / 4, "GOMEMLIMIT"}},
		{"nothing known", nil, math.MaxInt64, MemoryLimit{1 << 30, "unknown"}},
	} {
		read := func(name string) ([]byte, error) {
			if s, ok := tc.files[name]; ok {
				return []byte(s), nil
			}
			return nil, fs.ErrNotExist
		}
		if got := readMemoryLimit(read, tc.goLimit); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
