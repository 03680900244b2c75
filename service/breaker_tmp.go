package service

import "time"

// retryAfter is a placeholder until the breaker work lands.
func (b *breakers) retryAfter(string) time.Duration { return b.settings.Cooldown }
