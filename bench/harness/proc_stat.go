package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc: USER_HZ, 100 on every
// Linux architecture Go supports.
const userHZ = 100

// cpuTime is the CPU time (user and system, all threads, those that
// exited included) process pid used so far, from /proc/<pid>/stat.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: count fields
	// from the last ')'. utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return ticks(ut + st), nil
}

func ticks(n int64) time.Duration { return time.Duration(n) * time.Second / userHZ }

// rss is the resident set size of process pid in bytes, from
// /proc/<pid>/status (VmRSS).
func rss(pid int) (int64, error) { return statusBytes(pid, "VmRSS:") }

// peakRSS is the most the process's resident set has been, in bytes
// (VmHWM of /proc/<pid>/status).
func peakRSS(pid int) (int64, error) { return statusBytes(pid, "VmHWM:") }

// statusBytes reads a field of /proc/<pid>/status given in kB, in bytes.
func statusBytes(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, strings.TrimSuffix(field, ":"))
}

// machineCPU is the machine's CPU time so far, from the first line of
// /proc/stat: busy (user, nice, system, irq, softirq, steal; guest time is
// part of user) and all (busy, idle and iowait).
type machineCPU struct{ busy, all time.Duration }

func readMachineCPU() (machineCPU, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return machineCPU{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var v [8]int64
	for i := range v {
		if v[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return machineCPU{}, fmt.Errorf("/proc/stat: %w", err)
		}
	}
	busy := v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
	return machineCPU{busy: ticks(busy), all: ticks(busy + v[3] + v[4])}, nil
}

// sub is the CPU time between m0 and m.
func (m machineCPU) sub(m0 machineCPU) machineCPU {
	return machineCPU{busy: m.busy - m0.busy, all: m.all - m0.all}
}

// busyShare is the share of the machine that was busy, 0 to 1.
func (m machineCPU) busyShare() float64 {
	if m.all <= 0 {
		return 0
	}
	return float64(m.busy) / float64(m.all)
}

// cpuModel is the first "model name" of /proc/cpuinfo with the number of
// CPUs Go may use, e.g. "AMD EPYC × 2".
func cpuModel() string {
	name := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				name = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s × %d", name, runtime.NumCPU())
}
