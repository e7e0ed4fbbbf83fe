package redislock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed refresh.lua
	refreshSrc string
	//go:embed acquire_fair.lua
	acquireFairSrc string
	//go:embed release_fair.lua
	releaseFairSrc string
	//go:embed leave_fair.lua
	leaveFairSrc string

	acquireScript = redis.NewScript(acquireSrc)
	releaseScript = redis.NewScript(releaseSrc)
	refreshScript = redis.NewScript(refreshSrc)

	acquireFairScript = redis.NewScript(acquireFairSrc)
	releaseFairScript = redis.NewScript(releaseFairSrc)
	leaveFairScript   = redis.NewScript(leaveFairSrc)
)
