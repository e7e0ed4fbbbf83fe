package redislock

// MaxIdleChannels exposes the bound on idle subscriptions to the tests.
const MaxIdleChannels = maxIdleChannels
