package redislock

import (
	_ "embed"

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

	// Redis shares no Lua between scripts: the scripts carry the functions
	// of acquire_lib.lua (and release and leave those of handoff_lib.lua)
	// in front of their own text.
	acquireScript = redis.NewScript(acquireLibSrc + acquireSrc)
	releaseScript = redis.NewScript(acquireLibSrc + handoffLibSrc + releaseSrc)
	refreshScript = redis.NewScript(refreshSrc)
	leaveScript   = redis.NewScript(acquireLibSrc + handoffLibSrc + leaveSrc)

	acquireFairScript = redis.NewScript(acquireLibSrc + acquireFairSrc)
)

// luaCall is a script as evalsha sends it: digest and source boxed once.
type luaCall struct{ sha, src any }

func callOf(s *redis.Script, src string) luaCall { return luaCall{sha: s.Hash(), src: src} }

var (
	acquireCall = callOf(acquireScript, acquireLibSrc+acquireSrc)
	releaseCall = callOf(releaseScript, acquireLibSrc+handoffLibSrc+releaseSrc)
)
