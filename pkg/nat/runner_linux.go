package nat

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"

	"github.com/causeway-net/causeway/internal/netnsx"
)

// NewNftRunner returns a Runner executing nft (found on PATH) in the
// network namespace at netnsPath (the process's own if empty): the child
// is forked from a thread switched into that namespace.
func NewNftRunner(netnsPath string) Runner { return nftExec{netns: netnsPath} }

type nftExec struct{ netns string }

func (r nftExec) Nft(ctx context.Context, stdin string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "nft", args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := netnsx.Do(r.netns, cmd.Run); err != nil {
		return nil, fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, firstLines(stderr.String(), 5))
	}
	return stdout.Bytes(), nil
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	if len(lines) > n {
		lines = append(lines[:n], "…")
	}
	return strings.Join(lines, " | ")
}
