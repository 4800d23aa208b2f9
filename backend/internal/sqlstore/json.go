package sqlstore

import "encoding/binary"

// ValidJSON reports whether b is one JSON value, exactly as json.Valid does
// (FuzzValidJSON compares them): the same grammar and white space, the
// same nesting limit, and, like json.Valid, bytes of 0x80 and above in a
// string are not checked as UTF-8. It exists for the read path, which
// checks every stored data and metadata text of SQLite (CheckEvent):
// json.Valid's scanner, a state machine called per byte, checked 1 KB
// events at about 145 MB/s in BenchmarkCheckPage, as long as the rest of
// the read took; this loop steps through strings eight bytes at a time
// (about 1 GB/s there).
func ValidJSON(b []byte) bool {
	var buf [32]byte
	stack := buf[:0] // the open containers: '{' or '['
	i := 0
	for {
		// A value at i.
		i = skipSpace(b, i)
		if i >= len(b) {
			return false
		}
		switch c := b[i]; c {
		case '{', '[':
			if len(stack) == maxNesting {
				return false
			}
			stack = append(stack, c)
			i = skipSpace(b, i+1)
			if i < len(b) && b[i] == c+2 { // '}' or ']': empty
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				if i = key(b, i); i < 0 {
					return false
				}
			}
			continue
		case '"':
			if i = jsonString(b, i); i < 0 {
				return false
			}
		case 't':
			if i = literal(b, i, "true"); i < 0 {
				return false
			}
		case 'f':
			if i = literal(b, i, "false"); i < 0 {
				return false
			}
		case 'n':
			if i = literal(b, i, "null"); i < 0 {
				return false
			}
		default:
			if i = number(b, i); i < 0 {
				return false
			}
		}
		// After a value: close containers, then a comma and the next
		// value (after its key in an object), or the end.
		for {
			i = skipSpace(b, i)
			if len(stack) == 0 {
				return i == len(b)
			}
			if i >= len(b) {
				return false
			}
			top := stack[len(stack)-1]
			if b[i] == top+2 {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if b[i] != ',' {
				return false
			}
			i++
			if top == '{' {
				if i = key(b, skipSpace(b, i)); i < 0 {
					return false
				}
			}
			break
		}
	}
}

// maxNesting is json.Valid's limit of nested arrays and objects.
const maxNesting = 10000

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// key reads an object's key and its colon at i; -1 if there are none.
func key(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = jsonString(b, i); i < 0 {
		return -1
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	return i + 1
}

// plain marks the bytes a string holds as they are: not a control
// character, a quote or a backslash.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// jsonString reads the string that starts at b[i] ('"'); it returns the
// index after its closing quote, -1 if it is not a string.
func jsonString(b []byte, i int) int {
	i++
	for i < len(b) {
		// Eight bytes at a time while none of them ends the plain run.
		for i+8 <= len(b) && !special(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		if i >= len(b) {
			break
		}
		if plain[b[i]] {
			i++
			continue
		}
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			if i+1 >= len(b) {
				return -1
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return -1
				}
				i += 6
			default:
				return -1
			}
		default: // a control character
			return -1
		}
	}
	return -1
}

// special reports whether one of the eight bytes of w is a control
// character, a quote or a backslash (the bit tricks of "Bit Twiddling
// Hacks", "Determine if a word has a byte less than n" and "… equal to
// n"): a byte b < 0x80 gives b-n a high bit exactly when b < n, and bytes
// of 0x80 and above are masked out by ^w.
func special(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	less := (w - ones*0x20) & ^w & highs
	quote := w ^ (ones * '"')
	backslash := w ^ (ones * '\\')
	return less|((quote-ones)&^quote&highs)|((backslash-ones)&^backslash&highs) != 0
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func literal(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// number reads the number at i: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func number(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		for i++; i < len(b) && '0' <= b[i] && b[i] <= '9'; i++ {
		}
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if i = digits(b, i+1); i < 0 {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i = digits(b, i); i < 0 {
			return -1
		}
	}
	return i
}

// digits reads one or more digits at i: the index after them, -1 if there
// is none.
func digits(b []byte, i int) int {
	start := i
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	if i == start {
		return -1
	}
	return i
}
