package jsonenc

import "unicode/utf8"

// AppendString appends s as a JSON string, escaped as encoding/json (and
// the SDK's encoder, its fork) escapes it, but for <, > and &, which need
// no escaping outside HTML.
func AppendString[T string | []byte](b []byte, s T) []byte {
	b = append(b, '"')
	return append(AppendEscaped(b, s), '"')
}

// hex is the digits of a \u escape.
const hex = "0123456789abcdef"

// AppendEscaped appends s escaped for the inside of a JSON string: quotes,
// backslashes and control characters escaped, each byte that is not
// UTF-8 replaced by U+FFFD, and U+2028 and U+2029 escaped, which
// JavaScript takes for line ends. Runs that need nothing are copied whole.
func AppendEscaped[T string | []byte](b []byte, s T) []byte {
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			b = appendControl(b, c)
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(append(b, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(append(b, s[start:i]...), `\u202`...)
			b = append(b, hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(b, s[start:]...)
}

// appendControl appends the escape of an ASCII byte that cannot stand in a
// JSON string as it is.
func appendControl(b []byte, c byte) []byte {
	switch c {
	case '"', '\\':
		return append(b, '\\', c)
	case '\b':
		return append(b, `\b`...)
	case '\f':
		return append(b, `\f`...)
	case '\n':
		return append(b, `\n`...)
	case '\r':
		return append(b, `\r`...)
	case '\t':
		return append(b, `\t`...)
	}
	return append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
}
