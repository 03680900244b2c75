-- KEYS: LEASE
-- ARGV: value
-- Compare-and-delete: gives the lease up if it still holds value.
if redis.call('GET', LEASE) == value then return redis.call('DEL', LEASE) end
return 0
