package apps

import "context"

// RunClient does nothing until ctx is done: the process is a home for
// `causeway-lab exec` commands, which run in its namespace.
func RunClient(ctx context.Context) error {
	<-ctx.Done()
	return nil
}
