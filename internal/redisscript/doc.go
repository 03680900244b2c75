// Package redisscript loads a package's Redis Lua scripts from .lua files
// (embedded with go:embed) and runs them with every key they touch
// declared, named from one table.
//
// A script's first line names its keys, its second its arguments:
//
//	-- KEYS: META LOG LEASE
//	-- ARGV: id seq event
//
// Load replaces those two lines with the Lua that binds each name
// (local META, LOG, LEASE = KEYS[1], KEYS[2], KEYS[3]), so that a script
// reads its keys and arguments by name, the line numbers of Redis's errors
// are the file's, and the keys a call passes are built from the package's
// table of key names (a Table) in the order the script declares them: a
// script cannot be handed its keys in another order, and a key no table
// names cannot be declared.
//
// Names after a "|" repeat, once per Group a call passes (RunGroups): one
// script call that writes several subjects, each with its own keys. A
// call on a hot path builds its command in place instead (Batch), with
// each subject's keys built once (GroupKeys) and kept by the caller.
//
//	-- KEYS: TOTAL | META LOG
//	-- ARGV: now | id event
//
// The script reads group i's names with KEYS_OF(i) and ARGV_OF(i), for i
// from 1 to GROUPS (local META, LOG = KEYS_OF(i)). Such a script touches
// several subjects' hash slots: a standalone Redis runs it, a Redis Cluster
// only when every key falls in one slot.
//
// It never builds a key itself, never concatenates two scripts, and
// imports nothing of completiond.
package redisscript
