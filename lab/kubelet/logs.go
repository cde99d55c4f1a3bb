package kubelet

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// followPoll is how often a followed log is checked for more output.
const followPoll = 250 * time.Millisecond

// serveLogs answers GET /containerLogs/{namespace}/{pod}/{container}
// from the container's log file (stdout and stderr, appended across
// restarts): tailLines, limitBytes and follow (until the container stops
// running or the client goes away). timestamps, previous, sinceSeconds and
// sinceTime need what the log file does not keep (times, one file per
// run) and are refused.
func (k *Kubelet) serveLogs(w http.ResponseWriter, r *http.Request) {
	pod, ok := k.apiPod(w, r)
	if !ok {
		return
	}
	name := r.PathValue("container")
	if !hasContainer(pod, name) {
		http.Error(w, fmt.Sprintf("container %s is not valid for pod %s/%s", name, pod.Namespace, pod.Name), http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	for _, p := range []string{"timestamps", "previous"} {
		if q.Get(p) == "true" {
			http.Error(w, fmt.Sprintf("%s is not supported by the lab kubelet: a container's log is one file of its raw output, appended across restarts", p), http.StatusBadRequest)
			return
		}
	}
	for _, p := range []string{"sinceSeconds", "sinceTime"} {
		if q.Has(p) {
			http.Error(w, fmt.Sprintf("%s is not supported by the lab kubelet: its log files keep no times", p), http.StatusBadRequest)
			return
		}
	}
	tail, limit := int64(-1), int64(-1)
	for p, v := range map[string]*int64{"tailLines": &tail, "limitBytes": &limit} {
		if !q.Has(p) {
			continue
		}
		n, err := strconv.ParseInt(q.Get(p), 10, 64)
		if err != nil || n < 0 {
			http.Error(w, fmt.Sprintf("%s must be a non-negative integer", p), http.StatusBadRequest)
			return
		}
		*v = n
	}
	follow := q.Get("follow") == "true"

	f, err := os.Open(ContainerLog(k.cfg.StateDir, pod.Namespace, pod.Name, name))
	if errors.Is(err, os.ErrNotExist) {
		http.Error(w, fmt.Sprintf("container %s of pod %s/%s has not started yet", name, pod.Namespace, pod.Name), http.StatusBadRequest)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	offset := int64(0)
	if tail >= 0 {
		if offset, err = tailStart(f, st.Size(), tail); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	rc := http.NewResponseController(w)
	out := &limitedWriter{w: w, left: limit}
	send := func() (int64, error) {
		n, err := io.Copy(out, io.NewSectionReader(f, offset, 1<<62))
		offset += n
		if errors.Is(err, errLimit) {
			return n, err
		}
		if n > 0 {
			_ = rc.Flush()
		}
		return n, err
	}
	if _, err := send(); err != nil || !follow {
		return
	}
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
		// Whether it runs is read before the file: output written
		// before the process ended is then in the file.
		running := k.containerRunning(pod.Namespace, pod.Name, pod.UID, name)
		n, err := send()
		if err != nil || (n == 0 && !running) {
			return
		}
	}
}

func hasContainer(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return true
		}
	}
	return false
}

// containerRunning tells whether the pod (of that UID) still exists and
// its status says the container runs.
func (k *Kubelet) containerRunning(namespace, name string, uid types.UID, container string) bool {
	pod, err := k.pods.Pods(namespace).Get(name)
	if err != nil || pod.UID != uid || pod.DeletionTimestamp != nil {
		return false
	}
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == container {
			return s.State.Running != nil
		}
	}
	return false
}

// tailStart is the offset where the last n lines of the first size bytes
// of f begin (a last line without a newline counts).
func tailStart(f io.ReaderAt, size, n int64) (int64, error) {
	if n == 0 {
		return size, nil
	}
	end := size
	last := make([]byte, 1)
	if size > 0 {
		if _, err := f.ReadAt(last, size-1); err != nil {
			return 0, err
		}
		if last[0] == '\n' {
			end-- // the newline ending the last line starts none
		}
	}
	buf := make([]byte, 32<<10)
	for end > 0 {
		start := max(0, end-int64(len(buf)))
		chunk := buf[:end-start]
		if _, err := f.ReadAt(chunk, start); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		for i := len(chunk) - 1; i >= 0; i-- {
			if chunk[i] != '\n' {
				continue
			}
			if n--; n == 0 {
				return start + int64(i) + 1, nil
			}
		}
		end = start
	}
	return 0, nil
}

var errLimit = errors.New("limitBytes reached")

// limitedWriter passes on at most left bytes (all if left < 0), then
// fails with errLimit.
type limitedWriter struct {
	w    io.Writer
	left int64
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.left < 0 {
		return l.w.Write(p)
	}
	if l.left == 0 {
		return 0, errLimit
	}
	short := int64(len(p)) > l.left
	if short {
		p = p[:l.left]
	}
	n, err := l.w.Write(p)
	l.left -= int64(n)
	if err == nil && short {
		err = errLimit
	}
	return n, err
}
