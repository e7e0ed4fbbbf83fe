// Package idmetrics governs any ID generator, func() (int64, error), with
// lockgov's ID metrics (lockgov_id_*): IDs generated, clock-backwards waits
// and refusals, sequence exhaustion, the WorkerID lease state and the time
// left in the layout. It feeds on snowflake.Generator's hooks and classifies
// any generator's errors against snowflake's, so a generator lockgov did not
// write is counted too.
//
// It lives beside snowflake, not in instrument, so that a service using only
// locks links no ID code, and instrument never imports snowflake.
//
// # Failure modes
//
// New fails when its collectors conflict with collectors already on the
// registry (same name, other labels); generators with equal labels share
// series. Events a generator handles without returning an error (waits) are
// visible only through its hooks (SnowflakeHooks).
package idmetrics
