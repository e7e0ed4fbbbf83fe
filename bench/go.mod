module github.com/lockgov/lockgov/bench

go 1.26.0

replace github.com/lockgov/lockgov => ../

require (
	github.com/bwmarrin/snowflake v0.3.0
	github.com/lockgov/lockgov v0.0.0-00010101000000-000000000000
	github.com/sony/sonyflake/v2 v2.2.0
)
