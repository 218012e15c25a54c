package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/test/testbed"
)

// linkError is a link the bench cut and could not bring back up: every
// run after it would fail on that, so the bench stops.
type linkError struct{ err error }

func (e *linkError) Error() string { return "the link stays down: " + e.err.Error() }
func (e *linkError) Unwrap() error { return e.err }

// noBreak breaks nothing: it marks the moment the other scenarios break
// the streams, for the baseline's figures to be timed from the same point
// of the same migration.
func noBreak() breakTimes {
	at := time.Now()
	logf("no break (the unbroken baseline): timing from this moment")
	return breakTimes{Start: at, Back: at}
}

// breakByReset resets every connection of Ferry's proxies: the streams
// break at once and nothing stands in the way of new ones.
func breakByReset(b *testbed.Bed) (breakTimes, error) {
	at := time.Now()
	bt := breakTimes{Start: at, Back: at}
	if err := b.ResetMigration(); err != nil {
		return bt, fmt.Errorf("resetting the proxies' connections: %w", err)
	}
	logf("reset the proxies' connections (the call took %v)", time.Since(at).Round(time.Millisecond))
	return bt, nil
}

// breakByCut takes the link down until the source holds the migration
// paused and hold has passed since the cut, then brings it back up.
func breakByCut(ctx context.Context, b *testbed.Bed, f *flight, hold time.Duration) (bt breakTimes, err error) {
	bt = breakTimes{Start: time.Now(), PauseIsBreak: true}
	if err := b.CutLink(); err != nil {
		// One end may be down already.
		if rerr := b.RestoreLink(); rerr != nil {
			return bt, &linkError{errors.Join(err, rerr)}
		}
		return bt, fmt.Errorf("cutting the link: %w", err)
	}
	restored := false
	defer func() {
		if restored {
			return
		}
		if rerr := b.RestoreLink(); rerr != nil {
			err = &linkError{errors.Join(err, rerr)}
		}
	}()
	logf("link cut; waiting for the source job to show PostCopyPaused (the proxy's TCP user timeout is 30 s)")
	if _, err := f.waitJob(ctx, 90*time.Second, "PostCopyPaused on the source job", func(j api.Job) bool {
		return j.Phase == api.PhasePostCopyPaused
	}); err != nil {
		return bt, err
	}
	logf("the source job shows PostCopyPaused %.1fs after the cut; the link stays down until %v after it", time.Since(bt.Start).Seconds(), hold)
	if err := sleepCtx(ctx, time.Until(bt.Start.Add(hold))); err != nil {
		return bt, err
	}
	bt.Back = time.Now()
	if err := b.RestoreLink(); err != nil {
		return bt, fmt.Errorf("restoring the link: %w", err)
	}
	restored = true
	logf("link back up %.1fs after the cut", time.Since(bt.Start).Seconds())
	return bt, nil
}
