package drive

import "context"

// queueNoticeKey carries, in a Start's context, whom to tell that the
// migration waits in a queue: an outbound slot here, or an inbound slot on
// the target.
type queueNoticeKey struct{}

// WithQueueNotice has Start call tell, on the caller's goroutine, each time
// the migration begins to wait for a slot, with a sentence saying for what.
func WithQueueNotice(ctx context.Context, tell func(msg string)) context.Context {
	return context.WithValue(ctx, queueNoticeKey{}, tell)
}

func queueNotice(ctx context.Context, msg string) {
	if tell, ok := ctx.Value(queueNoticeKey{}).(func(string)); ok {
		tell(msg)
	}
}
