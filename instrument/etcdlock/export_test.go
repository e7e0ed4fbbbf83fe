package etcdlock

// SetAfterLock makes m call f once the Mutex is locked and before the lease
// is set up: tests use it to fail the steps that follow a successful lock.
func SetAfterLock(m *MutexLocker, f func()) { m.afterLock = f }
