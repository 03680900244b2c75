package recovery

var eventKindNames = [...]string{"invalid", "attempt_done", "attempt_failed", "wait_elapsed",
	"tool_results", "stop_hook_verdict", "cancelled", "budget_exceeded"}

// String returns the snake_case name used in messages and transcripts.
func (k EventKind) String() string {
	if int(k) >= 0 && int(k) < len(eventKindNames) {
		return eventKindNames[k]
	}
	return "unknown"
}
