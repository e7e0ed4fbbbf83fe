// Package chaos is lockgov's fault workload and history checker (issue 14):
// N clients, each with its own connection and Locker, loop acquire ->
// fenced write of (client, fence, counter) to a protected resource ->
// release, while a nemesis injects faults; every operation's invocation and
// return is recorded, and the history is checked with porcupine:
//
//   - the resource's history is linearizable against a fenced register
//     (a write applies only above the stored fence; reads see the last
//     applied write), and no write with a stale fence was accepted;
//   - the lock's history is linearizable against a mutex, where the backend
//     promises exclusion (single Redis, etcd). Under Sentinel failover and
//     quorum mode only the fence is promised; the verdict is reported, not
//     required.
//
// A lease's hold, for the mutex check, runs from Acquire's return to the
// last moment its holder saw Lease.Context() alive before writing: that is
// what the lock promises. A holder that writes after that (it was paused
// between the check and the write, the case fences exist for) is the
// resource check's business.
//
// Operations whose outcome is unknown (a timeout, a reset connection) are
// recorded with an open return: porcupine may place their effect anywhere
// after their call, or nowhere.
//
// The package holds no servers: the tests in this directory start them
// through internal/testenv and drive the faults. When a check fails, Check
// writes the history (JSON) and porcupine's HTML visualisation into a
// directory (t.TempDir, or $LOCKGOV_CHAOS_DIR when set) and names the files.
package chaos
