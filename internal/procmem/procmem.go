// Package procmem measures a daemon's memory for benchmarks: its resident
// set (and peak) from /proc, and its Go heap in use from its Prometheus
// /metrics.
package procmem

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// Memory is a daemon's resident set and Go heap in use.
type Memory struct {
	RSSKiB, PeakKiB int // VmRSS, VmHWM
	HeapBytes       float64
}

// RSSMiB is the resident set in MiB.
func (m Memory) RSSMiB() float64 { return float64(m.RSSKiB) / 1024 }

// PeakMiB is the peak resident set in MiB.
func (m Memory) PeakMiB() float64 { return float64(m.PeakKiB) / 1024 }

// HeapMiB is the Go heap in use in MiB.
func (m Memory) HeapMiB() float64 { return m.HeapBytes / (1 << 20) }

func (m Memory) String() string {
	return fmt.Sprintf("RSS %.1f MiB (peak %.1f MiB), heap in use %.1f MiB", m.RSSMiB(), m.PeakMiB(), m.HeapMiB())
}

// Read measures process pid, whose metrics are served at metricsURL
// (fetched with c).
func Read(c *http.Client, pid int, metricsURL string) (Memory, error) {
	heap, ok := Metric(c, metricsURL, "go_memstats_heap_inuse_bytes")
	if !ok {
		return Memory{}, fmt.Errorf("no go_memstats_heap_inuse_bytes at %s", metricsURL)
	}
	rss, peak, err := RSS(pid)
	if err != nil {
		return Memory{}, err
	}
	return Memory{RSSKiB: rss, PeakKiB: peak, HeapBytes: heap}, nil
}

// RSS returns a process's resident set and its peak in KiB (VmRSS, VmHWM).
func RSS(pid int) (rss, peak int, err error) {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	field := func(name string) (int, error) {
		for _, l := range strings.Split(string(s), "\n") {
			if v, ok := strings.CutPrefix(l, name+":"); ok {
				return strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			}
		}
		return 0, fmt.Errorf("no %s for pid %d", name, pid)
	}
	if rss, err = field("VmRSS"); err != nil {
		return 0, 0, err
	}
	peak, err = field("VmHWM")
	return rss, peak, err
}

// Metric returns the value of an unlabelled metric served at url.
func Metric(c *http.Client, url, name string) (float64, bool) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// SaveHeapProfile writes the Go heap profile of the daemon whose metrics
// are at metricsURL (".../metrics", served with its pprof handlers) to
// path; with afterGC, the profile is taken after a garbage collection
// (what is live).
func SaveHeapProfile(c *http.Client, metricsURL, path string, afterGC bool) error {
	url := strings.TrimSuffix(metricsURL, "/metrics") + "/debug/pprof/heap"
	if afterGC {
		url += "?gc=1"
	}
	resp, err := c.Get(url)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("heap profile: %s from %s", resp.Status, url)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("heap profile: %w", err)
	}
	return f.Close()
}
