package redislock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// notifier shares one pub/sub connection among every waiter of a Locker.
// It runs one goroutine while at least one waiter is subscribed and stops it
// (closing the connection) when the last waiter leaves, so an idle Locker
// holds no goroutine and no extra connection.
type notifier struct {
	c redis.UniversalClient

	mu   sync.Mutex
	sess *session // nil while nobody waits
}

// session is one pub/sub connection and the goroutine that reads it.
type session struct {
	ps    *redis.PubSub
	chans map[string]*channelWaiters
	done  chan struct{} // closed when read has returned
	quit  chan struct{} // closed when the session is stopped
}

type channelWaiters struct {
	ready   chan struct{} // closed when Redis confirmed the subscription
	waiters map[*waiter]struct{}
}

// waiter is one Acquire call waiting for a release on one channel.
type waiter struct {
	id      string // fair mode: woken only by messages naming it (or empty ones)
	channel string
	wake    chan struct{} // buffered 1: a release seen since the last drain
	ready   <-chan struct{}
}

// subscribe registers a waiter on channel. The returned waiter's ready
// channel closes once Redis has confirmed the subscription: a release
// published after that point is never missed.
func (n *notifier) subscribe(ctx context.Context, channel, id string) (*waiter, error) {
	w := &waiter{id: id, channel: channel, wake: make(chan struct{}, 1)}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sess == nil {
		s := &session{chans: make(map[string]*channelWaiters), done: make(chan struct{}), quit: make(chan struct{})}
		s.ps = n.c.Subscribe(context.WithoutCancel(ctx))
		n.sess = s
		go n.read(s)
	}
	s := n.sess
	cw := s.chans[channel]
	if cw == nil {
		cw = &channelWaiters{ready: make(chan struct{}), waiters: make(map[*waiter]struct{})}
		s.chans[channel] = cw
		if err := s.ps.Subscribe(ctx, channel); err != nil {
			delete(s.chans, channel)
			n.stopIfIdleLocked()
			return nil, err
		}
	}
	cw.waiters[w] = struct{}{}
	w.ready = cw.ready
	return w, nil
}

// unsubscribe removes w; the last waiter of a channel unsubscribes it and
// the last waiter of the Locker stops the session.
func (n *notifier) unsubscribe(w *waiter) {
	n.mu.Lock()
	s := n.sess
	if s == nil {
		n.mu.Unlock()
		return
	}
	if cw := s.chans[w.channel]; cw != nil {
		delete(cw.waiters, w)
		if len(cw.waiters) == 0 {
			delete(s.chans, w.channel)
			if len(s.chans) > 0 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_ = s.ps.Unsubscribe(ctx, w.channel)
				cancel()
			}
		}
	}
	stopped := n.stopIfIdleLocked()
	n.mu.Unlock()
	if stopped != nil {
		<-stopped
	}
}

// stopIfIdleLocked closes the session when no channel is left and returns
// the channel that closes when its goroutine has exited.
func (n *notifier) stopIfIdleLocked() chan struct{} {
	s := n.sess
	if s == nil || len(s.chans) > 0 {
		return nil
	}
	n.sess = nil
	close(s.quit)
	_ = s.ps.Close() // unblocks Receive in read
	return s.done
}

// read dispatches confirmations and messages until the session is closed.
func (n *notifier) read(s *session) {
	defer close(s.done)
	ctx := context.Background()
	for {
		msg, err := s.ps.Receive(ctx)
		n.mu.Lock()
		if n.sess != s {
			n.mu.Unlock()
			return
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				if cw := s.chans[m.Channel]; cw != nil {
					closeOnce(cw.ready)
				}
			}
		case *redis.Message:
			if cw := s.chans[m.Channel]; cw != nil {
				for w := range cw.waiters {
					if m.Payload == "" || w.id == "" || m.Payload == w.id {
						w.signal()
					}
				}
			}
		}
		if err != nil {
			// The connection broke: messages may have been lost. Wake every
			// waiter so it retries now instead of at its poll interval; go-redis
			// resubscribes on the next Receive.
			for _, cw := range s.chans {
				for w := range cw.waiters {
					w.signal()
				}
			}
		}
		n.mu.Unlock()
		if err != nil {
			t := time.NewTimer(50 * time.Millisecond)
			select {
			case <-t.C:
			case <-s.quit:
			}
			t.Stop()
		}
	}
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}
