package jsonenc

import (
	"math"
	"strconv"
	"unicode/utf8"
)

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

// AppendFloat appends the finite f as encoding/json writes a float64, and
// so the providers' SDK encoders (its forks): the shortest decimal that
// reads back as f, in exponent form below 1e-6 and from 1e21 on, with no
// leading zero in a negative exponent (1e-7, not 1e-07). JSON has no NaN
// or infinity: the caller refuses them.
func AppendFloat(b []byte, f float64) []byte {
	format := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1] // e-07 → e-7
		b = b[:n-1]
	}
	return b
}
