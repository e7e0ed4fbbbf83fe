// Package bench compares lockgov against peer libraries. It is its own module, so that the
// peers (github.com/bwmarrin/snowflake, github.com/sony/sonyflake/v2) never enter lockgov's
// go.mod. Run from this directory:
//
//	go test -run '^$' -bench . -benchtime 2s
//
// and copy the figures, with the goos/goarch/cpu header, into ../docs/BENCHMARKS.md.
package bench
