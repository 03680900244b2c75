// Package convert is the one place where the wire (completion.v1) meets
// the recovery machine and the providers: the request's messages and tools
// in, the machine's transitions, tool calls, usage and result out. Enums
// convert by name, never by number, so that the proto and the machine may
// number their values as each likes.
package convert
