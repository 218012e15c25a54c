package drive

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestSlotsQueueInTurn(t *testing.T) {
	s := newSlots(2)
	r1, _ := s.acquire(context.Background(), nil)
	r2, _ := s.acquire(context.Background(), nil)
	got := make(chan int, 2)
	var mu sync.Mutex
	var told []int
	for i := 3; i <= 4; i++ {
		go func() {
			r, err := s.acquire(context.Background(), func(ahead int) {
				mu.Lock()
				defer mu.Unlock()
				told = append(told, ahead)
			})
			if err != nil {
				t.Error(err)
				return
			}
			got <- i
			_ = r
		}()
		time.Sleep(20 * time.Millisecond)
	}
	if st := s.status(); st.Used != 2 || st.Queued != 2 {
		t.Fatalf("status %+v, want 2 used and 2 queued", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 2 || told[0] != 2 || told[1] != 3 {
		t.Fatalf("waiters were told %v ahead, want [2 3]", told)
	}
	r1()
	r1() // a second release frees nothing more
	if first := <-got; first != 3 {
		t.Fatalf("request %d got the slot first, want 3", first)
	}
	r2()
	<-got
	if st := s.status(); st.Used != 2 || st.Queued != 0 {
		t.Fatalf("status %+v, want 2 used by the two that waited", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := s.acquire(ctx, nil); !errors.Is(err, ErrConflict) {
		t.Fatalf("a wait that ended: %v, want ErrConflict", err)
	}
	if st := s.status(); st.Queued != 0 {
		t.Fatalf("a wait that ended stays queued: %+v", st)
	}
}
