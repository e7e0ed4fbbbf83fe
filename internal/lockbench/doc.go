// Package lockbench holds the cross-backend lock benchmarks: every backend
// and mode (redislock on a single node, on a 3-primary Cluster, over a
// 3-node quorum, in fair mode; etcdlock on one member and on a 3-member
// cluster) measured in one run, so their figures compare as ratios on the
// same machine at the same moment. It has no code of its own; see
// lockbench_test.go and docs/BENCHMARKS.md.
package lockbench
