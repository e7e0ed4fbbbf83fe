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

	acquireScript = redis.NewScript(acquireSrc)
	releaseScript = redis.NewScript(releaseSrc)
	refreshScript = redis.NewScript(refreshSrc)
)
