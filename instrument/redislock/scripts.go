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
	//go:embed leave_fair.lua
	leaveFairSrc string

	// Redis shares no Lua between scripts: both acquire scripts carry the
	// functions of acquire_lib.lua in front of their own text.
	acquireScript = redis.NewScript(acquireLibSrc + acquireSrc)
	releaseScript = redis.NewScript(releaseSrc)
	refreshScript = redis.NewScript(refreshSrc)

	acquireFairScript = redis.NewScript(acquireLibSrc + acquireFairSrc)
	leaveFairScript   = redis.NewScript(leaveFairSrc)
)
