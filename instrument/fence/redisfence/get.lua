-- Fenced GET: read a value and its fence together.
--
-- KEYS[1]  the value key
-- KEYS[2]  its fence key
--
-- Returns {value or false, fence or false}.
return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2])}
