package fleet

// Abandon stops a's publisher without deleting its heartbeat, as a process
// that crashed would: the heartbeat is left to expire at its TTL.
func Abandon(a *Attachment) {
	p := a.p
	a.closed.Store(true)
	publishers.mu.Lock()
	p.mu.Lock()
	p.stopped = true
	p.timer.Stop()
	delete(publishers.m, p.id)
	delete(publishers.byStamp, p.stamp)
	p.mu.Unlock()
	publishers.mu.Unlock()
	p.beatMu.Lock() // wait for a beat in flight
	p.unlink()
	p.beatMu.Unlock()
}
