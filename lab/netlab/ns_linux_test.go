package netlab

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
)

// TestDoLeavesThreadsAlone runs many Do calls concurrently and checks
// that fn ran inside the namespace and that afterwards no thread of this
// process is left in it.
func TestDoLeavesThreadsAlone(t *testing.T) {
	t.Parallel()
	h := newTestHost(t)
	name := h.prefix + "do"
	if err := h.EnsureNetns(name); err != nil {
		t.Fatal(err)
	}
	if err := h.EnsureNetns(name); err != nil { // idempotent
		t.Fatal(err)
	}
	want, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(h.netnsPath(name))
	if err != nil {
		t.Fatal(err)
	}
	inside := fmt.Sprintf("net:[%d]", inode(fi))
	if inside == want {
		t.Fatal("test namespace is the caller's")
	}
	before := tasksIn(t, inside)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- h.Do(name, func() error {
				got, err := os.Readlink("/proc/thread-self/ns/net")
				if err != nil {
					return err
				}
				if got != inside {
					return fmt.Errorf("fn ran in %s, want %s", got, inside)
				}
				return nil
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// EnsureNetns unshared on a thread the runtime then discards; it may
	// linger for a moment (or for good, when it was the main thread, which
	// Go parks instead of ending). Only threads that joined the namespace
	// during the Do calls, and are still in it, count as left behind.
	var left []string
	for _, task := range tasksIn(t, inside) {
		if !slices.Contains(before, task) {
			left = append(left, task)
		}
	}
	for _, task := range left {
		t.Errorf("%s still in the namespace after Do", task)
	}
	if err := h.DeleteNetns(name); err != nil {
		t.Fatal(err)
	}
	if err := h.DeleteNetns(name); err != nil { // missing is fine
		t.Fatal(err)
	}
	if err := h.Do(name, func() error { return nil }); err == nil {
		t.Error("Do in a deleted namespace succeeded")
	}
}

// tasksIn lists this process's threads whose network namespace is ns.
func tasksIn(t *testing.T, ns string) []string {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	var in []string
	for _, task := range tasks {
		if got, err := os.Readlink(task); err == nil && got == ns {
			in = append(in, task)
		}
	}
	return in
}

func inode(fi os.FileInfo) uint64 {
	return fi.Sys().(*syscall.Stat_t).Ino
}
