package redislock

import (
	_ "embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed acquire_lib.lua
	acquireLibSrc string
	//go:embed acquire.lua
	acquireSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed refresh.lua
	refreshSrc string
	//go:embed acquire_fair.lua
	acquireFairSrc string
	//go:embed handoff_lib.lua
	handoffLibSrc string
	//go:embed leave.lua
	leaveSrc string

	// Redis shares no Lua between scripts: a script carries the functions
	// of acquire_lib.lua (and handoff_lib.lua) it calls, where its
	// "#include" line says.
	acquireScript = redis.NewScript(acquireSrcFull)
	releaseScript = redis.NewScript(releaseSrcFull)
	refreshScript = redis.NewScript(refreshSrc)
	leaveScript   = redis.NewScript(withLibs(leaveSrc))

	acquireFairScript = redis.NewScript(acquireFairSrcFull)

	acquireSrcFull     = withLibs(acquireSrc)
	acquireFairSrcFull = withLibs(acquireFairSrc)
	releaseSrcFull     = withLibs(releaseSrc)
)

// withLibs returns src with each line "-- #include <file> ..." (indented
// or not) replaced by the named libraries' text. A library goes where it
// is needed, not in front of every script: Lua makes a closure for each
// function definition it runs past, on every run of the script, and a
// release with no waiter runs past none of handoff_lib.lua's. Unknown
// names panic: the scripts are part of the binary.
func withLibs(src string) string {
	libs := map[string]string{"acquire_lib.lua": acquireLibSrc, "handoff_lib.lua": handoffLibSrc}
	var b strings.Builder
	for line := range strings.Lines(src) {
		names, ok := strings.CutPrefix(strings.TrimSpace(line), "-- #include ")
		if !ok {
			b.WriteString(line)
			continue
		}
		for _, name := range strings.Fields(names) {
			lib, ok := libs[name]
			if !ok {
				panic("redislock: script includes unknown library " + name)
			}
			b.WriteString(lib)
		}
	}
	return b.String()
}

// luaCall is a script as evalsha sends it: digest and source boxed once.
type luaCall struct{ sha, src any }

func callOf(s *redis.Script, src string) luaCall { return luaCall{sha: s.Hash(), src: src} }

var (
	acquireCall     = callOf(acquireScript, acquireSrcFull)
	acquireFairCall = callOf(acquireFairScript, acquireFairSrcFull)
	releaseCall     = callOf(releaseScript, releaseSrcFull)
	refreshCall     = callOf(refreshScript, refreshSrc)
)
