package quota

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed deduct.lua
	deductSrc string
	//go:embed credit.lua
	creditSrc string
	//go:embed take.lua
	takeSrc string

	deductScript = redis.NewScript(deductSrc)
	creditScript = redis.NewScript(creditSrc)
	takeScript   = redis.NewScript(takeSrc)
)
