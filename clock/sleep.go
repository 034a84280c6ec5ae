package clock

import (
	"context"
	"time"
)

// Sleep waits d on c, or less when ctx ends first, returning ctx's error then. A d of
// zero or less does not wait: it returns ctx's error, nil while ctx lives.
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}
